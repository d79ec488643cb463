package postgres

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// normalizeSQL drops SQL line comments and pgbench meta lines' comments
// and collapses white space, so that the same statement indented or
// wrapped another way reads the same.
func normalizeSQL(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if i := strings.Index(line, "--"); i >= 0 && !strings.Contains(line[:i], "'") {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte(' ')
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// statementPattern matches sql with any text in place of each $n parameter.
func statementPattern(sql string) *regexp.Regexp {
	parts := regexp.MustCompile(`\$\d+`).Split(normalizeSQL(sql), -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(strings.Join(parts, `(.+?)`))
}

// TestBenchScriptsCarryTheStoresStatements: the pgbench scripts of `make
// bench` measure the statements the store sends, with a value in place of
// each parameter, so that the ceilings move with the store (the fence's
// attempts, the held status…) and not only when someone remembers to edit
// the scripts. TestPgbenchScripts (bench/cmd/billbench) runs them.
func TestBenchScriptsCarryTheStoresStatements(t *testing.T) {
	t.Parallel()
	read := sqlInvoicesForUpdate
	for script, stmts := range map[string]map[string]string{
		"../../bench/reserve_settle.sql": {
			"sqlReserveOne": sqlReserveOne, "sqlInvoicesForUpdate": read, "sqlSettleOne": sqlSettleOne,
		},
		"../../bench/reserve_settle_grouped.sql": {
			"sqlReservePrelude": sqlReservePrelude, "sqlReserveGroup": sqlReserveGroup, "sqlInvoicesForUpdate": read,
			"sqlSettlePrelude": sqlSettlePrelude, "sqlSettleGroup": sqlSettleGroup,
		},
	} {
		raw, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		text := normalizeSQL(string(raw))
		for name, sql := range stmts {
			if !statementPattern(sql).MatchString(text) {
				t.Errorf("%s does not carry the store's %s (with values for its parameters):\n%s", script, name, normalizeSQL(sql))
			}
		}
	}
}
