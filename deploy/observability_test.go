package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/acme/billing/internal/metrics"
)

var update = flag.Bool("update", false, "rewrite observability/prometheusrule.yaml from observability/billing-alerts.yaml")

const (
	dashboardFile   = obsDir + "/billing-dashboard.json"
	alertsFile      = obsDir + "/billing-alerts.yaml"
	ruleObjectFile  = obsDir + "/prometheusrule.yaml"
	readmeFile      = "README.md"
	runbookURLStart = "https://github.com/acme/billing/blob/main/deploy/README.md#"
	dsVar           = "${datasource}"
)

// prometheusSynthetic are series Prometheus writes itself for every target.
var prometheusSynthetic = map[string]bool{"up": true}

var descFQName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registered lists every metric name the service exposes: what
// metrics.New(reg, true) and metrics.RegisterBuildInfo gather (with the _bucket/_sum/_count series of
// histograms and summaries), plus vectors that have no child yet, found by
// describing each collector of metrics.Metrics.
var registered = sync.OnceValues(func() (map[string]bool, error) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, true)
	// Registered apart from metrics.New, by internal/app, with the build's
	// labels.
	metrics.RegisterBuildInfo(reg, metrics.BuildInfo{Version: "1.2.0", Revision: "r", GoVersion: "go", Schema: "s", RunsBeside: "1.2.0"})
	names := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			sm := descFQName.FindStringSubmatch(d.String())
			if sm == nil {
				return nil, fmt.Errorf("no fqName in %s", d)
			}
			n := sm[1]
			names[n] = true
			switch c.(type) {
			case *prometheus.HistogramVec:
				names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			case *prometheus.SummaryVec:
				names[n+"_sum"], names[n+"_count"] = true, true
			}
		}
	}
	return names, nil
})

func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names, err := registered()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	return names
}

// grafanaVars are the concrete values Grafana variables stand for while an
// expression is parsed.
var grafanaVars = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"namespace":       "billing",
	"job":             "billing",
}

var grafanaVarRE = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces Grafana variables in expr with concrete values.
func substitute(expr string) (string, error) {
	var errs []error
	out := grafanaVarRE.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVarRE.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		v, ok := grafanaVars[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown Grafana variable %s", m))
		}
		return v
	})
	return out, errors.Join(errs...)
}

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr (after Grafana substitution) and returns the metric
// names its selectors use.
func metricNames(expr string) ([]string, error) {
	s, err := substitute(expr)
	if err != nil {
		return nil, err
	}
	return promqlMetricNames(s)
}

// promqlMetricNames is metricNames of plain PromQL (a rule's expression,
// where "$1" is label_replace's, not a Grafana variable).
func promqlMetricNames(s string) ([]string, error) {
	ast, err := promql.ParseExpr(s)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", s, err)
	}
	var names []string
	var errs []error
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type != labels.MatchEqual {
					errs = append(errs, fmt.Errorf("selector %s: metric name matched by %s, want one name", vs, m.Type))
				}
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	if len(names) == 0 {
		errs = append(errs, fmt.Errorf("%q selects no metric", s))
	}
	return names, errors.Join(errs...)
}

// checkExpr parses expr (a dashboard's) and checks that every metric it
// reads is one the service registers.
func checkExpr(known map[string]bool, expr string) error {
	names, err := metricNames(expr)
	if err != nil {
		return err
	}
	return checkNames(known, names)
}

// checkRuleExpr is checkExpr for a rule's expression.
func checkRuleExpr(known map[string]bool, expr string) error {
	names, err := promqlMetricNames(expr)
	if err != nil {
		return err
	}
	return checkNames(known, names)
}

func checkNames(known map[string]bool, names []string) error {
	var errs []error
	for _, n := range names {
		if !known[n] && !prometheusSynthetic[n] {
			errs = append(errs, fmt.Errorf("metric %s is not registered by metrics.New", n))
		}
	}
	return errors.Join(errs...)
}

