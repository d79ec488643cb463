// Package demo is `billing demo`: an in-process Kafka broker, a Postgres
// (BILLING_DATABASE_URL when set, else a throwaway cluster), a stub payment
// gateway and a producer of sample events with duplicates, second events for
// billed orders, declines, a flaky gateway and malformed records; the real
// service runs against them and a summary says what happened to each kind.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/reconcile"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

// Options sizes the demo.
type Options struct {
	Orders       int // distinct orders (default 120)
	Resends      int // re-sends of an already sent event, same event_id (default 25)
	SecondEvents int // new event_id for an order already sent (default 10)
	Declines     int // orders whose customer the gateway declines (default 5)
	Flaky        int // orders whose first gateway call fails with 503 (default 3)
	Bad          int // malformed records (default 8, at most the corpus size)
	LogFile      string
	DatabaseURL  string // empty: start a throwaway cluster
	Timeout      time.Duration
	Seed         uint64
	MaxInFlight  int
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Orders, 120)
	def(&o.Resends, 25)
	def(&o.SecondEvents, 10)
	def(&o.Declines, 5)
	def(&o.Flaky, 3)
	def(&o.Bad, 8)
	def(&o.MaxInFlight, 16)
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
}

// Report is what happened, for the summary and for tests.
type Report struct {
	Records       int
	Outcomes      map[string]int
	Invoices      map[order.InvoiceStatus]int
	Orders        int
	Charges       int
	ChargedOrders int
	DoubleCharged []string
	GatewayCalls  int
	Gateway503    int
	DLQ           []kafkain.Record
	BadSent       []string
	Elapsed       time.Duration
	// Published counts the invoice events on the invoice topic by type;
	// EventIDProblems says which final invoices do not have exactly one
	// event id, the one of their transition (empty when all do).
	Published       map[order.InvoiceEventType]int
	EventIDProblems []string
	// Reconciled is `billing reconcile`'s run over the demo's period,
	// once the service stopped: the invoices against the stub's records.
	Reconciled order.ReconcileResult
}

const (
	topic        = "orders.order-confirmed.v1"
	group        = "billing-order-confirmed"
	invoiceTopic = "billing.invoice-events.v1"
)

