package e2e

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestPreviousReleaseBesideAnAttemptInFlight is issue 29 point 1's double
// charge, scripted step by step with the built binaries instead of found
// by load: on this release's schema, a process of this release (A) takes
// the attempt of an order's key K1 and its request is in flight (the stub
// gateway holds it); a process of a previous release that records no
// attempts (B) gets the order's event again, sends K1, is refused with a
// 404 (nothing stored) and settles as it knows; a third event of the
// order, with key K2, reaches another process of this release (C); then
// the gateway executes A's request of K1. The order must be charged once.
//
// Each process reads its own topic in its own consumer group, so that
// which process gets which record is the test's choice, not a
// rebalance's: it is the moment of a rollout where an old pod finishes a
// record that a new pod got again. The release gate (a process of this
// release does not join while the group has a member of a release it is
// not safe beside) cannot see B here; what is tested is that the
// database alone keeps the fence against a writer that does not know it.
// Only releases without a fence of their own take part: a release that
// takes attempts waits for A's instead of sending K1.
func TestPreviousReleaseBesideAnAttemptInFlight(t *testing.T) {
	t.Parallel()
	for _, r := range previousReleases(t) {
		if takesAttempts(t, r) {
			t.Logf("%s takes attempts: it waits for this release's attempt instead of sending the key", r)
			continue
		}
		bin := buildRelease(t, r)
		t.Run("v"+r.Version, func(t *testing.T) {
			t.Parallel()
			interleave29(t, r, bin)
		})
	}
}

