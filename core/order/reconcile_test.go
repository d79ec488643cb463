package order_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

var (
	keyA = uuid.Must(uuid.FromString("0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"))
	keyB = uuid.Must(uuid.FromString("0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8e"))
	at   = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
)

// inv is an invoice of ord-1 for 12990 EUR under key, in status st,
// charged with chargeID.
func inv(key uuid.UUID, st order.InvoiceStatus, chargeID string) *order.Invoice {
	return &order.Invoice{OrderID: "ord-1", EventID: key, CustomerID: "cus-1", Amount: 12990, Currency: "EUR", Status: st, ChargeID: chargeID}
}

// rec is a record of ord-1 for 12990 EUR under key.
func rec(id string, key uuid.UUID, st order.RecordStatus) order.PaymentRecord {
	k := key.String()
	if key == uuid.Nil {
		k = ""
	}
	return order.PaymentRecord{ChargeID: id, OrderID: "ord-1", Key: k, Amount: order.Money{Amount: 12990, Currency: "EUR"}, Status: st, CreatedAt: at}
}

func withAmount(r order.PaymentRecord, amount int64, currency string) order.PaymentRecord {
	r.Amount = order.Money{Amount: amount, Currency: currency}
	return r
}

// TestCompare is the table of what a difference is (docs/interface.md §1): one
// order, its invoice and the provider's records, and the kinds found.
func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		invoice *order.Invoice
		records []order.PaymentRecord
		want    []order.DiscrepancyKind
	}{
		{"charged, its charge", inv(keyA, order.StatusCharged, "ch_1"), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}, nil},
		{"charged, a decline before its charge", inv(keyA, order.StatusCharged, "ch_2"),
			[]order.PaymentRecord{rec("ch_1", keyB, order.RecordDeclined), rec("ch_2", keyA, order.RecordSucceeded)}, nil},
		{"charged without a charge id, the record under its key", inv(keyA, order.StatusCharged, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}, nil},
		{"charged without a charge id, the provider says no key", inv(keyA, order.StatusCharged, ""), []order.PaymentRecord{rec("ch_1", uuid.Nil, order.RecordSucceeded)}, nil},
		{"charged, nothing at the provider", inv(keyA, order.StatusCharged, "ch_1"), nil,
			[]order.DiscrepancyKind{order.DiscrepancyChargedWithoutMoney}},
		{"charged, only a decline at the provider", inv(keyA, order.StatusCharged, "ch_1"), []order.PaymentRecord{rec("ch_1", keyA, order.RecordDeclined)},
			[]order.DiscrepancyKind{order.DiscrepancyChargedWithoutMoney}},
		{"charged with one id, money under another", inv(keyA, order.StatusCharged, "ch_1"), []order.PaymentRecord{rec("ch_9", keyA, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyChargedWithoutMoney, order.DiscrepancyMoneyWithoutCharged}},
		{"charged, another amount", inv(keyA, order.StatusCharged, "ch_1"), []order.PaymentRecord{withAmount(rec("ch_1", keyA, order.RecordSucceeded), 12900, "EUR")},
			[]order.DiscrepancyKind{order.DiscrepancyAmountMismatch}},
		{"charged, another currency", inv(keyA, order.StatusCharged, "ch_1"), []order.PaymentRecord{withAmount(rec("ch_1", keyA, order.RecordSucceeded), 12990, "USD")},
			[]order.DiscrepancyKind{order.DiscrepancyAmountMismatch}},
		{"charged twice under two keys", inv(keyA, order.StatusCharged, "ch_1"),
			[]order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), rec("ch_2", keyB, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyDoubleCharge}},
		{"declined, charged twice", inv(keyA, order.StatusDeclined, ""),
			[]order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), rec("ch_2", keyB, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyDoubleCharge}},
		{"never invoiced, money taken", nil, []order.PaymentRecord{rec("ch_1", keyB, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyMoneyWithoutCharged}},
		{"never invoiced, only a decline", nil, []order.PaymentRecord{rec("ch_1", keyB, order.RecordDeclined)}, nil},
		{"declined, declined at the provider", inv(keyA, order.StatusDeclined, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordDeclined)}, nil},
		{"declined, money at the provider", inv(keyA, order.StatusDeclined, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyMoneyWithoutCharged}},
		{"rejected, money under its old key", inv(keyB, order.StatusRejected, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyMoneyWithoutCharged}},
		{"rejected, refused at the provider", inv(keyA, order.StatusRejected, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordRefused)}, nil},
		{"held, money under its key", inv(keyA, order.StatusHeld, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyMoneyWithoutCharged}},
		{"held, nothing at the provider", inv(keyA, order.StatusHeld, ""), nil, nil},
		{"pending, money under its key: being settled", inv(keyA, order.StatusPending, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}, nil},
		{"pending, money under another key", inv(keyB, order.StatusPending, ""), []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)},
			[]order.DiscrepancyKind{order.DiscrepancyMoneyWithoutCharged}},
		{"pending, a processing attempt", inv(keyA, order.StatusPending, ""), []order.PaymentRecord{rec("pi_1", keyA, order.RecordPending)}, nil},
	}
	for _, tt := range tests {
		o := order.OrderRecords{OrderID: "ord-1", Invoice: tt.invoice, Records: tt.records, Complete: true}
		var got []order.DiscrepancyKind
		for _, d := range order.Compare(o) {
			got = append(got, d.Kind)
			if d.OrderID != "ord-1" || d.Invoice != tt.invoice {
				t.Errorf("%s: discrepancy %+v names another order or invoice", tt.name, d)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Compare = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDiscrepancyLine: one line each, naming the kind, the order, the
// charges and the invoice.
func TestDiscrepancyLine(t *testing.T) {
	t.Parallel()
	ds := order.Compare(order.OrderRecords{OrderID: "ord-1", Invoice: inv(keyA, order.StatusCharged, "ch_1"),
		Records: []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), rec("ch_2", keyB, order.RecordSucceeded)}})
	if len(ds) != 1 {
		t.Fatalf("Compare = %v, want one double charge", ds)
	}
	line := ds[0].String()
	for _, want := range []string{"double_charge order ord-1", "2 successful charges", "ch_1 12990 EUR succeeded under key " + keyA.String(),
		"ch_2 12990 EUR succeeded under key " + keyB.String(), "invoice charged 12990 EUR under key " + keyA.String() + ", charge ch_1"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("line %q is not one line", line)
	}
	none := order.Discrepancy{Kind: order.DiscrepancyMoneyWithoutCharged, OrderID: "ord-2", Records: []order.PaymentRecord{rec("ch_3", uuid.Nil, order.RecordSucceeded)}}
	if got := none.String(); !strings.Contains(got, "billing has no invoice for the order") || !strings.Contains(got, "under key (not said)") {
		t.Errorf("line %q: want it to say there is no invoice and the key is not said", got)
	}
}

// TestNeedsLookup: an order whose listing agrees with its invoice costs no
// lookup; a held one, or one that shows a discrepancy, does, once.
func TestNeedsLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    order.OrderRecords
		want bool
	}{
		{"charged, its charge listed", order.OrderRecords{Invoice: inv(keyA, order.StatusCharged, "ch_1"), Records: []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}}, false},
		{"charged, its charge not listed (made after the period)", order.OrderRecords{Invoice: inv(keyA, order.StatusCharged, "ch_1")}, true},
		{"declined, nothing listed", order.OrderRecords{Invoice: inv(keyA, order.StatusDeclined, "")}, false},
		{"held", order.OrderRecords{Invoice: inv(keyA, order.StatusHeld, "")}, true},
		{"money, no invoice", order.OrderRecords{Records: []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}}, true},
		{"charged, read whole already", order.OrderRecords{Invoice: inv(keyA, order.StatusCharged, "ch_1"), Complete: true}, false},
	}
	for _, tt := range tests {
		tt.o.OrderID = "ord-1"
		if got := order.NeedsLookup(tt.o); got != tt.want {
			t.Errorf("%s: NeedsLookup = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestMerge: the lookup adds what the listing did not show, once, oldest
// first, and only the order's own records.
func TestMerge(t *testing.T) {
	t.Parallel()
	later := rec("ch_2", keyB, order.RecordSucceeded)
	later.CreatedAt = at.Add(time.Hour)
	other := rec("ch_9", keyB, order.RecordSucceeded)
	other.OrderID = "ord-2"
	o := order.OrderRecords{OrderID: "ord-1", Records: []order.PaymentRecord{later}}
	o.Merge([]order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), later, other})
	var ids []string
	for _, r := range o.Records {
		ids = append(ids, r.ChargeID)
	}
	if !slices.Equal(ids, []string{"ch_1", "ch_2"}) || !o.Complete {
		t.Errorf("merged records %v (complete %v), want [ch_1 ch_2], complete", ids, o.Complete)
	}
}

// TestDecideHeld is the table of when a held invoice's outcome is beyond
// doubt (docs/design.md, "Reconciliation"): only the records under its key
// count, and absence or refusals never settle it.
func TestDecideHeld(t *testing.T) {
	t.Parallel()
	held := *inv(keyA, order.StatusHeld, "")
	tests := []struct {
		name     string
		records  []order.PaymentRecord
		partial  bool
		settle   bool
		status   order.InvoiceStatus
		chargeID string
		why      string
	}{
		{"one success under its key", []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}, false, true, order.StatusCharged, "ch_1", "one successful charge"},
		{"a decline, then the success under its key (a forgotten key sent again)",
			[]order.PaymentRecord{rec("ch_1", keyA, order.RecordDeclined), rec("ch_2", keyA, order.RecordSucceeded)}, false, true, order.StatusCharged, "ch_2", "one successful charge"},
		{"a success under another key only", []order.PaymentRecord{rec("ch_1", keyB, order.RecordSucceeded)}, false, false, "", "", "no attempt recorded under its key"},
		{"a decline under its key", []order.PaymentRecord{rec("ch_1", keyA, order.RecordDeclined)}, false, true, order.StatusDeclined, "", "declined under its key"},
		{"two declines under its key", []order.PaymentRecord{rec("ch_1", keyA, order.RecordDeclined), rec("ch_2", keyA, order.RecordDeclined)}, false, true, order.StatusDeclined, "", "declined"},
		{"two successes under its key", []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), rec("ch_2", keyA, order.RecordSucceeded)}, false, false, "", "", "2 successful charges under its key"},
		{"a success and one still processing", []order.PaymentRecord{rec("pi_1", keyA, order.RecordSucceeded), rec("pi_2", keyA, order.RecordPending)}, false, false, "", "", "not final"},
		{"a decline and one still processing", []order.PaymentRecord{rec("pi_1", keyA, order.RecordDeclined), rec("pi_2", keyA, order.RecordPending)}, false, false, "", "", "not final"},
		{"a refusal only", []order.PaymentRecord{rec("ch_1", keyA, order.RecordRefused)}, false, false, "", "", "only refused attempts"},
		{"nothing at all: a key the provider may have forgotten", nil, false, false, "", "", "absence is not proof"},
		{"a record that does not say its key", []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded), rec("ch_2", uuid.Nil, order.RecordDeclined)}, false, false, "", "", "do not say their key"},
		{"the listing alone", []order.PaymentRecord{rec("ch_1", keyA, order.RecordSucceeded)}, true, false, "", "", "not read whole"},
	}
	for _, tt := range tests {
		got := order.DecideHeld(held, order.OrderRecords{OrderID: "ord-1", Invoice: &held, Records: tt.records, Complete: !tt.partial})
		if got.Settle != tt.settle || got.Status != tt.status || got.ChargeID != tt.chargeID || !strings.Contains(got.Why, tt.why) {
			t.Errorf("%s: DecideHeld = %+v, want settle %v %q %q, why containing %q", tt.name, got, tt.settle, tt.status, tt.chargeID, tt.why)
		}
	}
}

