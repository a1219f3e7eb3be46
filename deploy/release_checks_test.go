//go:build integration

package deploy

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checks of TestReleaseArtifacts on the SBOMs, the archive and the
// provenance statement.

type bomLicense struct {
	License struct{ ID, Name string }
}

type bomComponent struct {
	BomRef     string `json:"bom-ref"`
	Type       string
	Name       string
	Version    string
	Purl       string
	Licenses   []bomLicense
	Evidence   struct{ Licenses []bomLicense }
	Hashes     []struct{ Alg, Content string }
	Components []bomComponent
}

type cycloneDX struct {
	BomFormat, SpecVersion, SerialNumber string
	Metadata                             struct {
		Timestamp string
		Component bomComponent
	}
	Components []bomComponent
}

func readBOM(t *testing.T, path string) cycloneDX {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom cycloneDX
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatalf("SBOM %s: %v", path, err)
	}
	if bom.BomFormat != "CycloneDX" || bom.SpecVersion == "" {
		t.Errorf("%s: bomFormat %q specVersion %q: not a CycloneDX BOM", path, bom.BomFormat, bom.SpecVersion)
	}
	return bom
}

// licenseIDs joins the SPDX ids of licenses.
func licenseIDs(ls []bomLicense) string {
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.License.ID)
	}
	return strings.Join(ids, ",")
}

// checkBOMTime: the SBOM's time is the commit's, never the build's.
func checkBOMTime(t *testing.T, bom cycloneDX, commitDate string) {
	t.Helper()
	got, err1 := time.Parse(time.RFC3339, bom.Metadata.Timestamp)
	want, err2 := time.Parse(time.RFC3339, commitDate)
	if err1 != nil || err2 != nil || !got.Equal(want) {
		t.Errorf("SBOM timestamp %q, want the commit's date %s (%v %v)", bom.Metadata.Timestamp, commitDate, err1, err2)
	}
}

// checkArchive: entries sorted under one directory, owned by 0:0 with no
// names, every time the commit's, modes 0755 or 0644, and a gzip header
// with neither a name nor a time.
func checkArchive(t *testing.T, path, dir, commitDate string) {
	t.Helper()
	zr := openGzip(t, path)
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header: name %q, time %v: want neither", zr.Name, zr.ModTime)
	}
	want, _ := time.Parse(time.RFC3339, commitDate)
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(want) {
			t.Errorf("%s: mtime %v, want the commit's date %s", h.Name, h.ModTime, commitDate)
		}
		if m := h.Mode & 0o7777; m != 0o755 && m != 0o644 {
			t.Errorf("%s: mode %o, want 0755 or 0644", h.Name, m)
		}
		if !strings.HasPrefix(h.Name, dir+"/") {
			t.Errorf("%s: not under %s/", h.Name, dir)
		}
	}
	if !slices.IsSorted(names) || len(names) != 5 {
		t.Errorf("archive entries %v: want the directory and four files, sorted", names)
	}
}

// checkImageBOM: the image's SBOM names the image by its index digest and
// holds each platform's binary with its modules, and the CA bundle.
func checkImageBOM(t *testing.T, path, indexDigest string, want stamp) {
	t.Helper()
	bom := readBOM(t, path)
	img := bom.Metadata.Component
	if img.Type != "container" || img.Name != imageRepo || img.Version != want.version {
		t.Errorf("image SBOM describes %s %s %s, want container %s %s", img.Type, img.Name, img.Version, imageRepo, want.version)
	}
	if len(img.Hashes) != 1 || "sha256:"+img.Hashes[0].Content != indexDigest || !strings.Contains(img.Purl, strings.ReplaceAll(indexDigest, ":", "%3A")) {
		t.Errorf("image SBOM: hashes %v purl %s, want the index digest %s", img.Hashes, img.Purl, indexDigest)
	}
	if licenseIDs(img.Licenses) != "Apache-2.0" {
		t.Errorf("image SBOM: license %q", licenseIDs(img.Licenses))
	}
	checkBOMTime(t, bom, want.date)
	var apps []string
	refs := map[string]bool{}
	ca := false
	for _, c := range bom.Components {
		switch c.Type {
		case "application":
			apps = append(apps, c.Purl)
			if !slices.ContainsFunc(c.Components, func(m bomComponent) bool {
				return m.Name == "github.com/twmb/franz-go" && licenseIDs(m.Evidence.Licenses) == "BSD-3-Clause"
			}) {
				t.Errorf("image SBOM: %s does not list franz-go with its license", c.Purl)
			}
			for _, m := range c.Components {
				if refs[m.BomRef] {
					t.Errorf("image SBOM: bom-ref %s twice", m.BomRef)
				}
				refs[m.BomRef] = true
			}
		case "file":
			ca = c.Name == "etc/ssl/certs/ca-certificates.crt" && len(c.Hashes) == 1
		}
	}
	if len(apps) != 2 || !strings.Contains(apps[0], "goarch=amd64") || !strings.Contains(apps[1], "goarch=arm64") {
		t.Errorf("image SBOM applications %v, want the linux/amd64 and linux/arm64 binaries", apps)
	}
	if !ca {
		t.Error("image SBOM: no CA bundle file with its hash")
	}
}

// checkProvenance: an in-toto Statement v1 with a SLSA provenance v1
// predicate whose subjects are the files of SHA256SUMS with the same
// digests, and the image by its reference and index digest; built from the
// commit.
func checkProvenance(t *testing.T, dist, indexDigest string, want stamp) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dist, "outbox-relay-"+want.version+".intoto.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Type          string `json:"_type"`
		PredicateType string
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				BuildType            string
				ExternalParameters   map[string]any
				ResolvedDependencies []struct {
					URI    string
					Digest map[string]string
				}
			}
			RunDetails struct{ Builder struct{ ID string } }
		}
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("provenance: %v", err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://slsa.dev/provenance/v1" {
		t.Errorf("provenance: _type %q predicateType %q", st.Type, st.PredicateType)
	}
	bd := st.Predicate.BuildDefinition
	if bd.BuildType == "" || st.Predicate.RunDetails.Builder.ID == "" || bd.ExternalParameters["version"] != want.version {
		t.Errorf("provenance: buildType %q builder %q parameters %v", bd.BuildType, st.Predicate.RunDetails.Builder.ID, bd.ExternalParameters)
	}
	if len(bd.ResolvedDependencies) == 0 || bd.ResolvedDependencies[0].Digest["gitCommit"] != want.commit {
		t.Errorf("provenance: resolved dependencies %+v, want the commit %s first", bd.ResolvedDependencies, want.commit)
	}
	subjects := map[string]string{}
	for _, s := range st.Subject {
		subjects[s.Name] = s.Digest["sha256"]
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	for _, line := range lines {
		sum, file, _ := strings.Cut(line, "  ")
		if subjects[file] != sum {
			t.Errorf("provenance: subject %s has sha256 %q, SHA256SUMS says %s", file, subjects[file], sum)
		}
	}
	if got := subjects[imageRepo+":"+want.version]; "sha256:"+got != indexDigest {
		t.Errorf("provenance: the image's subject has sha256 %q, want the index digest %s", got, indexDigest)
	}
	if len(subjects) != len(lines)+1 {
		t.Errorf("provenance: %d subjects, want SHA256SUMS' %d and the image", len(subjects), len(lines))
	}
}