func TestCheckExprRejects(t *testing.T) {
	t.Parallel()
	known := registeredMetrics(t)
	for _, expr := range []string{
		`rate(billing_nope_total[5m])`,                                   // unknown metric
		`sum(rate(billing_events_total[$__rate_interval])`,               // syntax
		`rate(billing_events_total{namespace=~"$nope"}[5m])`,             // unknown variable
		`histogram_quantile(0.9, rate(billing_in_flight_bucket[5m]))`,    // a gauge has no buckets
		`rate({__name__=~"billing_.*"}[5m])`,                             // no single name
		`time()`,                                                         // no metric at all
		`billing_events_total{outcome="charged"} / billing_eventz_total`, // typo on one side
	} {
		if err := checkExpr(known, expr); err == nil {
			t.Errorf("checkExpr(%q): got nil, want an error", expr)
		}
	}
	for _, expr := range []string{
		`sum by (outcome) (rate(billing_events_total{namespace=~"$namespace"}[$__rate_interval]))`,
		`histogram_quantile(0.99, sum by (le) (rate(billing_payment_duration_seconds_bucket[${__rate_interval}])))`,
		`max by (topic, partition) (billing_consumer_lag)`, // a vector with no child yet
		`go_goroutines + process_resident_memory_bytes`,
	} {
		if err := checkExpr(known, expr); err != nil {
			t.Errorf("checkExpr(%q): %v", expr, err)
		}
	}
}

// Grafana dashboard JSON, the parts the tests read.
type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *dsRef `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Panels []panel `json:"panels"` // of a collapsed row
}

// unitOf returns the unit Grafana shows query refID of p in: an override
// matching its frame (byFrameRefID) or the panel's default.
func (p panel) unitOf(refID string) string {
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID != "byFrameRefID" || o.Matcher.Options != refID {
			continue
		}
		for _, pr := range o.Properties {
			if u, ok := pr.Value.(string); ok && pr.ID == "unit" {
				return u
			}
		}
	}
	return p.FieldConfig.Defaults.Unit
}

type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *dsRef          `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

func TestDashboardLoadsInGrafana(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.SchemaVersion < 38 {
		t.Errorf("schemaVersion: got %d, want >= 38 (Grafana 10)", d.SchemaVersion)
	}
	if d.UID == "" || len(d.UID) > 40 || d.Title == "" {
		t.Errorf("uid %q, title %q: want both, uid at most 40 characters", d.UID, d.Title)
	}
	// The service's metrics and the series the rules record (burn rates,
	// budgets); not other exporters': the dashboard shows billing alone.
	known := maps.Clone(registeredMetrics(t))
	maps.Copy(known, contractOnly)
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}

	var hasDS bool
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil || q != "prometheus" {
				t.Errorf("variable %s: query %s, want \"prometheus\"", v.Name, v.Query)
			}
			hasDS = hasDS || "${"+v.Name+"}" == dsVar
		case "query":
			if v.Datasource == nil || v.Datasource.UID != dsVar {
				t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, dsVar)
			}
			sm := labelValuesRE.FindStringSubmatch(v.Definition)
			if sm == nil {
				t.Errorf("variable %s: definition %q, want label_values(selector, label)", v.Name, v.Definition)
				continue
			}
			if err := checkExpr(known, sm[1]); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
			if _, ok := grafanaVars[v.Name]; !ok {
				t.Errorf("variable %s: not in grafanaVars, so queries using it cannot be checked", v.Name)
			}
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable named %s", dsVar)
	}

	ids := map[int]string{}
	used := map[string]bool{}
	var boxes []panel
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
			t.Errorf("panel %q: id %d, already used by %q (or not positive)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		boxes = append(boxes, p)
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				t.Errorf("row %q has queries", p.Title)
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVar || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want prometheus %s", p.Title, p.Datasource, dsVar)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.RefID == "" {
				t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != dsVar {
				t.Errorf("panel %q query %s: datasource %+v, want %s", p.Title, tg.RefID, tg.Datasource, dsVar)
			}
			names, err := metricNames(tg.Expr)
			if err == nil {
				err = checkExpr(known, tg.Expr)
			}
			if err != nil {
				t.Errorf("panel %q query %s: %v", p.Title, tg.RefID, err)
			}
			for _, n := range names {
				// A histogram is used through any of its series.
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					n = strings.TrimSuffix(n, suffix)
				}
				used[n] = true
			}
		}
	}
	for i, a := range boxes {
		for _, b := range boxes[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				t.Errorf("panels %q %+v and %q %+v overlap", a.Title, ga, b.Title, gb)
			}
		}
	}
	// Every billing metric is on the dashboard.
	for n := range registeredMetrics(t) {
		if strings.HasPrefix(n, "billing_") && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") && !used[n] {
			t.Errorf("metric %s is on no dashboard panel", n)
		}
	}
}

func parseRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rulefmt.Parse %s: %v", alertsFile, errors.Join(errs...))
	}
	return groups
}

// readmeAnchors returns the GitHub anchors of README.md's headings.
func readmeAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	anchors := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return anchors
}

// contractOnly are docs/interface.md §8 names that other branches register
// (the pending completer's gauges): rules may read them before they merge.
// Once metrics.New registers them this set changes nothing.
var contractOnly = map[string]bool{
	"billing_invoices_pending":               true,
	"billing_invoice_pending_oldest_seconds": true,
}

// externalMetrics are what the rules of the billing.autoscaling group read
// of other exporters, at the versions deploy/README.md names: KEDA's
// operator from v2.14 (keda_scaled_object_errors_total{namespace,
// scaledObject}; v2.17 dropped the unsuffixed keda_scaled_object_errors,
// and keda_scaler_errors_total had no labels to tell a ScaledObject by and
// is gone too), kube-state-metrics from v2.3 (kube_horizontalpodautoscaler_*
// since v2.0, _info with scaletargetref_* since v2.3).
var externalMetrics = map[string]bool{
	"keda_scaled_object_errors_total":                      true,
	"kube_horizontalpodautoscaler_info":                    true,
	"kube_horizontalpodautoscaler_spec_max_replicas":       true,
	"kube_horizontalpodautoscaler_status_current_replicas": true,
	"kube_horizontalpodautoscaler_status_condition":        true,
}

// knownToRules is what rule expressions may read: the service's metrics,
// the contract's, the other exporters' above, and the series the file's
// own recording rules write.
func knownToRules(t *testing.T, groups *rulefmt.RuleGroups) map[string]bool {
	t.Helper()
	known := maps.Clone(registeredMetrics(t))
	maps.Copy(known, contractOnly)
	maps.Copy(known, externalMetrics)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	return known
}

// jobMatchers returns the selectors of expr that match on the job label: a
// renamed job would silently change what such a rule sees.
func jobMatchers(expr string) []string {
	ast, err := promql.ParseExpr(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == "job" {
					out = append(out, vs.String())
				}
			}
		}
		return nil
	})
	return out
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	groups := parseRules(t)
	known := knownToRules(t, groups)
	anchors := readmeAnchors(t)
	want := []string{
		"BillingConsumerLagGrowing", "BillingNotConsuming", "BillingConsumerPaused", "BillingDeadLetters",
		"BillingGatewayIdempotencyConflict", "BillingDedupMaintenanceStale", "BillingAbsent", "BillingTargetDown",
		"BillingInvoicesPending", "BillingInvoicesPendingKeyExpiring", "BillingInvoicesHeld",
		"BillingEventDelayBudgetBurn", "BillingEventDelayBudgetBurnSlow",
		"BillingDeadLetterBudgetBurn", "BillingDeadLetterBudgetBurnSlow", "BillingPartitionStuck",
		"BillingAutoscalerFailing", "BillingAutoscalerAtMax",
	}
	var have []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if sel := jobMatchers(r.Expr); len(sel) > 0 {
				t.Errorf("%s%s: selects by job (%v); a renamed job would change what it sees", r.Alert, r.Record, sel)
			}
			if r.Alert == "" {
				if !strings.Contains(r.Record, ":") {
					t.Errorf("group %s: recording rule %q: want a level:metric:operations name", g.Name, r.Record)
				}
				if err := checkRuleExpr(known, r.Expr); err != nil {
					t.Errorf("%s: %v", r.Record, err)
				}
				continue
			}
			have = append(have, r.Alert)
			if r.For <= 0 {
				t.Errorf("%s: for: got %v, want a duration", r.Alert, r.For)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if u := r.Annotations["runbook_url"]; !strings.HasPrefix(u, runbookURLStart) || !anchors[strings.TrimPrefix(u, runbookURLStart)] {
				t.Errorf("%s: runbook_url %q: want %s<anchor of a %s heading>", r.Alert, u, runbookURLStart, readmeFile)
			}
			if err := checkRuleExpr(known, r.Expr); err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
		}
	}
	for _, w := range want {
		if !slices.Contains(have, w) {
			t.Errorf("alert %s missing; have %v", w, have)
		}
	}
}

