package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/build/constraint"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/acme/billing/internal/config"
)

const (
	repoRoot     = ".."
	composeFile  = "docker-compose.yml"
	wiremockDir  = "compose/wiremock/mappings"
	billingImage = "billing:dev"
)

type composeService struct {
	Image       string         `json:"image"`
	Build       map[string]any `json:"build"`
	Command     []string       `json:"command"`
	Environment map[string]any `json:"environment"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Volumes []string `json:"volumes"`
}

func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	// Parse the whole file first (anchors, duplicate keys), then the services.
	var whole map[string]any
	if err := yaml.UnmarshalStrict(b, &whole); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	var c struct {
		Services map[string]composeService `json:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s services: %v", composeFile, err)
	}
	return c.Services
}

func TestComposeUsesKnownConfig(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, n := range config.Names() {
		names[n] = true
	}
	services := loadCompose(t)
	for _, want := range []string{"kafka", "postgres", "gateway", "migrate", "billing"} {
		if _, ok := services[want]; !ok {
			t.Errorf("service %s missing; have %v", want, keys(services))
		}
	}
	wantCmd := map[string][]string{"migrate": {"migrate"}, "billing": {"run"}}
	for name, cmd := range wantCmd {
		s := services[name]
		if s.Image != billingImage || !slices.Equal(s.Command, cmd) {
			t.Errorf("service %s: image %q command %q, want %s %q", name, s.Image, s.Command, billingImage, cmd)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if !names[k] {
				t.Errorf("service %s: %s is not in config.Names()", name, k)
			}
			sv, ok := v.(string)
			if !ok {
				t.Errorf("service %s: %s = %v (%T), want a string", name, k, v, v)
			}
			env[k] = sv
		}
		if err := loadConfig(t, env); err != nil {
			t.Errorf("service %s: config.Load: %v", name, err)
		}
		// The addresses point at services of this file.
		hosts := map[string]string{"BILLING_DATABASE_URL": "postgres", "BILLING_PAYMENT_BASE_URL": "gateway"}
		for k, svc := range hosts {
			u, err := url.Parse(env[k])
			if err != nil || u.Hostname() != svc {
				t.Errorf("service %s: %s %q, want host %s", name, k, env[k], svc)
			}
		}
		for _, b := range strings.Split(env["BILLING_KAFKA_BROKERS"], ",") {
			if h, _, _ := strings.Cut(b, ":"); h != "kafka" {
				t.Errorf("service %s: broker %q, want host kafka", name, b)
			}
		}
	}
	if got := services["billing"].DependsOn["migrate"].Condition; got != "service_completed_successfully" {
		t.Errorf("billing depends_on migrate: got %q, want service_completed_successfully", got)
	}
	if services["migrate"].Build == nil {
		t.Errorf("service migrate builds no image")
	}
	for _, v := range services["gateway"].Volumes {
		src, _, _ := strings.Cut(v, ":")
		if _, err := os.Stat(src); err != nil {
			t.Errorf("gateway volume %s: %v", v, err)
		}
	}
}

func TestWiremockChargeMapping(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(wiremockDir, "charges.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Request struct {
			Method  string         `json:"method"`
			URLPath string         `json:"urlPath"`
			Headers map[string]any `json:"headers"`
		} `json:"request"`
		Response struct {
			Status       int               `json:"status"`
			Headers      map[string]string `json:"headers"`
			JSONBody     map[string]string `json:"jsonBody"`
			Transformers []string          `json:"transformers"`
		} `json:"response"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Request.Method != "POST" || m.Request.URLPath != "/charges" {
		t.Errorf("request: got %s %s, want POST /charges (docs/interface.md §6)", m.Request.Method, m.Request.URLPath)
	}
	if _, ok := m.Request.Headers["Idempotency-Key"]; !ok {
		t.Errorf("request: does not require Idempotency-Key")
	}
	if m.Response.Status != 201 && m.Response.Status != 200 {
		t.Errorf("response status: got %d, want 200 or 201", m.Response.Status)
	}
	if m.Response.JSONBody["status"] != "succeeded" || m.Response.JSONBody["charge_id"] == "" {
		t.Errorf("response body: got %v, want charge_id and status succeeded", m.Response.JSONBody)
	}
	if strings.Contains(m.Response.JSONBody["charge_id"], "{{") && !slices.Contains(m.Response.Transformers, "response-template") {
		t.Errorf("templated charge_id without the response-template transformer")
	}
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("Dockerfile ends in a continuation")
	}
	return out
}

var pinnedImageRE = regexp.MustCompile(`^[^\s@]+:[^\s@]+@(sha256:[0-9a-f]{64})$`)

// digestOf returns the digest of a FROM image, failing the test when the
// image is not pinned as name:tag@sha256:… (the tag for readers, the digest
// for reproducible builds).
func digestOf(t *testing.T, image string) string {
	t.Helper()
	m := pinnedImageRE.FindStringSubmatch(image)
	if m == nil {
		t.Errorf("FROM %s: want name:tag@sha256:<digest>", image)
		return "sha256:<digest>"
	}
	return m[1]
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := parseDockerfile(t)
	var stages [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s before the first FROM", in.cmd)
			}
			continue
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) != 2 {
		t.Fatalf("stages: got %d, want 2 (build, final)", len(stages))
	}
	build, final := stages[0], stages[1]
	if !strings.HasPrefix(build[0].args, "golang:1.26") || !strings.HasSuffix(build[0].args, " AS build") {
		t.Errorf("build stage: FROM %s, want golang:1.26… AS build", build[0].args)
	}
	digestOf(t, strings.TrimSuffix(build[0].args, " AS build"))
	var built bool
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w `, "-o /billing", "./cmd/billing"} {
				if !strings.Contains(in.args, want) {
					t.Errorf("go build: %q lacks %s", in.args, want)
				}
			}
			built = true
		}
	}
	if !built {
		t.Errorf("build stage runs no go build")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "billing")); err != nil {
		t.Errorf("./cmd/billing: %v", err)
	}

	want := map[string]string{
		"FROM":       "gcr.io/distroless/static-debian12:nonroot@" + digestOf(t, final[0].args),
		"COPY":       "--from=build /billing /billing",
		"USER":       "nonroot:nonroot",
		"EXPOSE":     fmt.Sprint(httpPort(t, configVar(t, "BILLING_HTTP_ADDR").Default)),
		"ENTRYPOINT": `["/billing"]`,
		"CMD":        `["run"]`,
	}
	got := map[string][]string{}
	for _, in := range final {
		got[in.cmd] = append(got[in.cmd], in.args)
	}
	for cmd, w := range want {
		if !slices.Equal(got[cmd], []string{w}) {
			t.Errorf("final stage %s: got %q, want exactly [%s]", cmd, got[cmd], w)
		}
	}
	for cmd := range got {
		if _, ok := want[cmd]; !ok && cmd != "LABEL" {
			t.Errorf("final stage: unexpected %s %q", cmd, got[cmd])
		}
	}
}

