package version

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/reeve-org/reeve", Version: "v0.3.1"},
		Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}},
	}
	clean := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/reeve-org/reeve", Version: "(devel)"},
		Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: "def456"}, {Key: "vcs.modified", Value: "false"}},
	}
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/reeve-org/reeve", Version: "(devel)"}}
	tests := []struct {
		name                string
		ldVersion, ldCommit string
		bi                  *debug.BuildInfo
		wantVersion         string
		wantCommit          string
	}{
		{"linker wins over build info", "v1.2.0", "0123abcd", stamped, "v1.2.0", "0123abcd"},
		{"module version and dirty revision", "", "", stamped, "v0.3.1", "abc123-dirty"},
		{"checkout with clean revision", "", "", clean, "(devel)", "def456"},
		{"-buildvcs=false: commit from the linker only", "", "feedface", noVCS, "(devel)", "feedface"},
		{"nothing known", "", "", noVCS, "(devel)", Unknown},
		{"no build info at all", "", "", nil, Unknown, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := from(tt.ldVersion, tt.ldCommit, tt.bi)
			if got.Version != tt.wantVersion || got.Commit != tt.wantCommit {
				t.Errorf("from(%q, %q) = version %q commit %q, want %q %q", tt.ldVersion, tt.ldCommit, got.Version, got.Commit, tt.wantVersion, tt.wantCommit)
			}
			if got.GoVersion == "" || got.Platform == "" {
				t.Errorf("from() = %+v: empty Go version or platform", got)
			}
		})
	}
}
