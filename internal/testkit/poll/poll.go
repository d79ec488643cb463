// Package poll is the one way tests wait for something that happens on its
// own time (a commit, an invoice, a pause): poll a condition until it holds
// or a deadline passes, never sleep and hope.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 20 * time.Millisecond

// Until calls cond every Interval until it returns true, and fails the test
// naming what it waited for if timeout passes first.
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
