package order

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gofrs/uuid/v5"
)

// MaxIDBytes is the longest order_id or customer_id accepted, in bytes.
const MaxIDBytes = 128

// JSON member names of the event (CONTRACT.md §3).
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

// Decode parses and validates one event value to CONTRACT.md §3. A missing or
// null currency becomes defaultCurrency, which the caller has checked with
// ValidCurrency (configuration is validated at start, not per event).
// OccurredAt is returned in UTC: the instant is what the event says, the
// offset it was written with carries no meaning for billing. Every rule
// broken is a *ValidationError (permanent); its message never repeats more
// of the payload than a member name or one character.
func Decode(raw []byte, defaultCurrency string) (OrderConfirmedEvent, error) {
	if err := checkValue(raw); err != nil {
		return OrderConfirmedEvent{}, err
	}
	m, err := scanObject(raw)
	if err != nil {
		return OrderConfirmedEvent{}, err
	}

	// Members are checked in a fixed order, not in the order they came, so
	// that the same bad record always reports the same error.
	var evt OrderConfirmedEvent
	if evt.EventID, err = decodeEventID(m[fieldEventID]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	if err = decodeEventType(m[fieldEventType]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	evt.EventType = EventTypeOrderConfirmed
	if evt.OccurredAt, err = decodeOccurredAt(m[fieldOccurredAt]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	if evt.OrderID, err = decodeID(memberOrderID, m[fieldOrderID]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	if evt.CustomerID, err = decodeID(memberCustomerID, m[fieldCustomerID]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	if evt.TotalAmount, err = decodeAmount(m[fieldTotalAmount]); err != nil {
		return OrderConfirmedEvent{}, err
	}
	if evt.Currency, err = decodeCurrency(m[fieldCurrency], defaultCurrency); err != nil {
		return OrderConfirmedEvent{}, err
	}
	return evt, nil
}

// invalid is shorthand for a *ValidationError.
func invalid(field, reason string) error {
	return &ValidationError{Field: field, Reason: reason}
}

// checkValue applies the rules about the value as a whole: size, encoding,
// and that it is exactly one JSON value with only white space around it.
func checkValue(raw []byte) error {
	// Size first: nothing else should spend time on an oversized value.
	if len(raw) > MaxEventBytes {
		return invalid("", fmt.Sprintf("value is %d bytes, over the %d-byte limit", len(raw), MaxEventBytes))
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
// not allocate for an ordinary event. Its index arithmetic relies on raw being
// valid JSON; FuzzDecode checks it against json.Decoder.
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
	if reason := checkEventID(u); reason != "" {
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

// checkEventID returns why u is not a valid event id, "" when it is.
func checkEventID(u uuid.UUID) string {
	switch {
	case u == uuid.Nil:
		return "nil UUID"
	case u == uuid.Max:
		return "max UUID"
	case u.Version() != uuid.V7:
		return fmt.Sprintf("UUID version %d, want 7", u.Version())
	case u.Variant() != uuid.VariantRFC9562:
		return "UUID variant is not RFC 9562"
	}
	return ""
}

func decodeEventType(v []byte) error {
	s, err := stringMember(memberEventType, v)
	if err != nil {
		return err
	}
	if string(s) != EventTypeOrderConfirmed {
		return invalid(memberEventType, "want "+EventTypeOrderConfirmed)
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
	if reason := checkID(s); reason != "" {
		return "", invalid(name, reason)
	}
	return string(s), nil
}

// checkID returns why s is not a valid order or customer id, "" when it is.
func checkID(s []byte) string {
	if len(s) > MaxIDBytes {
		return fmt.Sprintf("longer than %d bytes", MaxIDBytes)
	}
	blank := true
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && size == 1:
			return "not valid UTF-8"
		case unicode.IsControl(r): // Cc: C0, DEL and C1
			return "contains a control character"
		case !unicode.IsSpace(r):
			blank = false
		}
		s = s[size:]
	}
	if blank {
		return "blank"
	}
	return ""
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
	if n == 0 {
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

// ValidCurrency reports whether s is a currency code the contract accepts:
// exactly 3 upper-case letters A-Z (not checked against ISO 4217). The
// configured default currency must pass it.
func ValidCurrency(s string) bool {
	return validCurrency([]byte(s))
}

func validCurrency(s []byte) bool {
	if len(s) != 3 {
		return false
	}
	for _, c := range s {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// maxParsedOffset is the largest zone offset time.Parse accepts in RFC 3339,
// "+24:60": it checks hours <= 24 and minutes <= 60, not a real offset range.
const maxParsedOffset = 25 * time.Hour

// formatOccurredAt writes t in RFC 3339 with nanoseconds, in UTC when the UTC
// year has four digits. Decode accepts, and turns into UTC, instants up to
// 25 hours outside years 0000-9999 (such as "0000-01-01T00:00:00+01:00");
// those are written back with the extreme offset time.Parse accepts, so that
// Encode never refuses what Decode returned. time.Format would write that
// offset as "+25:00", which time.Parse refuses, hence the manual suffix.
func formatOccurredAt(t time.Time) (string, bool) {
	t = t.UTC()
	inRange := func(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }
	if inRange(t) {
		return t.Format(time.RFC3339Nano), true
	}
	const local = "2006-01-02T15:04:05.999999999"
	if t.Year() < 0 {
		if l := t.Add(maxParsedOffset); inRange(l) {
			return l.Format(local) + "+24:60", true
		}
	} else if l := t.Add(-maxParsedOffset); inRange(l) {
		return l.Format(local) + "-24:60", true
	}
	return "", false
}

// wireEvent is the JSON form of OrderConfirmedEvent.
type wireEvent struct {
	EventID     string `json:"event_id"`
	EventType   string `json:"event_type"`
	OccurredAt  string `json:"occurred_at"`
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	TotalAmount int64  `json:"total_amount"`
	Currency    string `json:"currency"`
}

// Encode returns e as the contract's JSON (CONTRACT.md §3), for producers,
// tests and the demo: event_id in lower case, occurred_at in RFC 3339 with
// nanoseconds in UTC (see formatOccurredAt for the one exception), currency
// always present. It refuses, with a
// *ValidationError, an event that Decode would refuse, so that nothing it
// writes is dead-lettered; Decode(Encode(e)) equals e with OccurredAt in UTC.
func Encode(e OrderConfirmedEvent) ([]byte, error) {
	if reason := checkEventID(e.EventID); reason != "" {
		return nil, invalid(memberEventID, reason)
	}
	if e.EventType != EventTypeOrderConfirmed {
		return nil, invalid(memberEventType, "want "+EventTypeOrderConfirmed)
	}
	at, ok := formatOccurredAt(e.OccurredAt)
	if !ok {
		return nil, invalid(memberOccurredAt, "no RFC 3339 form: year outside 0000-9999")
	}
	if reason := checkID([]byte(e.OrderID)); reason != "" {
		return nil, invalid(memberOrderID, reason)
	}
	if reason := checkID([]byte(e.CustomerID)); reason != "" {
		return nil, invalid(memberCustomerID, reason)
	}
	if e.TotalAmount <= 0 {
		return nil, invalid(memberTotalAmount, "must be greater than 0")
	}
	if !ValidCurrency(e.Currency) {
		return nil, invalid(memberCurrency, "want 3 upper-case letters A-Z")
	}
	return json.Marshal(wireEvent{
		EventID:     e.EventID.String(),
		EventType:   e.EventType,
		OccurredAt:  at,
		OrderID:     e.OrderID,
		CustomerID:  e.CustomerID,
		TotalAmount: e.TotalAmount,
		Currency:    e.Currency,
	})
}
