package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc CPU times (100 on every Linux
// build that matters).
const clockTick = 100

// cpuSnap is a snapshot of CPU time used: the whole host, and per group of
// processes (billing, postgres, broker, driver).
type cpuSnap struct {
	at     time.Time
	busy   time.Duration // host, all CPUs, not idle or iowait
	steal  time.Duration // host, all CPUs: taken by the hypervisor for other guests
	groups map[string]time.Duration
}

// takeHostSnap reads the host's CPU times from /proc/stat.
func takeHostSnap() cpuSnap {
	s := cpuSnap{at: time.Now(), groups: map[string]time.Duration{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		var busy int64
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case i == 7:
				s.steal = ticks(n)
			case i == 3 || i == 4 || i > 7: // idle, iowait; guest times are inside user
			default:
				busy += n
			}
		}
		s.busy = ticks(busy)
	}
	return s
}

// takeCPUSnap reads /proc. billingPID and brokerPID may be 0.
func takeCPUSnap(billingPID, brokerPID int) cpuSnap {
	s := takeHostSnap()
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		comm, cpu, ok := procCPU(pid)
		if !ok {
			continue
		}
		switch {
		case pid == billingPID:
			s.groups["billing"] += cpu
		case pid == brokerPID && brokerPID != 0:
			s.groups["broker"] += cpu
		case pid == self:
			s.groups["driver"] += cpu
		case comm == "postgres":
			s.groups["postgres"] += cpu
		}
	}
	return s
}

// procCPU returns a process's command name and user+system CPU time.
func procCPU(pid int) (string, time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	f := strings.Fields(string(b[end+1:]))
	// After the comm: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return "", 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return string(b[open+1 : end]), ticks(ut + st), true
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }

// cpuShare is CPU use between two snapshots, in % of one CPU.
type cpuShare struct {
	busy   float64
	steal  float64
	groups map[string]float64
}

func share(a, b cpuSnap) cpuShare {
	wall := b.at.Sub(a.at).Seconds()
	out := cpuShare{groups: map[string]float64{}}
	if wall <= 0 {
		return out
	}
	out.busy = 100 * (b.busy - a.busy).Seconds() / wall
	out.steal = 100 * (b.steal - a.steal).Seconds() / wall
	for k, v := range b.groups {
		out.groups[k] = 100 * (v - a.groups[k]).Seconds() / wall
	}
	return out
}
