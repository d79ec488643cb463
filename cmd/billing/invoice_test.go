package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/acme/billing/core/order"
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
