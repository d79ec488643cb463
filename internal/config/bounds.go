package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Bounds that other code relies on.
const (
	// MaxPaymentTimeout is the longest BILLING_PAYMENT_TIMEOUT: an attempt
	// lives at most this plus order.AttemptMargin, whatever the
	// configuration, which is how long a writer that records no attempt
	// must be assumed to be at the gateway.
	MaxPaymentTimeout = time.Minute
	// MaxRetryTiers is the most retry tiers BILLING_RETRY_DELAYS may name:
	// each is a topic and a consumer group of its own in every process.
	MaxRetryTiers = 10
)

// Kind is what a bound measures.
type Kind int

// Kinds of bounds.
const (
	KindDuration Kind = iota // a time.Duration, or a list of Duration
	KindCount                // an int
	KindBytes                // a Bytes
)

// A Bound is the range of one duration or count (docs/interface.md §2): a value
// outside it stops the program at start, naming the variable and the
// bounds.
type Bound struct {
	Var      string
	Kind     Kind
	Min, Max int64 // nanoseconds for a duration; of each entry for a list
	// MinEntries and MaxEntries bound the length of a list (0, 0: a single
	// value).
	MinEntries, MaxEntries int
	// ZeroDerived: unset (0) means the service derives the value; a value
	// that is set is bounded.
	ZeroDerived bool
}

// Bounds is the table of every duration and count the configuration has,
// in declaration order; `billing run -h` and README.md print it, and
// ValidateParts checks each value against it. A new duration or count
// needs a row (TestEveryDurationAndCountIsBounded).
func Bounds() []Bound {
	return []Bound{
		// A tier's delay is how long its records wait: below 100 ms it is
		// no delay, beyond a day the record outlives any sensible look at
		// the DLQ; each tier costs a topic and a consumer group.
		{Var: "BILLING_RETRY_DELAYS", Kind: KindDuration, Min: int64(100 * time.Millisecond), Max: int64(24 * time.Hour),
			MinEntries: 1, MaxEntries: MaxRetryTiers},
		// 12 replicas × 64 already exceed any single Postgres's
		// max_connections; the store groups what waits (README.md,
		// Configuration), so more connections buy nothing.
		// Below 1 MiB a batch of a few records of the largest event (1 MiB,
		// docs/interface.md §3) is not read; the process's decode budget is twice
		// the value (internal/app), which at 256 MiB is already twice the
		// Deployment's memory limit. Unset (a Config built in code): the
		// default.
		{Var: "BILLING_KAFKA_MAX_BATCH_BYTES", Kind: KindBytes, Min: MinKafkaMaxBatchBytes, Max: MaxKafkaMaxBatchBytes, ZeroDerived: true},
		{Var: "BILLING_DB_MAX_CONNS", Kind: KindCount, Min: 1, Max: 64, ZeroDerived: true},
		// Below 100 ms no gateway answers; beyond a minute an attempt holds
		// its invoice (and a shutdown waits) for longer than the pod's grace.
		{Var: "BILLING_PAYMENT_TIMEOUT", Kind: KindDuration, Min: int64(100 * time.Millisecond), Max: int64(MaxPaymentTimeout)},
		// Below a second the completer (which passes four times per value)
		// queries Postgres in a loop; beyond a day a stuck invoice waits
		// longer than a person would.
		{Var: "BILLING_PENDING_RESUME_AFTER", Kind: KindDuration, Min: int64(time.Second), Max: int64(24 * time.Hour)},
		// Gateways keep keys for hours to days (Stripe: 24 h); under an hour
		// the completer has no room before half of it, and a TTL beyond 30
		// days is a gateway no one has.
		{Var: "BILLING_GATEWAY_KEY_TTL", Kind: KindDuration, Min: int64(time.Hour), Max: int64(720 * time.Hour)},
		// Each event in flight holds its record, a goroutine and an idle
		// gateway connection; `make bench` measures up to 256.
		{Var: "BILLING_MAX_IN_FLIGHT", Kind: KindCount, Min: 1, Max: 1024},
		// Under an hour a redelivery after a rebalance could miss its dedup
		// row; beyond 90 days the table only grows (invoice.order_id guards
		// an order for ever).
		{Var: "BILLING_DEDUP_RETENTION", Kind: KindDuration, Min: int64(time.Hour), Max: int64(2160 * time.Hour)},
		// A drain needs a moment; the pod's grace period must exceed it
		// (deploy/base: 40 s for the default 25 s).
		{Var: "BILLING_SHUTDOWN_TIMEOUT", Kind: KindDuration, Min: int64(time.Second), Max: int64(10 * time.Minute)},
	}
}

// boundOf returns the bound of the variable called name.
func boundOf(name string) (Bound, bool) {
	for _, b := range Bounds() {
		if b.Var == name {
			return b, true
		}
	}
	return Bound{}, false
}

// String is the bound as `billing run -h` prints it: "100ms..60s", and for
// a list "1..10 of 100ms..24h".
func (b Bound) String() string {
	s := b.format(b.Min) + ".." + b.format(b.Max)
	if b.MaxEntries > 0 {
		s = fmt.Sprintf("%d..%d of %s", b.MinEntries, b.MaxEntries, s)
	}
	return s
}

// format writes v in the bound's unit.
func (b Bound) format(v int64) string {
	switch b.Kind {
	case KindDuration:
		return formatDuration(time.Duration(v))
	case KindBytes:
		return Bytes(v).String()
	}
	return strconv.FormatInt(v, 10)
}

// problem says why v is outside b, "" when it is within.
func (b Bound) problem(v int64) string {
	if v < b.Min || v > b.Max {
		return fmt.Sprintf("%s is not between %s and %s", b.format(v), b.format(b.Min), b.format(b.Max))
	}
	return ""
}

// checkBounds checks each field of the part p (a struct value) that has a
// row in Bounds.
func checkBounds(p reflect.Value) error {
	for i := range p.NumField() {
		b, ok := boundOf(p.Type().Field(i).Tag.Get("envconfig"))
		if !ok {
			continue
		}
		f := p.Field(i)
		if f.Kind() == reflect.Slice {
			if n := f.Len(); n < b.MinEntries || n > b.MaxEntries {
				return &Error{b.Var, fmt.Sprintf("%d entries, want %d to %d", n, b.MinEntries, b.MaxEntries)}
			}
			for j := range f.Len() {
				if why := b.problem(f.Index(j).Int()); why != "" {
					return &Error{b.Var, fmt.Sprintf("entry %d: %s", j+1, why)}
				}
			}
			continue
		}
		if v := f.Int(); !b.ZeroDerived || v != 0 {
			if why := b.problem(v); why != "" {
				return &Error{b.Var, why}
			}
		}
	}
	return nil
}

// formatDuration writes d as a person would: "1m", "2160h", "100ms", not
// time.Duration's "1m0s" and "2160h0m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