// Run runs the demo and writes its summary to out.
func Run(ctx context.Context, o Options, out io.Writer) (*Report, error) {
	o.defaults()
	work, err := os.MkdirTemp("", "billing-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if o.LogFile == "" {
		o.LogFile = filepath.Join(os.TempDir(), "billing-demo.log")
	}
	logf, err := os.Create(o.LogFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	log := slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))

	fmt.Fprintln(out, "billing demo: starting an in-process Kafka broker, Postgres and a stub payment gateway…")

	// Kafka.
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, topic),
		kfake.AllowAutoTopicCreation(), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(8 << 20)}))
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	client, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "billing-demo"})
	if err != nil {
		return nil, err
	}

	// Postgres.
	dsn := o.DatabaseURL
	if dsn == "" {
		cl, err := pgcluster.Start(ctx, filepath.Join(work, "pg"), pgcluster.Options{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start a throwaway postgres (or set BILLING_DATABASE_URL): %w", err)
		}
		defer func() { _ = cl.Stop(context.WithoutCancel(ctx)) }()
		dsn = cl.DSN("postgres")
	}

	// Gateway.
	stub := gatewaystub.New(gatewaystub.Options{Logger: log})
	flaky := map[string]bool{}
	stub.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if flaky[c.OrderID] && n == 1 {
			return gatewaystub.Fault{Status: 503}
		}
		return gatewaystub.Fault{}
	})
	gwURL, err := stub.Start()
	if err != nil {
		return nil, fmt.Errorf("start gateway stub: %w", err)
	}
	defer stub.Close()

	// The records.
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed>>1))
	records, badNames, err := sampleRecords(o, rng, flaky)
	if err != nil {
		return nil, err
	}

	cfg := config.Config{
		Kafka: config.Kafka{
			KafkaBrokers: brokers, KafkaTopic: topic, KafkaGroupID: group,
			KafkaRetryTopicPrefix: "billing.order-confirmed.retry",
			RetryDelays:           []config.Duration{config.Duration(time.Second), config.Duration(2 * time.Second)},
			KafkaDLQTopic:         "billing.order-confirmed.dlq", KafkaClientID: "billing-demo", KafkaInvoiceTopic: invoiceTopic,
		},
		Database: config.Database{DatabaseURL: config.Secret(dsn)},
		Gateway:  config.Gateway{PaymentBaseURL: gwURL},
		Rules: config.Rules{PaymentTimeout: 5 * time.Second, PendingResumeAfter: 15 * time.Minute, GatewayKeyTTL: 24 * time.Hour,
			PublishEvents: true},
		Service: config.Service{DefaultCurrency: "USD", MaxInFlight: o.MaxInFlight, DedupRetention: 168 * time.Hour, HTTPAddr: "127.0.0.1:0",
			MigrateOnStart: true, ShutdownTimeout: 10 * time.Second},
		Log: config.Log{LogLevel: "info"},
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a, err := app.New(ctx, cfg, app.Tuning{Reader: kafkatest.FastReaderOptions(), CommitInterval: 100 * time.Millisecond,
		ProbeInterval: time.Second, LagInterval: time.Second, OutageBackoff: 200 * time.Millisecond}, log)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- a.Run(runCtx) }()
	// halt stops the service and waits for it to return, on the ways out
	// that already carry an error; an error the service returned is joined
	// to it (a stopped service returns none).
	halt := func(err error) error {
		stop()
		if serviceErr := <-runErr; serviceErr != nil {
			return errors.Join(err, serviceErr)
		}
		return err
	}

	if err := produce(ctx, client, records); err != nil {
		return nil, halt(err)
	}
	fmt.Fprintf(out, "billing demo: produced %d records on %s (6 partitions); the service is working…\n", len(records), topic)

	// Every record on the main topic ends in one final outcome there; each
	// "retried" one comes back once more from a tier.
	deadline := time.Now().Add(o.Timeout)
	for {
		outcomes := counts(a.Metrics)
		total := 0
		for _, v := range outcomes {
			total += v
		}
		if total-outcomes["retried"] >= len(records) {
			break
		}
		if time.Now().After(deadline) {
			return nil, halt(fmt.Errorf("timed out: %d of %d records final (log: %s)", total-outcomes["retried"], len(records), o.LogFile))
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, halt(ctx.Err())
		}
	}
	elapsed := time.Since(start)
	// Billing's decisions leave through the outbox: wait for the relay to
	// empty it before stopping.
	if err := waitOutboxEmpty(ctx, dsn, deadline); err != nil {
		return nil, halt(err)
	}
	stop()
	if err := <-runErr; err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}

	rep, err := report(ctx, a, dsn, client, stub, len(records), badNames)
	if err != nil {
		return nil, err
	}
	rep.Elapsed = elapsed
	printReport(out, rep, o, cfg.KafkaDLQTopic)
	fmt.Fprintf(out, "service log: %s\n", o.LogFile)

	// The fourth line of defence: the invoices of the demo against the
	// gateway's own records, both ways, as the daily CronJob runs it.
	recon, err := reconcileDemo(ctx, cfg, log, order.Period{From: start.Add(-time.Minute), To: time.Now()})
	if err != nil {
		return rep, err
	}
	rep.Reconciled = recon.Result
	fmt.Fprintf(out, "\nbilling reconcile (the invoices against the gateway's own records, both ways):\n")
	if err := recon.Print(out); err != nil {
		return rep, err
	}
	if len(rep.DoubleCharged) > 0 || rep.Invoices[order.StatusPending] > 0 {
		return rep, errors.New("exactly-once check failed")
	}
	if len(rep.EventIDProblems) > 0 {
		return rep, errors.New("invoice events check failed")
	}
	if rep.Reconciled.Total() > 0 {
		return rep, errors.New("reconciliation found discrepancies")
	}
	return rep, nil
}

// reconcileDemo runs `billing reconcile` over p, as the CronJob does.
func reconcileDemo(ctx context.Context, cfg config.Config, log *slog.Logger, p order.Period) (*reconcile.Report, error) {
	return reconcile.RunConfigured(ctx, cfg, log, reconcile.Options{Period: p, By: "billing demo"}, time.Now())
}

