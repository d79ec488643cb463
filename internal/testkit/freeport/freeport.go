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

// Ports returns n distinct loopback ports that were free a moment ago.
//
// They are drawn from below the kernel's ephemeral range. A port the
// kernel picked with ":0" comes from that range, and when a test stops a
// server to start it again on the same port, any outgoing connection made
// in between (and a shared broker makes many) can be given that port as its
// local end; the restart then fails with "address already in use". Outside
// the range only another explicit bind can take the port.
func Ports(n int) ([]int, error) {
	lo, _, err := ephemeralRange()
	if err != nil || lo-lowest < 1000 {
		return kernelPorts(n)
	}
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		found := false
		for range 500 {
			p := lowest + rand.IntN(lo-lowest)
			l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				continue
			}
			held = append(held, l)
			ports = append(ports, p)
			found = true
			break
		}
		if !found {
			return nil, fmt.Errorf("freeport: no free port in [%d, %d) after 500 tries", lowest, lo)
		}
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

// kernelPorts lets the kernel choose, where its range is unknown.
func kernelPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralRange reads the range the kernel gives local ports from.
func ephemeralRange() (lo, hi int, err error) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return 0, 0, errors.New("freeport: ip_local_port_range: want two numbers")
	}
	if lo, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, err
	}
	if hi, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	return lo, hi, nil
}
