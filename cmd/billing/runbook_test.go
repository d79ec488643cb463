package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// Every billing command a runbook of deploy/README.md names runs here, as
// written there, against a real Postgres (and Kafka), in the situation its
// alert describes: the runbook's lines are read from the file, their
// placeholders (ORDER_ID, KEY, CHARGE_ID, NAME, TEXT, RFC3339) filled in
// with the situation's values, and run through the binary's own dispatch.
// A section with a billing command and no scenario here fails
// TestRunbooks: a runbook step nobody ran is a step that may not work.
// (billing_job runs its command as a Job; deploy's tests check the Job.)

const deployReadme = "../../deploy/README.md"

// runbookCommands returns, by section ("### Name"), the billing commands
// of the sh blocks of deploy/README.md: the lines starting with "billing "
// or "billing_job ", without their comments.
func runbookCommands(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(deployReadme)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	inSh := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			section = strings.TrimSpace(strings.TrimLeft(l, "#"))
		case l == "```sh":
			inSh = true
		case strings.HasPrefix(l, "```"):
			inSh = false
		case inSh && (strings.HasPrefix(l, "billing ") || strings.HasPrefix(l, "billing_job ")):
			if i := strings.Index(l, " #"); i >= 0 {
				l = l[:i]
			}
			out[section] = append(out[section], strings.TrimSpace(l))
		}
	}
	return out
}

// placeholders fill a runbook line's capitals.
type placeholders map[string]string

// argv turns a runbook line into billing's arguments, its placeholders
// filled; a placeholder without a value fails the test.
func (p placeholders) argv(t *testing.T, line string) []string {
	t.Helper()
	words := strings.Fields(line)
	out := make([]string, 0, len(words))
	for _, w := range words[1:] { // billing or billing_job
		if v, ok := p[w]; ok {
			w = v
		} else if strings.ToUpper(w) == w && strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") == "" && len(w) > 1 {
			t.Fatalf("%q: no value for %s", line, w)
		}
		out = append(out, w)
	}
	return out
}

// runLine runs one runbook line and returns its stdout and error.
func runLine(ctx context.Context, t *testing.T, line string, p placeholders) (string, error) {
	t.Helper()
	var stdout, stderr syncbuf.Buffer
	err := run(ctx, p.argv(t, line), &stdout, &stderr)
	t.Logf("$ %s\n%s%s", strings.Join(p.argv(t, line), " "), stdout.String(), stderr.String())
	return stdout.String(), err
}

// mustRun runs a line that must succeed.
func mustRun(ctx context.Context, t *testing.T, line string, p placeholders) string {
	t.Helper()
	out, err := runLine(ctx, t, line, p)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return out
}

// runbookScenarios build each section's situation and follow its lines.
var runbookScenarios = map[string]func(t *testing.T, lines []string){
	"BillingInvoicesHeld":               heldRunbook,
	"BillingInvoicesPendingKeyExpiring": keyExpiringRunbook,
	"BillingBackgroundStale":            staleGaugesRunbook,
	"BillingDeadLetters":                replayRunbook,
	"BillingDeadLetterBudgetBurn":       replayRunbook,
	"BillingReconcileDiscrepancies":     reconcileRunbook,
}

func TestRunbooks(t *testing.T) {
	sections := runbookCommands(t)
	for name := range sections {
		if runbookScenarios[name] == nil {
			t.Errorf("deploy/README.md, %s: billing commands %q, and no scenario in runbook_test.go runs them", name, sections[name])
		}
	}
	for name, scenario := range runbookScenarios {
		if len(sections[name]) == 0 {
			t.Errorf("deploy/README.md, %s: no billing command left; drop its scenario", name)
			continue
		}
		t.Run(name, func(t *testing.T) { scenario(t, sections[name]) })
	}
}

// runbookDB is a migrated database the commands are configured for.
func runbookDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	_, pool := pgtest.NewMigratedCluster(t)
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", pool.Config().ConnString())
	t.Setenv("BILLING_GATEWAY_KEY_TTL", "24h")
	return pool
}

// billEvent bills a new order through the service's own code against
// gateway base, and returns its key and the error.
func billEvent(ctx context.Context, t *testing.T, pool *pgxpool.Pool, base, orderID string) (order.OrderConfirmedEvent, error) {
	t.Helper()
	client, err := httpgateway.NewClient(base, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	svc := order.NewBillingService(postgres.NewStore(pool, postgres.WithEvents(true)), client, "billing-order-confirmed")
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: orderID, CustomerID: "cus-" + orderID, TotalAmount: 12990, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Bill(ctx, evt)
	return evt, err
}

// answering starts a stub gateway that answers every charge with status,
// executing none, and returns its base URL.
func answering(t *testing.T, status int) string {
	t.Helper()
	stub := gatewaystub.New(gatewaystub.Options{})
	base := stub.StartTest(t)
	stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault { return gatewaystub.Fault{Status: status} })
	return base
}

