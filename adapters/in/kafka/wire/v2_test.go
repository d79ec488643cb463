package wire

import (
	"errors"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/acme/billing/core/order"
)

// v2Members is the event's known members as encoding/json/v2 (its module
// form) reads them: raw values, nil when absent, so that the same member
// rules as Decode's apply to them.
type v2Members struct {
	EventID     jsontext.Value `json:"event_id"`
	EventType   jsontext.Value `json:"event_type"`
	OccurredAt  jsontext.Value `json:"occurred_at"`
	OrderID     jsontext.Value `json:"order_id"`
	CustomerID  jsontext.Value `json:"customer_id"`
	TotalAmount jsontext.Value `json:"total_amount"`
	Currency    jsontext.Value `json:"currency"`
}

// decodeV2 is Decode with the hand-written walk (scanObject, and the
// json.Valid pass before it) replaced by jsonv2.Unmarshal, whose defaults
// refuse duplicate names, invalid UTF-8, trailing data and case-variant
// names. It is the candidate BenchmarkDecodeScannerVsV2 weighs against the
// scanner (docs/design.md, "The event on the wire"). Its errors reuse
// Decode's wording where they can: the value-wide checks on failure only,
// the duplicate's name from the error's JSON pointer.
func decodeV2(raw []byte, defaultCurrency string) (order.OrderConfirmedEvent, error) {
	if len(raw) > order.MaxEventBytes {
		return order.OrderConfirmedEvent{}, checkValue(raw)
	}
	var w v2Members
	if err := jsonv2.Unmarshal(raw, &w); err != nil {
		return order.OrderConfirmedEvent{}, v2Error(raw, err)
	}
	var m members
	for i, v := range [...]jsontext.Value{w.EventID, w.EventType, w.OccurredAt, w.OrderID, w.CustomerID, w.TotalAmount, w.Currency} {
		m[i] = v
	}
	return m.event(defaultCurrency)
}

// v2Error words err as Decode would where it can.
func v2Error(raw []byte, err error) error {
	if verr := checkValue(raw); verr != nil {
		return verr // size, empty, BOM, UTF-8, syntax: Decode's own words
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		name := se.JSONPointer.LastToken()
		if se.JSONPointer.Parent() == "" && knownField([]byte(name)) >= 0 {
			return invalid(name, "member appears more than once")
		}
		return invalid("", "an unknown member name appears more than once")
	}
	if i := skipSpace(raw, 0); raw[i] != '{' {
		return invalid("", "not a JSON object but "+jsonKind(raw[i]))
	}
	// Here Decode would name a member; v2's text may quote the payload,
	// which Decode's never does: one more thing the scanner would have to
	// keep on top of the library.
	return invalid("", "invalid JSON: "+err.Error())
}
