package poll_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/acme/billing/internal/testkit/poll"
)

// fatalTB keeps the first Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// untilProgress runs poll.UntilProgress with a stall of two looks and
// returns what it failed with, "" when it returned.
func untilProgress(progress func() int, cond func() bool) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		poll.UntilProgress(tb, "the thing", 2*poll.ProgressInterval, progress, cond)
	}()
	<-done
	return tb.msg
}

func TestUntilProgressWaitsWhileProgressing(t *testing.T) {
	t.Parallel()
	// Ten looks, three times the stall: it waits as long as something moves.
	n, looks := 0, 0
	msg := untilProgress(func() int { n++; return n }, func() bool { looks++; return looks > 10 })
	if msg != "" {
		t.Errorf("failed while progressing: %s", msg)
	}
}

func TestUntilProgressFailsWhenStuck(t *testing.T) {
	t.Parallel()
	msg := untilProgress(func() int { return 7 }, func() bool { return false })
	if !strings.Contains(msg, "waiting for the thing: no progress") || !strings.Contains(msg, "last: 7") {
		t.Errorf("failed with %q, want no progress named, and the last snapshot", msg)
	}
}
