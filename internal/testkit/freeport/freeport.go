// Package freeport finds loopback TCP ports for the servers tests start:
// brokers, Postgres clusters, billing processes.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Ports considers: above the well-known and the
// commonly registered service ports.
const lowest = 10000

// draw picks a candidate in [0, n); tests replace it.
var draw = rand.IntN

// Ports returns n distinct loopback ports that were free a moment ago.
//
// They are drawn from below the kernel's ephemeral range. A port the
// kernel picked with ":0" comes from that range, and when a test stops a
// server to start it again on the same port, any outgoing connection made
// in between (and a shared broker makes many) can be given that port as its
// local end; the restart then fails with "address already in use". Outside
// the range only another explicit bind can take the port.
func Ports(n int) ([]int, error) {
	lo, err := ephemeralStart()
	if err != nil || lo-lowest < 1000 {
		lo = 0 // no room below the range, or no range known: the kernel chooses
	}
	ports := make([]int, 0, n)
	var held []net.Listener // until all n are chosen, so that they differ
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := listenBelow(lo)
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns one port as Ports does.
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// listenBelow listens on a random free loopback port in [lowest, lo), or
// on one the kernel chooses when lo is 0.
func listenBelow(lo int) (net.Listener, error) {
	listen := func(port int) (net.Listener, error) {
		return new(net.ListenConfig).Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if lo == 0 {
		l, err := listen(0)
		if err != nil {
			return nil, fmt.Errorf("freeport: find a free port: %w", err)
		}
		return l, nil
	}
	for range 500 {
		if l, err := listen(lowest + draw(lo-lowest)); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("freeport: no free port in [%d, %d) after 500 tries", lowest, lo)
}

// ephemeralStart reads where the range the kernel gives local ports from
// starts.
func ephemeralStart() (int, error) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return 0, errors.New("freeport: ip_local_port_range: want two numbers")
	}
	return strconv.Atoi(f[0])
}
