package httpgateway

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
)

// A lookup reply that breaks the protocol is refused whole, naming the
// field, never repeating what the gateway wrote (docs/interface.md §6: no free
// text from the gateway), and never passing a record billing would not
// store.
func TestLookupRefusesBadRecords(t *testing.T) {
	t.Parallel()
	const secret = "LEAK<script>"
	rec := func(field, value string) string {
		f := map[string]string{
			"charge_id": `"ch_1"`, "order_id": `"ord-1"`, "idempotency_key": `"k"`, "amount": `100`,
			"currency": `"EUR"`, "status": `"succeeded"`, "created_at": `"2026-12-05T10:00:00Z"`,
		}
		f[field] = value
		var b strings.Builder
		b.WriteString("{")
		first := true
		for _, k := range []string{"charge_id", "order_id", "idempotency_key", "amount", "currency", "status", "created_at"} {
			if !first {
				b.WriteString(",")
			}
			first = false
			b.WriteString(`"` + k + `":` + f[k])
		}
		return `{"charges":[` + b.String() + `],"next_cursor":null}`
	}
	tests := []struct {
		name, body string
	}{
		{"charge id with a NUL", rec("charge_id", `"ch_\u0000`+secret+`"`)},
		{"charge id too long", rec("charge_id", `"`+strings.Repeat("x", 256)+secret+`"`)},
		{"order id with a newline", rec("order_id", `"ord\n`+secret+`"`)},
		{"order id too long", rec("order_id", `"`+strings.Repeat("o", 129)+secret+`"`)},
		{"key with a control", rec("idempotency_key", `"k\u0007`+secret+`"`)},
		{"zero amount", rec("amount", `0`)},
		{"currency in lower case", rec("currency", `"eur"`)},
		{"unknown status", rec("status", `"`+secret+`"`)},
		{"bad time", rec("created_at", `"`+secret+`"`)},
		{"no charges member", `{"error":"` + secret + `"}`},
		{"not JSON", `<html>` + secret},
		{"cursor with a control", `{"charges":[],"next_cursor":"c\u0001` + secret + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tt.body))
			})
			c, _ := newClient(t, base, 5*time.Second)
			_, err := c.ChargesOfOrder(t.Context(), "ord-1")
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("ChargesOfOrder = %v, want ErrBadRecord", err)
			}
			if strings.Contains(err.Error(), "LEAK") || strings.Contains(err.Error(), "script") {
				t.Errorf("error repeats the gateway's text: %v", err)
			}
		})
	}
}

// The list waits out a 429 for as long as Retry-After asks, then reads on;
// the lookup's other statuses map as a charge's do.
func TestLookupStatuses(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{"charges":[],"next_cursor":null}`))
	})
	c, _ := newClient(t, base, 5*time.Second)
	start := time.Now()
	page, err := c.ChargesCreated(t.Context(), start.Add(-time.Hour), start, "")
	if err != nil || len(page.Records) != 0 || page.Next != "" {
		t.Fatalf("ChargesCreated = %+v, %v; want an empty last page after the 429", page, err)
	}
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2", calls.Load())
	}
	// A lower bound the timer guarantees, not a measure of speed.
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("asked again after %v, before the Retry-After of 1s", waited)
	}

	for status, want := range map[int]order.Class{401: order.ClassOutage, 403: order.ClassOutage, 404: order.ClassPermanent,
		400: order.ClassPermanent, 500: order.ClassTransient, 503: order.ClassTransient} {
		base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":"LEAK"}`))
		})
		c, _ := newClient(t, base, 5*time.Second)
		_, err := c.ChargesOfOrder(t.Context(), "ord-1")
		if err == nil || order.Classify(err) != want || strings.Contains(err.Error(), "LEAK") {
			t.Errorf("%d: error = %v, want a %v error without the gateway's text", status, err, want)
		}
	}
}
