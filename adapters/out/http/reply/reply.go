// Package reply reads a payment gateway's reply body: the members status,
// charge_id and error of a JSON object, scanned as the body arrives, up to
// a bound, keeping nothing else. It is its own package, importing nothing of
// the service, so that its fuzzing (FuzzReadReply, in make test) builds and
// instruments this reader alone rather than the HTTP client's whole graph.
package reply

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// MaxBytes is how much of a reply body is read. A charge reply is a
// few dozen bytes; the body is scanned as it arrives, keeping only the
// members the gateway client reads (Body), so this bounds the time spent on a
// reply, not the memory it takes. A body that runs past it is unreadable,
// unless it already said "succeeded" (the client's Client.reply).
const MaxBytes = 1 << 20

// maxMemberBytes bounds a member's value as written (escapes included) that
// Read keeps. Any value it reads whole is shorter once decoded: a
// charge id (order.MaxChargeIDBytes) takes at most 6 bytes a character
// written as \u00XX, so a longer one is too long whatever it holds.
const maxMemberBytes = 2048

// maxKeyBytes bounds a member name as written: longer names are none of
// those Read keeps.
const maxKeyBytes = 64

// Kind is what a top-level member of a reply body held.
type Kind int

const (
	Absent    Kind = iota // not in the body (or null)
	String                // a JSON string of at most maxMemberBytes as written
	TooLong               // a JSON string longer than that
	BadString             // a JSON string that does not decode (a raw control character, a bad escape)
	NotString             // a number, an object, an array, a boolean
)

// Member is one top-level member of a reply body.
type Member struct {
	Kind  Kind
	Value string // String: the decoded string (invalid UTF-8 as U+FFFD, as encoding/json does)
}

// Body is what the gateway client reads of a reply: the top-level members
// status, charge_id and error of a JSON object, with the exact names (JSON
// names are case-sensitive). The rest of the body is read and dropped.
type Body struct {
	Status, ChargeID, ErrCode Member
}

// Succeeded reports whether the body said "status":"succeeded".
func (b Body) Succeeded() bool {
	return b.Status.Kind == String && b.Status.Value == "succeeded"
}

// UnreadableError says a reply body is not a JSON object, or runs past
// MaxBytes: a fault of the gateway's reply, not of the connection.
type UnreadableError struct{ what string }

func (e *UnreadableError) Error() string { return "reply body " + e.what }

var (
	errNotObject = &UnreadableError{"is not a JSON object"}
	errTooLarge  = &UnreadableError{fmt.Sprintf("runs past %d bytes", MaxBytes)}
)

// Read reads a reply body of at most limit bytes. It returns the
// members read, also when it fails: those complete before the failure. The
// error is an *UnreadableError when the body is not a JSON object (trailing
// bytes other than white space included) or runs past limit, and the
// reader's error when the body could not be read to its end (a connection
// closed mid-reply).
func Read(r io.Reader, limit int64) (Body, error) {
	br := replyReaders.Get().(*bufio.Reader)
	br.Reset(r)
	s := &scanner{r: br, left: limit}
	var b Body
	err := s.object(&b)
	if err == nil {
		err = s.end()
	}
	br.Reset(nil) // holds no reply past its read
	replyReaders.Put(br)
	return b, err
}

// replyReaders are the buffers Read reads a body through, reused: one
// per reply was the largest allocation of a charge (the 4 KiB buffer;
// make bench's allocation profile). Nothing Read returns points into
// the buffer: the members it keeps are strings of their own.
var replyReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// scanner reads a JSON text byte by byte, without keeping it.
type scanner struct {
	r    *bufio.Reader
	left int64  // bytes that may still be read
	buf  []byte // str's, reused: what it returns is read before its next call
}

// errEOF is a body that ended before its JSON text did.
var errEOF = &UnreadableError{"ends before its JSON text does"}

// next returns the next byte.
func (s *scanner) next() (byte, error) {
	if s.left <= 0 {
		return 0, errTooLarge
	}
	c, err := s.r.ReadByte()
	switch {
	case errors.Is(err, io.EOF):
		return 0, errEOF
	case err != nil:
		return 0, err // the connection's: a reply cut short
	}
	s.left--
	return c, nil
}

// nonSpace returns the next byte that is not JSON white space.
func (s *scanner) nonSpace() (byte, error) {
	for {
		c, err := s.next()
		if err != nil || (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			return c, err
		}
	}
}

// end reads the white space after the JSON text up to the end of the body.
func (s *scanner) end() error {
	_, err := s.nonSpace()
	switch {
	case errors.Is(err, errEOF):
		return nil
	case err != nil:
		return err
	}
	return errNotObject
}

