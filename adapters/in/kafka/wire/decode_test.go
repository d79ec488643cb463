package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
)

const (
	exampleID       = "0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"
	defaultCurrency = "USD"
	validEventJSON  = ordertest.ExampleEvent
)

// exampleEvent is validEventJSON decoded.
func exampleEvent() order.OrderConfirmedEvent {
	return order.OrderConfirmedEvent{
		EventID:     uuid.Must(uuid.FromString(exampleID)),
		EventType:   order.EventTypeOrderConfirmed,
		OccurredAt:  time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		OrderID:     "ord-123",
		CustomerID:  "cus-9",
		TotalAmount: 12990,
		Currency:    "EUR",
	}
}

// replaced returns the example event's JSON with the first old replaced by
// new; it fails the test when old is not there, so no row tests the example
// event by mistake.
func replaced(t *testing.T, old, new string) []byte {
	t.Helper()
	if !strings.Contains(validEventJSON, old) {
		t.Fatalf("%q is not in the example event", old)
	}
	return []byte(strings.Replace(validEventJSON, old, new, 1))
}

func TestDecodeValid(t *testing.T) {
	t.Parallel()
	type mod func(*order.OrderConfirmedEvent)
	tests := []struct {
		name string
		raw  []byte
		mod  mod // applied to exampleEvent() to get the wanted event
	}{
		{"contract example", []byte(validEventJSON), nil},
		{"upper-case hex event_id", replaced(t, exampleID, strings.ToUpper(exampleID)), nil},
		{"mixed-case hex event_id", replaced(t, exampleID, "0190F8a4-6C1e-7B3a-9d2F-3c4E5a6B7c8D"), nil},
		{"missing currency", replaced(t, `,"currency":"EUR"`, ``), func(e *order.OrderConfirmedEvent) { e.Currency = defaultCurrency }},
		{"null currency", replaced(t, `"EUR"`, `null`), func(e *order.OrderConfirmedEvent) { e.Currency = defaultCurrency }},
		{"currency equal to the default", replaced(t, `"EUR"`, `"USD"`), func(e *order.OrderConfirmedEvent) { e.Currency = "USD" }},
		{"unknown members of every type", replaced(t, `{`, `{"note":"a \"}\" here","Event_ID":"x","nested":{"a":[1,{"b":"]}"}],"event_id":2},"list":[[],{}],"n":-1.5e3,"t":true,"f":false,"z":null,`), nil},
		{"unknown member after the known ones", replaced(t, `"EUR"}`, `"EUR","schema_version":3}`), nil},
		{"white space everywhere", []byte(" \t\r\n{ \"event_id\" : \"" + exampleID + "\" ,\n\t\"event_type\":\"OrderConfirmed\",\"occurred_at\"\r:\"2026-12-02T10:00:00Z\",\"order_id\":\"ord-123\",\"customer_id\":\"cus-9\",\"total_amount\" : 12990 ,\"currency\":\"EUR\"\n}\n\n"), nil},
		{"members in another order", []byte(`{"currency":"EUR","total_amount":12990,"customer_id":"cus-9","order_id":"ord-123","occurred_at":"2026-12-02T10:00:00Z","event_type":"OrderConfirmed","event_id":"` + exampleID + `"}`), nil},
		{"nanosecond timestamp", replaced(t, `10:00:00Z`, `10:00:00.123456789Z`), func(e *order.OrderConfirmedEvent) { e.OccurredAt = e.OccurredAt.Add(123456789) }},
		{"offset timestamp becomes UTC", replaced(t, `10:00:00Z`, `12:30:00+02:30`), nil},
		{"negative offset timestamp", replaced(t, `2026-12-02T10:00:00Z`, `2026-12-01T23:00:00.5-11:00`), func(e *order.OrderConfirmedEvent) { e.OccurredAt = e.OccurredAt.Add(500 * time.Millisecond) }},
		{"offset taking the instant before year 0", replaced(t, `2026-12-02T10:00:00Z`, `0000-01-01T00:00:00+01:00`), func(e *order.OrderConfirmedEvent) {
			e.OccurredAt = time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC)
		}},
		{"largest offset time.Parse accepts", replaced(t, `2026-12-02T10:00:00Z`, `9999-12-31T23:59:59.999999999-24:60`), func(e *order.OrderConfirmedEvent) {
			e.OccurredAt = time.Date(10000, 1, 2, 0, 59, 59, 999999999, time.UTC)
		}},
		{"escaped member name", replaced(t, `"order_id"`, `"order\u005fid"`), nil},
		{"escapes in order_id", replaced(t, `"ord-123"`, `"ord-\u00e9\/\"\\"`), func(e *order.OrderConfirmedEvent) { e.OrderID = `ord-é/"\` }},
		{"surrogate pair in customer_id", replaced(t, `"cus-9"`, `"cus-\ud83d\ude00"`), func(e *order.OrderConfirmedEvent) { e.CustomerID = "cus-😀" }},
		{"upper-case hex escape", replaced(t, `"ord-123"`, `"ord-\u00C9"`), func(e *order.OrderConfirmedEvent) { e.OrderID = "ord-É" }},
		{"every escape in an unknown member name", replaced(t, `{`, `{"\b\f\n\r\t\"\\\/\u00c9":1,"\b\f\n\r\t\"\\\/\u00C8":1,`), nil},
		{"escaped event_id and event_type", replaced(t, `"OrderConfirmed"`, `"Order\u0043onfirmed"`), nil},
		{"inner spaces in ids", replaced(t, `"ord-123"`, `" ord 123 "`), func(e *order.OrderConfirmedEvent) { e.OrderID = " ord 123 " }},
		{"order_id of exactly 128 bytes", replaced(t, `"ord-123"`, `"`+strings.Repeat("é", 64)+`"`), func(e *order.OrderConfirmedEvent) { e.OrderID = strings.Repeat("é", 64) }},
		{"amount 1", replaced(t, `12990`, `1`), func(e *order.OrderConfirmedEvent) { e.TotalAmount = 1 }},
		{"amount max int64", replaced(t, `12990`, `9223372036854775807`), func(e *order.OrderConfirmedEvent) { e.TotalAmount = math.MaxInt64 }},
		{"event_id with the largest v7 timestamp", replaced(t, exampleID, "ffffffff-ffff-7fff-bfff-ffffffffffff"), func(e *order.OrderConfirmedEvent) {
			e.EventID = uuid.Must(uuid.FromString("ffffffff-ffff-7fff-bfff-ffffffffffff"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := exampleEvent()
			if tt.mod != nil {
				tt.mod(&want)
			}
			got, err := Decode(tt.raw, defaultCurrency)
			if err != nil {
				t.Fatalf("Decode() error = %v, want nil", err)
			}
			if got != want {
				t.Errorf("Decode() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	t.Parallel()
	manyUnknown := func(dup bool) []byte {
		var b strings.Builder
		b.WriteString(`{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"x%d":%d,`, i, i)
		}
		if dup {
			b.WriteString(`"x\u0033":0,`) // "x3", escaped, after the map took over
		}
		b.WriteString(validEventJSON[1:])
		return []byte(b.String())
	}
	tests := []struct {
		name      string
		raw       []byte
		wantField string
	}{
		// The value as a whole.
		{"empty value", []byte{}, ""},
		{"nil value", nil, ""},
		{"white space only", []byte(" \n\t"), ""},
		{"invalid JSON", []byte(`{"event_id":`), ""},
		{"unquoted name", []byte(`{event_id:1}`), ""},
		{"trailing comma", replaced(t, `"EUR"}`, `"EUR",}`), ""},
		{"JSON array", []byte("[" + validEventJSON + "]"), ""},
		{"JSON string", []byte(`"` + exampleID + `"`), ""},
		{"JSON number", []byte(`12990`), ""},
		{"JSON null", []byte(`null`), ""},
		{"over 1 MiB", ordertest.OverMaxEvent(), ""},
		{"invalid UTF-8 in a value", replaced(t, `"ord-123"`, "\"ord-\xff\""), ""},
		{"invalid UTF-8 in an unknown member", replaced(t, `{`, "{\"x\":\"\xc3\x28\","), ""},
		{"BOM prefix", append([]byte("\xef\xbb\xbf"), validEventJSON...), ""},
		{"trailing garbage", []byte(validEventJSON + "x"), ""},
		{"two objects", []byte(validEventJSON + validEventJSON), ""},
		{"raw control character in a string", replaced(t, `"ord-123"`, "\"ord-\x01\""), ""},
		{"empty object", []byte(`{}`), "event_id"},
		{"duplicate member", replaced(t, `"cus-9"`, `"cus-9","customer_id":"cus-9"`), "customer_id"},
		{"duplicate member through an escape", replaced(t, `"cus-9"`, `"cus-9","customer\u005fid":"cus-8"`), "customer_id"},
		{"duplicate null currency", replaced(t, `"EUR"`, `null,"currency":null`), "currency"},
		{"duplicate unknown member", replaced(t, `{`, `{"x":1,"x":1,`), ""},
		{"duplicate unknown member among many", manyUnknown(true), ""},
		{"unpaired surrogate in a member name", replaced(t, `{`, `{"x\ud800":1,`), ""},

		// event_id
		{"missing event_id", replaced(t, `"event_id":"`+exampleID+`",`, ``), "event_id"},
		{"case-variant name Event_ID", replaced(t, `"event_id"`, `"Event_ID"`), "event_id"},
		{"null event_id", replaced(t, `"`+exampleID+`"`, `null`), "event_id"},
		{"number event_id", replaced(t, `"`+exampleID+`"`, `1`), "event_id"},
		{"object event_id", replaced(t, `"`+exampleID+`"`, `{}`), "event_id"},
		{"UUIDv4 event_id", replaced(t, exampleID, "1b4e28ba-2fa1-41d2-883f-0016d3cca427"), "event_id"},
		{"UUIDv1 event_id", replaced(t, exampleID, "6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "event_id"},
		{"UUIDv8 event_id", replaced(t, exampleID, "0190f8a4-6c1e-8b3a-9d2f-3c4e5a6b7c8d"), "event_id"},
		{"nil UUID", replaced(t, exampleID, "00000000-0000-0000-0000-000000000000"), "event_id"},
		{"max UUID", replaced(t, exampleID, "ffffffff-ffff-ffff-ffff-ffffffffffff"), "event_id"},
		{"Microsoft variant", replaced(t, exampleID, "0190f8a4-6c1e-7b3a-cd2f-3c4e5a6b7c8d"), "event_id"},
		{"NCS variant", replaced(t, exampleID, "0190f8a4-6c1e-7b3a-5d2f-3c4e5a6b7c8d"), "event_id"},
		{"braces", replaced(t, exampleID, "{"+exampleID+"}"), "event_id"},
		{"urn:uuid: prefix", replaced(t, exampleID, "urn:uuid:"+exampleID), "event_id"},
		{"URN:UUID: prefix", replaced(t, exampleID, "URN:UUID:"+exampleID), "event_id"},
		{"no hyphens", replaced(t, exampleID, strings.ReplaceAll(exampleID, "-", "")), "event_id"},
		{"misplaced hyphen", replaced(t, exampleID, "0190f8a46-c1e-7b3a-9d2f-3c4e5a6b7c8d"), "event_id"},
		{"non-hex digit", replaced(t, exampleID, "0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8g"), "event_id"},
		{"empty event_id", replaced(t, `"`+exampleID+`"`, `""`), "event_id"},
		{"unpaired surrogate in event_id", replaced(t, exampleID, `\udc00`), "event_id"},

		// event_type
		{"missing event_type", replaced(t, `"event_type":"OrderConfirmed",`, ``), "event_type"},
		{"null event_type", replaced(t, `"OrderConfirmed"`, `null`), "event_type"},
		{"wrong event_type", replaced(t, `"OrderConfirmed"`, `"OrderCreated"`), "event_type"},
		{"lower-case event_type", replaced(t, `"OrderConfirmed"`, `"orderconfirmed"`), "event_type"},
		{"event_type with a trailing space", replaced(t, `"OrderConfirmed"`, `"OrderConfirmed "`), "event_type"},
		{"array event_type", replaced(t, `"OrderConfirmed"`, `["OrderConfirmed"]`), "event_type"},

		// occurred_at
		{"missing occurred_at", replaced(t, `"occurred_at":"2026-12-02T10:00:00Z",`, ``), "occurred_at"},
		{"null occurred_at", replaced(t, `"2026-12-02T10:00:00Z"`, `null`), "occurred_at"},
		{"numeric occurred_at", replaced(t, `"2026-12-02T10:00:00Z"`, `1796205600`), "occurred_at"},
		{"occurred_at without zone", replaced(t, `10:00:00Z`, `10:00:00`), "occurred_at"},
		{"occurred_at with a space", replaced(t, `T10`, ` 10`), "occurred_at"},
		{"occurred_at date only", replaced(t, `"2026-12-02T10:00:00Z"`, `"2026-12-02"`), "occurred_at"},
		{"occurred_at month 13", replaced(t, `2026-12-02`, `2026-13-02`), "occurred_at"},

		// total_amount
		{"missing total_amount", replaced(t, `"total_amount":12990,`, ``), "total_amount"},
		{"null total_amount", replaced(t, `12990`, `null`), "total_amount"},
		{"zero total_amount", replaced(t, `12990`, `0`), "total_amount"},
		{"negative zero total_amount", replaced(t, `12990`, `-0`), "total_amount"},
		{"negative total_amount", replaced(t, `12990`, `-12990`), "total_amount"},
		{"string total_amount", replaced(t, `12990`, `"12990"`), "total_amount"},
		{"boolean total_amount", replaced(t, `12990`, `true`), "total_amount"},
		{"fractional total_amount", replaced(t, `12990`, `129.90`), "total_amount"},
		{"integral fraction total_amount", replaced(t, `12990`, `12990.0`), "total_amount"},
		{"exponent total_amount", replaced(t, `12990`, `1.299e4`), "total_amount"},
		{"upper-case exponent total_amount", replaced(t, `12990`, `1299E1`), "total_amount"},
		{"total_amount beyond int64", replaced(t, `12990`, `9223372036854775808`), "total_amount"},
		{"total_amount far beyond int64", replaced(t, `12990`, `99999999999999999999999`), "total_amount"},
		{"total_amount below int64", replaced(t, `12990`, `-9223372036854775809`), "total_amount"},

		// order_id, customer_id
		{"missing order_id", replaced(t, `"order_id":"ord-123",`, ``), "order_id"},
		{"null order_id", replaced(t, `"ord-123"`, `null`), "order_id"},
		{"numeric order_id", replaced(t, `"ord-123"`, `123`), "order_id"},
		{"empty order_id", replaced(t, `"ord-123"`, `""`), "order_id"},
		{"200-byte order_id", replaced(t, `"ord-123"`, `"`+strings.Repeat("o", 200)+`"`), "order_id"},
		{"129-byte order_id", replaced(t, `"ord-123"`, `"`+strings.Repeat("o", 129)+`"`), "order_id"},
		{"escaped control character in order_id", replaced(t, `"ord-123"`, `"ord-\u0007"`), "order_id"},
		{"escaped NUL in order_id", replaced(t, `"ord-123"`, `"ord-\u0000"`), "order_id"},
		{"tab in order_id", replaced(t, `"ord-123"`, `"ord\t123"`), "order_id"},
		{"DEL in order_id", replaced(t, `"ord-123"`, "\"ord-\x7f\""), "order_id"},
		{"C1 control in order_id", replaced(t, `"ord-123"`, "\"ord-\u0085\""), "order_id"},
		{"unpaired high surrogate in order_id", replaced(t, `"ord-123"`, `"ord-\ud800"`), "order_id"},
		{"high surrogate then a letter in order_id", replaced(t, `"ord-123"`, `"ord-\ud800\u0041"`), "order_id"},
		{"reversed surrogate pair in order_id", replaced(t, `"ord-123"`, `"ord-\ude00\ud83d"`), "order_id"},
		{"missing customer_id", replaced(t, `"customer_id":"cus-9",`, ``), "customer_id"},
		{"null customer_id", replaced(t, `"cus-9"`, `null`), "customer_id"},
		{"blank customer_id", replaced(t, `"cus-9"`, `"   "`), "customer_id"},
		{"Unicode-blank customer_id", replaced(t, `"cus-9"`, `"\u00a0\u2003"`), "customer_id"},
		{"boolean customer_id", replaced(t, `"cus-9"`, `false`), "customer_id"},

		// currency
		{"lower-case currency", replaced(t, `"EUR"`, `"eur"`), "currency"},
		{"4-letter currency", replaced(t, `"EUR"`, `"EURO"`), "currency"},
		{"2-letter currency", replaced(t, `"EUR"`, `"EU"`), "currency"},
		{"empty currency", replaced(t, `"EUR"`, `""`), "currency"},
		{"accented currency", replaced(t, `"EUR"`, `"ÉUR"`), "currency"},
		{"unpaired surrogate in currency", replaced(t, `"EUR"`, `"\ud800UR"`), "currency"},
		{"numeric currency", replaced(t, `"EUR"`, `978`), "currency"},
		{"object currency", replaced(t, `"EUR"`, `{"code":"EUR"}`), "currency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkRejected(t, tt.raw, tt.wantField)
		})
	}
}

// checkRejected asserts that Decode refuses raw with a one-line
// *order.ValidationError about wantField.
func checkRejected(t *testing.T, raw []byte, wantField string) {
	t.Helper()
	got, err := Decode(raw, defaultCurrency)
	if err == nil {
		t.Fatalf("Decode() = %+v, nil; want a *order.ValidationError", got)
	}
	var ve *order.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Decode() error = %T %v, want a *order.ValidationError", err, err)
	}
	if ve.Field != wantField {
		t.Errorf("Decode() error field = %q (%v), want %q", ve.Field, err, wantField)
	}
	if got != (order.OrderConfirmedEvent{}) {
		t.Errorf("Decode() event = %+v with an error, want the zero event", got)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") || len(msg) > 120 {
		t.Errorf("Decode() error = %q: want one line of at most 120 bytes", msg)
	}
}

func TestBadRecordCorpus(t *testing.T) {
	t.Parallel()
	// The field each bad record is about; every corpus entry must be here and
	// every name here must be in the corpus.
	wantField := map[string]string{
		"empty_value": "", "invalid_json": "", "json_array": "", "over_1mib": "",
		"invalid_utf8": "", "bom_prefix": "", "trailing_garbage": "", "two_objects": "",
		"duplicate_member":            "order_id",
		"uuid_v4_event_id":            "event_id",
		"nil_uuid_event_id":           "event_id",
		"max_uuid_event_id":           "event_id",
		"braced_event_id":             "event_id",
		"urn_event_id":                "event_id",
		"unhyphenated_event_id":       "event_id",
		"wrong_event_type":            "event_type",
		"lowercase_event_type":        "event_type",
		"zero_total_amount":           "total_amount",
		"negative_total_amount":       "total_amount",
		"string_total_amount":         "total_amount",
		"fractional_total_amount":     "total_amount",
		"exponent_total_amount":       "total_amount",
		"int64_overflow_total_amount": "total_amount",
		"missing_order_id":            "order_id",
		"long_order_id":               "order_id",
		"control_char_order_id":       "order_id",
		"blank_customer_id":           "customer_id",
		"lowercase_currency":          "currency",
		"four_letter_currency":        "currency",
		"null_event_id":               "event_id",
		"null_event_type":             "event_type",
		"null_occurred_at":            "occurred_at",
		"null_order_id":               "order_id",
		"null_customer_id":            "customer_id",
		"null_total_amount":           "total_amount",
	}
	corpus := ordertest.BadRecordCorpus()
	seen := make(map[string]bool)
	for _, rec := range corpus {
		if seen[rec.Name] {
			t.Errorf("corpus name %q appears twice", rec.Name)
		}
		seen[rec.Name] = true
		field, ok := wantField[rec.Name]
		if !ok {
			t.Errorf("corpus entry %q has no expected field in this test", rec.Name)
			continue
		}
		t.Run(rec.Name, func(t *testing.T) {
			t.Parallel()
			checkRejected(t, rec.Value, field)
		})
	}
	for name := range wantField {
		if !seen[name] {
			t.Errorf("corpus lacks %q", name)
		}
	}
}

// TestBadRecordCorpusFresh checks that callers may modify what they get.
func TestBadRecordCorpusFresh(t *testing.T) {
	t.Parallel()
	a := ordertest.BadRecordCorpus()
	for _, rec := range a {
		for i := range rec.Value {
			rec.Value[i] = 0
		}
	}
	for i, rec := range ordertest.BadRecordCorpus() {
		if len(rec.Value) > 0 && bytes.Equal(rec.Value, a[i].Value) {
			t.Errorf("%s: second call returned the bytes the first caller modified", rec.Name)
		}
	}
}

// TestDecodeSizeLimit checks the limit is exactly order.MaxEventBytes: the
// over-1-MiB record fails for its size alone.
func TestDecodeSizeLimit(t *testing.T) {
	t.Parallel()
	over := ordertest.OverMaxEvent()
	if got, want := len(over), order.MaxEventBytes+1; got != want {
		t.Fatalf("len(OverMaxEvent()) = %d, want %d", got, want)
	}
	at := bytes.Replace(over, []byte("xx"), []byte("x"), 1)
	if got, want := len(at), order.MaxEventBytes; got != want {
		t.Fatalf("len(at limit) = %d, want %d", got, want)
	}
	if _, err := Decode(at, defaultCurrency); err != nil {
		t.Errorf("Decode(%d bytes) error = %v, want nil", len(at), err)
	}
	checkRejected(t, over, "")
}

// TestDecodeDeterministicError checks that the first broken rule in the
// fixed field order is reported, whatever the member order.
func TestDecodeDeterministicError(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"currency":"eur","total_amount":0,"event_id":"` + exampleID + `","event_type":"x"}`)
	checkRejected(t, raw, "event_type")
}

func TestEncodeExample(t *testing.T) {
	t.Parallel()
	e := exampleEvent()
	e.EventID = uuid.Must(uuid.FromString(strings.ToUpper(exampleID))) // parsed case must not matter
	got, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	if want := validEventJSON; string(got) != want {
		t.Errorf("Encode() =\n%s\nwant\n%s", got, want)
	}
}

// TestEncodeOccurredAt checks how occurred_at is written, including the
// instants that only exist in RFC 3339 through an extreme offset.
func TestEncodeOccurredAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"offset becomes UTC", time.Date(2026, 12, 2, 12, 0, 0, 7, time.FixedZone("", 2*3600)), "2026-12-02T10:00:00.000000007Z"},
		{"trailing zeros trimmed", time.Date(2026, 12, 2, 10, 0, 0, 5e8, time.UTC), "2026-12-02T10:00:00.5Z"},
		{"year 0 in UTC", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), "0000-01-01T00:00:00Z"},
		{"year 9999 in UTC", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), "9999-12-31T23:59:59.999999999Z"},
		{"just before year 0", time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC), "0000-01-02T00:00:00+24:60"},
		{"25 h before year 0", time.Date(-1, 12, 30, 23, 0, 0, 0, time.UTC), "0000-01-01T00:00:00+24:60"},
		{"just after year 9999", time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC), "9999-12-30T23:00:00.000000001-24:60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := exampleEvent()
			e.OccurredAt = tt.at
			raw, err := Encode(e)
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			if want := `"occurred_at":"` + tt.want + `"`; !bytes.Contains(raw, []byte(want)) {
				t.Errorf("Encode() = %s, want it to contain %s", raw, want)
			}
			got, err := Decode(raw, defaultCurrency)
			if err != nil {
				t.Fatalf("Decode(Encode()) error = %v", err)
			}
			if !got.OccurredAt.Equal(tt.at) {
				t.Errorf("Decode(Encode()).OccurredAt = %v, want %v", got.OccurredAt, tt.at)
			}
		})
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		mod       func(*order.OrderConfirmedEvent)
		wantField string
	}{
		{"zero event id", func(e *order.OrderConfirmedEvent) { e.EventID = uuid.Nil }, "event_id"},
		{"UUIDv4 event id", func(e *order.OrderConfirmedEvent) { e.EventID = uuid.Must(uuid.NewV4()) }, "event_id"},
		{"empty event type", func(e *order.OrderConfirmedEvent) { e.EventType = "" }, "event_type"},
		{"year 10001", func(e *order.OrderConfirmedEvent) { e.OccurredAt = time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC) }, "occurred_at"},
		{"more than 25 h after year 9999", func(e *order.OrderConfirmedEvent) { e.OccurredAt = time.Date(10000, 1, 2, 1, 0, 0, 1, time.UTC) }, "occurred_at"},
		{"more than 25 h before year 0", func(e *order.OrderConfirmedEvent) { e.OccurredAt = time.Date(-1, 12, 30, 22, 59, 59, 0, time.UTC) }, "occurred_at"},
		{"year -2", func(e *order.OrderConfirmedEvent) { e.OccurredAt = time.Date(-2, 6, 1, 0, 0, 0, 0, time.UTC) }, "occurred_at"},
		{"blank order id", func(e *order.OrderConfirmedEvent) { e.OrderID = " " }, "order_id"},
		{"invalid UTF-8 order id", func(e *order.OrderConfirmedEvent) { e.OrderID = "ord-\xff" }, "order_id"},
		{"long customer id", func(e *order.OrderConfirmedEvent) { e.CustomerID = strings.Repeat("c", 129) }, "customer_id"},
		{"control in customer id", func(e *order.OrderConfirmedEvent) { e.CustomerID = "c\n" }, "customer_id"},
		{"zero amount", func(e *order.OrderConfirmedEvent) { e.TotalAmount = 0 }, "total_amount"},
		{"negative amount", func(e *order.OrderConfirmedEvent) { e.TotalAmount = math.MinInt64 }, "total_amount"},
		{"no currency", func(e *order.OrderConfirmedEvent) { e.Currency = "" }, "currency"},
		{"lower-case currency", func(e *order.OrderConfirmedEvent) { e.Currency = "eur" }, "currency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := exampleEvent()
			tt.mod(&e)
			raw, err := Encode(e)
			var ve *order.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Encode() = %s, %v; want a *order.ValidationError", raw, err)
			}
			if ve.Field != tt.wantField {
				t.Errorf("Encode() error field = %q, want %q", ve.Field, tt.wantField)
			}
		})
	}
}

