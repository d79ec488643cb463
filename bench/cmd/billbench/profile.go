package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The profiles of a cell come from a run of their own, with BILLING_PPROF
// on, after the measured runs: the figures of the table are measured with
// profiling off, and this run only says where the CPU and the allocations
// went. Each profile is kept beside the report (profiles/<cell>.cpu.pprof
// and .alloc.pprof, for `go tool pprof`) and summarised per stage of an
// event's path.

// profiling asks runService for profiles: a CPU profile of seconds, and
// the allocations made meanwhile, taken once profileFrom of the run's
// events are final (past the start: connections, first fetches).
type profiling struct {
	seconds int
	dir     string // where the .pprof files go
	file    string // their base name, the cell's
}

const profileFrom = 0.05

// maxProfileSeconds keeps a CPU profile under the service's HTTP write
// timeout (30 s, internal/app), past which net/http/pprof refuses it.
const maxProfileSeconds = 25

// cellProfile is what the profiled run of a cell gave.
type cellProfile struct {
	seconds   int
	cpuFile   string
	allocFile string
	cpu       []stageShare // of CPU time
	alloc     []stageShare // of bytes allocated
	problem   string       // why there is no profile ("" when there is)
}

// stageShare is one stage's share of a profile, and its heaviest
// functions.
type stageShare struct {
	stage string
	share float64 // of the profile's total, 0..1
	top   []funcShare
}

// funcShare is a function's cumulative share of a profile's total (the
// samples whose stack holds it), counted over the samples of its stage.
type funcShare struct {
	name  string
	share float64
}

// A stage is matched by the name of the innermost function of billing's own
// (or of the libraries it logs and measures with) in a sample's stack, so
// that the work a library does for billing (pgx, encoding/json, the
// allocator and the GC assists it triggers) is charged to the stage that
// asked for it. A stack without such a function (a goroutine of net/http's
// transport or of kafka-go, the runtime's own) is matched by the library
// patterns, innermost first too.
var (
	stageNames = []string{
		"fetch and decode", "dispatch", "reserve", "gateway call", "settle", "outbox and publish",
		"commit", "metrics and logs", "database grouping", "runtime: GC", "runtime: scheduler", "other",
	}
	billingPkg    = `^github\.com/acme/billing/`
	billingStages = []stagePattern{
		{"metrics and logs", `^(github\.com/acme/billing/internal/(metrics|telemetry)\.|log/slog\.|github\.com/prometheus/|go\.opentelemetry\.io/)`},
		{"commit", billingPkg + `adapters/in/kafka\.(\(\*Consumer\)\.commit|\(\*partState\))|` + billingPkg + `infra/kafka\..*(?i:commit|offset)`},
		{"outbox and publish", billingPkg + `(core/order\.(\(\*OutboxRelay\)|.*InvoiceEvent)|infra/postgres\..*(?i:outbox)|adapters/out/kafka\.)`},
		{"settle", billingPkg + `(infra/postgres\.\(\*Store\)\.(Settle|settleGroup|Release)|core/order\.\(\*BillingService\)\.release)`},
		{"reserve", billingPkg + `(infra/postgres\.\(\*Store\)\.(Reserve|reserveGroup|TakeAttempt)|infra/postgres\..*(?i:processed|dedup))`},
		{"gateway call", billingPkg + `(adapters/out/(http|stripe)\.|core/order\.\(\*BillingService\)\.charge)`},
		{"database grouping", billingPkg + `infra/postgres\.\(\*grouper`},
		{"fetch and decode", billingPkg + `(adapters/in/kafka\.(\(\*Consumer\)\.fetchLoop|.*(?i:source|reader|record|budget|batch))|core/order\.(?i:decode))`},
		{"dispatch", billingPkg + `(adapters/in/kafka\.|core/order\.\(\*BillingService\))`},
	}
	libraryStages = []stagePattern{
		{"gateway call", `^net/http\.(\(\*persistConn\)|\(\*Transport\)|\(\*Client\))`},
		{"metrics and logs", `^net/http\.\(\*conn\)\.serve`}, // the scrapes (and the profile requests)
		{"fetch and decode", `^github\.com/segmentio/kafka-go\.(\(\*[Rr]eader\)|\(\*Conn\)\.(ReadBatch|Fetch)|\(\*Batch\))`},
		{"outbox and publish", `^github\.com/segmentio/kafka-go\.(\(\*Writer\)|\(\*partitionWriter\)|\(\*writeBatch\))`},
		{"runtime: GC", `^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcStart|gcMarkDone|gcMarkTermination|gcDrain|markroot|scanobject|sweepone)`},
		{"runtime: scheduler", `^runtime\.(mcall|schedule|findRunnable|park_m|goexit0|sysmon|mstart|morestack|netpoll|usleep|futex|notesleep|stopm|startm|wakep|gopark)`},
	}
)

