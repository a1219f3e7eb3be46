package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/outbox-relay/outbox-relay", Version: "v1.2.3"},
		Deps: []*debug.Module{
			{Path: "github.com/go-mysql-org/go-mysql", Version: "v1.16.0"},
			{Path: "github.com/twmb/franz-go", Version: "v1.22.3"},
			{Path: "github.com/rs/zerolog", Version: "v1.35.1"},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}},
	}
	read := func() (*debug.BuildInfo, bool) { return bi, true }
	// go install ...@v1.2.3: the module version, as version is left at dev
	got := readBuildInfo(read).String()
	want := "outbox-relay v1.2.3\ncommit:   abc123 (modified) 2026-12-01T00:00:00Z\ngo:       go1.26.8\n" +
		"github.com/go-mysql-org/go-mysql v1.16.0\ngithub.com/twmb/franz-go v1.22.3"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// -X main.version wins (make release, the Dockerfile)
	old := version
	version = "v9.9.9"
	defer func() { version = old }()
	if got := readBuildInfo(read).Version; got != "v9.9.9" {
		t.Fatalf("stamped version %q", got)
	}
	// a plain go build: (devel) is not a version
	version = "dev"
	bi.Main.Version = "(devel)"
	if got := readBuildInfo(read); got.Version != "dev" || !strings.Contains(got.String(), "commit:   abc123") {
		t.Fatalf("devel build: %+v", got)
	}
	if got := readBuildInfo(func() (*debug.BuildInfo, bool) { return nil, false }); got.Version != "dev" || got.Go == "" {
		t.Fatalf("no build info: %+v", got)
	}
}
