package postgres

import (
	"bytes"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"pgregory.net/rapid"
)

// fastMap is a connection's type map once the store has sent a group on it.
func fastMap() *pgtype.Map {
	m := pgtype.NewMap()
	installFastArrays(m)
	return m
}

// The arrays the store encodes itself are the bytes pgx sends for them:
// NULL for a nil slice, an empty array for an empty one, any string (NUL
// and invalid UTF-8 included: pgx sends them as they are), NULL elements
// of uuid[].
func TestFastArraysEncodeAsPgx(t *testing.T) {
	t.Parallel()
	fast, pgx := fastMap(), pgtype.NewMap()
	same := func(t *rapid.T, oid uint32, v any) {
		want, wantErr := pgx.Encode(oid, pgtype.BinaryFormatCode, v, []byte("prefix"))
		got, err := fast.Encode(oid, pgtype.BinaryFormatCode, v, []byte("prefix"))
		if err != nil || wantErr != nil {
			t.Fatalf("Encode(%T): %v, pgx's: %v", v, err, wantErr)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("Encode(%#v) =\n%q, pgx's\n%q", v, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		anyBytes := rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "bytes")) })
		strs := rapid.SliceOfN(anyBytes, 0, 8).Draw(t, "strs")
		if rapid.Bool().Draw(t, "nil strs") {
			strs = nil
		}
		same(t, pgtype.TextArrayOID, strs)

		ints := rapid.SliceOfN(rapid.Int64(), 0, 8).Draw(t, "ints")
		if rapid.Bool().Draw(t, "nil ints") {
			ints = nil
		}
		same(t, pgtype.Int8ArrayOID, ints)

		n := rapid.IntRange(0, 8).Draw(t, "uuids")
		var uuids []pgtype.UUID
		if !rapid.Bool().Draw(t, "nil uuids") {
			uuids = make([]pgtype.UUID, n)
			for i := range uuids {
				copy(uuids[i].Bytes[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "uuid"))
				uuids[i].Valid = rapid.IntRange(0, 3).Draw(t, "valid") > 0
			}
		}
		same(t, pgtype.UUIDArrayOID, uuids)
	})
}

// The store's own plans are the ones a connection's map picks, and they
// read back through pgx's scan of the same type: scanning, the text format
// and other Go types stay pgx's. Not parallel: AllocsPerRun counts the
// whole process's allocations.
func TestFastArraysArePickedAndReadBack(t *testing.T) {
	fast, pgx := fastMap(), pgtype.NewMap()
	strs := make([]string, 64)
	for i := range strs {
		strs[i] = "ord-" + string(rune('a'+i%26))
	}
	encode := func(m *pgtype.Map) float64 {
		return testing.AllocsPerRun(100, func() {
			if _, err := m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, strs, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	if f, p := encode(fast), encode(pgx); f >= p/4 {
		t.Errorf("a 64-element text[] costs %v allocations, pgx's plan %v: the store's plan is not the one picked", f, p)
	}

	raw, err := fast.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, strs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var back []string
	if err := fast.Scan(pgtype.TextArrayOID, pgtype.BinaryFormatCode, raw, &back); err != nil || !slices.Equal(back, strs) {
		t.Errorf("Scan = %q, %v; want %q", back, err, strs)
	}
	text, err := fast.Encode(pgtype.TextArrayOID, pgtype.TextFormatCode, strs[:2], nil)
	if err != nil || string(text) != "{ord-a,ord-b}" {
		t.Errorf("text format = %q, %v; want pgx's {ord-a,ord-b}", text, err)
	}
	// Installed again (every group's connection is), the map is left as
	// it is: its plans stay memoized.
	before, _ := fast.TypeForOID(pgtype.TextArrayOID)
	installFastArrays(fast)
	if after, _ := fast.TypeForOID(pgtype.TextArrayOID); after != before {
		t.Error("a second install registered the type again")
	}
}
