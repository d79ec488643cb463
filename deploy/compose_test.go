package deploy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// loadComposeProject loads docker-compose.yml the way `docker compose` does
// (compose-spec's own loader: schema validation, interpolation, paths
// resolved against the file's directory).
func loadComposeProject(t *testing.T) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, composeFile)}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("billing", true)
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}
	return p
}

var pinnedRE = regexp.MustCompile(`^[a-z0-9./_-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)

// TestComposeLocalLook: the compose file loads, brings up everything a local
// look needs, pins every image it pulls by tag and digest, and every file it
// mounts exists.
func TestComposeLocalLook(t *testing.T) {
	t.Parallel()
	p := loadComposeProject(t)
	for _, want := range []string{"kafka", "postgres", "gateway", "migrate", "billing", "producer", "prometheus", "grafana"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %s missing; have %v", want, p.ServiceNames())
		}
	}
	built := map[string]bool{}
	for _, s := range p.Services {
		if s.Build != nil {
			built[s.Image] = true
		}
	}
	mounts := map[string]string{} // service:target in the container -> source on the host
	for name, s := range p.Services {
		switch {
		case built[s.Image]:
			// Built from ../Dockerfile, whose bases TestDockerfile checks.
		case !pinnedRE.MatchString(s.Image) || strings.Contains(s.Image, ":latest@"):
			t.Errorf("service %s: image %q, want name:tag@sha256:<digest>", name, s.Image)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s: volume source %s: %v", name, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("service %s: %s mounted read-write, want :ro", name, v.Source)
			}
			mounts[name+":"+v.Target] = v.Source
		}
	}

	// Prometheus loads the rules file the cluster runs, and Grafana the
	// dashboard, both mounted from deploy/observability.
	same := func(what, src, want string) {
		t.Helper()
		abs, _ := filepath.Abs(want)
		if src != abs {
			t.Errorf("%s: mounted from %q, want %s", what, src, abs)
		}
	}
	var prom struct {
		RuleFiles []string `json:"rule_files"`
	}
	b, err := os.ReadFile(mounts["prometheus:/etc/prometheus/prometheus.yml"])
	if err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	if len(prom.RuleFiles) != 1 {
		t.Fatalf("prometheus.yml rule_files: got %v, want one", prom.RuleFiles)
	}
	same("Prometheus rule file "+prom.RuleFiles[0], mounts["prometheus:"+prom.RuleFiles[0]], alertsFile)

	var prov struct {
		Providers []struct {
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	b, err = os.ReadFile(filepath.Join(mounts["grafana:/etc/grafana/provisioning/dashboards"], "billing.yaml"))
	if err != nil {
		t.Fatalf("Grafana dashboard provisioning: %v", err)
	}
	if err := yaml.Unmarshal(b, &prov); err != nil || len(prov.Providers) != 1 {
		t.Fatalf("Grafana dashboard provisioning: %v, %d providers", err, len(prov.Providers))
	}
	same("Grafana dashboard", mounts["grafana:"+prov.Providers[0].Options.Path+"/billing-dashboard.json"], dashboardFile)
	if _, err := os.Stat(filepath.Join(mounts["grafana:/etc/grafana/provisioning/datasources"], "prometheus.yaml")); err != nil {
		t.Errorf("Grafana datasource provisioning: %v", err)
	}
	if got := p.Services["billing"].Environment["BILLING_HTTP_ADDR"]; got == nil || !slices.Contains([]string{":8080"}, *got) {
		t.Errorf("billing BILLING_HTTP_ADDR %v, want :8080 (Prometheus scrapes billing:8080)", got)
	}
}

// TestComposePortsOnLoopback: every port the local look publishes is bound
// to 127.0.0.1. They expose Postgres with billing/billing, plaintext Kafka,
// WireMock's admin API, Prometheus with --web.enable-lifecycle and Grafana
// with admin/admin and anonymous access: on every interface, anyone on the
// network could use them.
func TestComposePortsOnLoopback(t *testing.T) {
	t.Parallel()
	p := loadComposeProject(t)
	published := 0
	for name, s := range p.Services {
		for _, port := range s.Ports {
			published++
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s: port %d published on %q, want 127.0.0.1", name, port.Target, port.HostIP)
			}
		}
	}
	if published == 0 {
		t.Error("no published port: the test checks nothing")
	}
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(b), "\nname:")
	if !strings.Contains(header, "127.0.0.1") {
		t.Errorf("%s: the header comment does not say the ports are bound to 127.0.0.1", composeFile)
	}
}
