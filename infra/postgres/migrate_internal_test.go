package postgres

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"two statements", "DROP INDEX CONCURRENTLY IF EXISTS a;\nCREATE INDEX CONCURRENTLY a ON t (x);\n", []string{"DROP INDEX CONCURRENTLY IF EXISTS a", "CREATE INDEX CONCURRENTLY a ON t (x)"}},
		{"no final semicolon", "SELECT 1;SELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"comments only are dropped", "-- billing:no-transaction\n-- why\n;/* nothing */;\n  ", nil},
		{"comments stay with their statement", "-- lead\nSELECT 1; -- tail", []string{"-- lead\nSELECT 1"}},
		{"semicolon in a line comment", "SELECT 1 -- a; b\n;", []string{"SELECT 1 -- a; b"}},
		{"nested block comment", "SELECT /* a /* b; */ c; */ 1;", []string{"SELECT /* a /* b; */ c; */ 1"}},
		{"string with a semicolon and a doubled quote", "SELECT 'a;''b';SELECT 2", []string{"SELECT 'a;''b'", "SELECT 2"}},
		{"standard string ends at a quote after a backslash", `SELECT 'a\';SELECT 2`, []string{`SELECT 'a\'`, "SELECT 2"}},
		{"escape string", `SELECT E'a\';b';SELECT 2`, []string{`SELECT E'a\';b'`, "SELECT 2"}},
		{"identifier ending in e is not an escape string", `SELECT some'a\';SELECT 2`, []string{`SELECT some'a\'`, "SELECT 2"}},
		{"quoted identifier", `CREATE INDEX CONCURRENTLY "a;b" ON t (x);`, []string{`CREATE INDEX CONCURRENTLY "a;b" ON t (x)`}},
		{"dollar quotes", "DO $$ BEGIN PERFORM 1; END $$;DO $x$ SELECT ';' $x$;", []string{"DO $$ BEGIN PERFORM 1; END $$", "DO $x$ SELECT ';' $x$"}},
		{"parameters and dollars in identifiers", "SELECT $1, a$b$c; SELECT 2", []string{"SELECT $1, a$b$c", "SELECT 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := splitStatements(tc.sql)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("splitStatements(%q) = %q, %v, want %q", tc.sql, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"SELECT 'a", `SELECT "a`, "SELECT /* a", "DO $$ BEGIN", "DO $x$ $y$"} {
		if got, err := splitStatements(bad); err == nil || !strings.Contains(err.Error(), "unterminated") {
			t.Errorf("splitStatements(%q) = %q, %v, want an unterminated error", bad, got, err)
		}
	}
}
