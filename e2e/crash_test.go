package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestKillBetweenGroupCommitAndCharges: billing is SIGKILLed
// while the reserves of a burst of events have been committed in groups and
// their charges are at the gateway, unanswered. The gateway then executes
// them (it does not know the client died), and the restarted process must
// find every one of those invoices pending under its recorded key, resume it
// under that key and settle it from the gateway's replay: one charge per
// order, nothing pending, offsets committed to the end.
func TestKillBetweenGroupCommitAndCharges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 64 in flight on the default pool (8 connections); a held charge must
	// not time out into a retry tier before the kill. The attempts the
	// killed process took live that timeout plus order.AttemptMargin: the
	// restarted one waits them out before it resumes the keys (what a
	// killed pod costs its orders).
	const paymentTimeout = 20 * time.Second
	e.extra = []string{"BILLING_MAX_IN_FLIGHT=64", "BILLING_PAYMENT_TIMEOUT=" + paymentTimeout.String()}
	e.runOK("migrate")
	w := newWorkload(t, 200, 0, 0, 0)
	release := e.gw.Hold()
	defer release()
	e.produce(w.records)

	// The events of a topic already full would reach the store a few
	// milliseconds apart, each finding a free runner and going alone. To
	// make the groups certain, the invoice table is locked until all 64
	// events are in flight: the first reserves wait at the server, the rest
	// queue in the store and go in groups when the lock goes.
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE invoice IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	p := e.start("run")
	metrics := "http://" + httpAddr(t, p) + "/metrics"
	poll.Until(t, "64 events in flight, their reserves waiting on the lock", 20*time.Second, func() bool {
		return scrape(metrics)[`billing_in_flight{topic="`+e.topic+`"}`] == 64
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var pending, held int
	var groups, reserves float64
	poll.Until(t, "invoices pending with their charges held at the gateway, reserved in groups", 20*time.Second, func() bool {
		pending, held = e.pendingCount(), e.gw.Held()
		m := scrape(metrics)
		groups, reserves = m[`billing_db_group_events_count{op="reserve"}`], m[`billing_db_group_events_sum{op="reserve"}`]
		return pending == 64 && held == 64 && groups < reserves
	})
	e.kill(p)
	t.Logf("SIGKILL with %d invoices pending, %d charges held; %v reserve groups for %v reserves before it",
		pending, held, groups, reserves)

	// The gateway executes what it holds, for a client that is gone.
	heldAtKill := e.gw.Held()
	release()
	poll.Until(t, "the held charges to execute", 10*time.Second, func() bool {
		return e.gw.Held() == 0 && len(e.gw.Charges()) >= heldAtKill
	})
	charges := e.gw.Charges()
	invs := e.invoices()
	for _, c := range charges {
		if inv, ok := invs[c.OrderID]; !ok || inv.Status != order.StatusPending || inv.EventID.String() != c.Key {
			t.Fatalf("charge of %s under %s: invoice %+v, want it pending under that key (the kill came after the settle?)", c.OrderID, c.Key, inv)
		}
	}
	t.Logf("%d charges executed at the gateway after the kill, their invoices pending", len(charges))

	kafkatest.EvictMembers(t, e.brokers, e.group)
	restarted := time.Now()
	p = e.start("run")
	poll.Until(t, "the group to commit every partition to its end", paymentTimeout+order.AttemptMargin+40*time.Second, e.caughtUp)
	t.Logf("caught up %v after the restart (the killed attempts live %v from their reserve)",
		time.Since(restarted).Round(100*time.Millisecond), paymentTimeout+order.AttemptMargin)
	e.stop(p)
	e.check(w)
	if n := e.pendingCount(); n != 0 {
		t.Errorf("%d invoices pending at the end, want 0", n)
	}
	replays := 0
	for _, c := range e.gw.Calls() {
		if c.Replayed {
			replays++
		}
	}
	if replays < len(charges) {
		t.Errorf("gateway replays = %d, want at least one per charge executed after the kill (%d): each pending invoice resumed under its key", replays, len(charges))
	}
}

func (e *env) invoices() map[string]order.Invoice {
	e.t.Helper()
	invs, err := e.store.Invoices(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]order.Invoice, len(invs))
	for _, inv := range invs {
		out[inv.OrderID] = inv
	}
	return out
}

func (e *env) pendingCount() int {
	invs, err := e.store.Invoices(context.Background())
	if err != nil {
		return -1
	}
	n := 0
	for _, inv := range invs {
		if inv.Status == order.StatusPending {
			n++
		}
	}
	return n
}

// httpAddr waits for p's log line naming its HTTP address.
func httpAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	poll.Until(t, "billing's HTTP address in its log", 20*time.Second, func() bool {
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		for sc.Scan() {
			var line struct{ Msg, HTTP string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http server listening" && line.HTTP != "" {
				addr = line.HTTP
				return true
			}
		}
		return false
	})
	return addr
}

// scrape returns the samples of the Prometheus text at url by series
// (name and labels as written, e.g. billing_in_flight or
// billing_db_group_events_count{op="reserve"}); none when it fails.
func scrape(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[series] = v
		}
	}
	return out
}
