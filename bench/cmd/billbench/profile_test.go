package main

import (
	"math"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// A sample goes to the stage of its innermost billing frame, whatever the
// library frames inside it; a stack without one goes by its library.
func TestStages(t *testing.T) {
	fns := map[string]*profile.Function{}
	loc := func(name string) *profile.Location {
		f, ok := fns[name]
		if !ok {
			f = &profile.Function{ID: uint64(len(fns) + 1), Name: name}
			fns[name] = f
		}
		return &profile.Location{ID: f.ID, Line: []profile.Line{{Function: f}}}
	}
	stack := func(v int64, innermostFirst ...string) *profile.Sample {
		s := &profile.Sample{Value: []int64{1, v}}
		for _, n := range innermostFirst {
			s.Location = append(s.Location, loc(n))
		}
		return s
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			// pgx inside the grouped reserve, inside the consumer: reserve.
			stack(40, "runtime.mallocgc", "github.com/jackc/pgx/v5.(*Conn).SendBatch",
				"github.com/acme/billing/infra/postgres.(*Store).reserveGroup.func2",
				"github.com/acme/billing/adapters/in/kafka.(*Consumer).process"),
			// The gateway client's request, inside the billing service's charge.
			stack(30, "encoding/json.Marshal", "github.com/acme/billing/adapters/out/http.(*Client).Charge",
				"github.com/acme/billing/core/order.(*BillingService).charge"),
			// net/http's transport goroutine: no billing frame.
			stack(20, "syscall.Syscall", "net/http.(*persistConn).writeLoop"),
			// A log line of the consumer.
			stack(5, "log/slog.(*Logger).Info", "github.com/acme/billing/adapters/in/kafka.(*Consumer).final"),
			stack(5, "runtime.scanobject", "runtime.gcBgMarkWorker"),
			stack(0, "never.counted"),
		},
	}
	got, err := stages(p, "cpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"reserve": 0.4, "gateway call": 0.5, "metrics and logs": 0.05, "runtime: GC": 0.05}
	if len(got) != len(want) {
		t.Errorf("stages %+v, want %v", got, want)
	}
	for _, s := range got {
		if w, ok := want[s.stage]; !ok || math.Abs(s.share-w) > 1e-9 {
			t.Errorf("stage %s: share %v, want %v", s.stage, s.share, w)
		}
		if s.stage == "reserve" && (len(s.top) != 2 || s.top[0].share != 0.4) {
			t.Errorf("reserve's top functions %+v, want two of 40%%", s.top)
		}
	}
	if _, err := stages(p, "alloc_space", 2); err == nil {
		t.Error("stages of a sample type the profile lacks: no error")
	}
}

func TestCellNames(t *testing.T) {
	for c, want := range map[cell]string{
		{inFlight: 64}: "0ms/64",
		{latency: 20 * time.Millisecond, inFlight: 256}: "20ms/256",
		{inFlight: 64, dup: true}:                       "0ms/dup/64",
		{inFlight: 256, conns: 32}:                      "0ms/256/32conns",
	} {
		if got := cellName(c); got != want {
			t.Errorf("cellName(%v) = %q, want %q", c, got, want)
		}
	}
	if got := profileFileName(cell{inFlight: 256, conns: 32}); got != "0ms-256-32conns" {
		t.Errorf("profileFileName = %q", got)
	}
	o, err := parseOptions([]string{"-cells", "0ms/64, 0 ms/dup/64"})
	if err != nil || len(o.only) != 2 || o.only[1] != "0ms/dup/64" {
		t.Errorf("-cells: %v %v", o.only, err)
	}
}
