package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3" (make
// release, the Dockerfile's VERSION build argument). Left at "dev", the
// module version recorded by `go install ...@v1.2.3` is used instead.
var version = "dev"

// commit and date are set with -X main.commit=... -X main.date=... by make
// (git's commit and its committer date, RFC 3339): the toolchain records
// no VCS information where the checkout is a git worktree or a source
// tarball. The toolchain's vcs.revision and vcs.time win where present.
var commit, date string

// buildInfo is what `version` prints.
type buildInfo struct {
	Version, Commit, Time, Go string
	Modified                  bool
	Deps                      map[string]string // module path -> version, of the libraries that matter
}

// keyDeps are the libraries whose versions decide protocol behaviour.
var keyDeps = []string{"github.com/go-mysql-org/go-mysql", "github.com/twmb/franz-go"}

// readBuildInfo combines the -X version with debug.ReadBuildInfo.
func readBuildInfo(read func() (*debug.BuildInfo, bool)) buildInfo {
	b := buildInfo{Version: version, Commit: commit, Time: date, Go: runtime.Version(), Deps: map[string]string{}}
	bi, ok := read()
	if !ok {
		return b
	}
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		for _, k := range keyDeps {
			if d.Path == k {
				v := d.Version
				if d.Replace != nil {
					v += " => " + d.Replace.Path + " " + d.Replace.Version
				}
				b.Deps[k] = v
			}
		}
	}
	return b
}

func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "outbox-relay %s\n", b.Version)
	if b.Commit != "" {
		mod := ""
		if b.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(&s, "commit:   %s%s %s\n", b.Commit, mod, b.Time)
	}
	fmt.Fprintf(&s, "go:       %s\n", b.Go)
	for _, k := range keyDeps {
		if v, ok := b.Deps[k]; ok {
			fmt.Fprintf(&s, "%s %s\n", k, v)
		}
	}
	return strings.TrimSuffix(s.String(), "\n")
}

func versionString() string { return readBuildInfo(debug.ReadBuildInfo).String() }

// shortVersion is the version alone, for logs and metrics.
func shortVersion() string { return readBuildInfo(debug.ReadBuildInfo).Version }

// versionDoc is version's --json document.
type versionDoc struct {
	Version  string            `json:"version"`
	Commit   string            `json:"commit"`
	Time     string            `json:"time"` // the commit's, RFC 3339
	Modified bool              `json:"modified"`
	Go       string            `json:"go"`
	Deps     map[string]string `json:"dependencies"` // module path -> version
}

func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version [--json]",
		Short:   "print the version, commit, Go version and key library versions",
		Example: "  outbox-relay version\n  outbox-relay --version\n  outbox-relay version --json | jq -r .version",
		Args:    noArgs,
	}
	asJSON := cmd.Flags().Bool("json", false, "print one JSON document: version, commit, time, modified, go, dependencies")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		b := readBuildInfo(debug.ReadBuildInfo)
		if *asJSON {
			return writeJSON(cmd.OutOrStdout(), versionDoc{Version: b.Version, Commit: b.Commit, Time: b.Time, Modified: b.Modified, Go: b.Go, Deps: b.Deps})
		}
		fmt.Fprintln(cmd.OutOrStdout(), b.String())
		return nil
	}
	return cmd
}