// rulesAsObjectGroups converts rulefmt groups into PrometheusRule groups.
func rulesAsObjectGroups(g *rulefmt.RuleGroups) []ruleGroup {
	var out []ruleGroup
	for _, rg := range g.Groups {
		og := ruleGroup{Name: rg.Name}
		if rg.Interval != 0 {
			og.Interval = rg.Interval.String()
		}
		for _, r := range rg.Rules {
			or := rule{Alert: r.Alert, Record: r.Record, Expr: r.Expr, Labels: r.Labels, Annotations: r.Annotations}
			if r.For != 0 {
				or.For = r.For.String()
			}
			og.Rules = append(og.Rules, or)
		}
		out = append(out, og)
	}
	return out
}

// normalize makes durations comparable ("1h" and "60m" are one duration).
func normalize(t *testing.T, gs []ruleGroup) []ruleGroup {
	t.Helper()
	out := slices.Clone(gs)
	for i := range out {
		out[i].Rules = slices.Clone(out[i].Rules)
		for j := range out[i].Rules {
			if f := out[i].Rules[j].For; f != "" {
				d, err := model.ParseDuration(f)
				if err != nil {
					t.Fatalf("rule %s: for %q: %v", out[i].Rules[j].Alert, f, err)
				}
				out[i].Rules[j].For = d.String()
			}
		}
	}
	return out
}

const ruleObjectHeader = `# Code generated by deploy_test.go (go test ./deploy -run TestPrometheusRuleMatchesRulesFile -update)
# from billing-alerts.yaml. DO NOT EDIT: edit billing-alerts.yaml and regenerate.
`

func writeRuleObject(t *testing.T, groups []ruleGroup) {
	t.Helper()
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Groups []ruleGroup `json:"groups"`
		} `json:"spec"`
	}
	obj.APIVersion, obj.Kind = "monitoring.coreos.com/v1", "PrometheusRule"
	obj.Metadata.Name = appName
	obj.Metadata.Labels = map[string]string{"app.kubernetes.io/name": appName}
	obj.Spec.Groups = groups
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ruleObjectFile, append([]byte(ruleObjectHeader), b...), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	t.Parallel()
	want := normalize(t, rulesAsObjectGroups(parseRules(t)))
	if *update {
		writeRuleObject(t, want)
		t.Logf("wrote %s", ruleObjectFile)
	}
	// Rendered afresh: -update may just have rewritten the file.
	r, err := renderNow(obsDir)
	if err != nil {
		t.Fatalf("render %s: %v", obsDir, err)
	}
	check := func(t *testing.T, r *rendered) {
		t.Helper()
		pr := get[prometheusRule](t, r, "PrometheusRule", appName)
		if got := normalize(t, pr.Spec.Groups); !reflect.DeepEqual(got, want) {
			t.Errorf("PrometheusRule groups differ from %s; run go test ./deploy -run TestPrometheusRuleMatchesRulesFile -update\ngot  %+v\nwant %+v", alertsFile, got, want)
		}
	}
	check(t, r)
	if !*update {
		forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
			if components(dir)[compMonitoring] {
				check(t, r)
			}
		})
	}
}

