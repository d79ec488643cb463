package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
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
)

// orderKind is what the scripted gateway does with an order of the load.
type orderKind int

const (
	kindNormal      orderKind = iota // charged at once
	kindDeclined                     // 402: declined (a "declined-" customer, the stub's rule)
	kindRejectFirst                  // the first request of its first key: 404, nothing stored; a later event reopens it
	kindHeld                         // every request of its first key: 422, the key used with another body
	kindSlow                         // every request slow (well within BILLING_PAYMENT_TIMEOUT)
	kindTimeout                      // the first request of its first key outlives BILLING_PAYMENT_TIMEOUT, and is executed anyway
	kindCount
)

var kindNames = [kindCount]string{"normal", "declined", "reject-first", "held", "slow", "timeout"}

func (k orderKind) String() string { return kindNames[k] }

// gatewayScript is the stub gateway's behaviour for the load: per order
// kind, and 503 bursts in which every request is refused unexecuted.
type gatewayScript struct {
	paymentTimeout time.Duration

	mu    sync.Mutex
	first map[string]orderKind // first key of each order → its kind
	slow  map[string]bool      // orders whose every request is slow

	burstUntil atomic.Int64 // UnixNano: every request until then gets a 503
}

func newGatewayScript(paymentTimeout time.Duration) *gatewayScript {
	return &gatewayScript{paymentTimeout: paymentTimeout, first: map[string]orderKind{}, slow: map[string]bool{}}
}

func (s *gatewayScript) add(orderID string, firstKey uuid.UUID, k orderKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first[firstKey.String()] = k
	if k == kindSlow {
		s.slow[orderID] = true
	}
}

// burst makes every request of the next d a 503.
func (s *gatewayScript) burst(d time.Duration) { s.burstUntil.Store(time.Now().Add(d).UnixNano()) }

// fault is the stub's fault hook (gatewaystub.Stub.SetFault).
func (s *gatewayScript) fault(c gatewaystub.Call, n int) gatewaystub.Fault {
	if time.Now().UnixNano() < s.burstUntil.Load() {
		return gatewaystub.Fault{Status: http.StatusServiceUnavailable}
	}
	s.mu.Lock()
	k, scripted := s.first[c.Key]
	slow := s.slow[c.OrderID]
	s.mu.Unlock()
	var f gatewaystub.Fault
	if slow {
		f.Delay = s.paymentTimeout / 3
	}
	if !scripted {
		return f
	}
	switch {
	case k == kindRejectFirst && n == 1:
		// Refused, nothing stored: the key may be executed by a later
		// request (issue 29 point 1's double charge needs exactly that
		// gateway). The refusal itself is slow, so that another path's
		// request of the key can be in flight meanwhile.
		f.Status, f.Delay = http.StatusNotFound, s.paymentTimeout/4
	case k == kindHeld:
		f.Status = http.StatusUnprocessableEntity
	case k == kindTimeout && n == 1:
		f.Delay = s.paymentTimeout + s.paymentTimeout/3
	}
	return f
}

// loadOrder is one order of the load.
type loadOrder struct {
	id       string
	customer string
	amount   int64
	kind     orderKind
	firstKey uuid.UUID
}

// sentRecord is one record the load produced.
type sentRecord struct {
	eventID uuid.UUID
	orderID string
	what    string // "new", "resend", "another", "reopen"
}

// load produces OrderConfirmed records at a steady rate until stopped: new
// orders of every kind, re-sends of records already sent (the same event
// id), new event ids for orders already sent, and for each order refused
// once a later event that reopens it. It remembers every record it sent.
type load struct {
	t      *testing.T
	w      *kafkago.Writer
	script *gatewayScript
	rate   int // records a second
	prefix string

	rng      *rand.Rand
	orders   []*loadOrder
	records  []kafkago.Message
	reopens  []scheduled
	bursts   time.Time // when the next 503 burst starts
	sequence int

	mu   sync.Mutex
	sent []sentRecord

	stop chan struct{}
	done chan error
}

// scheduled is a record to send once its time has come.
type scheduled struct {
	at  time.Time
	msg kafkago.Message
	rec sentRecord
}

// Shares of the records and of the new orders' kinds, in percent.
const (
	pctResend  = 18 // a record sent before, again
	pctAnother = 12 // a new event id for an order sent before

	pctDeclined    = 4
	pctRejectFirst = 6
	pctHeld        = 1
	pctSlow        = 5
	pctTimeout     = 1
)

// burstEvery and burstFor shape the 503 bursts.
const (
	burstEvery = 4 * time.Second
	burstFor   = 250 * time.Millisecond
)

func startLoad(t *testing.T, brokers []string, topic string, script *gatewayScript, rate int, prefix string, seed uint64) *load {
	t.Helper()
	// Logged so that a failed run's records can be made again by passing
	// its seed (the processes' timing cannot be).
	t.Logf("load %q: seed %d", prefix, seed)
	l := &load{
		t: t, w: kafkatest.NewWriter(t, brokers, topic), script: script, rate: rate, prefix: prefix,
		rng: rand.New(rand.NewPCG(seed, 29)), bursts: time.Now().Add(burstEvery),
		stop: make(chan struct{}), done: make(chan error, 1),
	}
	go func() { l.done <- l.run() }()
	return l
}

// tick is how often the load writes a batch.
const tick = 50 * time.Millisecond

