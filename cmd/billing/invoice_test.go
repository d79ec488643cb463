package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

func TestParseResolve(t *testing.T) {
	key := uuid.Must(uuid.FromString("0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"))
	who := []string{"--by", "alice", "--expect-key", key.String()}
	with := func(st order.InvoiceStatus, charge string) resolveArgs {
		return resolveArgs{"ord-1", order.Resolution{Status: st, ChargeID: charge, Key: key, By: "alice"}}
	}
	tests := []struct {
		args    []string
		want    resolveArgs
		wantErr string
	}{
		{append([]string{"ord-1", "--charged", "ch_9"}, who...), with(order.StatusCharged, "ch_9"), ""},
		{append([]string{"--charged=ch_9", "ord-1"}, who...), with(order.StatusCharged, "ch_9"), ""},
		{append([]string{"ord-1", "--declined"}, who...), with(order.StatusDeclined, ""), ""},
		{append([]string{"ord-1", "--rejected"}, who...), with(order.StatusRejected, ""), ""},
		{append([]string{"--resume", "ord-1"}, who...), with(order.StatusPending, ""), ""},
		{append([]string{"ord-1", "--rejected", "--note", "no charge in the gateway's list of the day"}, who...),
			resolveArgs{"ord-1", order.Resolution{Status: order.StatusRejected, Key: key, By: "alice", Note: "no charge in the gateway's list of the day"}}, ""},
		{append([]string{"ord-1"}, who...), resolveArgs{}, "exactly one of"},
		{append([]string{"ord-1", "--declined", "--resume"}, who...), resolveArgs{}, "exactly one of"},
		{append([]string{"ord-1", "--charged", " "}, who...), resolveArgs{}, "--charged CHARGE_ID: empty"},
		{append([]string{"--declined"}, who...), resolveArgs{}, "ORDER_ID is required"},
		{append([]string{"ord-1", "--declined", "ord-2"}, who...), resolveArgs{}, "unexpected argument"},
		{append([]string{"ord-1", "--refund"}, who...), resolveArgs{}, "usage"},
		{[]string{"ord-1", "--declined", "--expect-key", key.String()}, resolveArgs{}, "--by NAME: required"},
		{[]string{"ord-1", "--declined", "--by", "alice"}, resolveArgs{}, "--expect-key KEY is required"},
		{[]string{"ord-1", "--declined", "--by", "alice", "--expect-key", "K1"}, resolveArgs{}, "is not a key"},
		{[]string{"ord-1", "--declined", "--by", strings.Repeat("a", 65), "--expect-key", key.String()}, resolveArgs{}, "65 characters"},
		{[]string{"ord-1", "--declined", "--by", "   ", "--expect-key", key.String()}, resolveArgs{}, "--by NAME: required"},
		{[]string{"ord-1", "--declined", "--by", "al\x1bice", "--expect-key", key.String()}, resolveArgs{}, "not printable"},
		{append([]string{"ord-1", "--declined", "--note", strings.Repeat("n", 513)}, who...), resolveArgs{}, "513 characters"},
		{append([]string{"ord-1", "--declined", "--note", "line\nbreak"}, who...), resolveArgs{}, "not printable"},
		{append([]string{"ord-1", "--charged", "ch_\x00"}, who...), resolveArgs{}, "--charged CHARGE_ID: byte 4 is 0x00"},
		{append([]string{"ord\x1b", "--declined"}, who...), resolveArgs{}, "ORDER_ID: contains a control character"},
		{append([]string{" ", "--declined"}, who...), resolveArgs{}, "ORDER_ID: blank"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, err := parseResolve(tt.args, io.Discard)
			switch {
			case tt.wantErr == "" && (err != nil || got != tt.want):
				t.Errorf("parseResolve() = %+v, %v, want %+v", got, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("parseResolve() error = %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// `billing invoice resolve -h` needs no configuration and names every
// decision.
func TestInvoiceResolveHelp(t *testing.T) {
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", "")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"invoice", "resolve", "-h"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: billing invoice resolve", "--charged", "--declined", "--rejected", "--resume", "--by", "--expect-key", "--note"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help does not mention %s:\n%s", want, stdout.String())
		}
	}
}

// TestInvoiceResolvePublishes: the person's decision is a transition like
// any other (docs/interface.md §9): `billing invoice resolve` writes its invoice
// event to the outbox when publishing is on, and none when it is off.
func TestInvoiceResolvePublishes(t *testing.T) {
	for _, publish := range []bool{true, false} {
		t.Run(fmt.Sprintf("BILLING_PUBLISH_EVENTS=%v", publish), func(t *testing.T) {
			ctx := migrateCtx(t)
			_, pool := pgtest.NewMigratedCluster(t)
			setValidEnv(t)
			t.Setenv("BILLING_DATABASE_URL", pool.Config().ConnString())
			t.Setenv("BILLING_PUBLISH_EVENTS", strconv.FormatBool(publish))
			key := uuid.Must(uuid.NewV7())
			// Held by this release earlier: its writes are stamped (an
			// unstamped one is published by migration 0006's triggers).
			if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, reason, key_sent_at, written_xact)
				VALUES ('ord-held', $1, 'cus-1', 12990, 'EUR', 'held', 'gateway 422', now(), pg_current_xact_id())`, key); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr syncbuf.Buffer
			if err := run(ctx, []string{"invoice", "resolve", "ord-held", "--rejected", "--by", "alice", "--expect-key", key.String()}, &stdout, &stderr); err != nil {
				t.Fatalf("billing invoice resolve: %v\n%s", err, stderr.String())
			}
			var status string
			var id uuid.UUID
			err := pool.QueryRow(ctx, `SELECT status, event_id FROM invoice_outbox WHERE order_id = 'ord-held'`).Scan(&status, &id)
			switch {
			case publish && err != nil:
				t.Fatalf("outbox row of the decision: %v, want one", err)
			case publish && (status != string(order.StatusRejected) || id != order.InvoiceEventID("ord-held", key, order.StatusRejected, 0)):
				t.Errorf("outbox row = %s %s, want rejected with the transition's id", status, id)
			case !publish && !errors.Is(err, pgx.ErrNoRows):
				t.Errorf("outbox row with publishing off: %s, %v; want none", status, err)
			}
		})
	}
}
