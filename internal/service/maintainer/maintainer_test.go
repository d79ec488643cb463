package maintainer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service"
	"github.com/acme/billing/internal/service/maintainer"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// fakeWork answers each pass with the next of its results (the last one
// for ever after), counting the passes.
type fakeWork struct {
	mu      sync.Mutex
	passes  int
	results []result
}

type result struct {
	res postgres.DedupResult
	err error
}

func (w *fakeWork) Pass(context.Context) (postgres.DedupResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.results[min(w.passes, len(w.results)-1)]
	w.passes++
	return r.res, r.err
}

func (w *fakeWork) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passes
}

// TestPassLogs: a pass says what it did at Info when it changed something,
// at Debug when it did not or found another process at work, at Error
// when it failed; the error is returned too.
func TestPassLogs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		r    result
		want string // the log line, its level and message
	}{
		{"created", result{res: postgres.DedupResult{Created: []string{"processed_event_p20310314"}, Partitions: 5}},
			`"level":"INFO","msg":"dedup maintenance pass"`},
		{"nothing", result{res: postgres.DedupResult{Partitions: 5}}, `"level":"DEBUG","msg":"dedup maintenance pass"`},
		{"skipped", result{res: postgres.DedupResult{Skipped: true}}, `"level":"DEBUG","msg":"dedup maintenance pass skipped`},
		{"failed", result{err: errors.New("dedup maintenance: lock timeout")}, `"level":"ERROR","msg":"dedup maintenance pass failed"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf syncbuf.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			m := maintainer.New(&fakeWork{results: []result{tt.r}}, maintainer.Options{Logger: log})
			if _, err := m.Pass(t.Context()); !errors.Is(err, tt.r.err) {
				t.Errorf("Pass() error = %v, want %v", err, tt.r.err)
			}
			if got := buf.String(); !strings.Contains(got, tt.want) || !strings.Contains(got, `"component":"dedup_maintenance"`) {
				t.Errorf("log = %s, want a line with %s", got, tt.want)
			}
		})
	}
}

// TestPassStoppedIsNoFailure: a pass its context ended is not logged as
// failed.
func TestPassStoppedIsNoFailure(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := maintainer.New(&fakeWork{results: []result{{err: context.Canceled}}}, maintainer.Options{Logger: log})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Pass(ctx); err == nil {
		t.Error("Pass() error = nil, want the pass's")
	}
	if got := buf.String(); got != "" {
		t.Errorf("log = %s, want nothing", got)
	}
}

// TestStartStop: Start runs a pass at once and then every Interval; a
// second Start fails; Stop waits for the loop, is a no-op when not
// started, and the maintainer starts again afterwards.
func TestStartStop(t *testing.T) {
	t.Parallel()
	w := &fakeWork{results: []result{{}}}
	m := maintainer.New(w, maintainer.Options{Interval: time.Millisecond})
	m.Stop() // not started: a no-op
	if err := m.Start(t.Context()); err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	if err := m.Start(t.Context()); !errors.Is(err, service.ErrRunning) {
		t.Errorf("second Start() error = %v, want ErrRunning", err)
	}
	poll.Until(t, "three passes", 20*time.Second, func() bool { return w.count() >= 3 })
	m.Stop()
	stopped := w.count()
	if w.count() != stopped {
		t.Error("a pass ran after Stop returned")
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatalf("Start() after Stop error = %v", err)
	}
	poll.Until(t, "a pass after the restart", 20*time.Second, func() bool { return w.count() > stopped })
	m.Stop()
}
