// Package version says which build of Reeve is running: the release version,
// the commit it was built from and the Go toolchain.
//
// Release builds set the values with the linker:
//
//	go build -ldflags "-X github.com/reeve-org/reeve/internal/version.version=v0.4.0 \
//	    -X github.com/reeve-org/reeve/internal/version.commit=$(git rev-parse HEAD)" ./cmd/reeve
//
// (`make build` and `make image` do). Without them, Get falls back to the
// module's build information (runtime/debug.ReadBuildInfo): the module
// version for `go install ...@vX`, and the VCS revision when the build
// stamped it (not with -buildvcs=false, nor for a build outside a checkout).
package version

import (
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X; empty in a plain `go build`.
var (
	version string
	commit  string
)

// Unknown is reported for a value neither the linker nor the build
// information provides.
const Unknown = "unknown"

// Info describes a build.
type Info struct {
	// Version is the release version (e.g. v0.4.0), the module version of
	// `go install`, or "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Commit is the full git revision, with "-dirty" when the checkout had
	// local changes and the build information says so; Unknown when absent.
	Commit string `json:"commit"`
	// GoVersion is the toolchain that built the binary (runtime.Version).
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build's information. It is cheap and safe to call from any
// goroutine.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(version, commit, bi)
}

// from merges the linker's values with the build information (nil when the
// binary has none); the linker wins.
func from(ldVersion, ldCommit string, bi *debug.BuildInfo) Info {
	info := Info{Version: ldVersion, Commit: ldCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			var rev string
			var modified bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if rev != "" && modified {
				rev += "-dirty"
			}
			info.Commit = rev
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
	}
	if info.Version == "" {
		info.Version = Unknown
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	return info
}
