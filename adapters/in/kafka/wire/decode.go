package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// JSON member names of the event.
const (
	memberEventID     = "event_id"
	memberEventType   = "event_type"
	memberOccurredAt  = "occurred_at"
	memberOrderID     = "order_id"
	memberCustomerID  = "customer_id"
	memberTotalAmount = "total_amount"
	memberCurrency    = "currency"
)

// Indexes of the known members in a members array.
const (
	fieldEventID = iota
	fieldEventType
	fieldOccurredAt
	fieldOrderID
	fieldCustomerID
	fieldTotalAmount
	fieldCurrency
	numFields
)

// knownField maps a member name to its index, -1 for an unknown member.
// Names are compared byte for byte: the contract makes them case-sensitive.
func knownField(name []byte) int {
	switch string(name) { // no allocation: the compiler compares in place
	case memberEventID:
		return fieldEventID
	case memberEventType:
		return fieldEventType
	case memberOccurredAt:
		return fieldOccurredAt
	case memberOrderID:
		return fieldOrderID
	case memberCustomerID:
		return fieldCustomerID
	case memberTotalAmount:
		return fieldTotalAmount
	case memberCurrency:
		return fieldCurrency
	}
	return -1
}

// members holds the raw JSON value of each known member, nil when absent.
type members [numFields][]byte

