package config

import (
	"flag"
	"fmt"
	"os"
	"reflect"
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
	want := reference()
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
	ref := reference()
	for _, n := range Names() {
		if !strings.Contains(ref, "`"+n+"`") {
			t.Errorf("reference lacks %s", n)
		}
	}
}

// reference renders the configuration reference table of README.md from
// the struct tags, so the documentation cannot drift from the code.
func reference() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	t := reflect.TypeOf(Config{})
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("envconfig")
		if key == "" {
			continue
		}
		def := f.Tag.Get("default")
		switch {
		case f.Tag.Get("required") == "true":
			def = "required"
		case def == "":
			def = "—"
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s_%s` | %s | %s |\n", Prefix, key, def, f.Tag.Get("desc"))
	}
	return b.String()
}