// object reads a top-level object into b.
func (s *scanner) object(b *Body) error {
	c, err := s.nonSpace()
	if err != nil {
		return err
	}
	if c != '{' {
		return errNotObject
	}
	if c, err = s.nonSpace(); err != nil || c == '}' {
		return err
	}
	for {
		if c != '"' {
			return errNotObject
		}
		raw, over, err := s.str(maxKeyBytes)
		if err != nil {
			return err
		}
		var target *Member
		if !over {
			if key, ok := unquoteKey(raw); ok {
				switch string(key) {
				case "status":
					target = &b.Status
				case "charge_id":
					target = &b.ChargeID
				case "error":
					target = &b.ErrCode
				}
			}
		}
		if c, err = s.nonSpace(); err != nil {
			return err
		}
		if c != ':' {
			return errNotObject
		}
		if c, err = s.nonSpace(); err != nil {
			return err
		}
		m, err := s.value(c, target != nil)
		if err != nil {
			return err
		}
		if target != nil {
			*target = m // a name given twice: the last one, as encoding/json
		}
		if c, err = s.nonSpace(); err != nil {
			return err
		}
		switch c {
		case '}':
			return nil
		case ',':
			if c, err = s.nonSpace(); err != nil {
				return err
			}
		default:
			return errNotObject
		}
	}
}

// value reads the value that starts with c; keep says whether its member
// is one Read keeps.
func (s *scanner) value(c byte, keep bool) (Member, error) {
	switch c {
	case '"':
		raw, over, err := s.str(maxMemberBytes)
		switch {
		case err != nil:
			return Member{}, err
		case !keep:
			return Member{}, nil
		case over:
			return Member{Kind: TooLong}, nil
		}
		v, ok := unquote(raw)
		if !ok {
			return Member{Kind: BadString}, nil
		}
		return Member{Kind: String, Value: v}, nil
	case '{', '[':
		return Member{Kind: NotString}, s.skipNested()
	}
	lit, err := s.literal(c)
	if err != nil {
		return Member{}, err
	}
	if lit == "null" {
		return Member{Kind: Absent}, nil
	}
	return Member{Kind: NotString}, nil
}

// unquote decodes raw, a JSON string with its quotes that str read, as
// encoding/json does; false if encoding/json refuses it. Most strings a
// gateway sends hold no escape, no control character and only valid UTF-8:
// those are their own bytes, and go without the decoder, which cost more
// than the rest of the reply's reading. FuzzReadReply holds both paths to
// encoding/json.
func unquote(raw []byte) (string, bool) {
	if inner := raw[1 : len(raw)-1]; plain(inner) {
		return string(inner), true
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	return v, true
}

// unquoteKey is unquote for a member name, which is only compared: a plain
// one is returned in place, without a copy.
func unquoteKey(raw []byte) ([]byte, bool) {
	if inner := raw[1 : len(raw)-1]; plain(inner) {
		return inner, true
	}
	v, ok := unquote(raw)
	return []byte(v), ok
}

// plain reports whether the inside of a JSON string decodes to itself.
func plain(inner []byte) bool {
	for _, c := range inner {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	return utf8.Valid(inner)
}

// str reads a string whose opening quote was read, and returns it as
// written, quotes included, when that is at most limit bytes (over: longer,
// then only skipped). raw is valid until the next call.
func (s *scanner) str(limit int) (raw []byte, over bool, err error) {
	raw = append(s.buf[:0], '"')
	escaped := false
	for {
		c, err := s.next()
		if err != nil {
			return nil, false, err
		}
		if !over {
			if len(raw) >= limit {
				over, raw = true, nil
			} else {
				raw = append(raw, c)
			}
		}
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			if raw != nil {
				s.buf = raw[:0] // for the next call, grown or not
			}
			return raw, over, nil
		}
	}
}

// skipNested skips an object or an array whose opening bracket was read.
// It does not check what is inside beyond strings and brackets: the
// gateway client reads nothing nested.
func (s *scanner) skipNested() error {
	for depth := 1; depth > 0; {
		c, err := s.next()
		if err != nil {
			return err
		}
		switch c {
		case '"':
			if _, _, err := s.str(0); err != nil {
				return err
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return nil
}

// literal reads a number, true, false or null that starts with c, and the
// byte after it, which it puts back.
func (s *scanner) literal(c byte) (string, error) {
	isLit := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E'
	}
	if !isLit(c) {
		return "", errNotObject
	}
	lit := []byte{c}
	for {
		c, err := s.next()
		if err != nil {
			return "", err
		}
		if !isLit(c) {
			_ = s.r.UnreadByte()
			s.left++
			return string(lit), nil
		}
		if len(lit) < 8 { // enough to tell null
			lit = append(lit, c)
		}
	}
}
