package postgres

import (
	"testing"
	"unsafe"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

// noRow is a row whose Scan fills nothing: what scanInvoice itself
// allocates, apart from the values pgx makes.
type noRow struct{}

func (noRow) Scan(...any) error { return nil }

// TestScanInvoiceAllocatesOnce: an invoice row's scan targets, and the
// list Scan takes, are one allocation, not one each (they escape through
// Scan's interface); two rows are read per charged event.
func TestScanInvoiceAllocatesOnce(t *testing.T) {
	var (
		attempt int64
		wait    float64
	)
	if n := testing.AllocsPerRun(100, func() { _, _ = scanInvoice(noRow{}, &attempt, &wait) }); n > 1 {
		t.Errorf("scanInvoice allocates %v times per row, want 1", n)
	}
}

// TestStatusScan: a status column is read as order's own constant when it
// is one (no allocation), as a copy of the driver's bytes otherwise, and
// NULL is an error, as it is for a string.
func TestStatusScan(t *testing.T) {
	for _, s := range []order.InvoiceStatus{order.StatusPending, order.StatusCharged, order.StatusDeclined,
		order.StatusRejected, order.StatusHeld} {
		b := []byte(s)
		var st statusScan
		if n := testing.AllocsPerRun(10, func() { _ = st.ScanBytes(b) }); n != 0 {
			t.Errorf("ScanBytes(%q) allocates %v times, want 0", b, n)
		}
		if st.s != s || unsafe.StringData(string(st.s)) != unsafe.StringData(string(s)) {
			t.Errorf("ScanBytes(%q) = %q, want order's constant", b, st.s)
		}
	}
	b := []byte("refunded")
	var st statusScan
	if err := st.ScanBytes(b); err != nil {
		t.Fatal(err)
	}
	copy(b, "XXXXXXXX") // the driver reuses its memory
	if st.s != "refunded" {
		t.Errorf("ScanBytes kept the driver's memory: %q after it changed, want %q", st.s, "refunded")
	}
	if err := st.ScanBytes(nil); err == nil {
		t.Error("ScanBytes(NULL) = nil, want an error")
	}
}

// TestHotPathKeysAndChecksAllocateLittle: what every reserve and settle
// runs besides its statement: the grouper's keys of a request (into take's
// buffer: the order's key and the event's, one string each, none for a
// settle) and the check of the reserve's error for a partition race (nil
// nearly always: no allocation).
func TestHotPathKeysAndChecksAllocateLittle(t *testing.T) {
	// A pool that never connects: the keys need none.
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := NewStore(pool)
	id := uuid.Must(uuid.NewV7())
	reserve := reserveReq{inv: order.Invoice{OrderID: "ord-1", EventID: id}}
	settle := settleReq{}
	settle.OrderID = "ord-1"
	buf := make([]string, 0, 4)
	for _, tt := range []struct {
		name string
		max  float64
		f    func()
	}{
		{"reserve keys", 2, func() { buf = s.reserves.key(buf[:0], reserve) }},
		{"settle keys", 0, func() { buf = s.settles.key(buf[:0], settle) }},
		{"partition race check", 0, func() { _ = isDefaultPartitionRace(nil) }},
	} {
		if n := testing.AllocsPerRun(100, tt.f); n > tt.max {
			t.Errorf("%s: %v allocations, want at most %v", tt.name, n, tt.max)
		}
	}
	// The keys still tell orders and events apart, and one event from another.
	other := reserveReq{inv: order.Invoice{OrderID: "ord-1", EventID: uuid.Must(uuid.NewV7())}}
	a := s.reserves.key(nil, reserve)
	b := s.reserves.key(nil, other)
	if a[0] != b[0] || a[1] == b[1] || a[0] == a[1] {
		t.Errorf("keys %q and %q: want the order's shared, the events' distinct", a, b)
	}
}