type stagePattern struct {
	stage string
	re    string
}

// stageMatcher holds the compiled patterns, and each function's stage once
// looked up.
type stageMatcher struct {
	billing, library []*regexp.Regexp
	bStage, lStage   []string
	memo             map[string][2]string
}

func newStageMatcher() *stageMatcher {
	m := &stageMatcher{memo: map[string][2]string{}}
	for _, p := range billingStages {
		m.billing, m.bStage = append(m.billing, regexp.MustCompile(p.re)), append(m.bStage, p.stage)
	}
	for _, p := range libraryStages {
		m.library, m.lStage = append(m.library, regexp.MustCompile(p.re)), append(m.lStage, p.stage)
	}
	return m
}

// of returns the stages a function's name matches: as billing's code, and
// as a library's ("" for none).
func (m *stageMatcher) of(fn string) (billing, library string) {
	if s, ok := m.memo[fn]; ok {
		return s[0], s[1]
	}
	for i, re := range m.billing {
		if re.MatchString(fn) {
			billing = m.bStage[i]
			break
		}
	}
	for i, re := range m.library {
		if re.MatchString(fn) {
			library = m.lStage[i]
			break
		}
	}
	m.memo[fn] = [2]string{billing, library}
	return billing, library
}

// stageOf is the stage of a stack (function names, innermost first) and the
// index of the frame that decided it (len(stack) for "other").
func (m *stageMatcher) stageOf(stack []string) (string, int) {
	for i, fn := range stack {
		if b, _ := m.of(fn); b != "" {
			return b, i
		}
	}
	for i, fn := range stack {
		if _, l := m.of(fn); l != "" {
			return l, i
		}
	}
	return "other", len(stack)
}

// stages splits a profile's sample type valueType (cpu, alloc_space) by
// stage; each stage's top functions are the heaviest of those at or inside
// the frame that decided its samples' stage, by their cumulative share.
func stages(p *profile.Profile, valueType string, top int) ([]stageShare, error) {
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == valueType {
			vi = i
		}
	}
	if vi < 0 {
		return nil, fmt.Errorf("profile has no %s samples", valueType)
	}
	m := newStageMatcher()
	var total int64
	byStage := map[string]int64{}
	funcs := map[string]map[string]int64{} // stage → function → value
	for _, s := range p.Sample {
		v := s.Value[vi]
		if v <= 0 {
			continue
		}
		var stack []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line { // innermost (inlined) first
				if ln.Function != nil {
					stack = append(stack, ln.Function.Name)
				}
			}
		}
		stage, at := m.stageOf(stack)
		total += v
		byStage[stage] += v
		if funcs[stage] == nil {
			funcs[stage] = map[string]int64{}
		}
		seen := map[string]bool{}
		for _, fn := range stack[:min(at+1, len(stack))] {
			if !seen[fn] {
				seen[fn] = true
				funcs[stage][fn] += v
			}
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("profile has no %s samples", valueType)
	}
	var out []stageShare
	for _, name := range stageNames {
		v := byStage[name]
		if v == 0 {
			continue
		}
		ss := stageShare{stage: name, share: float64(v) / float64(total)}
		for fn, fv := range funcs[name] {
			ss.top = append(ss.top, funcShare{fn, float64(fv) / float64(total)})
		}
		slices.SortFunc(ss.top, func(a, b funcShare) int {
			return cmp.Or(cmp.Compare(b.share, a.share), cmp.Compare(a.name, b.name))
		})
		ss.top = ss.top[:min(top, len(ss.top))]
		out = append(out, ss)
	}
	return out, nil
}

