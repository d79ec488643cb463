// Package e2e runs the built billing binary against a real Apache Kafka
// broker (KRaft, jars from Maven Central: scripts/kafka.sh), a real Postgres
// and the stub payment gateway, and checks the service's promises from the
// outside: one invoice and one charge per order, malformed records in the
// DLQ with their raw bytes, offsets committed to the end, even when the
// process is killed with SIGKILL and restarted.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

var binary string

// envBinary names a billing binary to test instead of building one: `make
// test-e2e` passes bin/billing, which `make build` made and the bench
// module's tests run too, so the service is built once for both. A relative
// path is taken from this directory, where go test runs the tests.
const envBinary = "BILLING_BIN"

func TestMain(m *testing.M) {
	if bin := os.Getenv(envBinary); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, envBinary+":", err)
			os.Exit(1)
		}
		binary = abs
		os.Exit(kafkatest.AfterShared(pgtest.Run(m)))
	}
	dir, err := os.MkdirTemp("", "billing-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "billing")
	// Built in the service's own module (the repository root), with its
	// go.sum, as make build and the image build it: not with this test
	// module's dependency versions.
	build := exec.Command("go", "build", "-o", binary, "./cmd/billing")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build billing:", err)
		os.Exit(1)
	}
	code := kafkatest.AfterShared(pgtest.Run(m))
	os.RemoveAll(dir)
	os.Exit(code)
}

// partitions is the main topic's partition count.
const partitions = 6

// names are the topics and the consumer group of one env. Envs share a
// broker (kafkatest.SharedReal: a JVM broker's start and stop cost seconds
// of CPU on a machine CI keeps busy), so each has names of its own, passed
// to every billing process it starts.
type names struct {
	topic        string // BILLING_KAFKA_TOPIC
	group        string // BILLING_KAFKA_GROUP_ID; retry tier N's group is group.retry.N
	dlq          string // BILLING_KAFKA_DLQ_TOPIC
	retryPrefix  string // BILLING_KAFKA_RETRY_TOPIC_PREFIX; tier N's topic is retryPrefix.N
	invoiceTopic string // BILLING_KAFKA_INVOICE_TOPIC
}

func newNames(t *testing.T) names {
	t.Helper()
	base := kafkatest.UniqueName(t, "e2e")
	return names{topic: base + ".orders", group: base + ".billing", dlq: base + ".dlq",
		retryPrefix: base + ".retry", invoiceTopic: base + ".invoices"}
}

// retryTopic is retry tier n's topic.
func (n names) retryTopic(tier int) string { return n.retryPrefix + "." + strconv.Itoa(tier) }

// retryGroup is the consumer group of retry tier n.
func (n names) retryGroup(tier int) string { return n.group + ".retry." + strconv.Itoa(tier) }

// environ is the names as billing's environment.
func (n names) environ() []string {
	return []string{
		"BILLING_KAFKA_TOPIC=" + n.topic,
		"BILLING_KAFKA_GROUP_ID=" + n.group,
		"BILLING_KAFKA_DLQ_TOPIC=" + n.dlq,
		"BILLING_KAFKA_RETRY_TOPIC_PREFIX=" + n.retryPrefix,
		"BILLING_KAFKA_INVOICE_TOPIC=" + n.invoiceTopic,
	}
}

// workload is what the test sends and what it expects back.
type workload struct {
	records []kafkago.Message
	orders  map[string]order.OrderConfirmedEvent // first event per order
	bad     map[string][]byte                    // key → raw malformed value
}

