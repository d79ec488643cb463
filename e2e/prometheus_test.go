package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	kafkago "github.com/segmentio/kafka-go"
	"sigs.k8s.io/yaml"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
	"github.com/acme/billing/internal/testkit/freeport"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// What the project ships, read as it is.
const (
	shippedRules     = "../deploy/observability/billing-alerts.yaml"
	shippedDashboard = "../deploy/observability/billing-dashboard.json"
)

// The Prometheus job and target labels the test scrapes billing with, as
// the Prometheus Operator would label a pod (the job is not "billing": no
// rule may depend on the job's name), and the Grafana variables the
// dashboard's queries are run with.
const (
	promJob       = "shop-billing"
	promNamespace = "billing"
)

// TestAlertsOnRealPrometheus: a real Prometheus (Debian's
// package, scripts/deps.sh) loads the rules the project ships and scrapes
// the built binary while the test takes Postgres away and brings it back,
// then sends a burst of records that can only be dead-lettered. Through
// Prometheus's HTTP API it sees every recording rule write series, the
// outage page (BillingConsumerPaused) fire and resolve, the dead-letter
// page (BillingDeadLetterBudgetBurn) fire, the notice of an operator's
// pause (BillingConsumptionPausedByOperator) fire and resolve, and every
// query of every dashboard panel return data.
//
// The rules are the shipped expressions, labels and annotations; only the
// waits are shortened (checked below): every `for:` becomes 1s and every
// group is evaluated each second, with a scrape each second, so an alert
// fires within seconds of its condition instead of minutes. The windows in
// the expressions stay as shipped: a 5m or 1h rate over the test's minute
// of samples is what a freshly deployed service shows too.
func TestAlertsOnRealPrometheus(t *testing.T) {
	t.Parallel()
	promBin := prometheusBinary(t)
	pg, pool := pgtest.NewMigratedCluster(t)
	e := newEnvWith(t, pool, pg.DSN("postgres"), kafkatest.SharedReal(t))
	gw := e.gw

	p := e.start("run")
	prom := startPrometheus(t, promBin, httpAddr(t, p))

	// Normal traffic first: every series the dashboard reads gets samples.
	// Three orders meet a 503 on their first charge and are charged on
	// retry tier 1: one order each for the delay SLI, whatever the hops.
	gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if n == 1 && slices.Contains([]string{"ord-before-0", "ord-before-1", "ord-before-2"}, c.OrderID) {
			return gatewaystub.Fault{Status: http.StatusServiceUnavailable}
		}
		return gatewaystub.Fault{}
	})
	e.produce(orders(t, "ord-before", 20))
	poll.Until(t, "20 invoices charged", 30*time.Second, func() bool { return e.chargedCount() == 20 })
	poll.Until(t, "Prometheus to scrape the 20 charges", 30*time.Second, func() bool {
		return prom.value(t, `sum(billing_events_total{outcome="charged"})`) == 20
	})

	// A Postgres outage: the events that arrive meanwhile pause the
	// consumer, and the page fires; it resolves once Postgres is back.
	// Nothing may be paused before it, or the page would prove nothing.
	if st := prom.alertState(t, "BillingConsumerPaused"); st != "" {
		t.Fatalf("BillingConsumerPaused is %s before the outage", st)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := pg.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	e.produce(orders(t, "ord-during", 5))
	prom.waitAlert(t, "BillingConsumerPaused", "firing", 60*time.Second)
	if err := pg.Start(stopCtx); err != nil {
		t.Fatal(err)
	}
	prom.waitAlert(t, "BillingConsumerPaused", "", 60*time.Second)
	poll.Until(t, "the 5 orders of the outage charged after it", 30*time.Second, func() bool { return e.chargedCount() == 25 })

	// A burst of records that are permanent errors: every one goes to the
	// DLQ, far above the dead-letter SLO's 0.1%, and pages.
	corpus := ordertest.BadRecordCorpus()
	var bad []kafkago.Message
	for i := range 30 {
		b := corpus[i%len(corpus)]
		bad = append(bad, kafkago.Message{Key: fmt.Appendf(nil, "bad-%02d-%s", i, b.Name), Value: b.Value})
	}
	e.produce(bad)
	prom.waitAlert(t, "BillingDeadLetterBudgetBurn", "firing", 60*time.Second)

	// 25 orders charged (3 through a tier) and 30 dead-lettered: 55 events,
	// 55 observations of the delay SLI, as Prometheus scraped them.
	poll.Until(t, "Prometheus to scrape the 55 final outcomes", 30*time.Second, func() bool {
		return prom.value(t, `sum(billing_events_total{outcome!="retried"})`) == 55
	})
	if got := prom.value(t, `sum(billing_events_total{outcome="retried"})`); got != 3 {
		t.Errorf("retried = %v, want the 3 orders that met a 503", got)
	}
	if got := prom.value(t, `sum(billing_event_delay_seconds_count)`); got != 55 {
		t.Errorf("billing_event_delay_seconds_count = %v, want 55: one per event, not per hop", got)
	}

	rules := loadRules(t, shippedRules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			poll.Until(t, "series of the recording rule "+r.Record, 30*time.Second, func() bool {
				return len(prom.query(t, r.Record)) > 0
			})
		}
	}
	// "Returns data" means something only if a query of nothing returns
	// nothing.
	if r := prom.query(t, `billing_events_total{outcome="no such outcome"}`); len(r) != 0 {
		t.Fatalf("a query of a series that does not exist returned %v", r)
	}
	// Which pod owns which partition shows while the pod consumes: a pod
	// paused by a person (below) has left its groups and owns none. So the
	// panels are first read once while it consumes, the partition gauges
	// scraped.
	missing := dashboardQueries(t)
	t.Cleanup(func() {
		for _, q := range missing {
			t.Errorf("dashboard panel %q query %s returns no data: %s", q.panel, q.refID, q.expr)
		}
	})
	poll.Until(t, "the partitions' owners scraped", 60*time.Second, func() bool {
		return len(prom.query(t, `billing_partition_assigned`)) > 0
	})
	missing = withoutData(t, prom, missing)
	// A person pauses consumption (the runbook's command, with the built
	// binary): the notice fires naming them, and the dashboard's panel of
	// pauses has who to show. The pod stays ready, so it is still scraped.
	if out := e.runOK("consume", "pause", "--by", "e2e-oncall", "--note", "alert test"); !strings.Contains(out, "after:  paused by e2e-oncall at ") {
		t.Errorf("billing consume pause printed:\n%s", out)
	}
	prom.waitAlert(t, "BillingConsumptionPausedByOperator", "firing", 60*time.Second)
	// Polled, not read once: the lag, committed offsets and DLQ depth come
	// from the brokers every 15 seconds (the first round can meet a group
	// coordinator still loading), and a deriv() needs two scrapes of them.
	poll.Until(t, "every query of every dashboard panel to return data", 60*time.Second, func() bool {
		missing = withoutData(t, prom, missing)
		return len(missing) == 0
	})
	e.runOK("consume", "resume", "--by", "e2e-oncall")
	prom.waitAlert(t, "BillingConsumptionPausedByOperator", "", 60*time.Second)
	e.stop(p)
}

