package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
)

// FuzzDecode checks, for any input: Decode never panics; it fails only with
// a short one-line *order.ValidationError; on success the event keeps every
// invariant and survives Encode/Decode unchanged; and the hand-written
// top-level walk (scanObject) agrees with encoding/json's Decoder on what the
// members are.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validEventJSON))
	f.Add([]byte(`{"event_id":"0190F8A4-6C1E-7B3A-9D2F-3C4E5A6B7C8D","event_type":"OrderConfirmed","occurred_at":"2026-12-02T10:00:00.123456789+05:30","order_id":"o\u00e9\ud83d\ude00","customer_id":"c","total_amount":1,"currency":null,"x":[{"y":"}]"}]}`))
	f.Add([]byte(`{"event_id":"0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d","event_type":"OrderConfirmed","occurred_at":"2026-12-02T10:00:00Z","order\u005fid":"ord-1","customer_id":"c","total_amount":9223372036854775807}`))
	for _, rec := range ordertest.BadRecordCorpus() {
		if len(rec.Value) <= 4096 { // mutating a 1 MiB input only slows the fuzzer
			f.Add(rec.Value)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		evt, err := Decode(raw, defaultCurrency)
		if err != nil {
			var ve *order.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Decode() error = %T %v, want a *order.ValidationError", err, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || len(msg) > 120 {
				t.Fatalf("Decode() error = %q: want one line of at most 120 bytes", msg)
			}
		} else {
			checkInvariants(t, evt)
			enc, err := Encode(evt)
			if err != nil {
				t.Fatalf("Encode(%+v) error = %v", evt, err)
			}
			again, err := Decode(enc, defaultCurrency)
			if err != nil {
				t.Fatalf("Decode(Encode()) error = %v for %s", err, enc)
			}
			if again != evt {
				t.Fatalf("Decode(Encode(e)) = %+v, want %+v", again, evt)
			}
		}
		compareWithReference(t, raw)
	})
}

// checkInvariants fails t when evt breaks a rule of docs/interface.md §3.
func checkInvariants(t *testing.T, evt order.OrderConfirmedEvent) {
	t.Helper()
	switch {
	case evt.EventID.Version() != 7:
		t.Fatalf("event id %s is version %d", evt.EventID, evt.EventID.Version())
	case order.CheckEventID(evt.EventID) != "":
		t.Fatalf("event id %s: %s", evt.EventID, order.CheckEventID(evt.EventID))
	case evt.EventType != order.EventTypeOrderConfirmed:
		t.Fatalf("event type %q", evt.EventType)
	case evt.OccurredAt.Location().String() != "UTC":
		t.Fatalf("occurred_at %v is not in UTC", evt.OccurredAt)
	case evt.TotalAmount <= 0:
		t.Fatalf("amount %d", evt.TotalAmount)
	case !order.ValidCurrency(evt.Currency):
		t.Fatalf("currency %q", evt.Currency)
	}
	for _, id := range []string{evt.OrderID, evt.CustomerID} {
		if len(id) == 0 || len(id) > order.MaxIDBytes || !utf8.ValidString(id) || strings.TrimSpace(id) == "" {
			t.Fatalf("id %q breaks the length, UTF-8 or blank rule", id)
		}
		for _, r := range id {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("id %q holds control character %U", id, r)
			}
		}
	}
}

// unpairedSurrogate finds a \u escape of a surrogate, which scanObject and
// encoding/json treat differently on purpose (see unquote).
var unpairedSurrogate = regexp.MustCompile(`(?i)\\ud[89a-f]`)

// compareWithReference checks scanObject against a reference built on
// json.Decoder.Token: both must accept or refuse the same values, and agree
// on the raw value of every known member.
func compareWithReference(t *testing.T, raw []byte) {
	t.Helper()
	if checkValue(raw) != nil {
		return // scanObject is only ever called on what checkValue accepts
	}
	got, gotErr := scanObject(raw)
	want, wantErr := referenceMembers(raw)
	if unpairedSurrogate.Match(raw) {
		return // encoding/json replaces them with U+FFFD; Decode refuses them
	}
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("scanObject() error = %v, reference error = %v, for %q", gotErr, wantErr, raw)
	}
	if gotErr != nil {
		return
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Fatalf("member %d: scanObject() = %q, reference = %q, for %q", i, got[i], want[i], raw)
		}
	}
}

// referenceMembers is the slow, obviously right version of scanObject.
func referenceMembers(raw []byte) (members, error) {
	var m members
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return m, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return m, errors.New("not an object")
	}
	names := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, err
		}
		name := tok.(string)
		if names[name] {
			return m, errors.New("duplicate " + name)
		}
		names[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return m, err
		}
		if f := knownField([]byte(name)); f >= 0 {
			m[f] = v
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return m, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, errors.New("data after the object")
	}
	return m, nil
}

// TestFuzzSeedsClassified keeps the checked-in seed corpus honest: files
// named valid_* decode, files named bad_* do not.
func TestFuzzSeedsClassified(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var valid, bad int
	for _, path := range paths {
		name := filepath.Base(path)
		wantOK := strings.HasPrefix(name, "valid_")
		if !wantOK && !strings.HasPrefix(name, "bad_") {
			continue // a crasher the fuzzer wrote; FuzzDecode itself replays it
		}
		raw := readSeed(t, path)
		_, err := Decode(raw, defaultCurrency)
		if gotOK := err == nil; gotOK != wantOK {
			t.Errorf("%s: Decode() error = %v, want success %v", name, err, wantOK)
		}
		if wantOK {
			valid++
		} else {
			bad++
		}
	}
	if valid < 5 || bad < 5 {
		t.Errorf("seed corpus has %d valid and %d bad files, want at least 5 of each", valid, bad)
	}
}

// readSeed reads a one-value "go test fuzz v1" file holding a []byte.
func readSeed(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, body, ok := strings.Cut(string(data), "\n")
	lit, okPrefix := strings.CutPrefix(strings.TrimSpace(body), "[]byte(")
	lit, okSuffix := strings.CutSuffix(lit, ")")
	if !ok || header != "go test fuzz v1" || !okPrefix || !okSuffix {
		t.Fatalf("%s: not a one-value go test fuzz v1 file", path)
	}
	s, err := strconv.Unquote(lit)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}
