// Package procstat reads what Linux says of a process that a test or
// `make bench` started: its peak resident set, the figure the memory
// targets are set in.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// PeakRSS returns a process's peak resident set size in bytes (VmHWM in
// /proc/PID/status).
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
