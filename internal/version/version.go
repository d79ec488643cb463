// Package version says which build of billing is running: the version the
// build stamped (make build sets it with -ldflags -X), the VCS revision the
// Go toolchain recorded, and the Go version. `billing version` prints it
// and billing_build_info exports it.
package version

import (
	"runtime"
	"runtime/debug"
)

// version is set at link time: -ldflags "-X github.com/acme/billing/internal/version.version=v1.2.3".
// It is the one package variable of the module: -X can set nothing else.
var version string

// Info describes the running build.
type Info struct {
	Version   string // the stamped version, else the module version, else "devel"
	Revision  string // VCS revision, with "-dirty" when built from a modified tree; "unknown" without VCS data
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
	return info
}

// String is the line `billing version` prints.
func (i Info) String() string {
	return "billing " + i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
