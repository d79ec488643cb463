package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// TestInvoiceListAndShow: what a person reads before deciding, in text and
// JSON, with no psql: held first, the key to look up, the gateway's
// answers, the decisions, and what may be decided now.
func TestInvoiceListAndShow(t *testing.T) {
	ctx := migrateCtx(t)
	_, pool := pgtest.NewMigratedCluster(t)
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", pool.Config().ConnString())
	held, pending := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, reason, key_sent_at, updated_at, answers)
		VALUES ('ord-held', $1::uuid, 'cus-1', 12990, 'EUR', 'held', 'the gateway answered 422', now() - interval '2 hours', now() - interval '1 hour',
			ARRAY[to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' ' || $1::text || ' 422 idempotency_key_reused']),
		('ord-pending', $2::uuid, 'cus-2', 500, 'USD', 'pending', NULL, now() - interval '3 hours', now() - interval '3 hours', NULL)`, held, pending); err != nil {
		t.Fatal(err)
	}
	runOK := func(args ...string) string {
		t.Helper()
		var stdout, stderr syncbuf.Buffer
		if err := run(ctx, args, &stdout, &stderr); err != nil {
			t.Fatalf("billing %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}

	out := runOK("invoice", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "STATUS") || !strings.HasPrefix(lines[1], "held") || !strings.HasPrefix(lines[2], "pending") ||
		!strings.Contains(lines[1], held.String()) || !strings.Contains(lines[1], "1h0m0s") {
		t.Errorf("invoice list:\n%s\nwant a header, the held invoice (its key, in it for 1h), then the pending one", out)
	}
	var list []invoiceJSON
	if err := json.Unmarshal([]byte(runOK("invoice", "list", "--status", "pending", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].OrderID != "ord-pending" || list[0].Key != pending.String() || list[0].AgeSeconds < 3*3600-60 {
		t.Errorf("invoice list --status pending --json = %+v, want ord-pending, 3 hours old", list)
	}

	out = runOK("invoice", "show", "ord-held")
	for _, want := range []string{"order ord-held: held", held.String(), "422 idempotency_key_reused", "the gateway answered 422",
		"decisions:\n  none", "decide: look the key up", "--expect-key " + held.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("invoice show:\n%s\nwant %q", out, want)
		}
	}
	var d detailOut
	if err := json.Unmarshal([]byte(runOK("invoice", "show", "--json", "ord-pending")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Key != pending.String() || d.Status != "pending" || len(d.Answers) != 0 || len(d.Decisions) != 0 ||
		d.HalfKeyTTLAt.Sub(d.KeySentAt).Hours() != 12 || !strings.HasPrefix(d.Decide, "nothing") {
		t.Errorf("invoice show --json = %+v; want ord-pending, its key, half of the TTL 12 h after its key, nothing to decide", d)
	}

	var stdout, stderr syncbuf.Buffer
	for _, args := range [][]string{{"invoice", "show", "ord-none"}, {"invoice", "list", "--status", "lost"}, {"invoice", "list", "--limit", "0"}} {
		if err := run(ctx, args, &stdout, &stderr); err == nil {
			t.Errorf("billing %s: accepted", strings.Join(args, " "))
		}
	}
}
