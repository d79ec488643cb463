// Package tracectx carries a W3C Trace Context traceparent
// (https://www.w3.org/TR/trace-context/) from an incoming Kafka header into
// logs and onward HTTP calls, without depending on OpenTelemetry: billing
// only propagates the trace, it records no spans of its own.
package tracectx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Header is the name of the HTTP header (and Kafka record header) that
// carries a traceparent.
const Header = "traceparent"

// FlagSampled is the sampled bit of TraceParent.Flags.
const FlagSampled byte = 0x01

// The layout of a version-00 traceparent:
// "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>".
const (
	v00Len       = 55
	traceIDStart = 3
	spanIDStart  = traceIDStart + 32 + 1
	flagsStart   = spanIDStart + 16 + 1
)

// TraceParent is a parsed traceparent: the trace it belongs to, the span
// (parent-id) that sent it, and the trace flags.
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// Parse parses s as a traceparent header value, strictly to the W3C
// specification. Version 00 must be exactly 55 characters of lower-case hex
// and dashes, with neither the trace-id nor the parent-id all zeros. Version
// ff is invalid. A higher version is parsed as the specification asks of a
// version-00 implementation: at least 55 characters, the version-00 fields
// where version 00 has them, and either nothing or a dash after the flags; of
// its flags only the sampled bit is kept, since only version 00 defines them.
// White space is not trimmed: the HTTP layer does that for headers, and a
// Kafka header carrying it is malformed. ok is false for anything invalid;
// callers then start without a parent, as the specification says.
func Parse(s string) (tp TraceParent, ok bool) {
	if len(s) < v00Len {
		return TraceParent{}, false
	}
	var version [1]byte
	if !decodeLowerHex(version[:], s[0:2]) || version[0] == 0xff {
		return TraceParent{}, false
	}
	if version[0] == 0 && len(s) != v00Len {
		return TraceParent{}, false
	}
	if len(s) > v00Len && s[v00Len] != '-' {
		return TraceParent{}, false
	}
	if s[2] != '-' || s[spanIDStart-1] != '-' || s[flagsStart-1] != '-' {
		return TraceParent{}, false
	}
	var flags [1]byte
	if !decodeLowerHex(tp.TraceID[:], s[traceIDStart:spanIDStart-1]) ||
		!decodeLowerHex(tp.SpanID[:], s[spanIDStart:flagsStart-1]) ||
		!decodeLowerHex(flags[:], s[flagsStart:v00Len]) {
		return TraceParent{}, false
	}
	if isZero(tp.TraceID[:]) || isZero(tp.SpanID[:]) {
		return TraceParent{}, false
	}
	tp.Flags = flags[0]
	if version[0] != 0 {
		tp.Flags &= FlagSampled
	}
	return tp, true
}

// String formats tp as a version-00 traceparent header value.
func (tp TraceParent) String() string {
	b := make([]byte, 0, v00Len)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tp.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, tp.SpanID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{tp.Flags})
	return string(b)
}

// TraceIDString returns the trace-id as 32 lower-case hex digits, the form
// log lines and tracing back ends search for.
func (tp TraceParent) TraceIDString() string { return hex.EncodeToString(tp.TraceID[:]) }

// SpanIDString returns the parent-id as 16 lower-case hex digits.
func (tp TraceParent) SpanIDString() string { return hex.EncodeToString(tp.SpanID[:]) }

// Sampled reports whether the sampled flag is set.
func (tp TraceParent) Sampled() bool { return tp.Flags&FlagSampled != 0 }

// Child returns the traceparent for a call made on behalf of tp: the same
// trace and flags, with a new random, non-zero span id standing for that call.
func Child(tp TraceParent) TraceParent {
	child := tp
	for {
		_, _ = rand.Read(child.SpanID[:]) // crypto/rand.Read never fails (Go 1.24+)
		if !isZero(child.SpanID[:]) && child.SpanID != tp.SpanID {
			return child
		}
	}
}

// ctxKey is the context key of the TraceParent; a private type, so no other
// package can collide with it.
type ctxKey struct{}

// NewContext returns a copy of ctx that carries tp.
func NewContext(ctx context.Context, tp TraceParent) context.Context {
	return context.WithValue(ctx, ctxKey{}, tp)
}

// FromContext returns the TraceParent that ctx carries, if any.
func FromContext(ctx context.Context) (TraceParent, bool) {
	tp, ok := ctx.Value(ctxKey{}).(TraceParent)
	return tp, ok
}

// decodeLowerHex decodes src, which must be exactly 2*len(dst) lower-case
// hex digits, into dst. encoding/hex accepts upper case too, which the
// specification forbids, hence this.
func decodeLowerHex(dst []byte, src string) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := lowerHexDigit(src[2*i])
		lo, ok2 := lowerHexDigit(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func lowerHexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
