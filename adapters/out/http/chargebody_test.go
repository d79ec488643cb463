package httpgateway

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

// The charge body is json.Marshal's, byte for byte, whatever its strings
// hold: the ids and codes a charge carries, and strings that encoding/json
// escapes or changes (quotes, backslashes, control bytes, <>&, U+2028,
// invalid UTF-8, non-ASCII).
func TestChargeBodyEncodesAsJSON(t *testing.T) {
	for _, b := range []chargeBody{
		{OrderID: "ord-1", CustomerID: "cus-1", Amount: 1999, Currency: "EUR"},
		{},
		{OrderID: `a"b`, CustomerID: `c\d`, Amount: -1, Currency: "e\nf"},
		{OrderID: "<script>&", CustomerID: "\u2028\u2029", Amount: math.MaxInt64, Currency: "\xff\xfe"},
		{OrderID: "ordre-é", CustomerID: "\x7f", Amount: math.MinInt64, Currency: "~ !"},
	} {
		checkChargeBody(t, b)
	}
	// One string that needs escaping, the others plain: each in each field.
	for _, odd := range []string{"<", ">", "&", `"`, `\`, "\n", "\x00", "\x7f", "é", "\u2028", "\xff"} {
		checkChargeBody(t, chargeBody{OrderID: "ord-" + odd, CustomerID: "cus-1", Amount: 1, Currency: "EUR"})
		checkChargeBody(t, chargeBody{OrderID: "ord-1", CustomerID: odd + "cus", Amount: 1, Currency: "EUR"})
		checkChargeBody(t, chargeBody{OrderID: "ord-1", CustomerID: "cus-1", Amount: 1, Currency: "EU" + odd})
	}
	str := rapid.OneOf(
		rapid.StringMatching(`[A-Za-z0-9_.:-]{0,40}`),
		rapid.StringMatching(`[A-Za-z0-9 <>&"\\~\x7f\x00-\x1f-]{0,12}`),
		rapid.String(),
		rapid.StringOf(rapid.RuneFrom(nil, unicode.Latin, unicode.Cc, unicode.Zl, unicode.Zp, unicode.P)),
		rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }),
	)
	rapid.Check(t, func(rt *rapid.T) {
		checkChargeBody(rt, chargeBody{
			OrderID:    str.Draw(rt, "order"),
			CustomerID: str.Draw(rt, "customer"),
			Amount:     rapid.Int64().Draw(rt, "amount"),
			Currency:   str.Draw(rt, "currency"),
		})
	})
}

func checkChargeBody(t interface {
	Helper()
	Fatalf(string, ...any)
}, b chargeBody) {
	t.Helper()
	got, err := b.encode()
	want, werr := json.Marshal(b)
	if err != nil || werr != nil || !bytes.Equal(got, want) {
		t.Fatalf("encode(%+v) = %q, %v; json.Marshal: %q, %v", b, got, err, want, werr)
	}
}

// BenchmarkChargeBody is the encoding of a charge's request body alone.
func BenchmarkChargeBody(b *testing.B) {
	body := chargeBody{OrderID: "ord-0001234567", CustomerID: "cus-000042", Amount: 1999, Currency: "EUR"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := body.encode(); err != nil {
			b.Fatal(err)
		}
	}
}