// orders returns n OrderConfirmed records of distinct orders named
// prefix-0…
func orders(t *testing.T, prefix string, n int) []kafkago.Message {
	t.Helper()
	var out []kafkago.Message
	for i := range n {
		evt, err := order.NewOrderConfirmedEvent(order.Order{ID: fmt.Sprintf("%s-%d", prefix, i), CustomerID: "cus-1",
			TotalAmount: 1000 + int64(i), Currency: "EUR", ConfirmedAt: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		v, err := wire.Encode(evt)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kafkago.Message{Key: []byte(evt.OrderID), Value: v})
	}
	return out
}

func (e *env) chargedCount() int {
	invs, err := e.store.Invoices(context.Background())
	if err != nil {
		return -1
	}
	n := 0
	for _, inv := range invs {
		if inv.Status == order.StatusCharged {
			n++
		}
	}
	return n
}

// prometheusBinary finds the Prometheus server; without one the test is
// skipped, or fails when BILLING_E2E=1 (CI runs scripts/deps.sh, which
// installs it, before make test).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		needs.Missing(t, fmt.Errorf("prometheus not found: %w", err))
	}
	return bin
}

// fastRules returns the rules file at path with every `for:` set to 1s
// and every group's interval to 1s, and nothing else changed: the test
// checks that the expressions, labels and annotations it loads are the
// shipped ones.
func fastRules(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, g := range f.Groups {
		if _, ok := g["interval"]; ok {
			g["interval"] = "1s"
		}
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			if r, ok := r.(map[string]any); ok && r["for"] != nil {
				r["for"] = "1s"
			}
		}
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	shipped, fast := parseRuleGroups(t, b), parseRuleGroups(t, out)
	for _, gs := range []*rulefmt.RuleGroups{shipped, fast} {
		for i := range gs.Groups {
			gs.Groups[i].Interval = 0
			for j := range gs.Groups[i].Rules {
				gs.Groups[i].Rules[j].For = 0
			}
		}
	}
	if !reflect.DeepEqual(shipped, fast) {
		t.Fatalf("the test's rules differ from %s in more than for and interval", path)
	}
	return out
}