// takeProfiles fetches, from the service at base (http://host:port), the
// allocations so far, a CPU profile of prof.seconds, and the allocations
// again; it writes the CPU profile and the allocations between the two
// fetches (the difference, as `go tool pprof -diff_base` takes it) beside
// the report and summarises both.
func takeProfiles(ctx context.Context, base string, prof *profiling) cellProfile {
	out := cellProfile{seconds: prof.seconds}
	fail := func(err error) cellProfile { out.problem = err.Error(); return out }
	client := &http.Client{Timeout: time.Duration(prof.seconds)*time.Second + 30*time.Second}
	defer client.CloseIdleConnections()
	get := func(path string) (*profile.Profile, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
		}
		p, err := profile.ParseData(b)
		if err != nil {
			return nil, nil, fmt.Errorf("GET %s: %w", path, err)
		}
		return p, b, nil
	}
	before, _, err := get("/debug/pprof/allocs")
	if err != nil {
		return fail(err)
	}
	cpu, raw, err := get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", prof.seconds))
	if err != nil {
		return fail(err)
	}
	after, _, err := get("/debug/pprof/allocs")
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(prof.dir, 0o755); err != nil {
		return fail(err)
	}
	out.cpuFile = filepath.Join(prof.dir, prof.file+".cpu.pprof")
	if err := os.WriteFile(out.cpuFile, raw, 0o644); err != nil {
		return fail(err)
	}
	before.Scale(-1)
	alloc, err := profile.Merge([]*profile.Profile{after, before})
	if err != nil {
		return fail(fmt.Errorf("allocations between the fetches: %w", err))
	}
	alloc = alloc.Compact()
	out.allocFile = filepath.Join(prof.dir, prof.file+".alloc.pprof")
	f, err := os.Create(out.allocFile)
	if err != nil {
		return fail(err)
	}
	werr := alloc.Write(f)
	if err := cmp.Or(werr, f.Close()); err != nil {
		return fail(err)
	}
	if out.cpu, err = stages(cpu, "cpu", 4); err != nil {
		return fail(err)
	}
	if out.alloc, err = stages(alloc, "alloc_space", 3); err != nil {
		return fail(err)
	}
	return out
}

// profileFileName is c's name in a file name: 0ms-64, 0ms-dup-64,
// 0ms-256-32conns.
func profileFileName(c cell) string {
	return strings.ReplaceAll(strings.ReplaceAll(c.String(), " ", ""), "/", "-")
}

// profileCells runs each cell once more with profiling on, sized like its
// measured runs, and keeps its profiles.
func profileCells(ctx context.Context, e *env, o options, res *result, log *slog.Logger) error {
	res.profiles = map[cell]cellProfile{}
	for i, c := range res.cells {
		rate := median(res.rates(c))
		if rate <= 0 {
			continue
		}
		// Long enough that the profile ends before the last events do.
		secs := max(int(o.steady.Seconds()), 1)
		n := min(max(int(rate*float64(secs)*1.4), minEvents), maxEvents)
		secs = max(min(secs, int(0.75*float64(n)/rate), maxProfileSeconds), 1)
		prof := &profiling{seconds: secs, dir: filepath.Join(e.outDir, "profiles"), file: profileFileName(c)}
		name := fmt.Sprintf("bench-p%02d-%dms-if%d-prof", i+1, c.latency.Milliseconds(), c.inFlight)
		r, err := runService(ctx, e, o, c, name, n, max(rate/2, 1), prof, log)
		if err != nil {
			return fmt.Errorf("profile %s: %w", c, err)
		}
		e.deleteTopics(ctx, r.name, log)
		res.profiles[c] = r.profile
		if r.profile.problem != "" {
			log.Warn("no profile", slog.String("cell", c.String()), slog.String("problem", r.profile.problem))
		}
	}
	return nil
}

