package version

import (
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/acme/billing/migrations"
)

// changelog reads the repository's CHANGELOG.md.
func changelog(t *testing.T) []ChangelogEntry {
	t.Helper()
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ParseChangelog(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestChangelogMatchesTheCode: CHANGELOG.md names this build's release
// first, with what the code says of it (the releases it runs beside and
// rolls back to, its last migration the highest embedded one), and each
// release's first migration as ReleaseOfSchema knows it, each release
// starting right after the one before ended.
func TestChangelogMatchesTheCode(t *testing.T) {
	t.Parallel()
	entries := changelog(t)
	if len(entries) == 0 || entries[0].Version != Release {
		t.Fatalf("CHANGELOG.md's newest release = %+v, want %s (version.Release)", entries, Release)
	}
	cur := entries[0]
	if cur.RunsBeside != RunsBeside || cur.RollsBackTo != RollsBackTo {
		t.Errorf("CHANGELOG.md %s: runs beside %s, rolls back to %s; the code says %s and %s", Release, cur.RunsBeside, cur.RollsBackTo, RunsBeside, RollsBackTo)
	}
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatal(names, err)
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = strings.TrimSuffix(n, ".sql")
	}
	if got, want := cur.LastMigration(), names[len(names)-1]; got != want {
		t.Errorf("CHANGELOG.md %s: last migration %s, want the highest embedded, %s", Release, got, want)
	}
	var known []string
	for _, s := range releaseSchemas() {
		known = append(known, s.release+" "+s.first)
	}
	var listed []string
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		listed = append(listed, e.Version+" "+e.FirstMigration())
		for _, m := range []string{e.FirstMigration(), e.LastMigration()} {
			if !slices.Contains(names, m) {
				t.Errorf("CHANGELOG.md %s names migration %s, which is not embedded", e.Version, m)
			}
		}
		if i > 0 {
			next := slices.Index(names, e.LastMigration()) + 1
			if next >= len(names) || names[next] != entries[i-1].FirstMigration() {
				t.Errorf("CHANGELOG.md: %s's first migration %s does not follow %s's last, %s", entries[i-1].Version, entries[i-1].FirstMigration(), e.Version, e.LastMigration())
			}
		}
		if Compare(e.RunsBeside, e.Version) > 0 || Compare(e.RollsBackTo, e.Version) > 0 {
			t.Errorf("CHANGELOG.md %s runs beside %s and rolls back to %s: not later than itself", e.Version, e.RunsBeside, e.RollsBackTo)
		}
		if i > 0 && Compare(e.Version, entries[i-1].Version) >= 0 {
			t.Errorf("CHANGELOG.md lists %s before %s: want newest first", entries[i-1].Version, e.Version)
		}
	}
	if !slices.Equal(listed, known) {
		t.Errorf("releases and their first migrations: CHANGELOG.md %v, ReleaseOfSchema %v", listed, known)
	}
}

// TestPreviousRelease: the release before this one, and the one before
// that, are 1.1.0 (e6198e4) and 1.0.0 (8072a37), as the upgrade test reads
// them; in a checkout with history, each named commit is a commit of it.
func TestPreviousRelease(t *testing.T) {
	t.Parallel()
	entries := changelog(t)
	prev, ok := Previous(entries, Release)
	if !ok || prev.Version != "1.1.0" || !strings.HasPrefix(prev.Commit, "e6198e4") {
		t.Errorf("Previous(%s) = %+v, %v, want 1.1.0 at e6198e4", Release, prev, ok)
	}
	first, ok := Previous(entries, prev.Version)
	if !ok || first.Version != "1.0.0" || !strings.HasPrefix(first.Commit, "8072a37") {
		t.Errorf("Previous(%s) = %+v, %v, want 1.0.0 at 8072a37", prev.Version, first, ok)
	}
	if _, ok := Previous(entries, first.Version); ok {
		t.Errorf("Previous(%s) found a release; want none before the first", first.Version)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: cannot check the commits")
	}
	for _, e := range entries {
		if e.Unreleased {
			continue
		}
		out, err := exec.Command("git", "cat-file", "-t", e.Commit).CombinedOutput()
		if err != nil {
			if shallow, _ := exec.Command("git", "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(shallow)) != "false" {
				t.Skipf("a checkout without the history of %s (%s): cannot check its commit", e.Version, strings.TrimSpace(string(out)))
			}
			t.Errorf("CHANGELOG.md %s names commit %s, which this repository does not have: %s", e.Version, e.Commit, out)
		}
	}
}

func TestReleaseOfSchemaAndRollbacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema, release string
		refused         bool
	}{
		{"", "", false},
		{"0001_init", "1.0.0", true},
		{"0003_invoice_key_unique_rejected_resume", "1.0.0", true},
		{"0004_attempt_fence_held", "1.1.0", false},
		{"0005_invoice_outbox", "1.1.0", false},
		{"0006_release_writers", "1.2.0", false},
		{"0099_future", "1.2.0", false},
	} {
		if got := ReleaseOfSchema(tc.schema); got != tc.release {
			t.Errorf("ReleaseOfSchema(%q) = %q, want %q", tc.schema, got, tc.release)
		}
		if got := RollbackRefusal(tc.schema) != ""; got != tc.refused {
			t.Errorf("RollbackRefusal(%q) = %q, want refused %v", tc.schema, RollbackRefusal(tc.schema), tc.refused)
		}
	}
	if !strings.Contains(RollbackRefusal("0003_invoice_key_unique_rejected_resume"), "no attempt fence") {
		t.Errorf("RollbackRefusal of 1.0.0's schema = %q, want why", RollbackRefusal("0003_invoice_key_unique_rejected_resume"))
	}
	for _, c := range []struct {
		a, b string
		want int
	}{{"1.2.0", "1.10.0", -1}, {"1.1.0", "1.1.0", 0}, {"2.0.0", "1.9.9", 1},
		{"15", "16", -1}, {"9.6", "15", -1}, {"16", "16", 0}, {"16.1", "16", 1}, {"17", "9.6", 1}} {
		if got := Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestParseChangelogRefusesWhatCodeCannotRead: a released entry without
// its commit, or with an unknown key, is an error, not a silent gap.
func TestParseChangelogRefusesWhatCodeCannotRead(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"no commit":   "## 1.0.0\n\n- Migrations: 0001_a … 0002_b\n- Runs beside: 1.0.0\n- Rolls back to: 1.0.0\n",
		"unknown key": "## 1.0.0\n\n- Commit: 8072a37e07a9b31684734a98dfbfc5ae20b50341\n- Schema: 0002_b\n",
		"twice":       "## 1.0.0 (unreleased)\n- Migrations: a\n- Runs beside: 1.0.0\n- Rolls back to: 1.0.0\n## 1.0.0 (unreleased)\n",
		"bad heading": "## next\n",
	} {
		if _, err := ParseChangelog(text); err == nil {
			t.Errorf("%s: ParseChangelog accepted it", name)
		}
	}
}
