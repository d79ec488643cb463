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

// ProgressInterval is how often UntilProgress checks its condition and
// its progress.
const ProgressInterval = 250 * time.Millisecond

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

// UntilProgress is Until for a wait whose length depends on how fast a
// loaded machine works (a backlog draining, a fleet catching up): it fails
// only when progress, a snapshot of whatever moves while the awaited thing
// advances (offsets, counts), has not changed for stall. A slow machine
// then waits longer, a stuck one fails as soon as it is stuck; go test's
// -timeout still bounds a wait that progresses for ever. It looks every
// ProgressInterval: cond and progress usually ask Kafka or Postgres.
func UntilProgress[P comparable](t testing.TB, what string, stall time.Duration, progress func() P, cond func() bool) {
	t.Helper()
	last := progress()
	moved := time.Now()
	tick := time.NewTicker(ProgressInterval)
	defer tick.Stop()
	for !cond() {
		if p := progress(); p != last {
			last, moved = p, time.Now()
		} else if time.Since(moved) > stall {
			t.Fatalf("waiting for %s: no progress for %v (last: %v)", what, stall, last)
		}
		<-tick.C
	}
}