func interleave29(t *testing.T, from release, oldBin string) {
	pool, dsn := pgtest.NewEmptyDB(t)
	e := newEnvOn(t, pool, dsn)
	// A's request must stay in flight, unanswered, through B's and C's
	// steps: the longest payment timeout there is.
	e.extra = []string{"BILLING_PAYMENT_TIMEOUT=60s"}
	u := &upgrade{t: t, e: e, db: pool, from: from, oldBin: oldBin, began: time.Now()}
	if out, err := u.run(oldBin, "migrate"); err != nil {
		t.Fatalf("v%s's billing migrate: %v\n%s", from.Version, err, out)
	}
	if u.schemaFacts().fence {
		t.Fatalf("v%s's schema has invoice.attempt_id, which its migrations do not create", from.Version)
	}
	if out, err := u.run(binary, "migrate"); err != nil {
		if out, err = u.run(binary, "migrate", "--allow-no-rollback"); err != nil {
			t.Fatalf("billing migrate --allow-no-rollback: %v\n%s", err, out)
		}
	} else {
		t.Logf("billing migrate applied the migrations without --allow-no-rollback:\n%s", tail(out, 1024))
	}

	evt1, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-29", CustomerID: "cus-29", TotalAmount: 2900, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	k1 := evt1.EventID.String()
	// The gateway: K1's first request (A's) waits until released, then is
	// executed; any other request of K1 while it waits is refused with a
	// 404 that stores nothing.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseK1 := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseK1)
	var k1Held atomic.Bool
	e.gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if c.Key != k1 {
			return gatewaystub.Fault{}
		}
		if n == 1 {
			k1Held.Store(true)
			<-release
			return gatewaystub.Fault{}
		}
		select {
		case <-release:
			return gatewaystub.Fault{}
		default:
			return gatewaystub.Fault{Status: http.StatusNotFound}
		}
	})

	// A, this release, takes K1's attempt; its request waits at the gateway.
	a := u.startOwn(binary, "a")
	u.produceTo("a", a.topic, evt1)
	poll.Until(t, "A's request of K1 held at the gateway", time.Minute, k1Held.Load)

	// B, the previous release, gets the event again and sends K1: 404.
	b := u.startOwn(oldBin, "b")
	u.produceTo("b", b.topic, evt1)
	poll.Until(t, "B's request of K1 refused with a 404", time.Minute, func() bool {
		for _, c := range e.gw.Calls() {
			if c.Key == k1 && c.Status == http.StatusNotFound {
				return true
			}
		}
		return false
	})
	// B is done with the record once it routed it (DLQ or a tier, after
	// its settle) or paused on the database's answer.
	poll.Until(t, "B done with the record", time.Minute, func() bool {
		m := scrape(b.metrics)
		return m[`billing_events_total{outcome="dead_lettered"}`]+m[`billing_events_total{outcome="retried"}`] >= 1 ||
			m["billing_consumer_paused"] == 1
	})
	status, key := u.invoiceOf("ord-29")
	t.Logf("after B's 404: invoice %s under K1=%v", status, key == evt1.EventID)

	// C, this release, gets a new event of the order (K2).
	evt2, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-29", CustomerID: "cus-29", TotalAmount: 2900, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	c := u.startOwn(binary, "c")
	u.produceTo("c", c.topic, evt2)
	poll.Until(t, "C's reserve of K2's event", time.Minute, func() bool {
		var seen bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM processed_event WHERE event_id = $1)`, evt2.EventID).Scan(&seen)
		return err == nil && seen
	})
	if status, key := u.invoiceOf("ord-29"); key == evt2.EventID {
		// Reopened under K2 while K1's request is in flight: K2 is sent.
		poll.Until(t, "K2's charge", time.Minute, func() bool { return len(e.gw.ChargesForOrder("ord-29")) == 1 })
		t.Logf("C reopened the invoice under K2 while A's request of K1 was in flight (%s)", status)
	}

	// The gateway executes A's request of K1.
	releaseK1()
	// An attempt of a release that records none may be taken to live as
	// long as the longest payment timeout allows: wait that long and more.
	poll.Until(t, "the order final, each process done", 3*time.Minute, func() bool {
		status, _ := u.invoiceOf("ord-29")
		return status != order.StatusPending && status != "" &&
			u.groupDone(a) && u.groupDone(b) && u.groupDone(c)
	})
	charges := e.gw.ChargesForOrder("ord-29")
	status, key = u.invoiceOf("ord-29")
	if len(charges) != 1 {
		t.Errorf("order charged %d times (%v), want once; invoice %s under %s", len(charges), charges, status, key)
	}
	for _, p := range []*ownProc{a, b, c} {
		e.stop(p.p)
	}
	t.Logf("v%s beside this release: %d charge(s), invoice %s under %s (K1 %s, K2 %s)", from.Version, len(charges), status, key, k1, evt2.EventID)
}

// ownProc is a billing process reading a topic of its own in a consumer
// group of its own, with retry tiers and a DLQ of its own.
type ownProc struct {
	p       *proc
	topic   string
	group   string
	base    string // http://host:port
	metrics string
}

func (u *upgrade) startOwn(bin, name string) *ownProc {
	u.t.Helper()
	o := &ownProc{topic: u.e.topic + "." + name, group: u.e.group + "." + name}
	kafkatest.CreateTopics(u.t, u.e.brokers, 1, o.topic)
	o.p = u.e.startBin(bin, []string{
		"BILLING_KAFKA_TOPIC=" + o.topic,
		"BILLING_KAFKA_GROUP_ID=" + o.group,
		"BILLING_KAFKA_RETRY_TOPIC_PREFIX=" + u.e.retryPrefix + "." + name,
		"BILLING_KAFKA_DLQ_TOPIC=" + u.e.dlq + "." + name,
	}, "run")
	o.base = "http://" + httpAddr(u.t, o.p)
	o.metrics = o.base + "/metrics"
	poll.Until(u.t, name+" ready", time.Minute, func() bool { return status(o.base+"/readyz") == http.StatusOK })
	return o
}

func (u *upgrade) produceTo(name, topic string, evt order.OrderConfirmedEvent) {
	u.t.Helper()
	v, err := wire.Encode(evt)
	if err != nil {
		u.t.Fatal(err)
	}
	w := kafkatest.NewWriter(u.t, u.e.brokers, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte(evt.OrderID), Value: v}); err != nil {
		u.t.Fatalf("produce to %s: %v", name, err)
	}
}

// invoiceOf returns an order's invoice status and key ("" when none).
func (u *upgrade) invoiceOf(orderID string) (order.InvoiceStatus, uuid.UUID) {
	var status string
	var key uuid.UUID
	_ = u.db.QueryRow(context.Background(), `SELECT status, event_id FROM invoice WHERE order_id = $1`, orderID).Scan(&status, &key)
	return order.InvoiceStatus(status), key
}

// groupDone reports whether o's group committed its topic to the end.
func (u *upgrade) groupDone(o *ownProc) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lag, err := u.e.kc.Lag(ctx, o.group, o.topic)
	if err != nil {
		return false
	}
	for _, l := range lag {
		if l != 0 {
			return false
		}
	}
	return true
}

// takesAttempts reports whether release r takes attempts (docs/interface.md §4,
// "One attempt per key at a time"): whether its migrations create
// invoice.attempt_id, read from its commit without building or running it.
func takesAttempts(t *testing.T, r release) bool {
	t.Helper()
	err := exec.Command("git", "-C", repoRoot(t), "grep", "--quiet", "ADD COLUMN attempt_id", r.Commit, "--", "migrations").Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false
	default:
		t.Fatalf("release %s: git grep: %v (a shallow clone lacks the commit: fetch the whole history)", r, err)
		return false
	}
}
