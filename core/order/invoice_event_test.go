package order_test

import (
	"strings"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

func TestInvoiceEventID(t *testing.T) {
	t.Parallel()
	key := uuid.Must(uuid.NewV7())
	id := order.InvoiceEventID("ord-1", key, order.StatusCharged, 0)
	if id.Version() != 7 || id.Variant() != uuid.VariantRFC9562 {
		t.Errorf("id %s: version %d variant %d, want a UUIDv7", id, id.Version(), id.Variant())
	}
	if [6]byte(id[:6]) != [6]byte(key[:6]) {
		t.Errorf("id %s does not carry the key's timestamp %s", id, key)
	}
	if again := order.InvoiceEventID("ord-1", key, order.StatusCharged, 0); again != id {
		t.Errorf("the same transition gave %s, then %s", id, again)
	}
	for _, other := range []uuid.UUID{
		order.InvoiceEventID("ord-2", key, order.StatusCharged, 0),
		order.InvoiceEventID("ord-1", uuid.Must(uuid.NewV7()), order.StatusCharged, 0),
		order.InvoiceEventID("ord-1", key, order.StatusRejected, 0),
		// the same status reached again after a reopen is a new transition
		order.InvoiceEventID("ord-1", key, order.StatusCharged, 1),
	} {
		if other == id {
			t.Errorf("another transition has the id %s", id)
		}
	}
}

// PublishedReason is one line of at most 256 bytes, cut on a rune boundary.
func TestPublishedReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"400 Bad Request:\n  amount\ttoo large ", "400 Bad Request: amount too large"},
		{strings.Repeat("x", 300), strings.Repeat("x", 256)},
		{strings.Repeat("x", 255) + "é", strings.Repeat("x", 255)},
		{"", ""},
	} {
		if got := order.PublishedReason(tc.in); got != tc.want {
			t.Errorf("PublishedReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