// sampleRecords builds the records: new orders, re-sends, second events for
// sent orders, declines, flaky ones and malformed values, shuffled within
// the rule that an order's first event comes first (re-sends come after
// what they re-send, as on a real topic).
func sampleRecords(o Options, rng *rand.Rand, flaky map[string]bool) ([]kafkaclient.Message, []string, error) {
	var first, later []kafkaclient.Message
	var events []order.OrderConfirmedEvent
	now := time.Now().UTC()
	for i := range o.Orders {
		cust := fmt.Sprintf("cus-%03d", rng.IntN(50))
		if i < o.Declines {
			cust = fmt.Sprintf("declined-%03d", i)
		}
		ord := order.Order{ID: fmt.Sprintf("ord-%05d", i+1), CustomerID: cust,
			TotalAmount: int64(100 + rng.IntN(100000)), Currency: []string{"EUR", "USD", "GBP"}[rng.IntN(3)],
			ConfirmedAt: now.Add(-time.Duration(rng.IntN(3600)) * time.Second)}
		if i >= o.Declines && i < o.Declines+o.Flaky {
			flaky[ord.ID] = true
		}
		evt, err := order.NewOrderConfirmedEvent(ord)
		if err != nil {
			return nil, nil, err
		}
		events = append(events, evt)
		v, err := wire.Encode(evt)
		if err != nil {
			return nil, nil, err
		}
		first = append(first, kafkaclient.Message{Topic: topic, Key: []byte(evt.OrderID), Value: v})
	}
	for range o.Resends {
		later = append(later, first[rng.IntN(len(first))])
	}
	for range o.SecondEvents {
		evt := events[o.Declines+o.Flaky+rng.IntN(len(events)-o.Declines-o.Flaky)]
		again, err := order.NewOrderConfirmedEvent(order.Order{ID: evt.OrderID, CustomerID: evt.CustomerID,
			TotalAmount: evt.TotalAmount, Currency: evt.Currency, ConfirmedAt: evt.OccurredAt})
		if err != nil {
			return nil, nil, err
		}
		v, err := wire.Encode(again)
		if err != nil {
			return nil, nil, err
		}
		later = append(later, kafkaclient.Message{Topic: topic, Key: []byte(evt.OrderID), Value: v})
	}
	var badNames []string
	corpus := ordertest.BadRecordCorpus()
	rng.Shuffle(len(corpus), func(i, j int) { corpus[i], corpus[j] = corpus[j], corpus[i] })
	for _, b := range corpus[:min(o.Bad, len(corpus))] {
		badNames = append(badNames, b.Name)
		later = append(later, kafkaclient.Message{Topic: topic, Key: []byte("bad-" + b.Name), Value: b.Value})
	}
	rng.Shuffle(len(later), func(i, j int) { later[i], later[j] = later[j], later[i] })
	return append(first, later...), badNames, nil
}

// produce writes msgs with the service's own writer (murmur2 on the key,
// as Kafka's Java producers partition).
func produce(ctx context.Context, kc *kafkaclient.Cluster, msgs []kafkaclient.Message) error {
	w, closeW := kc.NewWriter()
	defer func() { _ = closeW() }()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("produce sample events: %w", err)
	}
	return nil
}

func counts(m *metrics.Metrics) map[string]int {
	out := map[string]int{}
	for _, o := range order.Outcomes() {
		out[string(o)] = int(testutil.ToFloat64(m.Events.WithLabelValues(string(o))))
	}
	return out
}

