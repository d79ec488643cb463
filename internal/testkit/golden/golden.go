// Package golden keeps generated sections of documentation in step with the
// code they are generated from: a test renders a section, and Section
// compares it with the file's text between two markers, or rewrites it there
// when the test runs with -update. Production code does not import it.
package golden

import (
	"os"
	"strings"
	"testing"
)

// Section checks that the text of path between the lines begin and end is
// want; with update it writes want there instead. regen is the command that
// rewrites it, for the failure message.
func Section(t *testing.T, path, begin, end, want string, update bool, regen string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	got := s[i+len(begin) : j]
	if got == want {
		return
	}
	if update {
		if err := os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the section after %q is out of date; run %s\ngot:\n%s\nwant:\n%s", path, strings.TrimSpace(begin), regen, got, want)
}
