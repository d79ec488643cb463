package kafka

import (
	"testing"

	"github.com/acme/billing/internal/version"
)

// The announcement round-trips, and what is not billing's JSON with a
// release announces nothing.
func TestParseAnnouncement(t *testing.T) {
	t.Parallel()
	a := Announcement{Release: "1.2.0", RunsBeside: "1.2.0"}
	got, ok := ParseAnnouncement(a.Encode())
	if !ok || got != a {
		t.Errorf("ParseAnnouncement(Encode(%+v)) = %+v, %v", a, got, ok)
	}
	for name, data := range map[string]string{
		"empty (before 1.2.0)":   "",
		"not JSON":               "\x00\x01range",
		"another application":    `{"app":"shipping","release":"1.2.0","runs_beside":"1.2.0"}`,
		"no release":             `{"app":"billing","runs_beside":"1.2.0"}`,
		"release not x.y.z":      `{"app":"billing","release":"1.2","runs_beside":"1.2.0"}`,
		"release with a suffix":  `{"app":"billing","release":"1.2.0-rc1","runs_beside":"1.2.0"}`,
		"release with a sign":    `{"app":"billing","release":"1.-2.0","runs_beside":"1.2.0"}`,
		"a JSON array":           `["billing","1.2.0"]`,
		"release of a JSON type": `{"app":"billing","release":120}`,
	} {
		if got, ok := ParseAnnouncement([]byte(data)); ok {
			t.Errorf("%s: ParseAnnouncement(%q) = %+v, true; want nothing", name, data, got)
		}
	}
	// A later release may say more: members this one does not know are
	// ignored.
	if got, ok := ParseAnnouncement([]byte(`{"app":"billing","release":"1.3.0","runs_beside":"1.2.0","zone":"b"}`)); !ok || got.Release != "1.3.0" {
		t.Errorf("announcement with an unknown member: %+v, %v", got, ok)
	}
}

// Who this release waits for: a member that announces nothing, or a release
// older than the one it runs beside; never one of its own release or a
// newer one (which waits itself if it must).
func TestNotSafeBeside(t *testing.T) {
	t.Parallel()
	ann := func(release, beside string) []byte {
		return Announcement{Release: release, RunsBeside: beside}.Encode()
	}
	for _, tt := range []struct {
		name       string
		runsBeside string
		member     []byte
		want       bool
	}{
		{"nothing announced (8072a37, e6198e4)", "1.2.0", nil, true},
		{"unreadable", "1.2.0", []byte("garbage"), true},
		{"same release", "1.2.0", ann("1.2.0", "1.2.0"), false},
		{"older than runs-beside", "1.2.0", ann("1.1.9", "1.1.0"), true},
		{"older major", "2.0.0", ann("1.9.9", "1.0.0"), true},
		{"newer, which does not run beside us: its own to wait", "1.2.0", ann("1.4.0", "1.4.0"), false},
		{"runs beside an older one", "1.1.0", ann("1.1.0", "1.1.0"), false},
		{"numeric, not lexical", "1.9.0", ann("1.10.0", "1.10.0"), false},
	} {
		if got := NotSafeBeside(tt.runsBeside, tt.member); got != tt.want {
			t.Errorf("%s: NotSafeBeside(%q, %q) = %v, want %v", tt.name, tt.runsBeside, tt.member, got, tt.want)
		}
	}
}

// This build's release and the oldest it runs beside are of the form the
// announcement carries, and it runs beside itself.
func TestThisReleaseAnnounces(t *testing.T) {
	t.Parallel()
	a := Announcement{Release: version.Release, RunsBeside: version.RunsBeside}
	if _, ok := parseRelease(version.RunsBeside); !ok {
		t.Fatalf("version.RunsBeside %q is not MAJOR.MINOR.PATCH", version.RunsBeside)
	}
	if _, ok := ParseAnnouncement(a.Encode()); !ok {
		t.Fatalf("version.Release %q does not announce", version.Release)
	}
	if NotSafeBeside(version.RunsBeside, a.Encode()) {
		t.Errorf("release %s is not safe beside itself (runs beside %s)", version.Release, version.RunsBeside)
	}
}