// newWorkload builds n records: distinct orders, resends of the same
// event_id, new event_ids for orders already sent, malformed values.
func newWorkload(t *testing.T, n, resends, second, malformed int) workload {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	w := workload{orders: map[string]order.OrderConfirmedEvent{}, bad: map[string][]byte{}}
	distinct := n - resends - second - malformed
	var firsts []kafkago.Message
	var evts []order.OrderConfirmedEvent
	for i := range distinct {
		evt, err := order.NewOrderConfirmedEvent(order.Order{
			ID: fmt.Sprintf("ord-%06d", i), CustomerID: fmt.Sprintf("cus-%d", rng.IntN(300)),
			TotalAmount: int64(1 + rng.IntN(1_000_000)), Currency: "EUR", ConfirmedAt: time.Now().UTC(),
		})
		if err != nil {
			t.Fatal(err)
		}
		v, err := wire.Encode(evt)
		if err != nil {
			t.Fatal(err)
		}
		w.orders[evt.OrderID] = evt
		evts = append(evts, evt)
		firsts = append(firsts, kafkago.Message{Key: []byte(evt.OrderID), Value: v})
	}
	var later []kafkago.Message
	for range resends {
		later = append(later, firsts[rng.IntN(len(firsts))])
	}
	for range second {
		prev := evts[rng.IntN(len(evts))]
		evt, err := order.NewOrderConfirmedEvent(order.Order{ID: prev.OrderID, CustomerID: prev.CustomerID,
			TotalAmount: prev.TotalAmount + 1, Currency: prev.Currency, ConfirmedAt: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		v, err := wire.Encode(evt)
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, kafkago.Message{Key: []byte(evt.OrderID), Value: v})
	}
	corpus := ordertest.BadRecordCorpus()
	for i := range malformed {
		b := corpus[i%len(corpus)]
		key := fmt.Sprintf("bad-%02d-%s", i, b.Name)
		val := b.Value
		if i >= len(corpus) { // make repeats distinct records
			val = append([]byte(nil), b.Value...)
		}
		w.bad[key] = val
		later = append(later, kafkago.Message{Key: []byte(key), Value: val})
	}
	rng.Shuffle(len(later), func(i, j int) { later[i], later[j] = later[j], later[i] })
	// Interleave: the later records are spread over the second half, so
	// resends and second events meet orders in every state.
	w.records = append(firsts[:len(firsts)/2:len(firsts)/2], interleave(firsts[len(firsts)/2:], later, rng)...)
	if len(w.records) != n {
		t.Fatalf("workload has %d records, want %d", len(w.records), n)
	}
	return w
}

func interleave(a, b []kafkago.Message, rng *rand.Rand) []kafkago.Message {
	out := make([]kafkago.Message, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || (len(a) > 0 && rng.IntN(2) == 0) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// env is everything one test run shares.
type env struct {
	t       *testing.T
	brokers []string
	dsn     string
	store   *postgres.Store
	gw      *gatewaystub.Stub
	gwURL   string
	kc      *kafkaclient.Cluster
	broker  *kafkatest.Cluster // the env's broker; only newEnvOwnBroker's may be stopped and restarted
	extra   []string           // more environment for the billing processes; a later value of a variable wins
	names
}

// newEnv is an env on the broker the tests share, with a database of its own.
func newEnv(t *testing.T) *env {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	return newEnvWith(t, pool, dsn, kafkatest.SharedReal(t))
}

// newEnvOwnBroker is newEnv on a broker of the test's own, for a test that
// stops and restarts it.
func newEnvOwnBroker(t *testing.T) *env {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	return newEnvWith(t, pool, dsn, kafkatest.NewReal(t))
}

// newEnvOn is newEnv on a database of the caller's (an empty one, for a
// test that migrates it with another release).
func newEnvOn(t *testing.T, pool *pgxpool.Pool, dsn string) *env {
	t.Helper()
	return newEnvWith(t, pool, dsn, kafkatest.SharedReal(t))
}

func newEnvWith(t *testing.T, pool *pgxpool.Pool, dsn string, kc *kafkatest.Cluster) *env {
	t.Helper()
	n := newNames(t)
	gw := gatewaystub.New(gatewaystub.Options{})
	url := gw.StartTest(t)
	conn, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: kc.Brokers(), ClientID: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)}
	if err := conn.EnsureTopics(ctx, []kafkaclient.TopicSpec{{Name: n.topic, Partitions: partitions, Configs: big}}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, brokers: kc.Brokers(), dsn: dsn, store: postgres.NewStore(pool), gw: gw, gwURL: url, kc: conn, broker: kc, names: n}
}

func (e *env) environ() []string {
	return append(append(os.Environ(),
		"BILLING_KAFKA_BROKERS="+strings.Join(e.brokers, ","),
		"BILLING_DATABASE_URL="+e.dsn,
		"BILLING_PAYMENT_BASE_URL="+e.gwURL,
		"BILLING_RETRY_DELAYS=200ms,500ms",
		"BILLING_HTTP_ADDR=127.0.0.1:0",
		"BILLING_MAX_IN_FLIGHT=32",
		"BILLING_SHUTDOWN_TIMEOUT=10s",
		"BILLING_LOG_LEVEL=info",
	), append(e.names.environ(), e.extra...)...)
}

// proc is one running billing process.
type proc struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

func (e *env) start(args ...string) *proc {
	e.t.Helper()
	return e.startBin(binary, nil, args...)
}

// startBin is start with another billing binary (a previous release's),
// and more environment for this process alone.
func (e *env) startBin(bin string, extra []string, args ...string) *proc {
	e.t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(e.environ(), extra...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	e.t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done //nolint:errcheck // only waits for the exit: Wait's error says the process was killed
		}
		if e.t.Failed() {
			e.t.Logf("billing output (last 4 KiB):\n%s", tail(p.out.String(), 4096))
		}
	})
	return p
}

