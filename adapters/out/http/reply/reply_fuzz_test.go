package reply

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadReply: Read never panics, and on every JSON object it reads
// what encoding/json reads: the same status, charge_id and error members
// (the last of a name given twice), strings as encoding/json decodes them.
func FuzzReadReply(f *testing.F) {
	for _, seed := range []string{
		`{"charge_id":"ch_1","status":"succeeded"}`,
		`{"status":"succeeded","charge_id":"ch_\u0000x","error":null}`,
		`{"charge_id":12,"status":"succeeded","extra":{"a":[1,"]}",{"b":null}]}}`,
		`{"error":"in_progress","message":"a \"quoted\" \\ text"}`,
		`{"status":"succeeded","status":"failed"}`,
		`{"st\u0061tus":"succeeded"}`,
		` { "charge_id" : "` + strings.Repeat("A", 3000) + `" , "status" : "succeeded" } `,
		`{"charge_id":"ch_` + "\xff\xfe" + `"}`,
		`{"charge_id":"` + strings.Repeat("c", maxMemberBytes-2) + `"}`, // the longest kept
		`{"charge_id":"` + strings.Repeat("c", maxMemberBytes-1) + `"}`,
		`{"charge_id":`,
		`[1,2]`,
		`null`,
		`{"a":1} x`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Read(bytes.NewReader(b), int64(len(b))+1)
		var obj map[string]json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &obj) != nil || obj == nil {
			return // not a JSON object: Read may fail or read leniently
		}
		if err != nil {
			t.Fatalf("Read(%q): %v, want the object read", b, err)
		}
		for name, m := range map[string]Member{"status": got.Status, "charge_id": got.ChargeID, "error": got.ErrCode} {
			if want := memberOf(obj[name]); m != want {
				t.Errorf("Read(%q): %s = %+v, want %+v", b, name, m, want)
			}
		}
	})
}

// memberOf is what Read should make of raw, as encoding/json reads it.
func memberOf(raw json.RawMessage) Member {
	raw = bytes.TrimSpace(raw)
	switch {
	case raw == nil, string(raw) == "null":
		return Member{Kind: Absent}
	case raw[0] != '"':
		return Member{Kind: NotString}
	case len(raw) > maxMemberBytes:
		return Member{Kind: TooLong}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return Member{Kind: BadString}
	}
	return Member{Kind: String, Value: s}
}
