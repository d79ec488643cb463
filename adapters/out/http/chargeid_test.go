package httpgateway

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// protocolErrors returns billing_gateway_protocol_errors_total{kind}.
func protocolErrors(m *metrics.Metrics, kind string) int {
	return int(testutil.ToFloat64(m.GatewayProtocolErrors.WithLabelValues(kind)))
}

// TestChargeIDShapes (docs/interface.md §6, issue 30 point 3): a success is a
// charge whatever charge id comes with it. An id of 1–255 bytes of printable
// ASCII is kept; any other (NUL, 60 KB, control characters, invalid UTF-8,
// not a string, absent from a 200/201) is dropped and counted as a protocol
// error of its kind, and the charge stands: no error, so nothing retries it
// or sends it to the DLQ.
func TestChargeIDShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		member string // the charge_id member as written in the body, "" for none
		want   string
		kind   string // the protocol error counted, "" for none
	}{
		{"plain", 201, `"ch_1"`, "ch_1", ""},
		{"255 bytes", 201, `"` + strings.Repeat("c", 255) + `"`, strings.Repeat("c", 255), ""},
		{"printable punctuation and space", 200, `"pi_3Mt:x/y z~"`, "pi_3Mt:x/y z~", ""},
		{"escaped printable", 201, `"ch\u005f1"`, "ch_1", ""},
		{"NUL", 201, `"ch_\u0000x"`, "", ProtocolChargeIDNotPrintable},
		{"60 KB", 201, `"` + strings.Repeat("A", 60<<10) + `"`, "", ProtocolChargeIDTooLong},
		{"600 KB", 201, `"` + strings.Repeat("A", 600<<10) + `"`, "", ProtocolChargeIDTooLong},
		{"256 bytes", 201, `"` + strings.Repeat("c", 256) + `"`, "", ProtocolChargeIDTooLong},
		{"control characters", 201, `"ch_\u001b[31m\r\nX-Injected: 1"`, "", ProtocolChargeIDNotPrintable},
		{"DEL", 201, `"ch_` + "\x7f" + `"`, "", ProtocolChargeIDNotPrintable},
		{"raw control byte", 201, `"ch_` + "\x01" + `"`, "", ProtocolChargeIDNotPrintable},
		{"invalid UTF-8", 201, `"ch_` + "\xff\xfe\xc3" + `"`, "", ProtocolChargeIDNotPrintable},
		{"non-ASCII", 201, `"ch_é"`, "", ProtocolChargeIDNotPrintable},
		{"empty", 201, `""`, "", ProtocolChargeIDMissing},
		{"null", 201, `null`, "", ProtocolChargeIDMissing},
		{"absent", 201, ``, "", ProtocolChargeIDMissing},
		{"number", 200, `12345`, "", ProtocolChargeIDNotString},
		{"object", 201, `{"id":"ch_1"}`, "", ProtocolChargeIDNotString},
		{"409 absent", 409, ``, "", ""},
		{"409 NUL", 409, `"ch_\u0000"`, "", ProtocolChargeIDNotPrintable},
		{"409 60 KB", 409, `"` + strings.Repeat("A", 60<<10) + `"`, "", ProtocolChargeIDTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := `{"status":"succeeded"}`
			if tt.member != "" {
				body = `{"status":"succeeded","charge_id":` + tt.member + `}`
			}
			if tt.status == 409 {
				body = strings.Replace(body, `"status":"succeeded"`, `"error":"idempotency_key_used"`, 1)
			}
			base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, body)
			})
			c, m := newClient(t, base, 5*time.Second)
			res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			if err != nil {
				t.Fatalf("Charge() error = %v, want the charge", err)
			}
			if res.Status != order.ChargeSucceeded || res.ChargeID != tt.want {
				t.Errorf("Charge() = %+v, want a charge with id %.40q", res, tt.want)
			}
			for _, kind := range ProtocolErrorKinds() {
				want := 0
				if kind == tt.kind {
					want = 1
				}
				if got := protocolErrors(m, kind); got != want {
					t.Errorf("protocol_errors{kind=%q} = %d, want %d", kind, got, want)
				}
			}
		})
	}
}

// Every kind of protocol error exists at zero as soon as the Client does,
// so that an alert on it sees a series from the first scrape.
func TestProtocolErrorKindsStartAtZero(t *testing.T) {
	t.Parallel()
	_, m := newClient(t, "http://gw.local", time.Second)
	mfs, err := m.Gathered.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "billing_gateway_protocol_errors_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				got = append(got, lp.GetValue())
			}
			if v := mt.GetCounter().GetValue(); v != 0 {
				t.Errorf("%v = %v, want 0", mt.GetLabel(), v)
			}
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ProtocolErrorKinds()))
	if !slices.Equal(got, want) {
		t.Errorf("kinds exported: %v, want %v", got, want)
	}
}

// The other replies that break the protocol are counted by kind. Without
// proof of a charge they are transient for the event (the same key is asked
// again); a 200 or 201 whose body said "succeeded" at its top level before
// it broke is a charge all the same: the gateway said the money moved.
func TestProtocolErrorsOfOtherReplies(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body string
		status     int
		kind       string
		charged    bool
	}{
		{"200 status failed", `{"charge_id":"ch_1","status":"failed"}`, 200, ProtocolChargeStatus, false},
		{"201 status absent", `{"charge_id":"ch_1"}`, 201, ProtocolChargeStatus, false},
		{"201 status a number", `{"charge_id":"ch_1","status":1}`, 201, ProtocolChargeStatus, false},
		{"201 status nested", `{"charge":{"status":"succeeded"}}`, 201, ProtocolChargeStatus, false},
		{"200 not JSON", `<html>ok</html>`, 200, ProtocolReplyUnreadable, false},
		{"200 cut JSON", `{"charge_id":`, 200, ProtocolReplyUnreadable, false},
		{"200 null", `null`, 200, ProtocolReplyUnreadable, false},
		{"200 over the limit before the status", `{"pad":"` + strings.Repeat(" ", MaxReplyBytes) + `","status":"succeeded"}`, 200, ProtocolReplyUnreadable, false},
		{"200 trailing garbage", `{"charge_id":"ch_1","status":"succeeded"} x`, 200, ProtocolReplyUnreadable, true},
		{"200 broken after the status", `{"status":"succeeded","charge_id":"ch_1",}`, 200, ProtocolReplyUnreadable, true},
		{"200 over the limit after the status", `{"status":"succeeded","charge_id":"ch_1","pad":"` + strings.Repeat(" ", MaxReplyBytes) + `"}`, 200, ProtocolReplyUnreadable, true},
		{"202", `{"charge_id":"ch_1","status":"succeeded"}`, 202, ProtocolUnexpectedStatus, false},
		{"302", ``, 302, ProtocolUnexpectedStatus, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c, m := newClient(t, base, 5*time.Second)
			res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			switch {
			case tt.charged && (err != nil || res.Status != order.ChargeSucceeded || res.ChargeID != "ch_1"):
				t.Fatalf("Charge() = %+v, %v; want the charge ch_1", res, err)
			case !tt.charged && order.Classify(err) != order.ClassTransient:
				t.Fatalf("Charge() = %+v, %v (class %v); want transient", res, err, order.Classify(err))
			}
			if got := protocolErrors(m, tt.kind); got != 1 {
				t.Errorf("protocol_errors{kind=%q} = %d, want 1", tt.kind, got)
			}
		})
	}
}
