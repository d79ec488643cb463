package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Values the test passes as the image's build arguments: not what the
// checkout would give (a git revision, a tag), so that only the build
// arguments can put them in the binary.
const (
	testVersion  = "v9.8.7-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// buildStage returns the instructions of the Dockerfile's first stage.
func buildStage(t *testing.T) []instruction {
	t.Helper()
	var stage []instruction
	seen := 0
	for _, in := range parseDockerfile(t) {
		if in.cmd == "FROM" {
			seen++
			continue
		}
		if seen == 1 {
			stage = append(stage, in)
		}
	}
	return stage
}

// TestImageReportsVersion: a binary built as the Dockerfile builds it
// (its go build line, read from the Dockerfile and run here through the
// shell with the build arguments in the environment, as RUN does; .git is
// not in the image's build context, so the toolchain stamps no revision
// there) reports the version and revision passed as build arguments, and
// `make image` passes both.
func TestImageReportsVersion(t *testing.T) {
	t.Parallel()
	var args []string
	var build string
	for _, in := range buildStage(t) {
		switch {
		case in.cmd == "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args = append(args, name)
		case in.cmd == "RUN" && strings.Contains(in.args, "go build"):
			build = in.args
		}
	}
	for _, want := range []string{"VERSION", "REVISION"} {
		if !slices.Contains(args, want) {
			t.Errorf("build stage: no ARG %s (have %v)", want, args)
		}
	}
	if build == "" {
		t.Fatal("build stage runs no go build")
	}
	// RUN's own flags (--mount=…) are Docker's, not the shell's.
	fields := strings.Fields(build)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		fields = fields[1:]
	}
	line := strings.Join(fields, " ")
	bin := filepath.Join(t.TempDir(), "billing")
	if !strings.Contains(line, " -o /billing ") {
		t.Fatalf("go build line %q: want -o /billing", line)
	}
	line = strings.Replace(line, " -o /billing ", " -o "+bin+" ", 1)

	cmd := exec.CommandContext(t.Context(), "sh", "-c", line)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "REVISION="+testRevision)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("billing version: %v\n%s", err, out)
	}
	// The release first (CHANGELOG.md), then the build's stamped version
	// and revision.
	if want := " (build " + testVersion + ", revision " + testRevision + ", "; !strings.HasPrefix(string(out), "billing ") || !strings.Contains(string(out), want) {
		t.Errorf("billing version = %q, want its first line to carry %q", out, want)
	}

	// make image passes every build argument of the Dockerfile.
	recipe := makeRecipe(t, "image")
	for _, a := range args {
		if !regexp.MustCompile(`--build-arg[ =]` + a + `=`).MatchString(recipe) {
			t.Errorf("make image: recipe %q does not pass --build-arg %s=", recipe, a)
		}
	}
}

// makeRecipe returns the recipe lines of target in the Makefile, joined.
func makeRecipe(t *testing.T, target string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recipe []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			recipe = append(recipe, strings.TrimSpace(line))
		case in:
			in = false
		}
	}
	if len(recipe) == 0 {
		t.Fatalf("Makefile: no target %s with a recipe", target)
	}
	return strings.Join(recipe, " ")
}
