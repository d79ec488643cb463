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
	tests := []struct {
		args    []string
		want    resolveArgs
		wantErr string
	}{
		{[]string{"ord-1", "--charged", "ch_9"}, resolveArgs{"ord-1", order.Resolution{Status: order.StatusCharged, ChargeID: "ch_9"}}, ""},
		{[]string{"--charged=ch_9", "ord-1"}, resolveArgs{"ord-1", order.Resolution{Status: order.StatusCharged, ChargeID: "ch_9"}}, ""},
		{[]string{"ord-1", "--declined"}, resolveArgs{"ord-1", order.Resolution{Status: order.StatusDeclined}}, ""},
		{[]string{"ord-1", "--rejected"}, resolveArgs{"ord-1", order.Resolution{Status: order.StatusRejected}}, ""},
		{[]string{"--resume", "ord-1"}, resolveArgs{"ord-1", order.Resolution{Status: order.StatusPending}}, ""},
		{[]string{"ord-1"}, resolveArgs{}, "exactly one of"},
		{[]string{"ord-1", "--declined", "--resume"}, resolveArgs{}, "exactly one of"},
		{[]string{"ord-1", "--charged", " "}, resolveArgs{}, "needs the charge id"},
		{[]string{"--declined"}, resolveArgs{}, "ORDER_ID is required"},
		{[]string{"ord-1", "--declined", "ord-2"}, resolveArgs{}, "unexpected argument"},
		{[]string{"ord-1", "--refund"}, resolveArgs{}, "usage"},
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
	for _, want := range []string{"usage: billing invoice resolve", "--charged", "--declined", "--rejected", "--resume"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help does not mention %s:\n%s", want, stdout.String())
		}
	}
}

// TestInvoiceResolvePublishes: the person's decision is a transition like
// any other (CONTRACT.md §9): `billing invoice resolve` writes its invoice
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
			if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, reason, key_sent_at)
				VALUES ('ord-held', $1, 'cus-1', 12990, 'EUR', 'held', 'gateway 422', now())`, key); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr syncbuf.Buffer
			if err := run(ctx, []string{"invoice", "resolve", "ord-held", "--rejected"}, &stdout, &stderr); err != nil {
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
