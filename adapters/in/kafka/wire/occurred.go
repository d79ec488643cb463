package wire

import "time"

// OccurredAt returns the occurred_at of an event value, and false when the
// value is not an object or its occurred_at is missing or not an RFC 3339
// time. It checks nothing else: it dates an event for the delay SLI whether
// or not the event is valid.
func OccurredAt(raw []byte) (time.Time, bool) {
	if checkValue(raw) != nil { // scanObject expects a checked value
		return time.Time{}, false
	}
	m, err := scanObject(raw)
	if err != nil {
		return time.Time{}, false
	}
	t, err := decodeOccurredAt(m[fieldOccurredAt])
	return t, err == nil
}
