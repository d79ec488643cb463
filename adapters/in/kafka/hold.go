package kafka

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/internal/metrics"
)

// HoldBy is why consumption is held: a reason that is not an outage.
type HoldBy string

// The reasons to hold consumption (billing_consumption_paused{by}).
const (
	// HoldOperator: a person ran `billing consume pause`.
	HoldOperator HoldBy = "operator"
	// HoldRelease: a member of one of the process's consumer groups runs a
	// release this one is not safe beside (ReleaseGate).
	HoldRelease HoldBy = "release"
)

// Hold is the switch of the reasons to stop consuming that keep the
// process ready, beside health.Pause's outages, which do not. While any reason
// holds, every Consumer that has the Hold stops fetching, lets its
// in-flight events finish (the revoke grace), makes its final commit and
// leaves its group, so that the group's other members (the other release)
// keep every partition; it joins again once no reason is left. Before a
// consumer joins, and again when a generation gives it partitions, the
// Hold's checks run (Verify), so that a reason found by a check stops the
// consumer before it fetches anything.
//
// The pending completer asks Held before each key it would send, and skips
// its passes while held. The outbox relay and the dedup maintenance go on:
// they send no key.
type Hold struct {
	mu      sync.Mutex
	reasons map[HoldBy]holdReason
	since   time.Time     // when the current hold began
	changed chan struct{} // closed (and replaced) whenever the set of reasons changes
	checks  []func(ctx context.Context) (bool, error)
	subs    map[*int]func()      // ended when consumption becomes held (whileOpen)
	gauges  *prometheus.GaugeVec // billing_consumption_paused{by}
	log     *slog.Logger
}

// holdReason is one reason's state.
type holdReason struct {
	why   string
	since time.Time
}

// NewHold returns an open Hold reporting to m's gauges (by = "operator",
// "release"), each set to 0.
func NewHold(m *metrics.Hold, log *slog.Logger) *Hold {
	gauges := m.Paused
	for _, by := range []HoldBy{HoldOperator, HoldRelease} {
		gauges.WithLabelValues(string(by)).Set(0)
	}
	return &Hold{reasons: map[HoldBy]holdReason{}, changed: make(chan struct{}), subs: map[*int]func(){},
		gauges: gauges, log: log}
}

// AddCheck makes Verify run check: it looks at the world now (the release
// gate describes the groups) and sets or clears its reason. It reports
// whether it could tell (false: ask again shortly, for instance while a
// group is rebalancing and its members' metadata is not shown).
func (h *Hold) AddCheck(check func(ctx context.Context) (bool, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, check)
}

// Set holds consumption for by, saying why; a reason already set keeps
// the time it began and takes the new why.
func (h *Hold) Set(by HoldBy, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if r, ok := h.reasons[by]; ok {
		r.why = why
		h.reasons[by] = r
		return
	}
	if len(h.reasons) == 0 {
		h.since = now
		for key, end := range h.subs {
			end()
			delete(h.subs, key)
		}
	}
	h.reasons[by] = holdReason{why: why, since: now}
	h.gauges.WithLabelValues(string(by)).Set(1)
	h.log.Warn("consumption held: fetching stops, in-flight events finish, offsets are committed, the groups are left",
		slog.String("by", string(by)), slog.String("why", why), slog.String("held_by", h.listLocked()))
	h.changeLocked()
}

// Clear ends the hold of by; with the last reason, consumption resumes.
func (h *Hold) Clear(by HoldBy) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.reasons[by]
	if !ok {
		return
	}
	delete(h.reasons, by)
	h.gauges.WithLabelValues(string(by)).Set(0)
	if len(h.reasons) > 0 {
		h.log.Info("consumption still held", slog.String("cleared", string(by)),
			slog.Duration("held_for", time.Since(r.since)), slog.String("held_by", h.listLocked()))
	} else {
		h.log.Info("consumption no longer held: joining the groups again", slog.String("cleared", string(by)),
			slog.Duration("held_for", time.Since(h.since)))
	}
	h.changeLocked()
}

// changeLocked wakes whoever waits for a change; h.mu is held.
func (h *Hold) changeLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// Held reports whether consumption is held, and why (each reason, sorted).
func (h *Hold) Held() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reasons) > 0, h.listLocked()
}

// listLocked says every reason and its why, sorted by reason; h.mu is held.
func (h *Hold) listLocked() string {
	parts := make([]string, 0, len(h.reasons))
	for by, r := range h.reasons {
		parts = append(parts, string(by)+": "+r.why)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// state returns whether the hold is open, and the channel closed at its
// next change.
func (h *Hold) state() (open bool, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reasons) == 0, h.changed
}

// WaitOpen waits until no reason holds consumption; false when ctx ended
// first.
func (h *Hold) WaitOpen(ctx context.Context) bool {
	for {
		open, changed := h.state()
		if open {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// verifyRetry bounds the pause between checks that could not tell.
const (
	verifyRetryMin = 100 * time.Millisecond
	verifyRetryMax = 2 * time.Second
)

// Verify runs every check, then reports whether the hold is open (false
// too when ctx ended first). A check that cannot tell yet (a group
// rebalancing) is asked again, at growing intervals, so that nothing is
// fetched on a guess; one that fails leaves its reason as the checks
// before it set it (the release gate's own loop keeps checking).
func (h *Hold) Verify(ctx context.Context) bool {
	h.mu.Lock()
	checks := slices.Clone(h.checks)
	h.mu.Unlock()
	wait := verifyRetryMin
	for _, check := range checks {
		for {
			told, err := check(ctx)
			if ctx.Err() != nil {
				return false
			}
			if told || err != nil {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
			wait = min(2*wait, verifyRetryMax)
		}
	}
	open, _ := h.state()
	return open
}

// whileOpen returns a context derived from ctx that ends, with cause
// errHeld, as soon as a reason holds consumption (at once if one does),
// and a function that releases it.
func (h *Hold) whileOpen(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reasons) > 0 {
		cancel(errHeld)
		return ctx, func() {}
	}
	key := new(int)
	h.subs[key] = func() { cancel(errHeld) }
	return ctx, func() {
		h.mu.Lock()
		delete(h.subs, key)
		h.mu.Unlock()
		cancel(nil)
	}
}

// errHeld is the cause of a generation's end when consumption is held.
var errHeld = heldError{}

type heldError struct{}

func (heldError) Error() string { return "consumption held" }
