package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/acme/billing/internal/testkit/needs"
)

const (
	rulesTestFile   = obsDir + "/billing-alerts_test.yaml"
	alertmanagerCfg = obsDir + "/alertmanager.yaml"
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
// (billing-alerts_test.yaml) with the promtool installed beside the
// Prometheus server that the end-to-end test runs the rules in (Debian's
// package: scripts/deps.sh prometheus). It is not built here from the
// prometheus module: compiling promtool was most of this module's test
// time. Without it the test is skipped, or fails when BILLING_E2E=1, as
// the end-to-end test does. Debian's promtool is of the 2.x line: 3.x made
// range and subquery windows open on the left, so a case whose sample sits
// on a window's edge could pass here and read differently on a 3.x server.
func TestAlertRulesUnitTests(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		needs.Missing(t, fmt.Errorf("promtool not found: %w", err))
	}
	// No deadline of its own: the run takes seconds of CPU, and minutes on
	// a machine busy with other builds; go test's -timeout bounds it.
	ctx := t.Context()
	version, _ := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	cmd := exec.CommandContext(ctx, bin, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = obsDir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		first, _, _ := strings.Cut(string(version), "\n")
		t.Fatalf("%s (%s) test rules %s: %v\n%s", bin, first, rulesTestFile, err, out)
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
