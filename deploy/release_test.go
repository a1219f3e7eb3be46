//go:build integration

package deploy

// The integration run of ./deploy/... (tag integration, make
// test-integration) runs this file: building the release and the image
// takes half a minute or more, too long for the unit suite.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

const releaseTestVersion = "v0.0.0-releasetest"

// imageRepo is the Makefile's IMAGE_REPO, which the image's index names.
const imageRepo = "ghcr.io/outbox-relay/outbox-relay"

// makeRelease runs `make release` into dist the way a maintainer cuts a
// release (docs/releasing.md), with one archive platform (linux/amd64: the
// darwin cross-builds add minutes and test nothing more) and both image
// platforms, its binaries built in a directory of their own, under umask;
// env is added to the environment.
func makeRelease(t *testing.T, dist, umask string, env ...string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `umask "$0" && exec make "$@"`, umask, "-C", "..", "release", "VERSION="+releaseTestVersion,
		"RELEASE_PLATFORMS=linux/amd64", "IMAGE_PLATFORMS=linux/amd64 linux/arm64", "DIST="+dist, "BUILD="+t.TempDir())
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
}

// TestReleaseArtifacts runs `make release` and checks what a user gets:
// the checksums verify and cover the archive, the image and their SBOMs;
// the SBOMs are CycloneDX JSON listing the protocol libraries with their
// licenses; the archive is sorted with fixed owners and times; the binary
// prints the version, commit and commit date; the OCI image tarball holds
// both platforms with entrypoint, user and labels set, no shell, a binary
// that answers `version`, and names itself by its full reference; the
// provenance statement names every artifact with its digest; a file
// already in DIST (an image built before) is left alone; and a second run,
// under another umask and time zone with the sources touched, gives the
// same bytes.
func TestReleaseArtifacts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release and the image (-short)")
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout: make release stamps git's commit")
	}
	dateOut, err := exec.Command("git", "log", "-1", "--format=%cI").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := stamp{version: releaseTestVersion, commit: strings.TrimSpace(string(commit)), date: strings.TrimSpace(string(dateOut))}
	dist := t.TempDir()
	earlier := filepath.Join(dist, "outbox-relay-v0.0.0-earlier-oci.tar")
	if err := os.WriteFile(earlier, []byte("an image built before"), 0o644); err != nil {
		t.Fatal(err)
	}
	makeRelease(t, dist, "022")
	name := "outbox-relay-" + releaseTestVersion + "-linux-amd64"
	image := "outbox-relay-" + releaseTestVersion + "-oci"

	t.Run("an earlier image stays", func(t *testing.T) {
		if _, err := os.Stat(earlier); err != nil {
			t.Errorf("make release deleted a file it did not make: %v", err)
		}
	})

	t.Run("checksums verify", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			sum, file, ok := strings.Cut(line, "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q: not `sha256sum` output", line)
			}
			data, err := os.ReadFile(filepath.Join(dist, file))
			if err != nil {
				t.Fatal(err)
			}
			if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
				t.Errorf("%s: sha256 %x, SHA256SUMS says %s", file, h, sum)
			}
			listed[file] = true
		}
		for _, f := range []string{name + ".tar.gz", name + ".cdx.json", image + ".tar", image + ".cdx.json"} {
			if !listed[f] {
				t.Errorf("%s is not in SHA256SUMS: %v", f, listed)
			}
		}
		if len(listed) != 4 {
			t.Errorf("SHA256SUMS lists %v, want this release's four files only", listed)
		}
	})

	t.Run("SBOM is CycloneDX listing franz-go and go-mysql with licenses", func(t *testing.T) {
		bom := readBOM(t, filepath.Join(dist, name+".cdx.json"))
		if bom.Metadata.Component.Version != releaseTestVersion {
			t.Errorf("the SBOM describes %s %s, want version %s", bom.Metadata.Component.Name, bom.Metadata.Component.Version, releaseTestVersion)
		}
		if got := licenseIDs(bom.Metadata.Component.Licenses); got != "Apache-2.0" {
			t.Errorf("the SBOM gives the relay the license %q, want Apache-2.0", got)
		}
		checkBOMTime(t, bom, want.date)
		// the relay's and the standard library's licenses are known (asserted);
		// the modules' are detected from their files (evidence)
		for mod, license := range map[string]string{"github.com/twmb/franz-go": "BSD-3-Clause", "github.com/go-mysql-org/go-mysql": "", "std": "BSD-3-Clause"} {
			i := slices.IndexFunc(bom.Components, func(c bomComponent) bool { return c.Name == mod })
			if i < 0 {
				t.Errorf("the SBOM does not list %s", mod)
				continue
			}
			c := bom.Components[i]
			if mod != "std" && (c.Version == "" || !strings.HasPrefix(c.Purl, "pkg:golang/"+mod+"@") || !strings.Contains(c.Purl, "goarch=amd64")) {
				t.Errorf("the SBOM lists %s without a version and purl of linux/amd64: %+v", mod, c)
			}
			got := licenseIDs(c.Licenses) + licenseIDs(c.Evidence.Licenses)
			if got == "" || license != "" && got != license {
				t.Errorf("the SBOM gives %s the license %q, want %s", mod, got, license)
			}
		}
		if got := licenseIDs(bom.Components[slices.IndexFunc(bom.Components, func(c bomComponent) bool { return c.Name == "std" })].Licenses); got != "BSD-3-Clause" {
			t.Errorf("the SBOM does not assert the standard library's license: %q", got)
		}
		for _, c := range bom.Components {
			if len(c.Licenses)+len(c.Evidence.Licenses) == 0 {
				t.Errorf("the SBOM has no license for %s", c.Name)
			}
		}
	})

	t.Run("archive is sorted with fixed owners and times", func(t *testing.T) {
		checkArchive(t, filepath.Join(dist, name+".tar.gz"), name, want.date)
	})

	t.Run("archive binary prints version commit and date", func(t *testing.T) {
		files := untarGz(t, filepath.Join(dist, name+".tar.gz"))
		for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md", "outbox-relay"} {
			if _, ok := files[name+"/"+f]; !ok {
				t.Errorf("the archive has no %s/%s", name, f)
			}
		}
		runVersion(t, files[name+"/outbox-relay"], want)
	})

	var indexDigest string
	t.Run("image tarball", func(t *testing.T) {
		indexDigest = checkImage(t, filepath.Join(dist, image+".tar"), want)
	})

	t.Run("image SBOM", func(t *testing.T) {
		checkImageBOM(t, filepath.Join(dist, image+".cdx.json"), indexDigest, want)
	})

	t.Run("provenance names every artifact", func(t *testing.T) {
		checkProvenance(t, dist, indexDigest, want)
	})

	t.Run("reproducible", func(t *testing.T) {
		again := t.TempDir()
		now := time.Now()
		for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md"} {
			if err := os.Chtimes(filepath.Join("..", f), now, now); err != nil {
				t.Fatal(err)
			}
		}
		makeRelease(t, again, "077", "TZ=Pacific/Chatham", "LC_ALL=C")
		for _, f := range []string{"SHA256SUMS", "outbox-relay-" + releaseTestVersion + ".intoto.json"} {
			a, err1 := os.ReadFile(filepath.Join(dist, f))
			b, err2 := os.ReadFile(filepath.Join(again, f))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs between two runs of make release:\n%s\n---\n%s", f, a, b)
			}
		}
	})
}

