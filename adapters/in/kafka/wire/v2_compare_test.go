package wire

import (
	"errors"
	"testing"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
)

// TestDecodeV2 keeps the benchmark's candidate honest: decodeV2 decides as
// Decode does on the contract's example and on every bad record of the
// corpus (duplicates included), with the same errors, so BenchmarkDecode compares two decoders of
// the same rules; and it shows, value by value, where encoding/json/v2's
// defaults would change what billing accepts, the reason the scanner stays
// (docs/design.md, "The event on the wire"). Should a later version of the
// library stop refusing these, the test says so and the choice is to be
// weighed again.
func TestDecodeV2(t *testing.T) {
	t.Parallel()
	same := map[string][]byte{"contract example": []byte(validEventJSON)}
	for _, rec := range ordertest.BadRecordCorpus() {
		same[rec.Name] = rec.Value
	}
	for name, raw := range same {
		got, gotErr := decodeV2(raw, defaultCurrency)
		want, wantErr := Decode(raw, defaultCurrency)
		var g, w *order.ValidationError
		errors.As(gotErr, &g)
		errors.As(wantErr, &w)
		if (gotErr == nil) != (wantErr == nil) || got != want || (g == nil) != (w == nil) || (g != nil && *g != *w) {
			t.Errorf("%s: decodeV2 = %+v, %v; Decode = %+v, %v", name, got, gotErr, want, wantErr)
		}
	}

	// Accepted by Decode, whose rules are about the event's own members,
	// refused by v2, which applies its rules to every value at every depth.
	for name, raw := range map[string][]byte{
		"duplicate name in a nested unknown object": replaced(t, `{`, `{"x":{"a":1,"a":2},`),
		"unpaired surrogate in an unknown string":   replaced(t, `{`, `{"x":"\ud800",`),
	} {
		if _, err := Decode(raw, defaultCurrency); err != nil {
			t.Errorf("%s: Decode() error = %v, want nil", name, err)
		}
		if _, err := decodeV2(raw, defaultCurrency); err == nil {
			t.Errorf("%s: decodeV2() accepts it: v2 no longer differs here", name)
		}
	}
}