func report(ctx context.Context, a *app.App, dsn string, kc *kafkaclient.Cluster, stub *gatewaystub.Stub, n int, bad []string) (*Report, error) {
	rep := &Report{Records: n, Outcomes: counts(a.Metrics), Invoices: map[order.InvoiceStatus]int{}, BadSent: bad}
	pool, err := postgres.NewPool(ctx, dsn, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	invs, err := postgres.NewStore(pool).Invoices(ctx)
	if err != nil {
		return nil, err
	}
	rep.Orders = len(invs)
	for _, inv := range invs {
		rep.Invoices[inv.Status]++
	}
	perOrder := map[string]int{}
	for _, c := range stub.Charges() {
		rep.Charges++
		perOrder[c.OrderID]++
	}
	rep.ChargedOrders = len(perOrder)
	for id, k := range perOrder {
		if k > 1 {
			rep.DoubleCharged = append(rep.DoubleCharged, id)
		}
	}
	for _, c := range stub.Calls() {
		rep.GatewayCalls++
		if c.Status == 503 {
			rep.Gateway503++
		}
	}
	if rep.DLQ, err = readTopic(ctx, kc, "billing.order-confirmed.dlq"); err != nil {
		return nil, err
	}
	events, err := readTopic(ctx, kc, invoiceTopic)
	if err != nil {
		return nil, err
	}
	rep.Published, rep.EventIDProblems = checkEvents(invs, events)
	return rep, nil
}

// checkEvents counts the invoice events by type and checks that every final
// invoice has exactly one distinct event id, its transition's (copies of
// one id, a relay's retry, are allowed), and that no event names an order
// without an invoice.
func checkEvents(invs []order.Invoice, events []kafkain.Record) (map[order.InvoiceEventType]int, []string) {
	published := map[order.InvoiceEventType]int{}
	ids := map[string]map[string]string{} // order → event id → event type
	var problems []string
	for _, m := range events {
		var v struct {
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
			OrderID   string `json:"order_id"`
		}
		if err := json.Unmarshal(m.Value, &v); err != nil {
			problems = append(problems, fmt.Sprintf("unreadable event %q", m.Value))
			continue
		}
		if ids[v.OrderID] == nil {
			ids[v.OrderID] = map[string]string{}
		}
		if _, seen := ids[v.OrderID][v.EventID]; !seen {
			published[order.InvoiceEventType(v.EventType)]++
		}
		ids[v.OrderID][v.EventID] = v.EventType
	}
	for _, inv := range invs {
		got := ids[inv.OrderID]
		delete(ids, inv.OrderID)
		if !inv.Status.Final() {
			continue
		}
		want := order.InvoiceEventID(inv.OrderID, inv.EventID, inv.Status, inv.Reopens).String()
		if _, ok := got[want]; !ok || len(got) != 1 {
			problems = append(problems, fmt.Sprintf("%s (%s): event ids %v, want only %s", inv.OrderID, inv.Status, got, want))
		}
	}
	for orderID := range ids {
		problems = append(problems, orderID+": an event for an order without an invoice")
	}
	slices.Sort(problems)
	return published, problems
}

// waitOutboxEmpty waits until the outbox relay has published every event,
// or the deadline.
func waitOutboxEmpty(ctx context.Context, dsn string, deadline time.Time) error {
	pool, err := postgres.NewPool(ctx, dsn, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := postgres.NewStore(pool)
	for {
		st, err := store.OutboxStats(ctx)
		if err == nil && st.Pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("timed out: %d invoice events still in the outbox (%w)", st.Pending, err)
			}
			return fmt.Errorf("timed out: %d invoice events still in the outbox", st.Pending)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readTopic reads every record of a topic (all partitions, from the start)
// through the service's door to Kafka (kafkain.ReadLog).
func readTopic(ctx context.Context, kc *kafkaclient.Cluster, t string) ([]kafkain.Record, error) {
	parts, err := kc.Offsets(ctx, t)
	if err != nil {
		return nil, err
	}
	var out []kafkain.Record
	for _, p := range parts {
		err := kafkain.ReadLog(ctx, kc.Access(), t, p.Partition, p.First, p.End, 0, func(r kafkain.Record) (bool, error) {
			out = append(out, r)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func printReport(out io.Writer, r *Report, o Options, dlq string) {
	p := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	p("")
	p("what was sent (%d records):", r.Records)
	p("  %4d new orders (%d for customers the gateway declines, %d whose first gateway call fails with 503)", o.Orders, o.Declines, o.Flaky)
	p("  %4d re-sends of an event already sent (same event_id)", o.Resends)
	p("  %4d second events for an order already sent (new event_id)", o.SecondEvents)
	p("  %4d malformed records (%s)", len(r.BadSent), strings.Join(r.BadSent, ", "))
	p("")
	p("what billing did (billing_events_total):")
	for _, k := range order.Outcomes() {
		p("  %-16s %4d", k, r.Outcomes[string(k)])
	}
	p("")
	p("invoices in Postgres: %d orders — %d charged, %d declined, %d rejected, %d held, %d pending",
		r.Orders, r.Invoices[order.StatusCharged], r.Invoices[order.StatusDeclined], r.Invoices[order.StatusRejected],
		r.Invoices[order.StatusHeld], r.Invoices[order.StatusPending])
	p("payment gateway: %d calls, %d answered 503 and were retried with the same Idempotency-Key; %d charges for %d orders",
		r.GatewayCalls, r.Gateway503, r.Charges, r.ChargedOrders)
	var names []string
	for _, m := range r.DLQ {
		if v, ok := m.Header(kafkain.HeaderError); ok {
			names = append(names, v)
		}
	}
	slices.Sort(names)
	p("dead-letter topic %s: %d records, raw bytes and x-* headers kept", dlq, len(r.DLQ))
	for i, n := range names {
		if i == 4 {
			p("    … and %d more", len(names)-4)
			break
		}
		p("    x-error: %s", n)
	}
	var published []string
	total := 0
	for _, typ := range order.InvoiceEventTypes() {
		published = append(published, fmt.Sprintf("%d %s", r.Published[typ], typ))
		total += r.Published[typ]
	}
	p("invoice events on %s: %d (%s)", invoiceTopic, total, strings.Join(published, ", "))
	if len(r.EventIDProblems) == 0 {
		p("  every final invoice has exactly one event id, its transition's")
	} else {
		for _, pr := range r.EventIDProblems {
			p("  PROBLEM: %s", pr)
		}
	}
	p("")
	if len(r.DoubleCharged) == 0 && r.Invoices[order.StatusPending] == 0 {
		p("exactly once: OK — one invoice per order, no order charged twice, nothing pending (%.1fs)", r.Elapsed.Seconds())
	} else {
		p("exactly once: FAILED — double charged: %v, pending: %d", r.DoubleCharged, r.Invoices[order.StatusPending])
	}
}
