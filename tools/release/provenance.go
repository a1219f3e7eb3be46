package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// The in-toto Statement v1 (https://in-toto.io/Statement/v1) with the SLSA
// provenance v1 predicate (https://slsa.dev/provenance/v1): what was built
// (subjects), from what (the commit, the toolchain, the CA bundle of the
// image) and how (the make targets and their parameters). It has no time
// and nothing of the machine but what -builder says, so that two runs from
// one commit give the same statement.
type statement struct {
	Type          string    `json:"_type"`
	Subject       []subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     predicate `json:"predicate"`
}

type predicate struct {
	BuildDefinition struct {
		BuildType            string         `json:"buildType"`
		ExternalParameters   map[string]any `json:"externalParameters"`
		InternalParameters   map[string]any `json:"internalParameters,omitempty"`
		ResolvedDependencies []subject      `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
	} `json:"runDetails"`
}

// buildType names how the artifacts are made: docs/releasing.md.
const buildType = "https://github.com/outbox-relay/outbox-relay/blob/main/docs/releasing.md"

type kv map[string]string

func (m kv) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kv) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("parse %q: want name=value", v)
	}
	m[k] = val
	return nil
}

func provenance(args []string) error {
	fs := flag.NewFlagSet("provenance", flag.ExitOnError)
	dir := fs.String("dir", "", "the directory of the artifacts")
	out := fs.String("out", "", "the statement to write (JSON)")
	version := fs.String("version", "", "the version built")
	commit := fs.String("commit", "", "the git commit built")
	source := fs.String("source", "", "the repository URL")
	builder := fs.String("builder", "", "runDetails.builder.id: who built it (a URI)")
	imageRef := fs.String("image-ref", "", "the image's reference (REPO:VERSION), the name of its index's subject")
	params := kv{}
	fs.Var(params, "param", "name=value: an external parameter of the build (repeat)")
	deps := kv{}
	fs.Var(deps, "dependency", "name=path: a file the build used, recorded with its sha256 (repeat)")
	_ = fs.Parse(args)
	if *dir == "" || *out == "" || *version == "" || *commit == "" || *source == "" || *builder == "" || fs.NArg() == 0 {
		return errors.New("provenance: -dir, -out, -version, -commit, -source, -builder and FILEs are required")
	}
	subjects, err := digests(*dir, fs.Args())
	if err != nil {
		return err
	}
	for _, f := range fs.Args() {
		if !strings.HasSuffix(f, "-oci.tar") {
			continue
		}
		d, err := imageIndexDigest(filepath.Join(*dir, f))
		if err != nil {
			return err
		}
		name := *imageRef
		if name == "" {
			name = f
		}
		subjects = append(subjects, subject{Name: name, Digest: map[string]string{"sha256": d}})
	}
	st := statement{Type: "https://in-toto.io/Statement/v1", Subject: subjects, PredicateType: "https://slsa.dev/provenance/v1"}
	bd := &st.Predicate.BuildDefinition
	bd.BuildType = buildType
	ext := map[string]any{"version": *version, "source": *source}
	for k, v := range params {
		ext[k] = v
	}
	bd.ExternalParameters = ext
	bd.InternalParameters = map[string]any{"goVersion": runtime.Version()}
	bd.ResolvedDependencies = []subject{{Name: "source", URI: "git+" + *source, Digest: map[string]string{"gitCommit": *commit}}}
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		path := deps[name]
		d, err := digests(filepath.Dir(path), []string{filepath.Base(path)})
		if err != nil {
			return err
		}
		bd.ResolvedDependencies = append(bd.ResolvedDependencies, subject{Name: name, URI: "file://" + path, Digest: d[0].Digest})
	}
	st.Predicate.RunDetails.Builder.ID = *builder
	raw, err := marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, raw, 0o644)
}

// imageIndexDigest is the digest of the image index an OCI archive holds
// (its index.json's one entry): what a registry serves the image as.
func imageIndexDigest(archive string) (string, error) {
	raw, err := readTarFile(archive, "index.json")
	if err != nil {
		return "", err
	}
	var idx struct {
		Manifests []struct{ Digest string }
	}
	if err := json.Unmarshal(raw, &idx); err != nil || len(idx.Manifests) != 1 {
		return "", fmt.Errorf("%s: index.json: %v, want one entry", archive, err)
	}
	d, ok := strings.CutPrefix(idx.Manifests[0].Digest, "sha256:")
	if !ok {
		return "", fmt.Errorf("%s: digest %q is not sha256", archive, idx.Manifests[0].Digest)
	}
	return d, nil
}
