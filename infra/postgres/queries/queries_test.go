package queries

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// TestLoad: every embedded file parses, into a statement with text and
// without a gap in its parameters.
func TestLoad(t *testing.T) {
	t.Parallel()
	all, err := Load()
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if len(all) == 0 {
		t.Fatal("Load() = no statement")
	}
	for name, st := range all {
		if st.Name != name || st.SQL == "" || strings.HasPrefix(st.SQL, "--") || strings.HasSuffix(st.SQL, ";") {
			t.Errorf("statement %s = %+v, want its name, and its text without the opening comments or the closing semicolon", name, st)
		}
	}
}

// TestParse: the opening comments and one closing semicolon are not sent,
// the parameters are counted, the variables listed, and a file that is not
// a statement is refused, by name.
func TestParse(t *testing.T) {
	t.Parallel()
	all, err := Parse(fstest.MapFS{
		"reserve_one.sql": {Data: []byte("-- why it is so\n--\n\n-- more\nSELECT $2::int,\n\t$1 -- the first\n;\n\n")},
		"drop_part.sql":   {Data: []byte(`DROP TABLE :"part"; -- :"not" a variable here` + "\n" + `SELECT ':"nor" here', $$:'this'$$, x::"char", :'lo'`)},
		"notes.txt":       {Data: []byte("not a statement")},
	})
	if err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	want := map[string]Statement{
		"reserve_one": {Name: "reserve_one", SQL: "SELECT $2::int,\n\t$1 -- the first", Params: 2},
		"drop_part": {Name: "drop_part", SQL: `DROP TABLE :"part"; -- :"not" a variable here` + "\n" + `SELECT ':"nor" here', $$:'this'$$, x::"char", :'lo'`,
			Vars: []string{"part", "lo"}},
	}
	if len(all) != len(want) {
		t.Errorf("Parse() = %d statements, want %d (only *.sql files)", len(all), len(want))
	}
	for name, w := range want {
		if got := all[name]; got.Name != w.Name || got.SQL != w.SQL || got.Params != w.Params || !slices.Equal(got.Vars, w.Vars) {
			t.Errorf("Parse()[%s] = %+v, want %+v", name, got, w)
		}
	}

	for _, tc := range []struct{ name, text, want string }{
		{"empty.sql", "-- only a comment\n\n", "no statement"},
		{"gap.sql", "SELECT $1, $3", "no $2"},
		{"zero.sql", "SELECT $0", "want $1 or more"},
		{"Upper.sql", "SELECT 1", "file name"},
		{"quote.sql", "SELECT 'open", "unterminated"},
		{"ident.sql", `SELECT "open`, "unterminated"},
		{"block.sql", "SELECT 1 /* a /* nested */ comment", "unterminated"},
		{"dollar.sql", "SELECT $f$ open", "unterminated"},
		{"var.sql", `SELECT :"a'b"`, "plain name"},
	} {
		if _, err := Parse(fstest.MapFS{tc.name: {Data: []byte(tc.text)}}); err == nil || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), tc.name) {
			t.Errorf("Parse(%s: %q) error = %v, want one naming the file and saying %q", tc.name, tc.text, err, tc.want)
		}
	}
}

// TestReplaceParams: parameters are tokens, not text inside a literal, a
// quoted identifier or a comment; $10 is not $1 followed by 0.
func TestReplaceParams(t *testing.T) {
	t.Parallel()
	sql := `SELECT $1, $10, '$1', E'\'$1', "$1", $$ $1 $$, $q$ $1 $q$, a$1, /* $1 /* $1 */ */ 'it''s $2' -- $1` + "\n" + `FROM t WHERE x = $2`
	got, err := ReplaceParams(sql, func(n int) (string, error) { return "<" + strconv.Itoa(n) + ">", nil })
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT <1>, <10>, '$1', E'\'$1', "$1", $$ $1 $$, $q$ $1 $q$, a$1, /* $1 /* $1 */ */ 'it''s $2' -- $1` + "\n" + `FROM t WHERE x = <2>`
	if got != want {
		t.Errorf("ReplaceParams() =\n%s\nwant\n%s", got, want)
	}
	boom := errors.New("no value")
	if _, err := ReplaceParams("SELECT $1", func(int) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("ReplaceParams(failing) error = %v, want %v", err, boom)
	}
}

// TestExpand: an identifier variable is quoted as one, a literal as one,
// quotes inside doubled; a missing or an unknown value is refused.
func TestExpand(t *testing.T) {
	t.Parallel()
	st, err := parse("attach.sql", `ALTER TABLE t ATTACH PARTITION :"part" FOR VALUES FROM (:'lo') TO (:'hi')`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Expand(map[string]string{"part": `p"1`, "lo": "a'b", "hi": "z"})
	if want := `ALTER TABLE t ATTACH PARTITION "p""1" FOR VALUES FROM ('a''b') TO ('z')`; err != nil || got != want {
		t.Errorf("Expand() = %q, %v, want %q", got, err, want)
	}
	for _, vals := range []map[string]string{
		{"part": "p", "lo": "a"},                      // no hi
		{"part": "p", "lo": "a", "hi": "z", "x": "y"}, // no variable x
		{"part": "p\x00", "lo": "a", "hi": "z"},       // a NUL cannot be quoted
	} {
		if _, err := st.Expand(vals); err == nil {
			t.Errorf("Expand(%q) error = nil, want one", vals)
		}
	}
}

// TestSkip: what holds no token is skipped whole, comments told from
// literals; a parameter, a lone $ and plain text are not skipped.
func TestSkip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql, rest   string // rest: what follows the skipped part
		comment, ok bool
		at          int
	}{
		{"-- a; comment\nSELECT", "\nSELECT", true, true, 0},
		{"-- to the end", "", true, true, 0},
		{"/* a /* nested; */ one */;", ";", true, true, 0},
		{"'it''s;';", ";", false, true, 0},
		{`E'\';';`, ";", false, true, 1},
		{`xe'\';`, ";", false, true, 2}, // not an escape string: the e ends an identifier
		{`"a"";b";`, ";", false, true, 0},
		{"$$ ; $$;", ";", false, true, 0},
		{"$fn$ $$ ; $fn$;", ";", false, true, 0},
		{"$1;", "$1;", false, false, 0},
		{"$ 1", "$ 1", false, false, 0},
		{"SELECT", "SELECT", false, false, 0},
	} {
		end, comment, ok, err := Skip(tc.sql, tc.at)
		if err != nil || comment != tc.comment || ok != tc.ok || tc.sql[end:] != tc.rest {
			t.Errorf("Skip(%q) = %d (rest %q), comment %v, ok %v, %v; want rest %q, comment %v, ok %v",
				tc.sql, end, tc.sql[end:], comment, ok, err, tc.rest, tc.comment, tc.ok)
		}
	}
}
