package reply

import (
	"bytes"
	"testing"
)

// BenchmarkReadReply is the reading of a charge's reply body alone, as
// the stub gateway sends it.
func BenchmarkReadReply(b *testing.B) {
	raw := []byte(`{"charge_id":"ch_01JEXAMPLE0000000000000000","status":"succeeded"}`)
	r := bytes.NewReader(raw)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(raw)
		body, err := Read(r, MaxBytes)
		if err != nil || !body.Succeeded() {
			b.Fatalf("Read: %+v, %v", body, err)
		}
	}
}
