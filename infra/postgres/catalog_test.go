package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/migrations"
)

// sqlCatalog describes what the migrations make in the public schema, one
// line per object, in a stable order: tables' columns (position, type, null,
// default), constraints (definition, validated), indexes (definition,
// valid), functions (definition) and triggers (definition). Two databases
// with the same text have the same schema, whichever statements built it.
const sqlCatalog = `
SELECT 'column ' || c.relname || '.' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		|| coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		|| CASE WHEN k.convalidated THEN ' validated' ELSE ' NOT VALIDATED' END
	FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'public'
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' INVALID' END
	FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'public'
UNION ALL
SELECT 'function ' || pg_get_functiondef(p.oid)
	FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid) || CASE t.tgenabled WHEN 'D' THEN ' DISABLED' ELSE '' END
	FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'public' AND NOT t.tgisinternal
ORDER BY 1`

// catalog returns sqlCatalog's description of pool's database.
func catalog(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, _ := pool.Query(ctx, sqlCatalog)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the catalog: %v", err)
	}
	return strings.Join(lines, "\n")
}

// migrationSet returns the embedded migrations up to and including last
// (all of them when last is ""), with the files of replace in place of
// theirs: a database as an earlier release, or an earlier form of a file,
// left it.
func migrationSet(t *testing.T, last string, replace map[string][]byte) fstest.MapFS {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	set := fstest.MapFS{}
	for _, name := range names {
		if last != "" && strings.TrimSuffix(name, ".sql") > last {
			continue
		}
		b, ok := replace[name]
		if !ok {
			if b, err = fs.ReadFile(migrations.FS, name); err != nil {
				t.Fatal(err)
			}
		}
		set[name] = &fstest.MapFile{Data: b}
	}
	return set
}

// lineDiff lists the lines of want missing from got (-) and those of got
// missing from want (+).
func lineDiff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for l := range strings.SplitSeq(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for l := range strings.SplitSeq(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for l := range strings.SplitSeq(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
