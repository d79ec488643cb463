package freeport

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// A server that a test stops and starts again on the same port loses that
// port if an outgoing connection is given it as its local port meanwhile.
// The kernel hands out local ports only from its ephemeral range, so ports
// for such servers must come from outside it.
func TestPortsLieBelowTheEphemeralRange(t *testing.T) {
	lo, err := ephemeralStart()
	if err != nil {
		t.Skipf("no ephemeral range to compare with: %v", err)
	}
	ports, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= lo || p < 1024 {
			t.Errorf("port %d is not in [1024, %d), below the ephemeral range", p, lo)
		}
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}

// A candidate another listener holds is passed over for the next one.
func TestPortSkipsAPortInUse(t *testing.T) {
	lo, err := ephemeralStart()
	if err != nil || lo-lowest < 1000 {
		t.Skipf("no room below the ephemeral range: %d, %v", lo, err)
	}
	held, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(held))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The first candidate drawn is the held port, the next the one after it.
	drawn := 0
	draw = func(n int) int {
		drawn++
		return (held - lowest + drawn - 1) % n
	}
	defer func() { draw = rand.IntN }()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if p == held || drawn < 2 {
		t.Fatalf("Port returned %d after %d draws; want the port after %d, which a listener holds", p, drawn, held)
	}
}