func parseRuleGroups(t *testing.T, b []byte) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rules: %v", errors.Join(errs...))
	}
	return groups
}

func loadRules(t *testing.T, path string) *rulefmt.RuleGroups {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseRuleGroups(t, b)
}

// promServer is a Prometheus server the test started.
type promServer struct {
	base string // http://host:port
}

// startPrometheus runs a Prometheus server that scrapes billing at target
// every second and evaluates the shipped rules (fastRules) every second, on
// a free loopback port, until the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), fastRules(t, shippedRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - rules.yaml
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%q]
        labels:
          namespace: %s
          pod: billing-e2e
`, promJob, target, promNamespace)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	var waitErr error
	if err := pgcluster.StartTied(cmd, exited, &waitErr, func() { _ = logf.Close() }); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	logTail := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		return tail(string(b), 4096)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log (last 4 KiB):\n%s", logTail())
		}
	})
	s := &promServer{base: "http://" + addr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = pgcluster.PollReady(ctx, "prometheus", exited, func() error { return waitErr }, logTail, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apiGet reads one answer of Prometheus's HTTP API into data.
func (s *promServer) apiGet(t *testing.T, path string, data any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		t.Fatalf("GET %s: %s %v %s: %s", path, resp.Status, err, env.Error, tail(string(body), 1024))
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		t.Fatalf("GET %s: data: %v", path, err)
	}
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query and returns its samples (a scalar or string
// result is one sample); an error of the query fails the test.
func (s *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	s.apiGet(t, "/api/v1/query?query="+url.QueryEscape(q), &data)
	switch data.ResultType {
	case "vector":
		var out []sample
		if err := json.Unmarshal(data.Result, &out); err != nil {
			t.Fatalf("query %s: %v", q, err)
		}
		return out
	case "scalar", "string":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			t.Fatalf("query %s: %v", q, err)
		}
		return []sample{{Value: v}}
	}
	t.Fatalf("query %s: result type %q, want an instant vector or scalar", q, data.ResultType)
	return nil
}

// value is the value of the single sample q returns; NaN when there is
// none or more than one.
func (s *promServer) value(t *testing.T, q string) float64 {
	t.Helper()
	r := s.query(t, q)
	if len(r) != 1 {
		return math.NaN()
	}
	str, _ := r[0].Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// alertState is the state of alert name for namespace promNamespace in
// Prometheus's active alerts: "pending", "firing", or "" when it is not
// active (never fired, or resolved).
func (s *promServer) alertState(t *testing.T, name string) string {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	s.apiGet(t, "/api/v1/alerts", &data)
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["namespace"] == promNamespace {
			return a.State
		}
	}
	return ""
}

// waitAlert waits until alert name is in state ("" = no longer active).
func (s *promServer) waitAlert(t *testing.T, name, state string, within time.Duration) {
	t.Helper()
	what := name + " " + state
	if state == "" {
		what = name + " resolved"
	}
	poll.Until(t, what, within, func() bool { return s.alertState(t, name) == state })
}

// dashboardQuery is one query of one panel of the shipped dashboard, with
// its Grafana variables replaced.
type dashboardQuery struct {
	panel, refID, expr string
}

// grafanaVars are the values the dashboard's variables take here: the
// test's namespace and job, and a rate window that covers the test's run.
var grafanaVars = map[string]string{
	"namespace":       promNamespace,
	"job":             promJob,
	"__rate_interval": "5m",
	"__interval":      "15s",
	"__range":         "5m",
}

var grafanaVarRE = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// withoutData returns the queries of qs that return no data now.
func withoutData(t *testing.T, prom *promServer, qs []dashboardQuery) []dashboardQuery {
	t.Helper()
	var still []dashboardQuery
	for _, q := range qs {
		if len(prom.query(t, q.expr)) == 0 {
			still = append(still, q)
		}
	}
	return still
}

// dashboardQueries decodes the shipped dashboard (panels in rows too) and
// returns every query of every panel.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(shippedDashboard)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", shippedDashboard, err)
	}
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", shippedDashboard, err)
			}
			for _, tg := range p.Targets {
				expr := grafanaVarRE.ReplaceAllStringFunc(tg.Expr, func(m string) string {
					sm := grafanaVarRE.FindStringSubmatch(m)
					v, ok := grafanaVars[sm[1]+sm[2]+sm[3]]
					if !ok {
						t.Fatalf("panel %q query %s: unknown Grafana variable %s", p.Title, tg.RefID, m)
					}
					return v
				})
				out = append(out, dashboardQuery{panel: p.Title, refID: tg.RefID, expr: expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no queries", shippedDashboard)
	}
	return out
}
