// Package version says which build of billing is running: the version and
// revision the build stamped (-ldflags -X: make build, and the Dockerfile
// from its VERSION and REVISION build arguments, which make image passes),
// else the VCS revision the Go toolchain recorded, and the Go version.
// `billing version` prints it and billing_build_info exports it.
package version

import (
	"runtime"
	"runtime/debug"
)

// version and revision are set at link time:
//
//	-ldflags "-X github.com/acme/billing/internal/version.version=v1.2.3 -X github.com/acme/billing/internal/version.revision=<commit>"
//
// They are the module's only package variables: -X can set nothing else.
// The revision is stamped because an image build has no .git (the
// Dockerfile's context leaves it out), so the toolchain records none there.
var version, revision string

// Info describes the running build.
type Info struct {
	Version   string // the stamped version, else the module version, else "devel"
	Revision  string // the stamped revision, else the VCS revision with "-dirty" when built from a modified tree; "unknown" without either
	GoVersion string
}

// Get returns the running build's Info.
func Get() Info {
	info := Info{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "devel"
		}
		if revision != "" {
			info.Revision = revision
		}
		return info
	}
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		info.Revision = rev
		if dirty {
			info.Revision += "-dirty"
		}
	}
	if revision != "" {
		info.Revision = revision
	}
	return info
}

// String is the first line `billing version` prints: the release
// (CHANGELOG.md), then the build's own version, revision and Go.
func (i Info) String() string {
	return "billing " + Release + " (build " + i.Version + ", revision " + i.Revision + ", " + i.GoVersion + ")"
}
