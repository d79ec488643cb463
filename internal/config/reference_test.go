package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the configuration table in README.md")

const (
	beginMarker = "<!-- config:begin (generated from internal/config; go test ./internal/config -update) -->\n"
	endMarker   = "<!-- config:end -->"
)

// README.md's configuration table is the struct's: same variables, defaults
// and meanings, in the same order.
func TestReadmeConfigurationReference(t *testing.T) {
	path := "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the markers %q … %q", beginMarker, endMarker)
	}
	got := s[i+len(beginMarker) : j]
	want := Reference()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(s[:i+len(beginMarker)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md configuration table is out of date; run go test ./internal/config -update\ngot:\n%s\nwant:\n%s", got, want)
}

func TestReferenceListsEveryVariable(t *testing.T) {
	ref := Reference()
	for _, n := range Names() {
		if !strings.Contains(ref, "`"+n+"`") {
			t.Errorf("reference lacks %s", n)
		}
	}
}
