package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The build stage runs go mod download with only go.mod and go.sum copied, to
// cache the modules; go reads the go.mod of every replacement directory then,
// so each must be copied before (kafka-go is replaced by third_party/kafka-go).
func TestDockerfileCopiesReplacedModulesBeforeDownload(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// Local replacements: "replace old => ./dir" (one line each here).
	var dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		_, to, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "replace "), "=>")
		if f := strings.Fields(to); ok && len(f) == 1 && (strings.HasPrefix(f[0], "./") || strings.HasPrefix(f[0], "../")) {
			dirs = append(dirs, f[0])
		}
	}
	copied := map[string]bool{}
	download := false
	for _, in := range parseDockerfile(t) {
		if in.cmd == "COPY" && !download {
			for _, f := range strings.Fields(in.args) {
				copied[filepath.Clean(f)] = true
			}
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go mod download") {
			download = true
			break
		}
	}
	if !download {
		t.Skip("the build stage runs no go mod download")
	}
	for _, d := range dirs {
		if want := filepath.Join(d, "go.mod"); !copied[want] {
			t.Errorf("Dockerfile copies %s only after go mod download, which reads it (a replace in go.mod)", want)
		}
	}
}
