package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acme/billing/core/order"
)

// The rules of the commands' arguments (docs/interface.md §1, §3, §6), in one
// place for every command: what a person types may be pasted from anywhere
// (a terminal escape, a NUL, a page of text), and some of it is stored and
// published (a charge id goes out in InvoiceCharged). Each rule returns
// the value to use or an error naming the argument and what is wrong,
// quoting nothing of a value that broke a rule of length or characters.

// Bounds of the people's arguments.
const (
	// maxNameChars bounds who decided (--by NAME), maxNoteChars why
	// (--note TEXT): docs/interface.md §1.
	maxNameChars = 64
	maxNoteChars = 512
	// maxLimit bounds a --limit: a larger run is several runs, each of
	// which a person can follow (replaying twice is harmless).
	maxLimit = 1_000_000
	// maxTimeArg is longer than any RFC 3339 time with nanoseconds and an
	// offset (35 bytes): a longer --since is not one, and is not quoted.
	maxTimeArg = 40
)

// orderIDArg checks ORDER_ID by the rule the event decoder applies to
// order_id (docs/interface.md §3: not blank, at most 128 bytes of UTF-8, no
// control character): an id that no event can carry names no invoice.
func orderIDArg(id string) (string, error) {
	if why := order.CheckID(id); why != "" {
		if len(id) > order.MaxIDBytes {
			why += fmt.Sprintf(" (%d)", len(id))
		}
		return "", fmt.Errorf("ORDER_ID: %s", why)
	}
	return id, nil
}

// chargeIDArg checks CHARGE_ID, the charge id a person found in the
// gateway's records (docs/interface.md §6): 1 to 255 bytes of printable ASCII,
// space excluded at either end (a paste's spaces are trimmed).
func chargeIDArg(id string) (string, error) {
	id = strings.TrimSpace(id)
	switch {
	case id == "":
		return "", errors.New("CHARGE_ID: empty: give the charge id found in the gateway's records")
	case len(id) > order.MaxChargeIDBytes:
		return "", fmt.Errorf("CHARGE_ID: %d bytes, at most %d", len(id), order.MaxChargeIDBytes)
	}
	for i := range len(id) {
		if c := id[i]; c < ' ' || c > '~' {
			return "", fmt.Errorf("CHARGE_ID: byte %d is 0x%02x, not printable ASCII", i+1, c)
		}
	}
	if !order.ValidChargeID(id) { // the rule the gateway client keeps; the checks above only explain it
		return "", errors.New("CHARGE_ID: not a charge id billing keeps")
	}
	return id, nil
}

// textArg checks a person's text: valid UTF-8 of printable characters
// (unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
// ASCII space; no control, format or line-breaking character), at most
// maxChars of them, spaces at either end trimmed.
func textArg(what, s string, maxChars int) (string, error) {
	s = strings.TrimSpace(s)
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%s: not valid UTF-8", what)
	}
	if n := utf8.RuneCountInString(s); n > maxChars {
		return "", fmt.Errorf("%s: %d characters, at most %d", what, n, maxChars)
	}
	n := 0
	for _, r := range s {
		n++
		if !unicode.IsPrint(r) {
			return "", fmt.Errorf("%s: character %d (%U) is not printable", what, n, r)
		}
	}
	return s, nil
}

// nameArg checks --by NAME, who decides: 1 to 64 printable characters.
func nameArg(flag, name string) (string, error) {
	name, err := textArg(flag+" NAME", name, maxNameChars)
	if err == nil && name == "" {
		err = fmt.Errorf("%s NAME: required: who decides", flag)
	}
	return name, err
}

// noteArg checks --note TEXT, why: at most 512 printable characters.
func noteArg(flag, note string) (string, error) { return textArg(flag+" TEXT", note, maxNoteChars) }

