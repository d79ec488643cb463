package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// member starts another billing process in h's group, on h's broker,
// database and gateway, logging to logw too.
func (h *harness) member(logw *syncbuf.Buffer) *harness {
	h.t.Helper()
	m := &harness{t: h.t, store: h.store, pool: h.pool, gw: h.gw, brokers: h.brokers, cfg: h.cfg, logw: logw}
	m.start()
	h.t.Cleanup(m.shutdown)
	return m
}

func (h *harness) paused() bool { return testutil.ToFloat64(h.app.Metrics.ConsumerPaused) == 1 }

// holding reports whether the process has events of the main topic in
// flight: while it is paused, events held for the outage.
func (h *harness) holding() bool {
	return testutil.ToFloat64(h.app.Metrics.InFlight.WithLabelValues(h.cfg.KafkaTopic)) > 0
}

// gaveWay counts the events a process's log says gave way to a rebalance
// or shutdown while held for an outage.
func gaveWay(log *syncbuf.Buffer) int {
	return strings.Count(log.String(), "event interrupted by shutdown or a rebalance during an outage")
}

// A dependency's outage during which the group rebalances: the events one process held for it leave with the old generation,
// and every process must still resume once the dependency answers, and
// bill everything. Postgres fails internally (SQLSTATE XX001 on every
// invoice insert) while answering pings; the gateway refuses connections.
func TestRebalanceDuringOutageResumes(t *testing.T) {
	t.Parallel()
	for _, dep := range []order.Dependency{order.DependencyGateway, order.DependencyPostgres} {
		for _, joining := range []bool{true, false} {
			name := string(dep) + map[bool]string{true: "/joining", false: "/leaving"}[joining]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				rebalanceDuringOutage(t, dep, joining)
			})
		}
	}
}

func rebalanceDuringOutage(t *testing.T, dep order.Dependency, joining bool) {
	gw := newSwitchedGateway(t)
	var logA, logB syncbuf.Buffer
	pool, dsn := pgtest.NewDB(t)
	h := newHarnessLogged(t, nil, pool, dsn, func(c *config.Config) { c.PaymentBaseURL = gw.url() }, &logA)
	ctx := context.Background()
	// The outage, and its end.
	var back func()
	switch dep {
	case order.DependencyGateway:
		back = gw.up // down until then: connections refused
	case order.DependencyPostgres:
		gw.up()
		for _, stmt := range []string{
			`CREATE FUNCTION fail_internally() RETURNS trigger LANGUAGE plpgsql AS
			 $$BEGIN RAISE EXCEPTION 'could not read block 7' USING ERRCODE = 'XX001'; END$$`,
			`CREATE TRIGGER fail_internally BEFORE INSERT ON invoice FOR EACH ROW EXECUTE FUNCTION fail_internally()`,
		} {
			if _, err := h.pool.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		back = func() {
			if _, err := h.pool.Exec(ctx, `DROP TRIGGER fail_internally ON invoice`); err != nil {
				t.Fatal(err)
			}
		}
	}
	var msgs []kafkago.Message
	for i := range 9 {
		_, m := event(t, fmt.Sprintf("ord-rb-%d", i), "cus-1", int64(100+i))
		msgs = append(msgs, m)
	}

	members := []*harness{h}
	if joining {
		// A alone holds events during the outage; B joins.
		h.send(msgs...)
		poll.Until(t, "A paused, holding events", 20*time.Second, h.paused)
		b := h.member(&logB)
		members = append(members, b)
		poll.Until(t, "A's held events to give way to the rebalance", 30*time.Second, func() bool { return gaveWay(&logA) > 0 })
	} else {
		// A and B both hold events; B leaves.
		b := h.member(&logB)
		// In the main topic's group, not only a retry tier's: B joining it
		// after the events are sent would make A's events give way before
		// B leaves, and A might hold none when it does.
		poll.Until(t, "B in the main topic's group", 30*time.Second, func() bool {
			return strings.Contains(logB.String(), `"msg":"partitions assigned","tier":0,`)
		})
		h.send(msgs...)
		poll.Until(t, "A and B paused, holding events", 20*time.Second, func() bool {
			return h.paused() && b.paused() && h.holding() && b.holding()
		})
		before := gaveWay(&logA)
		b.shutdown()
		poll.Until(t, "A's held events to give way to the rebalance", 30*time.Second, func() bool { return gaveWay(&logA) > before })
	}
	if n := h.routed(); n != 0 {
		t.Fatalf("%d records routed during the outage, want 0", n)
	}

	up := time.Now()
	back()
	var took []string
	for i, m := range members {
		poll.Until(t, fmt.Sprintf("member %d to resume", i), 30*time.Second, func() bool {
			return !m.paused() && m.readyz() == http.StatusOK
		})
		took = append(took, time.Since(up).Round(10*time.Millisecond).String())
	}
	poll.Until(t, "every order charged", 30*time.Second, func() bool {
		invs, err := h.store.Invoices(ctx)
		if err != nil || len(invs) != len(msgs) {
			return false
		}
		for _, inv := range invs {
			if inv.Status != order.StatusCharged {
				return false
			}
		}
		return true
	})
	t.Logf("%s outage, a member %s during it: after the dependency came back, members ready again after %v, every order charged after %v",
		dep, map[bool]string{true: "joining", false: "leaving"}[joining], took, time.Since(up).Round(10*time.Millisecond))
	for _, m := range members {
		if n := m.routed(); n != 0 {
			t.Errorf("%d records routed, want 0", n)
		}
	}
	for _, m := range msgs {
		if n := len(gw.stub.ChargesForOrder(string(m.Key))); n != 1 {
			t.Errorf("%s charged %d times, want 1", m.Key, n)
		}
	}
}
