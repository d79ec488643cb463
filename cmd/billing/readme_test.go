package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/golden"
)

var update = flag.Bool("update", false, "rewrite the table of what each command reads in README.md")

const (
	readsBegin = "<!-- command-config:begin (generated from cmd/billing's commands; go test ./cmd/billing -run TestReadmeCommandConfiguration -update) -->\n"
	readsEnd   = "<!-- command-config:end -->"
)

// README.md's table of what each command reads is the command table's:
// the deploy tests read it to check that each container carries the
// secrets of its command and no other.
func TestReadmeCommandConfiguration(t *testing.T) {
	golden.Section(t, "../../README.md", readsBegin, readsEnd, commandConfiguration(), *update,
		"go test ./cmd/billing -run TestReadmeCommandConfiguration -update")
}

// commandConfiguration renders the table: each command, the parts it
// reads and their variables.
func commandConfiguration() string {
	var b strings.Builder
	b.WriteString("| command | parts | variables |\n|---|---|---|\n")
	for _, c := range commands() {
		switch c.reads() {
		case 0:
			fmt.Fprintf(&b, "| `billing %s` | none | — |\n", c.name)
		case config.AllParts:
			fmt.Fprintf(&b, "| `billing %s` | all | every variable above |\n", c.name)
		default:
			fmt.Fprintf(&b, "| `billing %s` | %s | `%s` |\n", c.name, c.reads(), strings.Join(config.NamesOf(c.reads()), "`, `"))
		}
	}
	return b.String()
}