// randomEvent returns a valid event with values drawn from r, including the
// awkward ones: escapes, HTML characters, line separators, astral runes,
// extreme amounts and timestamps.
func randomEvent(r *rand.Rand) order.OrderConfirmedEvent {
	var id uuid.UUID
	for i := range id {
		id[i] = byte(r.Uint32())
	}
	id.SetVersion(uuid.V7)
	id.SetVariant(uuid.VariantRFC9562)

	// Years 0000-9999, any nanosecond; now and then within the 25 hours
	// beyond either end that Decode can also return.
	lo := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	sec := lo + r.Int64N(hi-lo+1)
	switch r.IntN(8) {
	case 0:
		sec = lo - r.Int64N(25*3600)
	case 1:
		sec = hi + r.Int64N(25*3600)
	}
	at := time.Unix(sec, r.Int64N(1e9)).UTC()

	amount := 1 + r.Int64N(math.MaxInt64)
	switch r.IntN(4) {
	case 0:
		amount = math.MaxInt64
	case 1:
		amount = 1 + r.Int64N(100000)
	}
	cur := string([]byte{byte('A' + r.IntN(26)), byte('A' + r.IntN(26)), byte('A' + r.IntN(26))})
	return order.OrderConfirmedEvent{
		EventID:     id,
		EventType:   order.EventTypeOrderConfirmed,
		OccurredAt:  at,
		OrderID:     randomID(r),
		CustomerID:  randomID(r),
		TotalAmount: amount,
		Currency:    cur,
	}
}

