package order

import (
	"bytes"
	"strings"
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
	// The generator keeps ids monotonic with a 12-bit counter per
	// millisecond (RFC 9562, 6.2, method 1) and takes the next millisecond
	// when the counter runs out: while other tests of the process make
	// ids at once, the timestamp may run a little ahead of the clock.
	const runAhead = 1000 // ms
	if ms := at.UnixMilli(); ms < before || ms > after+runAhead {
		t.Errorf("EventID time = %d ms, want within [%d, %d]", ms, before, after+runAhead)
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

func TestValidAmount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]bool{1: true, 12990: true, 1<<63 - 1: true, 0: false, -1: false, -1 << 63: false} {
		if got := ValidAmount(n); got != want {
			t.Errorf("ValidAmount(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestValidCurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"EUR", true}, {"USD", true}, {"XXX", true}, {"AAA", true}, {"ZZZ", true},
		{"", false}, {"EU", false}, {"EURO", false}, {"eur", false}, {"EuR", false},
		{"E1R", false}, {"ÉUR", false}, {"@AB", false}, {"AB[", false}, {"EU ", false},
	}
	for _, tt := range tests {
		if got := ValidCurrency(tt.in); got != tt.want {
			t.Errorf("ValidCurrency(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want string
	}{
		{"ord-1", ""}, {"é€😀", ""}, {" x ", ""}, {strings.Repeat("o", MaxIDBytes), ""},
		{strings.Repeat("é", MaxIDBytes/2), ""}, {"ord\u202e", ""},
		{strings.Repeat("o", MaxIDBytes+1), "longer than 128 bytes"},
		{strings.Repeat("o", 5<<10) + "\x1b", "longer than 128 bytes"},
		{"", "blank"}, {" ", "blank"}, {"\u00a0\u2028", "blank"},
		{"ord\x00", "contains a control character"}, {"ord\t1", "contains a control character"},
		{"ord\x7f", "contains a control character"}, {"ord\u0085", "contains a control character"},
		{"ord\xff", "not valid UTF-8"}, {"\xc3", "not valid UTF-8"},
	}
	for _, tt := range tests {
		if got := CheckID(tt.id); got != tt.want {
			t.Errorf("CheckID(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestCheckEventID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want string
	}{
		{"0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d", ""},
		{"ffffffff-ffff-7fff-bfff-ffffffffffff", ""},
		{"00000000-0000-0000-0000-000000000000", "nil UUID"},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", "max UUID"},
		{"1b4e28ba-2fa1-41d2-883f-0016d3cca427", "UUID version 4, want 7"},
		{"0190f8a4-6c1e-8b3a-9d2f-3c4e5a6b7c8d", "UUID version 8, want 7"},
		{"0190f8a4-6c1e-7b3a-cd2f-3c4e5a6b7c8d", "UUID variant is not RFC 9562"},
		{"0190f8a4-6c1e-7b3a-5d2f-3c4e5a6b7c8d", "UUID variant is not RFC 9562"},
	}
	for _, tt := range tests {
		if got := CheckEventID(uuid.Must(uuid.FromString(tt.id))); got != tt.want {
			t.Errorf("CheckEventID(%s) = %q, want %q", tt.id, got, tt.want)
		}
	}
}
