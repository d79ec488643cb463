package version

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RollsBackTo is the oldest release that runs on this release's schema
// without a double charge or a lost event (docs/interface.md §10, CHANGELOG.md
// "Upgrading"): a Deployment may be rolled back to it after this release's
// migrations ran. 1.0.0 knows no attempt fence; migration 0006 keeps the
// fence against its writes, but cannot see all of them, so a rollback to it
// is not safe.
const RollsBackTo = "1.1.0"

// releaseSchemas are the releases so far, oldest first, each with the first
// migration it brought (CHANGELOG.md's "Migrations" lines;
// TestChangelogMatchesTheCode checks that they agree). A database that
// applied migrations up to some version holds the schema of the newest
// release whose first migration is at or before it.
func releaseSchemas() []struct{ release, first string } {
	return []struct{ release, first string }{
		{"1.0.0", "0001_init"},
		{"1.1.0", "0004_attempt_fence_held"},
		{"1.2.0", "0006_release_writers"},
	}
}

// ReleaseOfSchema names the release whose schema a database holds that
// applied the migrations up to schema: "" when schema is empty (a database
// never migrated).
func ReleaseOfSchema(schema string) string {
	r := ""
	for _, s := range releaseSchemas() {
		if schema != "" && s.first <= schema {
			r = s.release
		}
	}
	return r
}

// Compare orders two dotted version numbers numerically by component,
// releases ("1.2.0" < "1.10.0") as Postgres's ("9.6" < "15" < "16.1"): -1,
// 0 or +1. A missing component is 0, and so is one that is not a number.
func Compare(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// RollbackSafe reports whether a Deployment may go back to release r once
// this release's migrations ran: r is at or after RollsBackTo.
func RollbackSafe(r string) bool { return r != "" && Compare(r, RollsBackTo) >= 0 }

// RollbackRefusal is why `billing migrate` refuses, without
// --allow-no-rollback, to bring a database to this release's schema when
// it held schemaBefore before this release's migrations ran (infra/postgres
// SchemaBefore): the release of that schema cannot run on this release's,
// so rolling the Deployment back to it afterwards is not safe. "" when
// migrating is fine: a new database, one of this release or a later one, or
// one of a release that rolls back safely.
func RollbackRefusal(schemaBefore string) string {
	if schemaBefore == "" {
		return ""
	}
	schema := schemaBefore
	r := ReleaseOfSchema(schema)
	if Compare(r, Release) >= 0 || RollbackSafe(r) {
		return ""
	}
	return fmt.Sprintf("the database holds release %s's schema (%s), and %s cannot be rolled back to %s: %s (CHANGELOG.md, %s, Upgrading)",
		r, schema, Release, r, notSafeWhy(r), Release)
}

// notSafeWhy says why a rollback to r, older than RollsBackTo, is not safe.
func notSafeWhy(r string) string {
	if Compare(r, "1.1.0") < 0 {
		return "it has no attempt fence, so beside this schema's pending invoices it can send a key while another request under it is in flight, and charge twice"
	}
	return "it does not know this schema"
}

// RollbackNote is what `billing version` says of rolling back to the
// release whose schema a database held before this release's migrations
// ran (previous): safe or not, and why.
func RollbackNote(previous string) string {
	switch {
	case previous == "":
		return "no earlier release used this database"
	case Compare(previous, Release) >= 0:
		return "it held this release's schema before"
	case RollbackSafe(previous):
		return fmt.Sprintf("rolling back to %s is safe", previous)
	}
	return fmt.Sprintf("rolling back to %s is not safe: %s", previous, notSafeWhy(previous))
}

// ChangelogEntry is one release as CHANGELOG.md names it: the lines of
// "- Key: value" right under its "## VERSION" heading.
type ChangelogEntry struct {
	Version     string
	Unreleased  bool   // "## 1.2.0 (unreleased)": this round, not landed yet
	Commit      string // the commit of main it is, 40 hex digits; "" while unreleased
	Migrations  string // "FIRST … LAST": the migrations it brought
	RunsBeside  string // the oldest release it is safe beside
	RollsBackTo string // the oldest release that runs on its schema
}

// FirstMigration and LastMigration are the two ends of Migrations.
func (e ChangelogEntry) FirstMigration() string {
	f, _, _ := strings.Cut(e.Migrations, " … ")
	return f
}

// LastMigration: see FirstMigration.
func (e ChangelogEntry) LastMigration() string {
	_, l, ok := strings.Cut(e.Migrations, " … ")
	if !ok {
		return e.Migrations
	}
	return l
}

// ParseChangelog reads the releases CHANGELOG.md names, newest first, as
// written there. An entry without a commit that is not marked unreleased,
// a key it does not know, or a release named twice is an error: the file
// is read by tests and by the upgrade test, not only by people.
func ParseChangelog(text string) ([]ChangelogEntry, error) {
	var (
		out    []ChangelogEntry
		cur    *ChangelogEntry
		inHead bool // still in the "- Key: value" lines under the heading
	)
	for n, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			head := strings.TrimSpace(strings.TrimPrefix(line, "## "))
			v, rest, _ := strings.Cut(head, " ")
			e := ChangelogEntry{Version: v, Unreleased: strings.TrimSpace(rest) == "(unreleased)"}
			if strings.Count(v, ".") != 2 {
				return nil, fmt.Errorf("CHANGELOG.md:%d: heading %q: want \"## MAJOR.MINOR.PATCH\"", n+1, line)
			}
			if slices.ContainsFunc(out, func(o ChangelogEntry) bool { return o.Version == v }) {
				return nil, fmt.Errorf("CHANGELOG.md:%d: release %s named twice", n+1, v)
			}
			out = append(out, e)
			cur, inHead = &out[len(out)-1], true
		case cur == nil || !inHead:
		case strings.TrimSpace(line) == "" && cur.Migrations == "":
			// blank lines between the heading and its keys
		case strings.HasPrefix(line, "- ") && strings.Contains(line, ": "):
			key, val, _ := strings.Cut(strings.TrimPrefix(line, "- "), ": ")
			val = strings.Trim(strings.TrimSpace(val), "`")
			switch key {
			case "Commit":
				cur.Commit = val
			case "Migrations":
				cur.Migrations = val
			case "Runs beside":
				cur.RunsBeside = val
			case "Rolls back to":
				cur.RollsBackTo = val
			default:
				return nil, fmt.Errorf("CHANGELOG.md:%d: %s: unknown key %q", n+1, cur.Version, key)
			}
		default:
			inHead = false
		}
	}
	for _, e := range out {
		switch {
		case !e.Unreleased && !isCommit(e.Commit):
			return nil, fmt.Errorf("CHANGELOG.md: release %s: commit %q is not 40 hex digits", e.Version, e.Commit)
		case e.Migrations == "" || e.RunsBeside == "" || e.RollsBackTo == "":
			return nil, fmt.Errorf("CHANGELOG.md: release %s: want the Migrations, Runs beside and Rolls back to lines", e.Version)
		}
	}
	return out, nil
}

func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// Previous returns the release named right after v in entries (newest
// first): the release before v, which v is upgraded from.
func Previous(entries []ChangelogEntry, v string) (ChangelogEntry, bool) {
	for i, e := range entries {
		if e.Version == v && i+1 < len(entries) {
			return entries[i+1], true
		}
	}
	return ChangelogEntry{}, false
}
