// Command ociimage builds the relay's multi-arch container image without a
// Docker daemon (make image): one static binary per platform on an empty
// base, with the few files a static Go program needs from a distribution
// (the CA bundle of Debian's ca-certificates, /etc/passwd and /etc/group with
// the nonroot user 65532, /tmp), no shell, no package manager. It writes an
// OCI image layout as a tarball (an OCI archive: `skopeo copy
// oci-archive:FILE docker://REF`, or untar it and `crane push DIR REF`).
// The archive's index.json names the image by its full reference,
// REPO:VERSION (org.opencontainers.image.ref.name and
// io.containerd.image.name, which podman load and docker load read). With
// -sbom it also writes the image's CycloneDX SBOM (sbom.go). It is a build
// tool: nothing of it is linked into the relay.
//
//	go run ./tools/ociimage -binary linux/amd64=dist/.../outbox-relay \
//	  -binary linux/arm64=... -version v0.1.0 -revision <commit> \
//	  -created <RFC 3339> -source <repository URL> -repo ghcr.io/o/r \
//	  -out image.tar [-sbom linux/amd64=bin.cdx.json ... -sbom-out image.cdx.json]
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image.
const (
	binaryPath = "/usr/local/bin/outbox-relay"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	nonroot    = 65532
)

type binaries map[string]string // os/arch -> binary path

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binaries) Set(v string) error {
	p, path, ok := strings.Cut(v, "=")
	if !ok || !strings.Contains(p, "/") {
		return fmt.Errorf("parse binary %q: want os/arch=path", v)
	}
	b[p] = path
	return nil
}

type options struct {
	binaries                                 binaries
	caBundle, version, revision, source, out string
	license, repo                            string
	created                                  time.Time
	sboms                                    binaries // os/arch -> the binary's CycloneDX SBOM
	sbomOut                                  string
}

// ref is the image's full reference, REPO:VERSION.
func (o options) ref() string { return o.repo + ":" + o.version }

func main() {
	o := options{binaries: binaries{}, sboms: binaries{}}
	var created string
	flag.Var(o.binaries, "binary", "os/arch=path of a static relay binary (repeat per platform)")
	flag.StringVar(&o.caBundle, "ca-bundle", caPath, "CA certificates bundle to ship (Debian's ca-certificates)")
	flag.StringVar(&o.version, "version", "", "version (label org.opencontainers.image.version)")
	flag.StringVar(&o.revision, "revision", "", "git commit (label org.opencontainers.image.revision)")
	flag.StringVar(&created, "created", "", "RFC 3339 time: the commit's date, for a reproducible image")
	flag.StringVar(&o.source, "source", "", "repository URL (label org.opencontainers.image.source)")
	flag.StringVar(&o.license, "license", "Apache-2.0", "SPDX license (label org.opencontainers.image.licenses)")
	flag.StringVar(&o.out, "out", "", "OCI archive (tarball of an OCI image layout) to write")
	flag.StringVar(&o.repo, "repo", "", "image repository (ghcr.io/outbox-relay/outbox-relay): the archive names the image REPO:VERSION")
	flag.Var(o.sboms, "sbom", "os/arch=path of the CycloneDX SBOM of that platform's binary (repeat per platform; with -sbom-out)")
	flag.StringVar(&o.sbomOut, "sbom-out", "", "the image's CycloneDX SBOM to write: the binaries' SBOMs and the CA bundle")
	flag.Parse()
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		fail(fmt.Errorf("parse -created %q: %w (want RFC 3339, e.g. git log -1 --format=%%cI)", created, err))
	}
	o.created = t.UTC()
	if len(o.binaries) == 0 || o.version == "" || o.revision == "" || o.source == "" || o.out == "" || o.repo == "" {
		fail(errors.New("build image: -binary, -version, -revision, -source, -repo and -out are required"))
	}
	if (o.sbomOut == "") != (len(o.sboms) == 0) {
		fail(errors.New("build image: -sbom and -sbom-out go together"))
	}
	if err := build(o); err != nil {
		fail(err)
	}
	fmt.Printf("built %s (%d platforms)\n", o.out, len(o.binaries))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ociimage:", err)
	os.Exit(1)
}

func build(o options) error {
	ca, err := os.ReadFile(o.caBundle)
	if err != nil {
		return fmt.Errorf("read CA bundle: %w (install Debian's ca-certificates: apt-get install ca-certificates)", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "outbox-relay",
		"org.opencontainers.image.description": "CDC outbox relay: MySQL/MariaDB binlog to Kafka, exactly once",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    o.license,
	}
	platforms := make([]string, 0, len(o.binaries))
	for p := range o.binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		goos, arch, _ := strings.Cut(p, "/")
		img, err := platformImage(o, goos, arch, ca, labels)
		if err != nil {
			return fmt.Errorf("build image %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}}})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.ref(),
		"io.containerd.image.name":          o.ref()})); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := tarDir(dir, o.out, o.created); err != nil {
		return err
	}
	if o.sbomOut == "" {
		return nil
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	return writeSBOM(o, digest, ca)
}

// platformImage is one platform's image: a single layer on an empty base.
func platformImage(o options, goos, arch string, ca []byte, labels map[string]string) (v1.Image, error) {
	bin, err := os.ReadFile(o.binaries[goos+"/"+arch])
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	files := []entry{
		{name: "etc/", mode: 0o755 | fs.ModeDir},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl/", mode: 0o755 | fs.ModeDir},
		{name: "etc/ssl/certs/", mode: 0o755 | fs.ModeDir},
		{name: strings.TrimPrefix(caPath, "/"), mode: 0o644, data: ca},
		{name: "home/", mode: 0o755 | fs.ModeDir},
		{name: "home/nonroot/", mode: 0o700 | fs.ModeDir, uid: nonroot},
		{name: "tmp/", mode: 0o1777 | fs.ModeDir | fs.ModeSticky},
		{name: "usr/", mode: 0o755 | fs.ModeDir},
		{name: "usr/local/", mode: 0o755 | fs.ModeDir},
		{name: "usr/local/bin/", mode: 0o755 | fs.ModeDir},
		{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, files, o.created); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = goos, arch
	cfg.Created = v1.Time{Time: o.created}
	cfg.Author = "outbox-relay"
	cfg.Config = v1.Config{
		Entrypoint:   []string{binaryPath},
		User:         fmt.Sprintf("%d:%d", nonroot, nonroot),
		WorkingDir:   "/home/nonroot",
		Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath},
		ExposedPorts: map[string]struct{}{"9464/tcp": {}},
		Labels:       labels,
	}
	cfg.History = []v1.History{{Created: v1.Time{Time: o.created}, CreatedBy: "make image (tools/ociimage)"}}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

type entry struct {
	name string
	mode fs.FileMode
	uid  int
	data []byte
}

// writeTar writes entries with fixed times and owners: the same inputs give
// the same layer digest.
func writeTar(w io.Writer, files []entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: int64(f.mode.Perm()), Uid: f.uid, Gid: f.uid,
			ModTime: mtime, Format: tar.FormatPAX}
		if f.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.mode.IsDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// tarDir writes the OCI layout in dir as the tarball out, in a fixed order.
func tarDir(dir, out string, mtime time.Time) error {
	var files []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			files = append(files, entry{name: rel + "/", mode: 0o755 | fs.ModeDir})
			return nil
		}
		data, err := os.ReadFile(p)
		files = append(files, entry{name: rel, mode: 0o644, data: data})
		return err
	})
	if err != nil {
		return fmt.Errorf("read OCI layout: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := writeTar(f, files, mtime); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	return f.Close()
}