func (l *load) run() error {
	tk := time.NewTicker(tick)
	defer tk.Stop()
	start, due := time.Now(), 0
	for {
		select {
		case <-l.stop:
			// The reopens still waiting are sent now: an order refused
			// once always gets the later event that reopens it.
			var batch []kafkago.Message
			var recs []sentRecord
			for _, s := range l.reopens {
				batch, recs = append(batch, s.msg), append(recs, s.rec)
			}
			l.reopens = nil
			return l.write(batch, recs)
		case now := <-tk.C:
			// As many records as the rate owes since the start, at most a
			// second's worth at once: a write that took long is caught up
			// without flooding the topic.
			want := int(now.Sub(start).Seconds() * float64(l.rate))
			n := min(want-due, l.rate)
			due = want
			if now.After(l.bursts) {
				l.script.burst(burstFor)
				l.bursts = now.Add(burstEvery)
			}
			batch, recs, err := l.next(n, now)
			if err != nil {
				return err
			}
			if err := l.write(batch, recs); err != nil {
				return err
			}
		}
	}
}

func (l *load) write(batch []kafkago.Message, recs []sentRecord) error {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.w.WriteMessages(ctx, batch...); err != nil {
		return fmt.Errorf("produce %d records: %w", len(batch), err)
	}
	l.mu.Lock()
	l.sent = append(l.sent, recs...)
	l.mu.Unlock()
	return nil
}

// next makes n records, and adds the reopens whose time has come.
func (l *load) next(n int, now time.Time) ([]kafkago.Message, []sentRecord, error) {
	var batch []kafkago.Message
	var recs []sentRecord
	add := func(msg kafkago.Message, rec sentRecord) {
		batch, recs = append(batch, msg), append(recs, rec)
		l.records = append(l.records, msg)
	}
	for range n {
		p := l.rng.IntN(100)
		switch {
		case p < pctResend && len(l.records) > 0:
			// Mostly recent records, which meet their orders in flight.
			i := len(l.records) - 1 - l.rng.IntN(min(len(l.records), 2000))
			msg := l.records[i]
			evt, err := wire.Decode(msg.Value, "EUR")
			if err != nil {
				return nil, nil, err
			}
			batch = append(batch, msg)
			recs = append(recs, sentRecord{eventID: evt.EventID, orderID: evt.OrderID, what: "resend"})
		case p < pctResend+pctAnother && len(l.orders) > 0:
			o := l.orders[len(l.orders)-1-l.rng.IntN(min(len(l.orders), 2000))]
			msg, rec, err := l.event(o, "another")
			if err != nil {
				return nil, nil, err
			}
			add(msg, rec)
		default:
			msg, rec, err := l.newOrder(now)
			if err != nil {
				return nil, nil, err
			}
			add(msg, rec)
		}
	}
	kept := l.reopens[:0]
	for _, s := range l.reopens {
		if now.Before(s.at) {
			kept = append(kept, s)
			continue
		}
		add(s.msg, s.rec)
	}
	l.reopens = kept
	return batch, recs, nil
}

// newOrder makes the first record of a new order, of a kind drawn by the
// shares above.
func (l *load) newOrder(now time.Time) (kafkago.Message, sentRecord, error) {
	l.sequence++
	o := &loadOrder{id: fmt.Sprintf("%s-%06d", l.prefix, l.sequence), customer: fmt.Sprintf("cus-%d", l.rng.IntN(500)),
		amount: int64(100 + l.rng.IntN(100_000))}
	p := l.rng.IntN(100)
	switch {
	case p < pctDeclined:
		o.kind, o.customer = kindDeclined, "declined-"+o.customer
	case p < pctDeclined+pctRejectFirst:
		o.kind = kindRejectFirst
	case p < pctDeclined+pctRejectFirst+pctHeld:
		o.kind = kindHeld
	case p < pctDeclined+pctRejectFirst+pctHeld+pctSlow:
		o.kind = kindSlow
	case p < pctDeclined+pctRejectFirst+pctHeld+pctSlow+pctTimeout:
		o.kind = kindTimeout
	}
	msg, rec, err := l.event(o, "new")
	if err != nil {
		return msg, rec, err
	}
	o.firstKey = rec.eventID
	l.script.add(o.id, o.firstKey, o.kind)
	l.orders = append(l.orders, o)
	if o.kind == kindRejectFirst {
		// The event that reopens it comes while its first request may
		// still be in flight somewhere, or soon after it was refused.
		reopen, rrec, err := l.event(o, "reopen")
		if err != nil {
			return msg, rec, err
		}
		l.reopens = append(l.reopens, scheduled{at: now.Add(time.Duration(200+l.rng.IntN(1500)) * time.Millisecond), msg: reopen, rec: rrec})
	}
	return msg, rec, nil
}

// event makes a record of order o with a new event id.
func (l *load) event(o *loadOrder, what string) (kafkago.Message, sentRecord, error) {
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: o.id, CustomerID: o.customer, TotalAmount: o.amount,
		Currency: "EUR", ConfirmedAt: time.Now().UTC()})
	if err != nil {
		return kafkago.Message{}, sentRecord{}, err
	}
	v, err := wire.Encode(evt)
	if err != nil {
		return kafkago.Message{}, sentRecord{}, err
	}
	return kafkago.Message{Key: []byte(o.id), Value: v}, sentRecord{eventID: evt.EventID, orderID: o.id, what: what}, nil
}

// finish stops the load, sends what it still owed (the reopens) and
// returns what it sent, and its orders by id.
func (l *load) finish() ([]sentRecord, map[string]*loadOrder) {
	l.t.Helper()
	close(l.stop)
	if err := <-l.done; err != nil {
		l.t.Fatalf("load: %v", err)
	}
	byID := make(map[string]*loadOrder, len(l.orders))
	for _, o := range l.orders {
		byID[o.id] = o
	}
	return l.sentRecords(), byID
}

// sentRecords returns the records sent so far.
func (l *load) sentRecords() []sentRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentRecord(nil), l.sent...)
}
