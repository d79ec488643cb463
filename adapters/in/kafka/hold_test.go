package kafka

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestHold(t *testing.T) (*Hold, *prometheus.GaugeVec) {
	t.Helper()
	return newTestHoldLogged(slog.New(slog.DiscardHandler))
}

// Each reason shows in its own series; the hold opens with the last one.
func TestHoldReasons(t *testing.T) {
	t.Parallel()
	h, g := newTestHold(t)
	for _, by := range []HoldBy{HoldOperator, HoldRelease} {
		if v := testutil.ToFloat64(g.WithLabelValues(string(by))); v != 0 {
			t.Errorf("%s = %v at start, want 0", by, v)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	genCtx, release := h.whileOpen(ctx)
	defer release()
	h.Set(HoldOperator, "paused by alice")
	if genCtx.Err() == nil || !errors.Is(context.Cause(genCtx), errHeld) {
		t.Errorf("a generation's context did not end, with errHeld, when consumption was held: %v", context.Cause(genCtx))
	}
	h.Set(HoldRelease, "waiting for 8072a37")
	if held, why := h.Held(); !held || why != "operator: paused by alice; release: waiting for 8072a37" {
		t.Errorf("Held() = %v, %q", held, why)
	}
	h.Clear(HoldOperator)
	if held, _ := h.Held(); !held || testutil.ToFloat64(g.WithLabelValues("operator")) != 0 || testutil.ToFloat64(g.WithLabelValues("release")) != 1 {
		t.Error("clearing the operator's reason opened the hold, or the gauges do not say which reason holds")
	}
	if later, end := h.whileOpen(ctx); later.Err() == nil {
		t.Error("whileOpen on a held hold returned a live context")
	} else {
		end()
	}
	opened := make(chan bool)
	go func() { opened <- h.WaitOpen(ctx) }()
	h.Clear(HoldRelease)
	if !<-opened {
		t.Error("WaitOpen did not return true once the last reason was cleared")
	}
	cancel()
}

// Verify asks a check that cannot tell (a group rebalancing) again, and
// one that fails leaves the hold as it was.
func TestHoldVerify(t *testing.T) {
	t.Parallel()
	h, _ := newTestHold(t)
	calls := 0
	h.AddCheck(func(context.Context) (bool, error) {
		calls++
		if calls < 3 {
			return false, nil
		}
		h.Set(HoldRelease, "found one")
		return true, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if h.Verify(ctx) || calls != 3 {
		t.Errorf("Verify = open after %d calls; want held after 3", calls)
	}
	h2, _ := newTestHold(t)
	h2.AddCheck(func(context.Context) (bool, error) { return false, errors.New("coordinator away") })
	if !h2.Verify(ctx) {
		t.Error("a failing check closed an open hold")
	}
}