func (e *env) runOK(args ...string) string {
	e.t.Helper()
	p := e.start(args...)
	select {
	case err := <-p.done:
		if err != nil {
			e.t.Fatalf("billing %v: %v\n%s", args, err, p.out.String())
		}
	case <-time.After(60 * time.Second):
		e.t.Fatalf("billing %v did not finish", args)
	}
	return p.out.String()
}

func (e *env) produce(msgs []kafkago.Message) {
	e.t.Helper()
	w := kafkatest.NewWriter(e.t, e.brokers, e.topic)
	w.BatchBytes = 16 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < len(msgs); i += 200 {
		if err := w.WriteMessages(ctx, msgs[i:min(i+200, len(msgs))]...); err != nil {
			e.t.Fatalf("produce: %v", err)
		}
	}
}

func (e *env) invoiceCount() int {
	invs, err := e.store.Invoices(context.Background())
	if err != nil {
		return -1
	}
	return len(invs)
}

// caughtUp reports whether the group committed every partition to its end.
func (e *env) caughtUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lag, err := e.kc.Lag(ctx, e.group, e.topic)
	if err != nil || len(lag) != partitions {
		return false
	}
	for _, l := range lag {
		if l != 0 {
			return false
		}
	}
	return true
}

func (e *env) stop(p *proc) {
	e.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		e.t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			e.t.Fatalf("billing exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Fatal("billing did not exit within 30s of SIGTERM")
	}
}

func (e *env) kill(p *proc) {
	e.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done //nolint:errcheck // only waits for the exit: Wait's error says the process was killed
}