// dockerignore is a .dockerignore: patterns in order, "!" re-includes, the
// last match wins; a pattern matching a directory excludes what is inside.
type dockerignore []struct {
	re      *regexp.Regexp
	include bool
}

func parseDockerignore(t *testing.T, text string) dockerignore {
	t.Helper()
	var d dockerignore
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		include := strings.HasPrefix(line, "!")
		p := strings.Trim(filepath.ToSlash(filepath.Clean(strings.TrimPrefix(line, "!"))), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("(/.*)?$")
		d = append(d, struct {
			re      *regexp.Regexp
			include bool
		}{regexp.MustCompile(re.String()), include})
	}
	return d
}

func (d dockerignore) excludes(path string) bool {
	excluded := false
	for _, p := range d {
		if p.re.MatchString(path) {
			excluded = !p.include
		}
	}
	return excluded
}

var goEmbedRE = regexp.MustCompile(`(?m)^//go:embed\s+(.+)$`)

// buildInputs lists, relative to the repository root, the files go build
// reads: go.mod, go.sum, non-test Go files and the files they embed.
func buildInputs(t *testing.T) []string {
	t.Helper()
	out := []string{"go.mod", "go.sum"}
	err := filepath.WalkDir(repoRoot, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if de.IsDir() {
			if rel != "." && (strings.HasPrefix(de.Name(), ".") || de.Name() == "testdata" || rel == "deploy") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		out = append(out, rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if isIgnoredBuild(src) {
			return nil
		}
		for _, m := range goEmbedRE.FindAllSubmatch(src, -1) {
			for _, pat := range strings.Fields(string(m[1])) {
				pat = strings.TrimPrefix(strings.Trim(pat, "\"`"), "all:")
				matches, err := filepath.Glob(filepath.Join(filepath.Dir(path), pat))
				if err != nil {
					return fmt.Errorf("%s: //go:embed %s: %w", rel, pat, err)
				}
				if len(matches) == 0 {
					return fmt.Errorf("%s: //go:embed %s matches nothing", rel, pat)
				}
				for _, mt := range matches {
					if err := filepath.WalkDir(mt, func(p string, de fs.DirEntry, err error) error {
						if err == nil && !de.IsDir() {
							r, _ := filepath.Rel(repoRoot, p)
							out = append(out, filepath.ToSlash(r))
						}
						return err
					}); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// isIgnoredBuild reports a file excluded by //go:build ignore.
func isIgnoredBuild(src []byte) bool {
	for _, line := range strings.Split(string(src), "\n") {
		if constraint.IsGoBuild(line) {
			e, err := constraint.Parse(line)
			return err == nil && !e.Eval(func(tag string) bool { return tag != "ignore" })
		}
		if strings.HasPrefix(line, "package ") {
			return false
		}
	}
	return false
}

func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	d := parseDockerignore(t, string(b))
	// The matcher itself: these must be excluded by this file.
	for _, p := range []string{".git/HEAD", "internal/config/config_test.go", "deploy/base/deployment.yaml", "a/testdata/x.json"} {
		if !d.excludes(p) {
			t.Errorf(".dockerignore keeps %s, want it excluded", p)
		}
	}
	inputs := buildInputs(t)
	if !slices.Contains(inputs, "cmd/billing/main.go") {
		t.Errorf("build inputs %v lack cmd/billing/main.go", inputs)
	}
	for _, p := range inputs {
		if d.excludes(p) {
			t.Errorf(".dockerignore excludes %s, which go build needs", p)
		}
	}
}