// exprKind says what an expression's values are, where its shape tells:
// "ratio" for a share of two counts (a/b or 1 - a/b, both sides counters,
// histogram counts or buckets: the SLI), "seconds" for a quantile of a
// histogram in seconds; "" otherwise.
func exprKind(t *testing.T, expr string) string {
	t.Helper()
	s, err := substitute(expr)
	if err != nil {
		t.Fatal(err)
	}
	e, err := promql.ParseExpr(s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	counts := func(n parser.Node) bool {
		ok, any := true, false
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, is := n.(*parser.VectorSelector); is {
				any = true
				ok = ok && (strings.HasSuffix(vs.Name, "_total") || strings.HasSuffix(vs.Name, "_count") || strings.HasSuffix(vs.Name, "_bucket"))
			}
			return nil
		})
		return ok && any
	}
	for {
		switch n := e.(type) {
		case *parser.ParenExpr:
			e = n.Expr
			continue
		case *parser.BinaryExpr:
			if _, lit := n.LHS.(*parser.NumberLiteral); lit && n.Op == parser.SUB {
				e = n.RHS
				continue
			}
			if n.Op == parser.DIV && counts(n.LHS) && counts(n.RHS) {
				return "ratio"
			}
		case *parser.Call:
			if n.Func.Name == "histogram_quantile" && len(n.Args) == 2 {
				var secs bool
				parser.Inspect(n.Args[1], func(n parser.Node, _ []parser.Node) error {
					if vs, is := n.(*parser.VectorSelector); is && strings.HasSuffix(vs.Name, "_seconds_bucket") {
						secs = true
					}
					return nil
				})
				if secs {
					return "seconds"
				}
			}
		}
		return ""
	}
}

func TestExprKind(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		`1 - sum(rate(billing_event_delay_seconds_bucket{le="60"}[$__rate_interval])) / sum(rate(billing_event_delay_seconds_count[$__rate_interval]))`: "ratio",
		`sum(rate(billing_events_total{outcome="dead_lettered"}[5m])) / sum(rate(billing_events_total[5m]))`:                                            "ratio",
		`histogram_quantile(0.99, sum by (le) (rate(billing_payment_duration_seconds_bucket[5m])))`:                                                     "seconds",
		`sum(rate(billing_db_group_events_sum[5m])) / sum(rate(billing_db_group_events_count[5m]))`:                                                     "", // a mean
		`histogram_quantile(0.5, sum by (le) (rate(billing_db_group_events_bucket[5m])))`:                                                               "", // not seconds
		`max(billing_invoice_pending_oldest_seconds)`:                                                                                                   "",
		`namespace:billing_event_delay_slow:ratio_rate1h / 0.01`:                                                                                        "", // a burn rate
	} {
		if got := exprKind(t, expr); got != want {
			t.Errorf("exprKind(%s) = %q, want %q", expr, got, want)
		}
	}
}

// TestDashboardUnits: a share is shown as a percentage and a latency in
// seconds. The SLI panel once plotted the slow share with unit s, so 1%
// read "10 ms".
func TestDashboardUnits(t *testing.T) {
	t.Parallel()
	want := map[string][]string{"ratio": {"percentunit"}, "seconds": {"s"}}
	for _, p := range allPanels(loadDashboard(t).Panels) {
		for _, tg := range p.Targets {
			kind := exprKind(t, tg.Expr)
			if kind == "" {
				continue
			}
			if u := p.unitOf(tg.RefID); !slices.Contains(want[kind], u) {
				t.Errorf("panel %q query %s is a %s shown in unit %q, want %v", p.Title, tg.RefID, kind, u, want[kind])
			}
		}
	}
}
