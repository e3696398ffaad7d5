// Package version is the version of the build, set at link time:
//
//	go build -ldflags "-X github.com/fpga-dra/fpga-dra-driver/internal/version.version=v0.3.0 -X github.com/fpga-dra/fpga-dra-driver/internal/version.gitCommit=0123abc"
//
// A build without them is "devel", with the commit Go recorded, if any.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X (see the package comment).
var (
	version   = "devel"
	gitCommit = ""
)

// Version is the release this binary was built as, "devel" when unset.
func Version() string { return version }

// GitCommit is the commit this binary was built from: the one set at link
// time, else the one Go recorded from the checkout, else "unknown".
func GitCommit() string {
	if gitCommit != "" {
		return gitCommit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is what --version prints: the version, the commit and the Go
// toolchain and platform.
func String() string {
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", Version(), GitCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
