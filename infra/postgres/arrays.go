package postgres

import (
	"encoding/binary"
	"math"

	"github.com/jackc/pgx/v5/pgtype"
)

// fastArrayCodec is pgx's ArrayCodec for text[], int8[] and uuid[], but
// that it encodes the group statements' parameters ([]string, []int64,
// []pgtype.UUID) in Postgres's binary array format itself. pgx's own plan
// boxes every element into an interface (FlatArray.Index) and looks its
// encoder up through reflection: a heap allocation per element of every
// array of every group, the largest single source of the service's
// allocations in make bench's profiles. The bytes are pgx's, byte for byte
// (TestFastArraysEncodeAsPgx); any other value, the text format and every
// scan are left to the ArrayCodec.
type fastArrayCodec struct {
	*pgtype.ArrayCodec
}

func (c fastArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch elem := c.ElementType.OID; value.(type) {
		case []string:
			if elem == pgtype.TextOID {
				return textArrayPlan{}
			}
		case []int64:
			if elem == pgtype.Int8OID {
				return int8ArrayPlan{}
			}
		case []pgtype.UUID:
			if elem == pgtype.UUIDOID {
				return uuidArrayPlan{}
			}
		}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// fastArrayOIDs are the array types fastArrayCodec takes over.
var fastArrayOIDs = [...]uint32{pgtype.TextArrayOID, pgtype.Int8ArrayOID, pgtype.UUIDArrayOID}

// installFastArrays puts fastArrayCodec in m for text[], int8[] and uuid[].
// A connection's map is its own, so the store installs it on each
// connection it sends groups on; a map that has it already, or another
// codec for one of these types, keeps what it has.
func installFastArrays(m *pgtype.Map) {
	for _, oid := range fastArrayOIDs {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: fastArrayCodec{ac}})
		}
	}
}

// appendArray appends a as a one-dimensional array of elem in Postgres's
// binary format, lower bound 1: the header, then each element as its
// length and the bytes appendElem appends for it (false: the element is
// NULL, and the header says the array holds one). A nil a is NULL: pgx's
// Map.Encode sends a nil slice as NULL before it asks any plan, so only a
// caller of a plan itself meets that case. Lengths are written as pgx
// writes them, without a check: a group's arrays hold at most the store's
// group size of values, each from an event of at most order.MaxEventBytes.
func appendArray[T any](buf []byte, a []T, elem uint32, appendElem func([]byte, T) ([]byte, bool)) []byte {
	if a == nil {
		return nil
	}
	start := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // holds a NULL: set below
	buf = binary.BigEndian.AppendUint32(buf, elem)
	//nolint:gosec // G115: a group's size, far below 2^31 (see above)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, v := range a {
		at := len(buf)
		buf = binary.BigEndian.AppendUint32(buf, 0) // the length: set below
		var valid bool
		if buf, valid = appendElem(buf, v); !valid {
			buf = buf[:at+4] // what appendElem wrote is no value
			binary.BigEndian.PutUint32(buf[start+4:], 1)
			binary.BigEndian.PutUint32(buf[at:], math.MaxUint32) // -1 as an int32
			continue
		}
		//nolint:gosec // G115: one value of an event, far below 2^31 bytes (see above)
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	return buf
}

type textArrayPlan struct{}

func (textArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return appendArray(buf, value.([]string), pgtype.TextOID, func(buf []byte, s string) ([]byte, bool) {
		return append(buf, s...), true
	}), nil
}

type int8ArrayPlan struct{}

func (int8ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return appendArray(buf, value.([]int64), pgtype.Int8OID, func(buf []byte, n int64) ([]byte, bool) {
		//nolint:gosec // G115: the two's complement bits are int8's binary form
		return binary.BigEndian.AppendUint64(buf, uint64(n)), true
	}), nil
}

type uuidArrayPlan struct{}

func (uuidArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	return appendArray(buf, value.([]pgtype.UUID), pgtype.UUIDOID, func(buf []byte, u pgtype.UUID) ([]byte, bool) {
		return append(buf, u.Bytes[:]...), u.Valid
	}), nil
}
