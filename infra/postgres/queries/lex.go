package queries

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// rewrite copies sql, replacing each parameter $n by param(n) and each
// psql-style variable (:"name", :'name') by variable(name, ident), where
// they are tokens: not inside a string or dollar-quoted literal, a quoted
// identifier or a comment. A nil function leaves its tokens as they are.
// It knows as much of Postgres's lexical rules as telling those apart
// takes, and refuses text it cannot read (an unterminated literal or
// comment).
func rewrite(sql string, param func(n int) (string, error), variable func(name string, ident bool) (string, error)) (string, error) {
	var b strings.Builder
	b.Grow(len(sql))
	for i := 0; i < len(sql); {
		c := sql[i]
		next := byte(0)
		if i+1 < len(sql) {
			next = sql[i+1]
		}
		end, _, ok, err := Skip(sql, i)
		if err != nil {
			return "", err
		}
		if ok {
			b.WriteString(sql[i:end])
			i = end
			continue
		}
		switch {
		case c == '$' && isDigit(next) && (i == 0 || !continuesIdent(sql[i-1])):
			j := i + 1
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			n, err := strconv.Atoi(sql[i+1 : j])
			if err != nil || n < 1 {
				return "", fmt.Errorf("parameter %q: want $1 or more", sql[i:j])
			}
			out := sql[i:j]
			if param != nil {
				if out, err = param(n); err != nil {
					return "", fmt.Errorf("parameter $%d: %w", n, err)
				}
			}
			b.WriteString(out)
			i = j
		case c == ':' && (next == '"' || next == '\'') && (i == 0 || sql[i-1] != ':'):
			end, err := quoted(sql, i+1, next, false)
			if err != nil {
				return "", err
			}
			name := sql[i+2 : end-1]
			if name == "" || strings.ContainsAny(name, `"'`) {
				return "", fmt.Errorf("variable %s: want a plain name", sql[i:end])
			}
			out := sql[i:end]
			if variable != nil {
				if out, err = variable(name, next == '"'); err != nil {
					return "", fmt.Errorf("variable %s: %w", sql[i:end], err)
				}
			}
			b.WriteString(out)
			i = end
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// Skip reports what starts at sql[i] that holds no token: a comment (--
// or /* */, which nest), a string literal ('…', E'…'), a quoted identifier
// ("…") or a dollar-quoted literal ($tag$…$tag$). It returns its end and
// whether it is a comment, or ok false when none starts there (a parameter
// $1 and a lone $ are not one). One that does not end is an error. The
// migrator splits its no-transaction files with it, as rewrite reads
// statements.
func Skip(sql string, i int) (end int, comment, ok bool, err error) {
	c, next := sql[i], byte(0)
	if i+1 < len(sql) {
		next = sql[i+1]
	}
	switch {
	case c == '-' && next == '-':
		end := strings.IndexByte(sql[i:], '\n')
		if end < 0 {
			return len(sql), true, true, nil
		}
		return i + end, true, true, nil
	case c == '/' && next == '*':
		end, err := blockComment(sql, i)
		return end, true, err == nil, err
	case c == '\'':
		end, err := quoted(sql, i, '\'', escapes(sql, i))
		return end, false, err == nil, err
	case c == '"':
		end, err := quoted(sql, i, '"', false)
		return end, false, err == nil, err
	case c == '$' && !isDigit(next) && (i == 0 || !continuesIdent(sql[i-1])):
		end, ok, err := dollarQuoted(sql, i)
		return end, false, ok, err
	}
	return i, false, false, nil
}

var (
	errUnterminated = errors.New("unterminated")
	errNoComment    = fmt.Errorf("/* comment: %w", errUnterminated)
)

// quoted returns the end of the literal or identifier opening with q at
// sql[i]: a doubled q stands for itself, and so does a backslashed
// character when backslash escapes it.
func quoted(sql string, i int, q byte, backslash bool) (int, error) {
	for j := i + 1; j < len(sql); j++ {
		switch {
		case backslash && sql[j] == '\\':
			j++
		case sql[j] == q && j+1 < len(sql) && sql[j+1] == q:
			j++
		case sql[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%c-quoted text at byte %d: %w", q, i, errUnterminated)
}

// escapes reports whether the string literal at sql[i] is an escape
// string (E'…'), where a backslash escapes the next character.
func escapes(sql string, i int) bool {
	return i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !continuesIdent(sql[i-2]))
}

// blockComment returns the end of the /* comment at sql[i]; Postgres
// nests them.
func blockComment(sql string, i int) (int, error) {
	depth := 0
	for j := i; j+1 < len(sql); j++ {
		switch sql[j : j+2] {
		case "/*":
			depth++
			j++
		case "*/":
			depth--
			j++
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, errNoComment
}

// dollarQuoted returns the end of the dollar-quoted literal ($tag$…$tag$)
// at sql[i], or ok false when the $ there opens none.
func dollarQuoted(sql string, i int) (end int, ok bool, err error) {
	j := i + 1
	for j < len(sql) && isIdent(sql[j]) {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return 0, false, nil
	}
	tag := sql[i : j+1]
	k := strings.Index(sql[j+1:], tag)
	if k < 0 {
		return 0, false, fmt.Errorf("%s-quoted text at byte %d: %w", tag, i, errUnterminated)
	}
	return j + 1 + k + len(tag), true, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdent reports a byte of a dollar quote's tag.
func isIdent(c byte) bool {
	return c == '_' || isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

// continuesIdent reports a byte that may continue an unquoted identifier:
// a $ or an E' right after one belongs to it.
func continuesIdent(c byte) bool { return c == '$' || isIdent(c) }