type stamp struct{ version, commit, date string }

func untarGz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	return untar(t, openGzip(t, path))
}

// openGzip opens a .gz file for the test.
func openGzip(t *testing.T, path string) *gzip.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return zr
}

func untar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "/")] = data
	}
}

// runVersion runs the linux/amd64 binary's `version` and checks the stamp.
func runVersion(t *testing.T, bin []byte, want stamp) {
	t.Helper()
	if len(bin) == 0 {
		t.Fatal("no binary")
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("a linux/amd64 binary does not run on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	path := filepath.Join(t.TempDir(), "outbox-relay")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("outbox-relay version: %v\n%s", err, out)
	}
	for _, s := range []string{"outbox-relay " + want.version + "\n", want.commit, want.date, "github.com/twmb/franz-go", "github.com/go-mysql-org/go-mysql"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("outbox-relay version does not print %q:\n%s", s, out)
		}
	}
}

// checkImage opens the OCI archive as a registry client would, and returns
// the digest of its image index.
func checkImage(t *testing.T, archive string, want stamp) string {
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	for name, data := range untar(t, f) {
		if strings.HasSuffix(name, "/") {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	topm, err := top.IndexManifest()
	if err != nil || len(topm.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d entries, want one image index", err, len(topm.Manifests))
	}
	for _, k := range []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"} {
		if ref := topm.Manifests[0].Annotations[k]; ref != imageRepo+":"+want.version {
			t.Errorf("index.json %s %q, want the full reference %s:%s", k, ref, imageRepo, want.version)
		}
	}
	idx, err := top.ImageIndex(topm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		p := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, p)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkPlatformImage(t, p, img, want)
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
	return topm.Manifests[0].Digest.String()
}

func checkPlatformImage(t *testing.T, platform string, img v1.Image, want stamp) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.OS + "/" + cf.Architecture; got != platform {
		t.Errorf("%s: config says %s", platform, got)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/outbox-relay"}) {
		t.Errorf("%s: entrypoint %v", platform, cf.Config.Entrypoint)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want the nonroot user 65532:65532", platform, cf.Config.User)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  want.version,
		"org.opencontainers.image.revision": want.commit,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/outbox-relay/outbox-relay",
	} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("%s: label %s=%q, want %q", platform, k, got, v)
		}
	}
	created, err1 := time.Parse(time.RFC3339, cf.Config.Labels["org.opencontainers.image.created"])
	commitDate, err2 := time.Parse(time.RFC3339, want.date)
	if err1 != nil || err2 != nil || !created.Equal(commitDate) || !cf.Created.Equal(commitDate) {
		t.Errorf("%s: created label %q, config created %v: want the commit's date %s (%v, %v)",
			platform, cf.Config.Labels["org.opencontainers.image.created"], cf.Created, want.date, err1, err2)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := untar(t, rc)
	for name := range files {
		if base := filepath.Base(name); base == "sh" || base == "bash" || base == "busybox" {
			t.Errorf("%s: the image has a shell: %s", platform, name)
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no nonroot user 65532:\n%s", platform, files["etc/passwd"])
	}
	if !strings.Contains(string(files["etc/ssl/certs/ca-certificates.crt"]), "BEGIN CERTIFICATE") {
		t.Errorf("%s: no CA certificates bundle", platform)
	}
	if platform == "linux/amd64" {
		runVersion(t, files["usr/local/bin/outbox-relay"], want)
	}
}