// sinceArg checks a time given as RFC 3339, such as dlq replay's --since:
// not after now (a time to come selects nothing: a typo), not before 1970
// (no record is older).
func sinceArg(flag, s string, now time.Time) (time.Time, error) {
	if len(s) > maxTimeArg {
		return time.Time{}, fmt.Errorf("%s: %d bytes, not an RFC 3339 time", flag, len(s))
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time (2006-01-02T15:04:05Z)", flag, s)
	case t.After(now):
		return time.Time{}, fmt.Errorf("%s: %s is in the future", flag, s)
	case t.Before(time.Unix(0, 0)):
		return time.Time{}, fmt.Errorf("%s: %s is before 1970", flag, s)
	}
	return t, nil
}

// limitArg checks a --limit: unset ("") is no limit (0), else a whole
// number from 1 to maxLimit.
func limitArg(flag, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, fmt.Errorf("%s: want a whole number from 1 to %d", flag, maxLimit)
	}
	return n, nil
}

// maxPeriod bounds a reconciliation's period: a longer one is several
// runs, each of which reads a period's invoices and records in memory.
const maxPeriod = 31 * 24 * time.Hour

// periodFlags are the arguments that choose a reconciliation's period, as
// typed ("" when not given).
type periodFlags struct{ since, day, from, to string }

// periodArg checks a reconciliation's period (docs/interface.md §1): --since D,
// the last D up to now (1m to 31 days); --day YYYY-MM-DD, that UTC day,
// once it has ended; --from and --to, RFC 3339 times not in the future,
// from before to, at most 31 days apart; at most one of the three; none,
// the previous UTC day (what the daily CronJob reconciles).
func periodArg(f periodFlags, now time.Time) (order.Period, error) {
	given := 0
	for _, set := range []bool{f.since != "", f.day != "", f.from != "" || f.to != ""} {
		if set {
			given++
		}
	}
	now = now.UTC()
	switch {
	case given > 1:
		return order.Period{}, errors.New("give one of --since D, --day YYYY-MM-DD, or --from and --to")
	case f.since != "":
		d, err := time.ParseDuration(f.since)
		if err != nil || len(f.since) > maxTimeArg {
			return order.Period{}, errors.New("--since D: not a duration (24h, 90m)")
		}
		if d < time.Minute || d > maxPeriod {
			return order.Period{}, fmt.Errorf("--since D: %s, want 1m to %s", d, maxPeriod)
		}
		return order.Period{From: now.Add(-d), To: now}, nil
	case f.day != "":
		day, err := time.Parse(time.DateOnly, f.day)
		switch {
		case err != nil || len(f.day) != len(time.DateOnly):
			return order.Period{}, errors.New("--day: not a date (YYYY-MM-DD)")
		case day.Add(24 * time.Hour).After(now):
			return order.Period{}, fmt.Errorf("--day: %s has not ended (UTC); --since D reconciles the day so far", f.day)
		case day.Before(time.Unix(0, 0)):
			return order.Period{}, fmt.Errorf("--day: %s is before 1970", f.day)
		}
		return order.Period{From: day, To: day.Add(24 * time.Hour)}, nil
	case f.from != "" || f.to != "":
		if f.from == "" || f.to == "" {
			return order.Period{}, errors.New("--from and --to go together")
		}
		from, err := sinceArg("--from", f.from, now)
		if err != nil {
			return order.Period{}, err
		}
		to, err := sinceArg("--to", f.to, now)
		if err != nil {
			return order.Period{}, err
		}
		switch {
		case !from.Before(to):
			return order.Period{}, errors.New("--from: not before --to")
		case to.Sub(from) > maxPeriod:
			return order.Period{}, fmt.Errorf("--from, --to: %s apart, at most %s", to.Sub(from), maxPeriod)
		}
		return order.Period{From: from.UTC(), To: to.UTC()}, nil
	}
	today := now.Truncate(24 * time.Hour)
	return order.Period{From: today.Add(-24 * time.Hour), To: today}, nil
}
