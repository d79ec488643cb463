package postgres

import (
	"testing"
	"unsafe"

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
