package postgres

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres/queries"
	"github.com/acme/billing/migrations"
)

// TestStatementsLoad: every file of queries/ is a statement the package
// takes, and every statement it takes has its file; a file too many or one
// missing is named.
func TestStatementsLoad(t *testing.T) {
	t.Parallel()
	all, err := queries.Load()
	if err != nil {
		t.Fatalf("queries.Load() error = %v", err)
	}
	if _, err := loadStatements(all); err != nil {
		t.Fatalf("loadStatements() error = %v", err)
	}

	extra := maps.Clone(all)
	extra["settle_three"] = queries.Statement{Name: "settle_three", SQL: "SELECT 3"}
	if _, err := loadStatements(extra); err == nil || !strings.Contains(err.Error(), "queries/settle_three.sql: no statement") {
		t.Errorf("loadStatements(a file no statement takes) error = %v, want it named", err)
	}
	missing := maps.Clone(all)
	delete(missing, "settle_one")
	if _, err := loadStatements(missing); err == nil || !strings.Contains(err.Error(), "no file queries/settle_one.sql") {
		t.Errorf("loadStatements(settle_one missing) error = %v, want it named", err)
	}
	vars := maps.Clone(all)
	vars["settle_one"] = queries.Statement{Name: "settle_one", SQL: `SELECT :'x'`, Vars: []string{"x"}}
	if _, err := loadStatements(vars); err == nil || !strings.Contains(err.Error(), "variables [x] to expand") {
		t.Errorf("loadStatements(settle_one with a variable) error = %v, want it refused as plain text", err)
	}
}

// TestEveryStatementIsSent: each statement loadStatements takes is read by
// the package's code (a field no file of it selects would be a file kept
// for nothing).
func TestEveryStatementIsSent(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	_, files := packageFiles(t)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "stmts" {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	typ := reflect.TypeFor[statements]()
	for i := range typ.NumField() {
		if name := typ.Field(i).Name; !used[name] {
			t.Errorf("statement stmts.%s is loaded and never sent", name)
		}
	}
}

// sqlText matches what reads as SQL statement text: a statement's opening
// keywords, in upper case as the project writes them.
var sqlText = regexp.MustCompile(`\b(SELECT|INSERT INTO|DELETE FROM|UPDATE [a-z_]+ (SET|[a-z]+ SET)|LOCK TABLE|(CREATE|ALTER|DROP) (TABLE|INDEX)|WITH [a-z_]+ AS \(|SET LOCAL|BEGIN;)`)

// TestNoSQLInGo: the statements live in queries/, not in Go strings; only
// the migrator keeps its own (its lock, its timeouts, its catalog reads).
func TestNoSQLInGo(t *testing.T) {
	t.Parallel()
	fset, files := packageFiles(t)
	for name, f := range files {
		if name == "migrate.go" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, lit.Value, err)
			}
			if m := sqlText.FindString(s); m != "" {
				t.Errorf("%s: SQL text (%q…) in a Go string: move the statement to queries/", fset.Position(lit.Pos()), m)
			}
			return true
		})
	}
}

// packageFiles parses the package's non-test Go files, by name.
func packageFiles(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	if len(files) == 0 {
		t.Fatal("no Go file found")
	}
	return fset, files
}