// resolveLines are the `invoice resolve` lines of a runbook: one decision
// each, on an invoice of its own.
func resolveLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, " invoice resolve ") {
			out = append(out, l)
		}
	}
	return out
}

// showJSON is `billing invoice show ORDER_ID --json`.
func showJSON(ctx context.Context, t *testing.T, orderID string) detailOut {
	t.Helper()
	var d detailOut
	if err := json.Unmarshal([]byte(mustRun(ctx, t, "billing invoice show ORDER_ID --json", placeholders{"ORDER_ID": orderID})), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// decisionOf is the status a runbook's resolve line leads to.
func decisionOf(line string) order.InvoiceStatus {
	for flag, st := range map[string]order.InvoiceStatus{"--charged": order.StatusCharged, "--declined": order.StatusDeclined,
		"--rejected": order.StatusRejected, "--resume": order.StatusPending} {
		if slices.Contains(strings.Fields(line), flag) {
			return st
		}
	}
	return ""
}

// heldRunbook: BillingInvoicesHeld. The gateway answered 422 to one order
// per decision the runbook lists (the key was used with another body); the
// person lists the held invoices, shows each, and records each decision.
func heldRunbook(t *testing.T, lines []string) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	base := answering(t, 422)
	resolves := resolveLines(lines)
	keys := map[string]string{}
	for i := range resolves {
		orderID := "ord-held-" + string(rune('a'+i))
		evt, err := billEvent(ctx, t, pool, base, orderID)
		if !errors.As(err, new(*order.HeldError)) {
			t.Fatalf("Bill(%s) = %v, want held by the 422", orderID, err)
		}
		keys[orderID] = evt.EventID.String()
	}
	i := 0
	for _, l := range lines {
		switch {
		case strings.Contains(l, " invoice list"):
			out := mustRun(ctx, t, l, nil)
			for orderID, key := range keys {
				if !strings.Contains(out, orderID) || !strings.Contains(out, key) {
					t.Errorf("%s: %s or its key %s missing:\n%s", l, orderID, key, out)
				}
			}
		case strings.Contains(l, " invoice show"):
			for orderID, key := range keys {
				out := mustRun(ctx, t, l, placeholders{"ORDER_ID": orderID})
				if !strings.Contains(out, key) || !strings.Contains(out, " 422") || !strings.Contains(out, "decide: look the key up") {
					t.Errorf("%s %s: want its key, the gateway's 422 and what to decide:\n%s", l, orderID, out)
				}
			}
		case strings.Contains(l, " invoice resolve "):
			orderID := "ord-held-" + string(rune('a'+i))
			i++
			p := placeholders{"ORDER_ID": orderID, "KEY": showJSON(ctx, t, orderID).Key, "CHARGE_ID": "ch_seen_at_the_gateway",
				"NAME": "alice", "TEXT": "the gateway's list of the day"}
			mustRun(ctx, t, l, p)
			d := showJSON(ctx, t, orderID)
			if want := decisionOf(l); d.Status != string(want) || len(d.Decisions) != 1 || d.Decisions[0].By != "alice" ||
				d.Decisions[0].Key != keys[orderID] || d.Decisions[0].Reason != order.ReasonKeyReused {
				t.Errorf("%s: invoice %s with decisions %+v; want %s, alice's decision on its key with the hold's reason", l, d.Status, d.Decisions, want)
			}
		default:
			t.Errorf("%s: a line this scenario does not know", l)
		}
	}
}

// keyExpiringRunbook: BillingInvoicesPendingKeyExpiring. Orders left
// pending by a gateway that failed them (503), their keys first sent 13
// hours ago (past half of the 24-hour TTL), and no completer to hold them.
// On main the resolve step exited 1, "invoice is not held".
func keyExpiringRunbook(t *testing.T, lines []string) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	base := answering(t, 503)
	resolves := resolveLines(lines)
	for i := range resolves {
		orderID := "ord-pending-" + string(rune('a'+i))
		if _, err := billEvent(ctx, t, pool, base, orderID); order.Classify(err) != order.ClassTransient {
			t.Fatalf("Bill(%s) = %v, want a transient failure (pending, its event to the retry tiers)", orderID, err)
		}
	}
	// Hours pass: no completer runs.
	if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - interval '13 hours', updated_at = now() - interval '13 hours'`); err != nil {
		t.Fatal(err)
	}
	i := 0
	for _, l := range lines {
		switch {
		case strings.Contains(l, " invoice list"):
			if out := mustRun(ctx, t, l, nil); strings.Count(out, "pending ") != len(resolves) {
				t.Errorf("%s: want the %d pending invoices:\n%s", l, len(resolves), out)
			}
		case strings.Contains(l, " invoice show"):
			out := mustRun(ctx, t, l, placeholders{"ORDER_ID": "ord-pending-a"})
			if !strings.Contains(out, "503") || !strings.Contains(out, "--resume is refused") {
				t.Errorf("%s: want the gateway's 503 and --resume refused:\n%s", l, out)
			}
		case strings.Contains(l, " invoice resolve "):
			orderID := "ord-pending-" + string(rune('a'+i))
			i++
			d := showJSON(ctx, t, orderID)
			p := placeholders{"ORDER_ID": orderID, "KEY": d.Key, "CHARGE_ID": "ch_seen_at_the_gateway", "NAME": "bob", "TEXT": "looked up by order id"}
			mustRun(ctx, t, l, p)
			if d = showJSON(ctx, t, orderID); d.Status != string(decisionOf(l)) || len(d.Decisions) != 1 || d.Decisions[0].Before != "pending" {
				t.Errorf("%s: invoice %s, decisions %+v; want %s from pending", l, d.Status, d.Decisions, decisionOf(l))
			}
		default:
			t.Errorf("%s: a line this scenario does not know", l)
		}
	}
}

// staleGaugesRunbook: BillingBackgroundStale. While the gauges are stale
// the person lists what waits: a pending invoice past half the TTL, and a
// held one.
func staleGaugesRunbook(t *testing.T, lines []string) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, reason, key_sent_at, updated_at)
		VALUES ('ord-old', $1::uuid, 'cus-1', 100, 'EUR', 'pending', NULL, now() - interval '13 hours', now() - interval '13 hours'),
			('ord-held', $2::uuid, 'cus-2', 100, 'EUR', 'held', 'the gateway answered 422', now() - interval '1 hour', now())`,
		newKey(t), newKey(t)); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		want := "ord-old"
		if strings.Contains(l, "--status held") {
			want = "ord-held"
		}
		if out := mustRun(ctx, t, l, nil); !strings.Contains(out, want) {
			t.Errorf("%s: want %s listed:\n%s", l, want, out)
		}
	}
}

