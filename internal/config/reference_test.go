package config

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/acme/billing/internal/testkit/golden"
)

var update = flag.Bool("update", false, "rewrite the configuration table in README.md")

const (
	beginMarker = "<!-- config:begin (generated from internal/config; go test ./internal/config -update) -->\n"
	endMarker   = "<!-- config:end -->"
)

// README.md's configuration table is the struct's: same variables, defaults
// and meanings, in the same order.
func TestReadmeConfigurationReference(t *testing.T) {
	golden.Section(t, "../../README.md", beginMarker, endMarker, reference(), *update, "go test ./internal/config -update")
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
// the struct tags (Vars), so the documentation cannot drift from the code.
func reference() string {
	var b strings.Builder
	b.WriteString("| variable | part | default | bounds | meaning |\n|---|---|---|---|---|\n")
	for _, v := range Vars() {
		def := "`" + v.Default + "`"
		switch {
		case v.Required:
			def = "required"
		case v.RequiredWith != "":
			def = "required with `" + v.RequiredWith + "`"
		case v.Default == "":
			def = "—"
		}
		bounds := "—"
		if bd, ok := v.Bound(); ok {
			bounds = bd.String()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", v.Name, v.Part, def, bounds, v.Desc)
	}
	return b.String()
}
