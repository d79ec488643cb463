package kafka

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Announcement is what a billing process says about itself to its consumer
// groups: the user data of its member metadata (the "range" protocol's), so
// that every member, and anyone who describes the group, can tell which
// release each member runs (docs/design.md, "Releases side by side").
// Releases before 1.2.0 announce nothing: their user data is empty.
type Announcement struct {
	// Release is the member's release (internal/version.Release).
	Release string `json:"release"`
	// RunsBeside is the oldest release the member is safe beside
	// (internal/version.RunsBeside).
	RunsBeside string `json:"runs_beside"`
}

// announcementApp marks billing's user data among whatever else a group's
// members might carry there.
const announcementApp = "billing"

// wireAnnouncement is the JSON on the wire: an object, so that a later
// release can add members that this one ignores.
type wireAnnouncement struct {
	App string `json:"app"`
	Announcement
}

// Encode returns the member metadata's user data announcing a.
func (a Announcement) Encode() []byte {
	b, err := json.Marshal(wireAnnouncement{App: announcementApp, Announcement: a})
	if err != nil { // a struct of two strings always marshals
		panic(fmt.Sprintf("encode announcement: %v", err))
	}
	return b
}

// ParseAnnouncement reads a member's user data. ok is false when it
// announces nothing billing can read (empty: a release before the
// announcement; anything else that is not billing's JSON with a release
// of the form MAJOR.MINOR.PATCH).
func ParseAnnouncement(userData []byte) (a Announcement, ok bool) {
	if len(userData) == 0 {
		return Announcement{}, false
	}
	var w wireAnnouncement
	if err := json.Unmarshal(userData, &w); err != nil || w.App != announcementApp {
		return Announcement{}, false
	}
	if _, ok := parseRelease(w.Release); !ok {
		return Announcement{}, false
	}
	return w.Announcement, true
}

// describeAnnouncement is how a log line names what a member announced.
func describeAnnouncement(userData []byte) string {
	a, ok := ParseAnnouncement(userData)
	if !ok {
		if len(userData) == 0 {
			return "nothing (a release before 1.2.0)"
		}
		return fmt.Sprintf("%d bytes billing cannot read", len(userData))
	}
	return "release " + a.Release + ", runs beside " + a.RunsBeside + " and later"
}

// NotSafeBeside reports whether a process that runs beside releases from
// runsBeside on is not safe beside a member whose user data is userData:
// the member announces nothing (a release before the announcement, or
// anything billing cannot read), or a release older than runsBeside.
//
// A member of a newer release is never a reason to wait here: whether the
// two are safe together is the newer one's to say, since only it knows
// both, and it waits (its own RunsBeside) if they are not. So two releases
// never wait for each other, and during a rollout in either direction the
// older keeps the partitions while the newer waits.
func NotSafeBeside(runsBeside string, userData []byte) bool {
	a, ok := ParseAnnouncement(userData)
	if !ok {
		return true
	}
	floor, ok := parseRelease(runsBeside)
	if !ok { // this process's own constant: a test pins its form
		return true
	}
	r, _ := parseRelease(a.Release)
	return r.less(floor)
}

// release is a MAJOR.MINOR.PATCH version.
type release [3]int

// parseRelease reads MAJOR.MINOR.PATCH (decimal, no sign, no suffix).
func parseRelease(s string) (release, bool) {
	var r release
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return r, false
	}
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" || len(p) > 9 {
			return r, false
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return r, false
		}
		r[i] = n
	}
	return r, true
}

// less reports whether r is older than o.
func (r release) less(o release) bool {
	for i := range r {
		if r[i] != o[i] {
			return r[i] < o[i]
		}
	}
	return false
}