// event checks the members and builds the event from them: Decode's and
// the jsonv2 candidate's (v2_test.go) one set of rules. Members are checked
// in a fixed order, not in the order they came, so that the same bad record
// always reports the same error.
func (m *members) event(defaultCurrency string) (order.OrderConfirmedEvent, error) {
	var (
		evt order.OrderConfirmedEvent
		err error
	)
	if evt.EventID, err = decodeEventID(m[fieldEventID]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	if err = decodeEventType(m[fieldEventType]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	evt.EventType = order.EventTypeOrderConfirmed
	if evt.OccurredAt, err = decodeOccurredAt(m[fieldOccurredAt]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	if evt.OrderID, err = decodeID(memberOrderID, m[fieldOrderID]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	if evt.CustomerID, err = decodeID(memberCustomerID, m[fieldCustomerID]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	if evt.TotalAmount, err = decodeAmount(m[fieldTotalAmount]); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	if evt.Currency, err = decodeCurrency(m[fieldCurrency], defaultCurrency); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	return evt, nil
}

// Decode parses and validates one OrderConfirmed event value to
// docs/interface.md §3: the JSON here, the rules of its values
// (order.CheckEventID, order.CheckID, order.ValidCurrency) in core/order
// (docs/design.md, "The event on the wire"). A missing or null currency
// becomes defaultCurrency, which the caller has checked with
// order.ValidCurrency (configuration is validated at start, not per event).
// OccurredAt is returned in UTC: the instant is what the event says, the
// offset it was written with carries no meaning for billing. Every rule
// broken is an *order.ValidationError (permanent); its message never repeats
// more of the payload than a member name or one character.
func Decode(raw []byte, defaultCurrency string) (order.OrderConfirmedEvent, error) {
	if err := checkValue(raw); err != nil {
		return order.OrderConfirmedEvent{}, err
	}
	m, err := scanObject(raw)
	if err != nil {
		return order.OrderConfirmedEvent{}, err
	}

	return m.event(defaultCurrency)
}

// invalid is shorthand for an *order.ValidationError.
func invalid(field, reason string) error {
	return &order.ValidationError{Field: field, Reason: reason}
}

// checkValue applies the rules about the value as a whole: size, encoding,
// and that it is exactly one JSON value with only white space around it.
func checkValue(raw []byte) error {
	// Size first: nothing else should spend time on an oversized value.
	if len(raw) > order.MaxEventBytes {
		return invalid("", fmt.Sprintf("value is %d bytes, over the %d-byte limit", len(raw), order.MaxEventBytes))
	}
	if len(raw) == 0 {
		return invalid("", "empty value")
	}
	if bytes.HasPrefix(raw, []byte("\xef\xbb\xbf")) {
		return invalid("", "starts with a byte-order mark")
	}
	// encoding/json does not check UTF-8 inside strings; the contract does.
	if !utf8.Valid(raw) {
		return invalid("", "not valid UTF-8")
	}
	if json.Valid(raw) {
		return nil
	}
	return explainInvalidJSON(raw)
}

// explainInvalidJSON says why json.Valid refused raw. It runs on failures
// only, so it may be slow. Syntax errors from encoding/json quote at most one
// character, so they are safe to repeat.
func explainInvalidJSON(raw []byte) error {
	if skipSpace(raw, 0) == len(raw) {
		return invalid("", "empty value (white space only)")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var first json.RawMessage
	if err := dec.Decode(&first); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return invalid("", fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error()))
		}
		return invalid("", "invalid JSON: truncated value")
	}
	return invalid("", fmt.Sprintf("data after the JSON value at byte %d", dec.InputOffset()))
}

// maxLinearNames is how many unknown member names are checked for
// duplicates by linear search before a map is worth its allocation.
const maxLinearNames = 16

// scanObject walks the top level of raw, which json.Valid has accepted, and
// returns the raw values of the known members. It rejects a value that is not
// an object and any member name that appears twice (compared after
// unescaping, byte for byte).
//
// It is hand-written rather than built on json.Decoder.Token because Token
// boxes every token into an interface and copies the input: this walk does
// not allocate for an ordinary event; and not on encoding/json/v2, whose
// duplicate check applies at every depth and would refuse events billing
// accepts (docs/design.md, "The event on the wire"). Its index arithmetic
// relies on raw being valid JSON; FuzzDecode checks it against json.Decoder.
func scanObject(raw []byte) (members, error) {
	var m members
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return m, invalid("", "not a JSON object but "+jsonKind(raw[i]))
	}
	i = skipSpace(raw, i+1)
	if raw[i] == '}' {
		return m, nil
	}
	var (
		seen    uint
		others  [][]byte // unknown names, while there are few of them
		bigSeen map[string]struct{}
	)
	for {
		end := stringEnd(raw, i) // raw[i] is the opening quote of a name
		name, err := unquote(raw[i+1 : end-1])
		if err != nil {
			return m, invalid("", "member name: "+err.Error())
		}
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // past ':'
		vend := valueEnd(raw, i)

		if f := knownField(name); f >= 0 {
			if seen&(1<<f) != 0 {
				return m, invalid(string(name), "member appears more than once")
			}
			seen |= 1 << f
			m[f] = raw[i:vend]
		} else if bigSeen != nil {
			if _, dup := bigSeen[string(name)]; dup {
				return m, invalid("", "an unknown member name appears more than once")
			}
			bigSeen[string(name)] = struct{}{}
		} else {
			for _, o := range others {
				if bytes.Equal(o, name) {
					return m, invalid("", "an unknown member name appears more than once")
				}
			}
			others = append(others, name)
			if len(others) > maxLinearNames {
				bigSeen = make(map[string]struct{}, 2*len(others))
				for _, o := range others {
					bigSeen[string(o)] = struct{}{}
				}
				others = nil
			}
		}

		i = skipSpace(raw, vend)
		if raw[i] == '}' {
			return m, nil
		}
		i = skipSpace(raw, i+1) // past ','
	}
}

// skipSpace returns the index of the first non-white-space byte of raw at or
// after i (JSON white space: space, tab, line feed, carriage return).
func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the closing quote of the JSON string
// that opens at raw[i].
func stringEnd(raw []byte, i int) int {
	for j := i + 1; ; j++ {
		switch raw[j] {
		case '"':
			return j + 1
		case '\\':
			j++ // the escaped byte cannot close the string
		}
	}
}

// valueEnd returns the index just past the JSON value that starts at raw[i].
func valueEnd(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for j := i; ; {
			switch raw[j] {
			case '"':
				j = stringEnd(raw, j)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
	default: // number, true, false, null: ends at a delimiter or the end
		j := i
		for j < len(raw) {
			switch raw[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

// jsonKind names the type of the JSON value whose first byte is c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// unescapeError is why unquote refused a string.
type unescapeError string

func (e unescapeError) Error() string { return string(e) }

// unquote returns the content of a valid JSON string (between its quotes)
// with escapes resolved. Without a backslash it returns s itself, so the
// common case does not allocate.
//
// encoding/json turns an unpaired surrogate escape such as \ud800 into
// U+FFFD; unquote refuses it instead, so that two different order ids can
// never decode to the same one.
func unquote(s []byte) ([]byte, error) {
	first := bytes.IndexByte(s, '\\')
	if first < 0 {
		return s, nil
	}
	b := make([]byte, first, len(s))
	copy(b, s[:first])
	for i := first; i < len(s); {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
					return nil, unescapeError("unpaired UTF-16 surrogate escape")
				}
				r2 := hex4(s[i+2 : i+6])
				if r2 < 0xdc00 || r2 > 0xdfff {
					return nil, unescapeError("unpaired UTF-16 surrogate escape")
				}
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			b = utf8.AppendRune(b, r)
			continue
		default: // '"', '\\', '/'
			b = append(b, s[i+1])
		}
		i += 2
	}
	return b, nil
}

// hex4 decodes the four hex digits of a \u escape that json.Valid accepted.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default: // 'A'..'F'
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// stringMember returns the unescaped content of a required string member.
func stringMember(name string, v []byte) ([]byte, error) {
	switch {
	case v == nil:
		return nil, invalid(name, "missing")
	case v[0] == 'n':
		return nil, invalid(name, "null, want a string")
	case v[0] != '"':
		return nil, invalid(name, "want a string, got "+jsonKind(v[0]))
	}
	s, err := unquote(v[1 : len(v)-1])
	if err != nil {
		return nil, invalid(name, err.Error())
	}
	return s, nil
}

func decodeEventID(v []byte) (uuid.UUID, error) {
	s, err := stringMember(memberEventID, v)
	if err != nil {
		return uuid.Nil, err
	}
	u, reason := parseCanonicalUUID(s)
	if reason != "" {
		return uuid.Nil, invalid(memberEventID, reason)
	}
	if reason := order.CheckEventID(u); reason != "" {
		return uuid.Nil, invalid(memberEventID, reason)
	}
	return u, nil
}

// parseCanonicalUUID accepts only the 36-character 8-4-4-4-12 form, hex
// digits in either case. uuid.FromString also takes braces, a urn:uuid:
// prefix and the 32-digit form, which the contract refuses, so the text is
// checked here; parsing it directly also saves the library's allocations.
func parseCanonicalUUID(s []byte) (uuid.UUID, string) {
	var u uuid.UUID
	if len(s) != 36 {
		switch {
		case len(s) > 0 && s[0] == '{':
			return u, "UUID in braces, want the canonical 36-character form"
		case len(s) >= 9 && bytes.EqualFold(s[:9], []byte("urn:uuid:")):
			return u, "UUID with a urn:uuid: prefix, want the canonical 36-character form"
		case len(s) == 32:
			return u, "UUID without hyphens, want the canonical 36-character form"
		}
		return u, "not a UUID in the canonical 36-character form"
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return u, "not a UUID in the canonical 36-character form"
			}
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return u, "not a UUID in the canonical 36-character form"
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, ""
}

func fromHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func decodeEventType(v []byte) error {
	s, err := stringMember(memberEventType, v)
	if err != nil {
		return err
	}
	if string(s) != order.EventTypeOrderConfirmed {
		return invalid(memberEventType, "want "+order.EventTypeOrderConfirmed)
	}
	return nil
}

func decodeOccurredAt(v []byte) (time.Time, error) {
	s, err := stringMember(memberOccurredAt, v)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		// Not err itself: a *time.ParseError quotes the whole input.
		return time.Time{}, invalid(memberOccurredAt, "not an RFC 3339 time")
	}
	return t.UTC(), nil
}

func decodeID(name string, v []byte) (string, error) {
	s, err := stringMember(name, v)
	if err != nil {
		return "", err
	}
	id := string(s) // the event keeps it: converted once, checked as it is kept
	if reason := order.CheckID(id); reason != "" {
		return "", invalid(name, reason)
	}
	return id, nil
}

func decodeAmount(v []byte) (int64, error) {
	switch {
	case v == nil:
		return 0, invalid(memberTotalAmount, "missing")
	case v[0] == 'n':
		return 0, invalid(memberTotalAmount, "null, want an integer")
	case v[0] != '-' && (v[0] < '0' || v[0] > '9'):
		return 0, invalid(memberTotalAmount, "want a JSON number, got "+jsonKind(v[0]))
	case bytes.ContainsAny(v, ".eE"):
		return 0, invalid(memberTotalAmount, "want an integer, without fraction or exponent")
	case v[0] == '-':
		return 0, invalid(memberTotalAmount, "must be greater than 0")
	}
	// json.Valid has vouched for the digits; only the range is left.
	var n int64
	for _, c := range v {
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, invalid(memberTotalAmount, "out of the int64 range")
		}
		n = n*10 + d
	}
	if !order.ValidAmount(n) { // 0: the sign was refused above, with the same words
		return 0, invalid(memberTotalAmount, "must be greater than 0")
	}
	return n, nil
}

func decodeCurrency(v []byte, defaultCurrency string) (string, error) {
	if v == nil || v[0] == 'n' {
		return defaultCurrency, nil
	}
	if v[0] != '"' {
		return "", invalid(memberCurrency, "want a string, got "+jsonKind(v[0]))
	}
	s, err := unquote(v[1 : len(v)-1])
	if err != nil {
		return "", invalid(memberCurrency, err.Error())
	}
	if !validCurrency(s) {
		return "", invalid(memberCurrency, "want 3 upper-case letters A-Z")
	}
	if string(s) == defaultCurrency {
		return defaultCurrency, nil // the usual case, without a new string
	}
	return string(s), nil
}

// validCurrency is order.ValidCurrency on the unescaped bytes. The string
// made for the call does not escape, so it stays on the stack: checking a
// currency allocates nothing (BenchmarkDecode's allocs/op).
func validCurrency(s []byte) bool { return order.ValidCurrency(string(s)) }
