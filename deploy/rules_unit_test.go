package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	rulesTestFile   = obsDir + "/billing-alerts_test.yaml"
	alertmanagerCfg = obsDir + "/alertmanager.yaml"
	// promtool's rule unit tests live in its main package (cmd/promtool,
	// unittest.go), which no program can import; it is run at the version
	// of the prometheus module go.mod already requires.
	promtoolPkg = "github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
)

// promtoolTestFile mirrors the parts of promtool's unit test file the tests
// below read.
type promtoolTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertHasUnitTests: each alert of billing-alerts.yaml is tested at
// a time it fires and at a time it must not.
func TestEveryAlertHasUnitTests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var f promtoolTestFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Equal(f.RuleFiles, []string{filepath.Base(alertsFile)}) {
		t.Errorf("rule_files: got %v, want [%s]", f.RuleFiles, filepath.Base(alertsFile))
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tg := range f.Tests {
		for _, a := range tg.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: firing case %v, not-firing case %v in %s; want both", r.Alert, firing[r.Alert], silent[r.Alert], rulesTestFile)
			}
		}
	}
}

// TestAlertRulesUnitTests runs promtool's rule unit tests
// (billing-alerts_test.yaml). The first run downloads and compiles promtool,
// later ones reuse the module and build caches. It is built without its
// service-discovery plugins (remove_all_sd: the cloud SDKs were most of the
// compile, and rule tests discover nothing), which takes a fresh machine's
// build from minutes to a fraction of them.
func TestAlertRulesUnitTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds promtool; skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "-tags", "remove_all_sd", promtoolPkg, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = obsDir
	// promtool's dependencies are its own, not this module's. The module
	// cache is asked first, as a file proxy: with everything in it the run
	// works offline (plain GOPROXY=off fails on the deprecation lookup of an
	// @version run); anything missing falls through to the usual proxies.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE", "GOPROXY").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) == 2 {
			env = append(env, "GOPROXY=file://"+filepath.ToSlash(f[0])+"/cache/download,"+f[1])
		}
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out.String())
	}
	if !strings.Contains(out.String(), "SUCCESS") {
		t.Errorf("promtool test rules: no SUCCESS in\n%s", out.String())
	}
}

var alertNameRE = regexp.MustCompile(`alertname\s*(=~?)\s*"?([^"]+?)"?\s*$`)

// TestInhibitionRules: every alert an inhibition rule names exists, and each
// rule is scoped to one namespace.
func TestInhibitionRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(alertmanagerCfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		InhibitRules []struct {
			SourceMatchers []string `json:"source_matchers"`
			TargetMatchers []string `json:"target_matchers"`
			Equal          []string `json:"equal"`
		} `json:"inhibit_rules"`
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s: %v", alertmanagerCfg, err)
	}
	alerts := map[string]bool{}
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
		}
	}
	if len(cfg.InhibitRules) == 0 {
		t.Fatalf("%s: no inhibit_rules", alertmanagerCfg)
	}
	silenced := map[string]bool{}
	for i, ir := range cfg.InhibitRules {
		if !slices.Equal(ir.Equal, []string{"namespace"}) {
			t.Errorf("inhibit rule %d: equal %v, want [namespace]", i, ir.Equal)
		}
		for which, ms := range map[string][]string{"source": ir.SourceMatchers, "target": ir.TargetMatchers} {
			if len(ms) != 1 {
				t.Errorf("inhibit rule %d: %s matchers %v, want one on alertname", i, which, ms)
				continue
			}
			sm := alertNameRE.FindStringSubmatch(ms[0])
			if sm == nil {
				t.Errorf("inhibit rule %d: %s matcher %q, want alertname = X or alertname =~ \"X|Y\"", i, which, ms[0])
				continue
			}
			for _, n := range strings.Split(sm[2], "|") {
				if !alerts[n] {
					t.Errorf("inhibit rule %d: %s alert %s is not in %s", i, which, n, alertsFile)
				}
				if which == "target" {
					silenced[n] = true
				}
			}
		}
	}
	// A Postgres outage pauses every pod: one page, nothing it causes.
	for _, n := range []string{"BillingNotConsuming", "BillingEventDelayBudgetBurn", "BillingTargetDown"} {
		if !silenced[n] {
			t.Errorf("%s is silenced by no inhibit rule", n)
		}
	}
}
