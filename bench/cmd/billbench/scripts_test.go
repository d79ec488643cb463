package main

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/acme/billing/infra/postgres/queries"
)

// TestPgbenchScriptsBindEveryParameter: the scripts carry the store's
// statements with every parameter given a pgbench value (none is left for
// pgbench to choke on), in the pipelines the store sends them in.
func TestPgbenchScriptsBindEveryParameter(t *testing.T) {
	t.Parallel()
	all, err := queries.Load()
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := pgbenchScripts(all)
	if err != nil {
		t.Fatalf("pgbenchScripts() error = %v", err)
	}
	left := errors.New("a parameter left")
	for name, want := range map[string][]string{
		perEventScript: {`\startpipeline`, "WITH dedup AS", "FOR UPDATE;", `\endpipeline`, "SELECT count(*) FROM moved;"},
		groupedScript:  {`\startpipeline`, "force_generic_plan", "FROM unnest(", "FOR UPDATE;", `\endpipeline`, "'synchronous_commit', 'off'", "SELECT order_id FROM moved;"},
	} {
		script := scripts[name]
		if _, err := queries.ReplaceParams(script, func(int) (string, error) { return "", left }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		at := 0
		for _, w := range want {
			i := strings.Index(script[at:], w)
			if i < 0 {
				t.Errorf("%s: no %q after byte %d:\n%s", name, w, at, script)
				break
			}
			at += i + len(w)
		}
	}
}

// TestPgbenchScriptsFollowTheStatements: a statement that gains a
// parameter, or goes, stops the bench instead of being measured with a
// value missing.
func TestPgbenchScriptsFollowTheStatements(t *testing.T) {
	t.Parallel()
	all, err := queries.Load()
	if err != nil {
		t.Fatal(err)
	}
	more := maps.Clone(all)
	st := more["settle_one"]
	st.SQL, st.Params = st.SQL+" AND $10", st.Params+1
	more["settle_one"] = st
	if _, err := pgbenchScripts(more); err == nil || !strings.Contains(err.Error(), "settle_one takes 10 parameters, the script gives 9") {
		t.Errorf("pgbenchScripts(settle_one with a parameter more) error = %v, want it named", err)
	}
	gone := maps.Clone(all)
	delete(gone, "reserve_group")
	if _, err := pgbenchScripts(gone); err == nil || !strings.Contains(err.Error(), "no statement reserve_group") {
		t.Errorf("pgbenchScripts(no reserve_group) error = %v, want it named", err)
	}
}
