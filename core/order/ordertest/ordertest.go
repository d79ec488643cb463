// Package ordertest holds test data for the OrderConfirmed contract: the
// contract's example event and the corpus of bad records, for the tests of
// the event's decoder (adapters/in/kafka/wire), internal/app and e2e, and
// for the demo (test tooling too). Production code does not import it.
//
// It is test tooling kept in core rather than under internal/testkit, where
// the rest of the tooling lives: it describes core's event (which rule each
// bad record breaks), and it imports only the standard library, so any
// test, core's included, can use it without an import cycle
// (.golangci.yaml's depguard rule "no-test-tooling" keeps it out of the
// service). The size limit it builds the over-1-MiB record from is the
// contract's, which adapters/in/kafka/wire's TestDecodeSizeLimit checks
// against order.MaxEventBytes.
package ordertest

import (
	"bytes"
	"strings"
)

// BadRecord is one event value that breaks docs/interface.md §3. Name says which
// rule it breaks; Value is the raw Kafka record value.
type BadRecord struct {
	Name  string
	Value []byte
}

// maxEventBytes is the largest event value docs/interface.md §3 accepts (1 MiB),
// order.MaxEventBytes.
const maxEventBytes = 1 << 20

// ExampleEvent is the contract's example event; every bad record is this
// event with one thing wrong, so that the thing is the only reason it fails.
const ExampleEvent = `{"event_id":"0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d","event_type":"OrderConfirmed",` +
	`"occurred_at":"2026-12-02T10:00:00Z","order_id":"ord-123","customer_id":"cus-9",` +
	`"total_amount":12990,"currency":"EUR"}`

// BadRecordCorpus returns the project's corpus of bad records, for tests and
// the demo: every one of them is a permanent error for wire.Decode and must end in
// the DLQ with its bytes unchanged. Each call returns fresh slices, so callers
// may keep or modify them. The over-1-MiB record is built here rather than
// stored in the repository.
func BadRecordCorpus() []BadRecord {
	with := func(old, new string) []byte {
		if !strings.Contains(ExampleEvent, old) {
			panic("ordertest: bad record corpus: " + old + " is not in the example event")
		}
		return []byte(strings.Replace(ExampleEvent, old, new, 1))
	}
	without := func(member string) []byte {
		return []byte(stripMember(ExampleEvent, member))
	}
	const id = `"0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"`

	return []BadRecord{
		{"empty_value", []byte{}},
		{"invalid_json", []byte(`{"event_id":"0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d","event_type":`)},
		{"json_array", []byte("[" + ExampleEvent + "]")},
		{"over_1mib", OverMaxEvent()},
		{"invalid_utf8", with(`"ord-123"`, "\"ord-\xff\xfe-123\"")},
		{"bom_prefix", append([]byte("\xef\xbb\xbf"), ExampleEvent...)},
		{"trailing_garbage", []byte(ExampleEvent + " garbage")},
		{"two_objects", []byte(ExampleEvent + "\n" + ExampleEvent)},
		{"duplicate_member", with(`"order_id":"ord-123"`, `"order_id":"ord-123","order_id":"ord-124"`)},

		{"uuid_v4_event_id", with(id, `"1b4e28ba-2fa1-41d2-883f-0016d3cca427"`)},
		{"nil_uuid_event_id", with(id, `"00000000-0000-0000-0000-000000000000"`)},
		{"max_uuid_event_id", with(id, `"ffffffff-ffff-ffff-ffff-ffffffffffff"`)},
		{"braced_event_id", with(id, `"{0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d}"`)},
		{"urn_event_id", with(id, `"urn:uuid:0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"`)},
		{"unhyphenated_event_id", with(id, `"0190f8a46c1e7b3a9d2f3c4e5a6b7c8d"`)},

		{"wrong_event_type", with(`"OrderConfirmed"`, `"OrderCreated"`)},
		{"lowercase_event_type", with(`"OrderConfirmed"`, `"orderconfirmed"`)},

		{"zero_total_amount", with(`12990`, `0`)},
		{"negative_total_amount", with(`12990`, `-12990`)},
		{"string_total_amount", with(`12990`, `"12990"`)},
		{"fractional_total_amount", with(`12990`, `129.90`)},
		{"exponent_total_amount", with(`12990`, `1.299e4`)},
		{"int64_overflow_total_amount", with(`12990`, `9223372036854775808`)},

		{"missing_order_id", without("order_id")},
		{"long_order_id", with(`"ord-123"`, `"`+strings.Repeat("o", 200)+`"`)},
		{"control_char_order_id", with(`"ord-123"`, `"ord-\u0007-123"`)},
		{"blank_customer_id", with(`"cus-9"`, `"   "`)},

		{"lowercase_currency", with(`"EUR"`, `"eur"`)},
		{"four_letter_currency", with(`"EUR"`, `"EURO"`)},

		{"null_event_id", with(id, `null`)},
		{"null_event_type", with(`"OrderConfirmed"`, `null`)},
		{"null_occurred_at", with(`"2026-12-02T10:00:00Z"`, `null`)},
		{"null_order_id", with(`"ord-123"`, `null`)},
		{"null_customer_id", with(`"cus-9"`, `null`)},
		{"null_total_amount", with(`12990`, `null`)},
	}
}

// stripMember returns the example event without the member name, which must
// not be its first member.
func stripMember(event, name string) string {
	start := strings.Index(event, `,"`+name+`":`)
	if start < 0 {
		panic("ordertest: bad record corpus: no member " + name + " to strip")
	}
	end := start + 1 + strings.IndexAny(event[start+1:], ",}")
	return event[:start] + event[end:]
}

// OverMaxEvent returns a valid event padded with an unknown member to one
// byte over the 1 MiB limit, so that its size is the only thing wrong with
// it.
func OverMaxEvent() []byte {
	const head = `{"padding":"`
	const tail = `",` // then the example event's members
	body := ExampleEvent[1:]
	pad := maxEventBytes + 1 - len(head) - len(tail) - len(body)
	var b bytes.Buffer
	b.Grow(maxEventBytes + 1)
	b.WriteString(head)
	b.Write(bytes.Repeat([]byte{'x'}, pad))
	b.WriteString(tail)
	b.WriteString(body)
	return b.Bytes()
}