// check verifies the exactly-once invariants after a run.
func (e *env) check(w workload) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	invs, err := e.store.Invoices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(invs), len(w.orders); got != want {
		t.Errorf("invoices = %d, want one per distinct order = %d", got, want)
	}
	charges := map[string][]gatewaystub.Charge{}
	for _, c := range e.gw.Charges() {
		charges[c.OrderID] = append(charges[c.OrderID], c)
	}
	for _, inv := range invs {
		if inv.Status != order.StatusCharged {
			t.Errorf("order %s: invoice %s, want charged", inv.OrderID, inv.Status)
		}
		cs := charges[inv.OrderID]
		if len(cs) != 1 {
			t.Errorf("order %s: %d successful charges, want 1", inv.OrderID, len(cs))
			continue
		}
		if cs[0].Key != inv.EventID.String() {
			t.Errorf("order %s: charged under key %s, invoice records %s", inv.OrderID, cs[0].Key, inv.EventID)
		}
		if first, ok := w.orders[inv.OrderID]; ok && inv.Amount != first.TotalAmount && inv.Amount != first.TotalAmount+1 {
			t.Errorf("order %s: amount %d, sent %d", inv.OrderID, inv.Amount, first.TotalAmount)
		}
	}
	if len(charges) != len(w.orders) {
		t.Errorf("gateway charged %d orders, want %d", len(charges), len(w.orders))
	}

	dlq := kafkatest.ReadAll(t, e.brokers, e.dlq, len(w.bad), 30*time.Second)
	seen := map[string]bool{}
	for _, m := range dlq {
		k := string(m.Key)
		want, ok := w.bad[k]
		if !ok {
			t.Errorf("unexpected DLQ record key %q", k)
			continue
		}
		if seen[k] {
			continue // a kill between the DLQ write and the commit may write it twice: allowed (at least once)
		}
		seen[k] = true
		if !bytes.Equal(m.Value, want) {
			t.Errorf("DLQ record %s: value changed (%d bytes, sent %d)", k, len(m.Value), len(want))
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		for hk, hv := range map[string]string{"x-error-class": "permanent", "x-attempt": "0",
			"x-original-topic": e.topic, "x-consumer-group": e.group} {
			if hs[hk] != hv {
				t.Errorf("DLQ record %s: header %s = %q, want %q", k, hk, hs[hk], hv)
			}
		}
		for _, hk := range []string{"x-original-partition", "x-original-offset", "x-error", "x-failed-at"} {
			if hs[hk] == "" {
				t.Errorf("DLQ record %s: header %s missing", k, hk)
			}
		}
	}
	if len(seen) != len(w.bad) {
		t.Errorf("DLQ holds %d distinct malformed records, want %d", len(seen), len(w.bad))
	}
	if !e.caughtUp() {
		t.Errorf("group %s has not committed every partition to its end", e.group)
	}
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	billOnce(t, newEnv(t))
}

// billOnce migrates twice (idempotent), bills a workload of new orders,
// resends, second events and malformed records to its end, and checks
// that every order was billed once and the rest ended where it should.
func billOnce(t *testing.T, e *env) {
	t.Helper()
	e.runOK("migrate")
	e.runOK("migrate") // idempotent
	w := newWorkload(t, 2000, 300, 50, 20)
	e.produce(w.records)

	p := e.start("run")
	poll.Until(t, "the group to commit every partition to its end", 3*time.Minute, e.caughtUp)
	e.stop(p)
	e.check(w)
}

func TestEndToEndSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runOK("migrate")
	w := newWorkload(t, 2000, 300, 50, 20)
	e.produce(w.records)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for kill := range 2 {
		p := e.start("run")
		// Kill at a random moment while work is under way.
		target := 200 + rng.IntN(600) + kill*700
		poll.Until(t, fmt.Sprintf("%d invoices before kill %d", target, kill+1), 2*time.Minute,
			func() bool { return e.invoiceCount() >= target })
		e.kill(p)
		t.Logf("SIGKILL %d at %d invoices", kill+1, e.invoiceCount())
		if kill == 0 {
			// After the first kill the dead members are removed as their
			// session's end would remove them (30 s); after the second the
			// next process waits that session out, as it would in a pod.
			kafkatest.EvictMembers(t, e.brokers, e.group)
		}
	}
	p := e.start("run")
	poll.Until(t, "the group to commit every partition to its end", 3*time.Minute, e.caughtUp)
	e.stop(p)
	e.check(w)
}

func TestBadConfigurationStopsWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value string }{
		{"BILLING_KAFKA_BROKERS", ""},
		{"BILLING_PAYMENT_TIMEOUT", "soon"},
		{"BILLING_MAX_IN_FLIGHT", "-4"},
		// Credentials over plain http (the last value of a variable wins).
		{"BILLING_PAYMENT_BASE_URL", "http://svc:hunter2@127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(binary, "run")
			cmd.Env = []string{
				"BILLING_KAFKA_BROKERS=127.0.0.1:1",
				"BILLING_DATABASE_URL=postgres://u:hunter2@127.0.0.1:1/db",
				"BILLING_PAYMENT_BASE_URL=http://127.0.0.1:1",
			}
			cmd.Env = append(cmd.Env, tc.name+"="+tc.value)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatal("billing started with a bad variable")
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.name) || strings.Contains(lines[0], "hunter2") {
				t.Errorf("stderr = %q, want one line naming %s", stderr.String(), tc.name)
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
