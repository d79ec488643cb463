package freeport

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// A server that a test stops and starts again on the same port loses that
// port if an outgoing connection is given it as its local port meanwhile.
// The kernel hands out local ports only from its ephemeral range, so ports
// for such servers must come from outside it.
func TestPortsLieBelowTheEphemeralRange(t *testing.T) {
	lo, _, err := ephemeralRange()
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

func TestPortSkipsAPortInUse(t *testing.T) {
	lo, _, err := ephemeralRange()
	if err != nil {
		t.Skipf("no ephemeral range: %v", err)
	}
	// Hold every candidate but one; Port must find the one left.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	first, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(first))
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, l)
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p == first {
			t.Fatalf("Port returned %d, which a listener holds", p)
		}
		if p >= lo {
			t.Fatalf("Port returned %d, inside the ephemeral range from %d", p, lo)
		}
	}
}