// replayRunbook: BillingDeadLetters and BillingDeadLetterBudgetBurn. The
// DLQ holds records the gateway refused (400) and a bad payload; once the
// cause is fixed, the person dry-runs the replay, then replays what failed
// since the fault began. The replayed records carry x-replayed-at.
func replayRunbook(t *testing.T, lines []string) {
	ctx := migrateCtx(t)
	c := kafkatest.NewFake(t)
	setValidEnv(t)
	t.Setenv("BILLING_KAFKA_BROKERS", strings.Join(c.Brokers(), ","))
	t.Setenv("BILLING_KAFKA_TOPIC", "orders")
	t.Setenv("BILLING_KAFKA_DLQ_TOPIC", "orders.dlq")
	kafkatest.CreateTopics(t, c.Brokers(), 1, "orders", "orders.dlq")
	began := time.Now().Add(-time.Hour).UTC()
	w := kafkatest.NewWriter(t, c.Brokers(), "orders.dlq")
	for i, failedAt := range []time.Time{began.Add(-time.Hour), began.Add(time.Minute), began.Add(2 * time.Minute)} {
		if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("ord-" + string(rune('a'+i))), Value: []byte(`{"order":"` + string(rune('a'+i)) + `"}`),
			Headers: []kafkago.Header{
				{Key: kafkain.HeaderOriginalTopic, Value: []byte("orders")}, {Key: kafkain.HeaderErrorClass, Value: []byte("permanent")},
				{Key: kafkain.HeaderError, Value: []byte("charge rejected: POST /charges: 400 Bad Request")},
				{Key: kafkain.HeaderFailedAt, Value: []byte(failedAt.Format(time.RFC3339Nano))},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	replayed := 0
	for _, l := range lines {
		out := mustRun(ctx, t, l, placeholders{"RFC3339": began.Format(time.RFC3339)})
		last := strings.TrimSpace(out)
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		switch {
		case strings.Contains(l, "--dry-run"):
			if last != "would replay 3 records, skip 0" {
				t.Errorf("%s: %q, want would replay 3 records, skip 0", l, last)
			}
		case strings.Contains(l, "--since"):
			if last != "replayed 2 records, skipped 0" {
				t.Errorf("%s: %q, want the 2 that failed since it began", l, last)
			}
			replayed += 2
		default:
			t.Errorf("%s: a line this scenario does not know", l)
		}
	}
	for _, m := range kafkatest.ReadAll(t, c.Brokers(), "orders", replayed, 15*time.Second) {
		if headers := headerKeys(m); !slices.Equal(headers, []string{kafkain.HeaderReplayedAt}) {
			t.Errorf("replayed record %s with headers %v, want its own (none) and x-replayed-at", m.Key, headers)
		}
	}
}

func headerKeys(m kafkago.Message) []string {
	var out []string
	for _, h := range m.Headers {
		out = append(out, h.Key)
	}
	return out
}

func newKey(t *testing.T) uuid.UUID {
	t.Helper()
	k, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