func randomID(r *rand.Rand) string {
	alphabet := []rune(`aZ09-_ "\/<>&'é€😀` + "\u2028\u2029\ufffd\u00a0")
	for {
		var b strings.Builder
		for n := r.IntN(40); n >= 0; n-- {
			ch := alphabet[r.IntN(len(alphabet))]
			if b.Len()+len(string(ch)) > order.MaxIDBytes {
				break
			}
			b.WriteRune(ch)
		}
		if s := b.String(); order.CheckID(s) == "" {
			return s
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		want := randomEvent(r)
		raw, err := Encode(want)
		if err != nil {
			t.Fatalf("#%d Encode(%+v) error = %v", i, want, err)
		}
		got, err := Decode(raw, defaultCurrency)
		if err != nil {
			t.Fatalf("#%d Decode(%s) error = %v", i, raw, err)
		}
		if got != want {
			t.Fatalf("#%d Decode(Encode(e)) =\n%+v\nwant\n%+v", i, got, want)
		}
	}
}

// BenchmarkDecode measures Decode (the scanner) beside decodeV2, the same
// rules on encoding/json/v2's Unmarshal, on the same values: what
// docs/design.md, "The event on the wire", weighs.
func BenchmarkDecode(b *testing.B) {
	big := replacedB(`{`, `{"lines":[`+strings.Repeat(`{"sku":"abc-123","qty":2,"note":"x\"y"},`, 1000)+`{}],`)
	benchmarks := []struct {
		name string
		raw  []byte
	}{
		{"contract_example", []byte(validEventJSON)},
		{"escapes", replacedB(`"ord-123"`, `"ord-\u00e9-\ud83d\ude00"`)},
		{"40KiB_unknown_member", big},
	}
	decoders := []struct {
		name   string
		decode func([]byte, string) (order.OrderConfirmedEvent, error)
	}{
		{"scanner", Decode},
		{"jsonv2", decodeV2},
	}
	for _, d := range decoders {
		for _, bm := range benchmarks {
			b.Run(d.name+"/"+bm.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(bm.raw)))
				for b.Loop() {
					if _, err := d.decode(bm.raw, defaultCurrency); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func replacedB(old, new string) []byte {
	return []byte(strings.Replace(validEventJSON, old, new, 1))
}

// order.CheckID is the rule Decode applies to order_id: every id it accepts an
// event carries, and every id it refuses makes the event invalid, naming
// order_id (a person's ORDER_ID names an invoice an event could have made).
func TestCheckIDIsTheDecodersRule(t *testing.T) {
	t.Parallel()
	ids := []string{"ord-1", "é€😀", " x ", strings.Repeat("o", order.MaxIDBytes), strings.Repeat("o", order.MaxIDBytes+1),
		strings.Repeat("o", 5<<10) + "\x1b", "", " ", "\u00a0\u2028", "ord\x00", "ord\x7f", "ord\u0085", "ord\xff", "ord\u202e"}
	for _, id := range ids {
		raw, err := json.Marshal(map[string]any{"event_id": "0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d", "event_type": order.EventTypeOrderConfirmed,
			"occurred_at": "2026-12-02T10:00:00Z", "order_id": "ID", "customer_id": "cus-9", "total_amount": 12990, "currency": "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		quoted, err := json.Marshal(id)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(id) {
			// json.Marshal would replace the bad byte; Decode refuses the
			// whole value for it, before any member.
			quoted = []byte(`"` + id + `"`)
		}
		raw = bytes.Replace(raw, []byte(`"ID"`), quoted, 1)
		_, derr := Decode(raw, "USD")
		why := order.CheckID(id)
		var ve *order.ValidationError
		switch {
		case !utf8.ValidString(id):
			if why == "" || derr == nil {
				t.Errorf("invalid UTF-8 %q: order.CheckID %q, Decode %v; want both to refuse", id, why, derr)
			}
		case why == "" && derr != nil:
			t.Errorf("order.CheckID(%q) accepts, Decode refuses: %v", id, derr)
		case why != "" && (!errors.As(derr, &ve) || ve.Field != memberOrderID || ve.Reason != why):
			t.Errorf("order.CheckID(%q) = %q, Decode: %v", id, why, derr)
		}
	}
}

// What the producer makes with order.NewOrderConfirmedEvent, the consumer
// accepts unchanged.
func TestNewOrderConfirmedEventRoundTrip(t *testing.T) {
	t.Parallel()
	evt, err := order.NewOrderConfirmedEvent(order.Order{
		ID: "ord-123", CustomerID: "cus-9", TotalAmount: 12990, Currency: "EUR",
		ConfirmedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
	})
	if err != nil {
		t.Fatalf("NewOrderConfirmedEvent() error = %v", err)
	}
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