// TestReadRanges: the period, and the last lag before now that the
// provider's lookup may not show yet, merged when they meet.
func TestReadRanges(t *testing.T) {
	t.Parallel()
	day := order.Period{From: at.Truncate(24 * time.Hour), To: at.Truncate(24 * time.Hour).Add(24 * time.Hour)}
	tests := []struct {
		name string
		now  time.Time
		lag  time.Duration
		want []order.Period
	}{
		{"no lag", day.To.Add(time.Hour), 0, []order.Period{day}},
		{"an hour's lag, an hour after the day", day.To.Add(time.Hour), time.Hour, []order.Period{{From: day.From, To: day.To.Add(time.Hour)}}},
		{"an hour's lag, half an hour after the day", day.To.Add(30 * time.Minute), time.Hour, []order.Period{{From: day.From, To: day.To.Add(30 * time.Minute)}}},
		{"an hour's lag, a week after", day.To.Add(7 * 24 * time.Hour), time.Hour,
			[]order.Period{day, {From: day.To.Add(7*24*time.Hour - time.Hour), To: day.To.Add(7 * 24 * time.Hour)}}},
		{"an hour's lag, a period of the last ten minutes", day.To, time.Hour,
			[]order.Period{{From: day.To.Add(-time.Hour), To: day.To}}},
	}
	for _, tt := range tests {
		p := day
		if strings.Contains(tt.name, "ten minutes") {
			p = order.Period{From: tt.now.Add(-10 * time.Minute), To: tt.now}
		}
		if got := order.ReadRanges(p, tt.now, tt.lag); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ReadRanges = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCountDiscrepancies: every kind counted, absent ones at 0.
func TestCountDiscrepancies(t *testing.T) {
	t.Parallel()
	counts := order.CountDiscrepancies([]order.Discrepancy{{Kind: order.DiscrepancyDoubleCharge}, {Kind: order.DiscrepancyDoubleCharge}, {Kind: order.DiscrepancyAmountMismatch}})
	want := map[order.DiscrepancyKind]int{order.DiscrepancyDoubleCharge: 2, order.DiscrepancyAmountMismatch: 1,
		order.DiscrepancyMoneyWithoutCharged: 0, order.DiscrepancyChargedWithoutMoney: 0}
	if len(counts) != len(want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("counts[%s] = %d, want %d", k, counts[k], n)
		}
	}
	if r := (order.ReconcileResult{Discrepancies: counts}); r.Total() != 3 {
		t.Errorf("Total = %d, want 3", r.Total())
	}
}
