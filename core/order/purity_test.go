package order_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// core/order is the domain: the events and their rules, invoices and their
// transitions, the ports, the errors. It does no I/O, starts no goroutine
// and never waits; the adapters and the background services
// (internal/service) do (README, "Layout"). These tests read its source and
// say so, so that a new file cannot bring a loop or a driver back in
// unnoticed.

// allowedImports are the packages core/order's non-test files may import:
// values, errors, text and time as a type (a clock is a func handed in).
// Not net, os, io, database, encoding/json, sync, log or runtime.
var allowedImports = []string{
	"cmp", "context", "errors", "fmt", "maps", "slices", "sort", "strconv", "strings", "time",
	"unicode", "unicode/utf8", "unicode/utf16", "math", "math/bits",
	"crypto/sha256", "encoding/binary", "encoding/hex",
	"github.com/gofrs/uuid/v5",
}

// waitingCalls are the functions of package time that wait or arm a
// timer: a pass's loop and its pauses belong to a service.
var waitingCalls = []string{"Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}

// impurities returns what in the source of one Go file breaks the rules
// above, one line each; the file is named name in them.
func impurities(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	timeName := "" // what this file calls package time, "" if it does not import it
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(allowedImports, path) {
			found = append(found, fset.Position(imp.Pos()).String()+": imports "+path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = append(found, fset.Position(n.Pos()).String()+": starts a goroutine")
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && slices.Contains(waitingCalls, n.Sel.Name) {
				found = append(found, fset.Position(n.Pos()).String()+": uses time."+n.Sel.Name)
			}
		}
		return true
	})
	return found, nil
}

// TestCoreIsPure: no non-test file of core/order imports a package outside
// allowedImports, starts a goroutine or waits.
func TestCoreIsPure(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		found, err := impurities(fset, name, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Error(f)
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked %d files of core/order, want all of them (run from the package's directory)", checked)
	}
}

// TestImpurities: the check finds each thing it looks for, under any name
// package time is imported by, and passes what is allowed.
func TestImpurities(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []string // substrings, one per finding, in order
	}{
		{"pure", `package order
import (
	"context"
	"time"
	"github.com/gofrs/uuid/v5"
)
func f(ctx context.Context, d time.Duration) (time.Time, uuid.UUID) { return time.Now().Add(d), uuid.Nil }`, nil},
		{"driver", `package order
import (
	"database/sql"
	"os"
)
var _ = sql.ErrNoRows
var _ = os.Args`, []string{"imports database/sql", "imports os"}},
		{"sync", `package order
import "sync"
var mu sync.Mutex`, []string{"imports sync"}},
		{"goroutine", `package order
func f() { go func() {}() }`, []string{"starts a goroutine"}},
		{"sleep", `package order
import "time"
func f() { time.Sleep(time.Second) }`, []string{"time.Sleep"}},
		{"renamed timer", `package order
import clock "time"
func f() { t := clock.NewTimer(clock.Second); <-t.C; <-clock.After(1) }`, []string{"time.NewTimer", "time.After"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			found, err := impurities(token.NewFileSet(), tt.name+".go", tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != len(tt.want) {
				t.Fatalf("impurities = %q, want %d matching %q", found, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(found[i], w) {
					t.Errorf("impurity %d = %q, want it to say %q", i, found[i], w)
				}
			}
		})
	}
}
