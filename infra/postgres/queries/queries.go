// Package queries holds the SQL statements of infra/postgres, one file per
// statement, named after it (reserve_one.sql is the reserve of one event),
// and reads them for the store and for `make bench` (bench/cmd/billbench
// builds its pgbench scripts from the same files), so that what is measured
// is what the service sends.
//
// A file is the statement as the server receives it, readable and runnable
// on its own (psql, EXPLAIN): the comment lines that open it say why it is
// so, and are not sent; everything after them is, less one closing
// semicolon. Fragments several statements share (the written_xact stamp,
// the push of a gateway answer, the outbox insert, the invoice's column
// list) are written out in each file rather than included from another:
// infra/postgres's tests tie the copies (docs/design.md, "SQL in files").
//
// Parameters are $1, $2…, numbered without a gap. A name that cannot be a
// parameter (a partition created or dropped by the dedup maintainer: DDL
// takes no parameters) is written as psql writes a variable, :"name" for an
// identifier and :'name' for a literal, and given its value by Expand,
// quoted; the file still runs in psql after \set name value.
package queries

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// files are the statements.
//
//go:embed *.sql
var files embed.FS

// Statement is one file of statements.
type Statement struct {
	// Name is the file's name without ".sql".
	Name string
	// SQL is the text sent to the server: the file less its opening
	// comment lines and its closing semicolon.
	SQL string
	// Params is the number of parameters, $1…$Params.
	Params int
	// Vars are the psql-style variables (:"name", :'name') that Expand
	// fills, in order of first use.
	Vars []string
}

// fileName is what a statement's file may be called.
var fileName = regexp.MustCompile(`^[a-z][a-z0-9_]*\.sql$`)

// Load parses the embedded statements.
func Load() (map[string]Statement, error) { return Parse(files) }

// Parse parses every *.sql file at the top of fsys, by name.
func Parse(fsys fs.FS) (map[string]Statement, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list statements: %w", err)
	}
	out := make(map[string]Statement, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read statement %s: %w", name, err)
		}
		st, err := parse(name, string(b))
		if err != nil {
			return nil, fmt.Errorf("statement %s: %w", name, err)
		}
		out[st.Name] = st
	}
	return out, nil
}

// parse reads one file called name.
func parse(name, text string) (Statement, error) {
	if !fileName.MatchString(name) {
		return Statement{}, fmt.Errorf("file name: want lower case letters, digits and _, ending in .sql")
	}
	st := Statement{Name: strings.TrimSuffix(path.Base(name), ".sql"), SQL: body(text)}
	if st.SQL == "" {
		return Statement{}, fmt.Errorf("no statement after the comments")
	}
	seen := map[int]bool{}
	_, err := rewrite(st.SQL,
		func(n int) (string, error) {
			seen[n] = true
			st.Params = max(st.Params, n)
			return "", nil
		},
		func(v string, _ bool) (string, error) {
			if !slices.Contains(st.Vars, v) {
				st.Vars = append(st.Vars, v)
			}
			return "", nil
		})
	if err != nil {
		return Statement{}, err
	}
	for n := 1; n <= st.Params; n++ {
		if !seen[n] {
			// Postgres could not tell the type of the missing one, and
			// every caller would pass a value for nothing.
			return Statement{}, fmt.Errorf("parameters up to $%d but no $%d", st.Params, n)
		}
	}
	return st, nil
}

// body is text less its opening comment lines (and blank lines), its
// trailing space and one closing semicolon.
func body(text string) string {
	rest := text
	for rest != "" {
		line, after, _ := strings.Cut(rest, "\n")
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			break
		}
		rest = after
	}
	rest = strings.TrimRightFunc(rest, isSpace)
	return strings.TrimRightFunc(strings.TrimSuffix(rest, ";"), isSpace)
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// Expand returns st's text with each variable replaced by its value in
// vals: :"name" by the value as a quoted identifier, :'name' as a quoted
// literal. Every variable needs a value, and every value a variable.
func (st Statement) Expand(vals map[string]string) (string, error) {
	for k := range vals {
		if !slices.Contains(st.Vars, k) {
			return "", fmt.Errorf("statement %s: no variable %q", st.Name, k)
		}
	}
	out, err := rewrite(st.SQL, nil, func(v string, ident bool) (string, error) {
		val, ok := vals[v]
		switch {
		case !ok:
			return "", fmt.Errorf("no value for %q", v)
		case strings.ContainsRune(val, 0):
			return "", fmt.Errorf("value of %q holds a NUL byte", v)
		case ident:
			return `"` + strings.ReplaceAll(val, `"`, `""`) + `"`, nil
		default:
			return `'` + strings.ReplaceAll(val, `'`, `''`) + `'`, nil
		}
	})
	if err != nil {
		return "", fmt.Errorf("statement %s: %w", st.Name, err)
	}
	return out, nil
}

// ReplaceParams returns sql with each parameter $n outside literals,
// quoted identifiers and comments replaced by with(n) (bench/cmd/billbench
// puts pgbench expressions in their place).
func ReplaceParams(sql string, with func(n int) (string, error)) (string, error) {
	return rewrite(sql, with, nil)
}