// loadedStatements returns the statements as the package reads them, by
// name.
func loadedStatements(t *testing.T) map[string]queries.Statement {
	t.Helper()
	all, err := queries.Load()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// norm collapses white space, so that copies compare by their tokens.
func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestEveryInvoiceWriteStamps: every statement that writes invoice stamps
// written_xact with its transaction's id in each of its writes, so that
// migration 0006's triggers skip the row (docs/design.md, "Releases";
// TestThisReleaseSkipsTheTriggers sees it at the server).
func TestEveryInvoiceWriteStamps(t *testing.T) {
	t.Parallel()
	const stamp = "written_xact = pg_current_xact_id()"
	update := regexp.MustCompile(`\bUPDATE invoice\b`)
	insert := regexp.MustCompile(`\bINSERT INTO invoice\s*\(([^)]*)\)`)
	writes := 0
	for name, st := range loadedStatements(t) {
		sql := norm(st.SQL)
		for _, loc := range update.FindAllStringIndex(sql, -1) {
			writes++
			// The SET list ends at the statement's FROM or WHERE.
			set := sql[loc[1]:]
			if end := regexp.MustCompile(`\b(FROM|WHERE)\b`).FindStringIndex(set); end != nil {
				set = set[:end[0]]
			}
			if !strings.Contains(set, stamp) {
				t.Errorf("%s: an UPDATE invoice without %q in its SET list: %s", name, stamp, set)
			}
		}
		for _, m := range insert.FindAllStringSubmatchIndex(sql, -1) {
			writes++
			cols := strings.Split(sql[m[2]:m[3]], ", ")
			rest := sql[m[1]:]
			if end := strings.Index(rest, " ON CONFLICT"); end >= 0 {
				rest = rest[:end]
			}
			if !slices.Contains(cols, "written_xact") || !strings.Contains(rest, "pg_current_xact_id()") {
				t.Errorf("%s: an INSERT INTO invoice that does not stamp written_xact: %s", name, sql[m[0]:])
			}
		}
	}
	if writes < 10 {
		t.Errorf("%d writes of invoice found, want the store's (reserve, take, hold, settle, release, claim, resolve…)", writes)
	}
}

// TestOutboxInsertsAreOne: every statement that writes an invoice event
// writes the same row, its id invoice_event_id (migrations/0005), once;
// only its traceparent, the rows it reads and its condition differ.
func TestOutboxInsertsAreOne(t *testing.T) {
	t.Parallel()
	copyOf := regexp.MustCompile(`^INSERT INTO invoice_outbox \(event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent\) ` +
		`SELECT invoice_event_id\(order_id, event_id, status, reopens\), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, ` +
		`(NULL|NULLIF\((cause|\$\d+), ''\)) FROM (held|moved) WHERE (status <> 'pending' AND )?\$\d+::boolean ON CONFLICT \(event_id\) DO NOTHING$`)
	each := regexp.MustCompile(`INSERT INTO invoice_outbox\b.*?DO NOTHING`)
	inserts := 0
	for name, st := range loadedStatements(t) {
		sql := norm(st.SQL)
		found := each.FindAllString(sql, -1)
		if strings.Count(sql, "invoice_outbox (") != len(found) {
			t.Errorf("%s: an outbox insert that does not end ON CONFLICT (event_id) DO NOTHING", name)
		}
		for _, ins := range found {
			inserts++
			if !copyOf.MatchString(ins) {
				t.Errorf("%s: outbox insert differs from the others':\n%s", name, ins)
			}
		}
	}
	if inserts < 7 {
		t.Errorf("%d outbox inserts, want one per statement that moves an invoice into a published status", inserts)
	}
}

// TestAnswerPushesAreOne: the invoice's history of the gateway's answers
// (migrations/0007) is pushed in two forms only: the answer the caller got,
// at now(), or order.AnswerNone for an attempt that ended with no answer, at
// its end.
func TestAnswerPushesAreOne(t *testing.T) {
	t.Parallel()
	unanswered := regexp.MustCompile(`^answers = CASE WHEN (inv\.)?attempt_until IS NULL THEN (inv\.)?answers ` +
		`ELSE invoice_answers_push\((inv\.)?answers, (inv\.)?attempt_until, (inv\.)?event_id, '` + regexp.QuoteMeta(order.AnswerNone) + `'\) END`)
	answered := regexp.MustCompile(`^answers = invoice_answers_push\((invoice\.)?answers, now\(\), (invoice\.)?event_id, (\$\d+|u\.answer)\)`)
	pushes := 0
	for name, st := range loadedStatements(t) {
		sql := norm(st.SQL)
		n := 0
		for _, loc := range regexp.MustCompile(`\banswers = `).FindAllStringIndex(sql, -1) {
			n++
			if rest := sql[loc[0]:]; !unanswered.MatchString(rest) && !answered.MatchString(rest) {
				t.Errorf("%s: answers pushed in another form: %.160s", name, rest)
			}
		}
		if calls := strings.Count(sql, "invoice_answers_push("); calls != n {
			t.Errorf("%s: %d invoice_answers_push calls, %d of them in an answers = clause", name, calls, n)
		}
		pushes += n
	}
	if pushes < 8 {
		t.Errorf("%d pushes of answers, want every take, hold, settle, release and decision's", pushes)
	}
}

// invoiceColumns are the columns scanInvoice reads, and summaryColumns
// scanSummary's, as each statement read by them selects them.
const (
	invoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens`
	summaryColumns = invoiceColumns + `, updated_at, greatest(extract(epoch FROM now() - updated_at), 0)::float8, resume_attempts`
)

// TestColumnsAreOne: the statements whose rows scanInvoice and scanSummary
// read select their columns, in their order.
func TestColumnsAreOne(t *testing.T) {
	t.Parallel()
	all := loadedStatements(t)
	for _, tc := range []struct {
		cols  string
		names []string
	}{
		{invoiceColumns, []string{"invoices_all", "invoices_for_update", "claim_pending", "resolve_read", "resolve"}},
		{summaryColumns, []string{"list_oldest", "list_newest", "show_invoice"}},
	} {
		for _, name := range tc.names {
			sql := norm(all[name].SQL)
			i := strings.LastIndex(sql, "SELECT "+tc.cols)
			if i < 0 {
				t.Errorf("%s: its last SELECT does not start with the columns its scan reads: %s", name, sql)
				continue
			}
			if rest := sql[i+len("SELECT "+tc.cols):]; !strings.HasPrefix(rest, ",") && !strings.HasPrefix(rest, " FROM") {
				t.Errorf("%s: the columns its scan reads are followed by %.40q", name, rest)
			}
		}
	}
}

// TestPreludesShareTheirPlanSettings: the settle's prelude sets what the
// reserve's does, and only adds its commit that does not wait for its
// flush.
func TestPreludesShareTheirPlanSettings(t *testing.T) {
	t.Parallel()
	all := loadedStatements(t)
	reserve, settle := norm(all["reserve_prelude"].SQL), norm(all["settle_prelude"].SQL)
	if want := reserve + ", set_config('synchronous_commit', 'off', true)"; settle != want {
		t.Errorf("settle_prelude = %q, want %q", settle, want)
	}
}

// TestConsumeCommandsAreOne: the switch reads the commands it writes, as
// literals that match decision_consume_idx's predicate
// (migrations/0007_decision.sql).
func TestConsumeCommandsAreOne(t *testing.T) {
	t.Parallel()
	sql := norm(loadedStatements(t)["consume_state"].SQL)
	pause, resume := "'"+commandConsumePause+"'", "'"+commandConsumeResume+"'"
	in := "command IN (" + pause + ", " + resume + ")"
	if !strings.Contains(sql, "command = "+pause) || !strings.Contains(sql, in) {
		t.Errorf("consume_state = %q, want it to read %s and %s", sql, pause, resume)
	}
	index, err := fs.ReadFile(migrations.FS, "0007_decision.sql")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(norm(string(index)), "decision_consume_idx ON decision (id) WHERE "+in) {
		t.Errorf("migrations/0007_decision.sql: decision_consume_idx's predicate is not %s", in)
	}
}
