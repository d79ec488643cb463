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

// appendArrayHeader appends the header of a one-dimensional array of n
// elements of type elem, lower bound 1, without NULLs (setNull marks one).
// Lengths are written as pgx writes them, without a check: a group's arrays
// hold at most the store's group size of values, each from an event of at
// most order.MaxEventBytes.
func appendArrayHeader(buf []byte, elem uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // has NULLs
	buf = binary.BigEndian.AppendUint32(buf, elem)
	//nolint:gosec // G115: n is a group's size, far below 2^31 (see above)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

// setNull marks the array whose header starts at start as holding a NULL.
func setNull(buf []byte, start int) {
	binary.BigEndian.PutUint32(buf[start+4:], 1)
}

// nullElement is an element's length for NULL.
const nullElement = math.MaxUint32 // -1 as an int32

type textArrayPlan struct{}

func (textArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]string)
	if a == nil {
		// NULL. pgx's Map.Encode sends a nil slice as NULL before it asks
		// any plan; this is for a caller of the plan itself.
		return nil, nil
	}
	buf = appendArrayHeader(buf, pgtype.TextOID, len(a))
	for _, s := range a {
		//nolint:gosec // G115: a value of an event, far below 2^31 bytes (appendArrayHeader)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf, nil
}

type int8ArrayPlan struct{}

func (int8ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]int64)
	if a == nil {
		return nil, nil
	}
	buf = appendArrayHeader(buf, pgtype.Int8OID, len(a))
	for _, n := range a {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		//nolint:gosec // G115: the two's complement bits are int8's binary form
		buf = binary.BigEndian.AppendUint64(buf, uint64(n))
	}
	return buf, nil
}

type uuidArrayPlan struct{}

func (uuidArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]pgtype.UUID)
	if a == nil {
		return nil, nil
	}
	start := len(buf)
	buf = appendArrayHeader(buf, pgtype.UUIDOID, len(a))
	for _, u := range a {
		if !u.Valid {
			setNull(buf, start)
			buf = binary.BigEndian.AppendUint32(buf, nullElement)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, u.Bytes[:]...)
	}
	return buf, nil
}