// allocsPerEvent is a cell's median heap allocations per event, count and
// bytes, over its measured runs (profiling off); 0, 0 when the binary did
// not export them.
func (r *result) allocsPerEvent(c cell) (count, bytes float64) {
	var n, b []float64
	for _, run := range r.runs[c] {
		if run.allocs > 0 {
			n, b = append(n, run.allocs), append(b, run.allocBytes)
		}
	}
	return median(n), median(b)
}

// profileMarkdown is the report's Profiles section: per cell, CPU and
// allocations per event from the measured runs, then where the profiled
// run spent them, by stage.
func (r *result) profileMarkdown(e *env) string {
	if len(r.profiles) == 0 && len(r.cells) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## Profiles\n\n")
	p("CPU µs and heap allocations per event are the measured runs' (profiling off; median of the runs; allocations from the service's `go_memstats_mallocs_total` and `go_memstats_alloc_bytes_total` over the measured interval, which include what the driver's scrapes make the service allocate). ")
	p("The profiles come from one more run of each cell with `BILLING_PPROF=true`: a CPU profile from the moment %.0f%% of its events are final, and the allocations made meanwhile (the difference of two `/debug/pprof/allocs`, sampled by the runtime every 512 KiB), kept in `profiles/` beside this report (`go tool pprof -top profiles/<cell>.cpu.pprof`). ", 100*profileFrom)
	p("A sample goes to the stage of the innermost function of billing's own code (or of its metrics and logging libraries) in its stack, so that what pgx, encoding/json, net/http or the allocator do for a stage is the stage's; a stack with none goes by the library (net/http's transport: gateway call; kafka-go's reader: fetch; its writer: publish; the runtime's GC workers and scheduler). ")
	p("A stage's µs/event is its share of the CPU profile times the cell's CPU µs per event. Top functions: the heaviest at or inside the frame that set the stage, by cumulative share of the whole profile.\n\n")
	for _, c := range r.cells {
		cpu := r.cpuPerEvent(c)
		n, bytes := r.allocsPerEvent(c)
		p("### %s\n\n", c)
		p("billing CPU %.0f µs/event; heap allocations %.0f per event, %.1f KiB per event.", cpu, n, bytes/1024)
		prof, ok := r.profiles[c]
		switch {
		case !ok:
			p(" Not profiled.\n\n")
			continue
		case prof.problem != "":
			p(" No profile: %s.\n\n", prof.problem)
			continue
		}
		rel := func(f string) string {
			if s, err := filepath.Rel(e.outDir, f); err == nil {
				return s
			}
			return f
		}
		p(" Profiles (%d s): `%s`, `%s`.\n\n", prof.seconds, rel(prof.cpuFile), rel(prof.allocFile))
		alloc := map[string]float64{}
		for _, s := range prof.alloc {
			alloc[s.stage] = s.share
		}
		p("| stage | CPU | µs/event | bytes allocated | top functions (cumulative %% of the CPU profile) |\n|---|---:|---:|---:|---|\n")
		for _, s := range prof.cpu {
			var tops []string
			for _, f := range s.top {
				tops = append(tops, fmt.Sprintf("`%s` %.1f%%", shortFunc(f.name), 100*f.share))
			}
			p("| %s | %.1f%% | %.1f | %.1f%% | %s |\n", s.stage, 100*s.share, s.share*cpu, 100*alloc[s.stage], strings.Join(tops, ", "))
		}
		p("\n")
	}
	return b.String()
}

// genericShape is the type arguments of a generic function's name, which
// the runtime spells out as whole struct shapes.
var genericShape = regexp.MustCompile(`\[go\.shape\..*?\]\)`)

// shortFunc drops the module path of billing's own functions and the
// shapes of a generic one's type arguments.
func shortFunc(fn string) string {
	fn = genericShape.ReplaceAllString(fn, "[…])")
	return strings.TrimPrefix(fn, "github.com/acme/billing/")
}
