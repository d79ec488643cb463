package order

import (
	"bytes"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
)

func TestNewOrderConfirmedEvent(t *testing.T) {
	t.Parallel()
	o := Order{
		ID:          "ord-123",
		CustomerID:  "cus-9",
		TotalAmount: 12990,
		Currency:    "EUR",
		ConfirmedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
	}
	before := time.Now().UnixMilli()
	evt, err := NewOrderConfirmedEvent(o)
	after := time.Now().UnixMilli()
	if err != nil {
		t.Fatalf("NewOrderConfirmedEvent() error = %v", err)
	}
	if got := evt.EventID.Version(); got != uuid.V7 {
		t.Errorf("EventID version = %d, want 7", got)
	}
	if got := evt.EventID.Variant(); got != uuid.VariantRFC9562 {
		t.Errorf("EventID variant = %d, want RFC 9562", got)
	}
	ts, err := uuid.TimestampFromV7(evt.EventID)
	if err != nil {
		t.Fatalf("TimestampFromV7() error = %v", err)
	}
	at, err := ts.Time()
	if err != nil {
		t.Fatalf("Timestamp.Time() error = %v", err)
	}
	if ms := at.UnixMilli(); ms < before || ms > after {
		t.Errorf("EventID time = %d ms, want within [%d, %d]", ms, before, after)
	}
	want := OrderConfirmedEvent{
		EventID:     evt.EventID,
		EventType:   EventTypeOrderConfirmed,
		OccurredAt:  o.ConfirmedAt,
		OrderID:     o.ID,
		CustomerID:  o.CustomerID,
		TotalAmount: o.TotalAmount,
		Currency:    o.Currency,
	}
	if evt != want {
		t.Errorf("NewOrderConfirmedEvent() = %+v, want %+v", evt, want)
	}

	// What the producer makes, the consumer accepts unchanged.
	raw, err := Encode(evt)
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	got, err := Decode(raw, "USD")
	if err != nil {
		t.Fatalf("Decode(Encode()) error = %v", err)
	}
	if got != evt {
		t.Errorf("Decode(Encode()) = %+v, want %+v", got, evt)
	}
}

// TestEventIDsSortByTime checks that ids made one after the other sort in
// the order they were made, byte-wise and as text: what lets
// processed_event be partitioned by RANGE (event_id).
func TestEventIDsSortByTime(t *testing.T) {
	t.Parallel()
	const n = 5000
	ids := make([]uuid.UUID, n)
	for i := range ids {
		evt, err := NewOrderConfirmedEvent(Order{ID: "o", CustomerID: "c", TotalAmount: 1, Currency: "EUR"})
		if err != nil {
			t.Fatalf("NewOrderConfirmedEvent() error = %v", err)
		}
		ids[i] = evt.EventID
	}
	for i := 1; i < n; i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Fatalf("id %d %s does not sort after id %d %s", i, ids[i], i-1, ids[i-1])
		}
		if ids[i-1].String() >= ids[i].String() {
			t.Fatalf("id %d %s does not sort after id %d %s as text", i, ids[i], i-1, ids[i-1])
		}
	}
}

func TestMoneyString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m    Money
		want string
	}{
		{Money{12990, "EUR"}, "12990 EUR"},
		{Money{1, "JPY"}, "1 JPY"},
		{Money{9223372036854775807, "USD"}, "9223372036854775807 USD"},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.m, got, tt.want)
		}
	}
}
