package migrations

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

var (
	nameRE         = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)
	concurrentlyRE = regexp.MustCompile(`(?im)^[^-]*\bCONCURRENTLY\b`)
)

// noTxMarker is infra/postgres.NoTransactionMarker (this package cannot
// import it: infra/postgres imports this one).
const noTxMarker = "-- billing:no-transaction"

// TestFiles checks what infra/postgres relies on: files named NNNN_name.sql,
// one per number, each with SQL in it, a file using CONCURRENTLY marked to
// run outside a transaction, and the first one creating the contract's
// tables.
func TestFiles(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		t.Fatalf("read embedded FS: %v", err)
	}
	if len(entries) == 0 {
		t.Fatal("no embedded migrations")
	}
	seen := map[string]string{}
	for _, e := range entries {
		m := nameRE.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s: want a name like 0001_init.sql", e.Name())
			continue
		}
		if prev, ok := seen[m[1]]; ok {
			t.Errorf("%s and %s share the number %s", prev, e.Name(), m[1])
		}
		seen[m[1]] = e.Name()
		b, err := fs.ReadFile(FS, e.Name())
		if err != nil {
			t.Fatalf("read %s: %v", e.Name(), err)
		}
		if strings.TrimSpace(string(b)) == "" {
			t.Errorf("%s is empty", e.Name())
		}
		// Postgres refuses CONCURRENTLY inside a transaction (25001): the
		// file must say so on its first line (README.md).
		first, _, _ := strings.Cut(string(b), "\n")
		if concurrentlyRE.Match(b) && strings.TrimSpace(first) != noTxMarker {
			t.Errorf("%s uses CONCURRENTLY: want %q as its first line", e.Name(), noTxMarker)
		}
	}
	b, err := fs.ReadFile(FS, "0001_init.sql")
	if err != nil {
		t.Fatalf("read 0001_init.sql: %v", err)
	}
	for _, want := range []string{"CREATE TABLE processed_event", "PRIMARY KEY (event_id, consumer_group)", "CREATE TABLE invoice"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("0001_init.sql lacks %q", want)
		}
	}
}
