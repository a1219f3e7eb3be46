// Command release does the steps of `make release` that must give the same
// bytes on every run from the same commit (docs/releasing.md): it is a build
// tool, nothing of it is linked into the relay.
//
//	release sbom -time T -license SPDX FILE
//	    completes a CycloneDX SBOM of cyclonedx-gomod in place: the main
//	    component's license (its module cannot be downloaded to detect
//	    it), the standard library's (BSD-3-Clause), the timestamp T, and
//	    a serial number derived from the content (the same SBOM, the same
//	    serial).
//	release archive -out F.tar.gz -prefix DIR -time T FILE...
//	    a .tar.gz of the files under DIR/, entries sorted, owner 0:0,
//	    mtime T, modes 0755 (executables) or 0644, gzip without name or
//	    time.
//	release sums -dir D FILE...
//	    D/SHA256SUMS of the files, in sha256sum's format, sorted.
//	release provenance -dir D -out F -version V -commit C -source URL [...] FILE...
//	    an in-toto Statement v1 with a SLSA provenance v1 predicate whose
//	    subjects are the files with their sha256, and the image index of
//	    each OCI archive among them (-image-ref names it).
//
// T is the commit's date (RFC 3339), as SOURCE_DATE_EPOCH is.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: release sbom|archive|sums|provenance [flags] FILE..."))
	}
	cmds := map[string]func([]string) error{"sbom": sbom, "archive": archive, "sums": sums, "provenance": provenance}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fail(fmt.Errorf("unknown step %q: want sbom, archive, sums or provenance", os.Args[1]))
	}
	if err := run(os.Args[2:]); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}

// parseTime parses -time: RFC 3339, the commit's date.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, fmt.Errorf("parse -time %q: %w (want RFC 3339: git log -1 --format=%%cI)", s, err)
	}
	return t.UTC(), nil
}

func sbom(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ExitOnError)
	when := fs.String("time", "", "the SBOM's timestamp: the commit's date, RFC 3339")
	license := fs.String("license", "", "SPDX license id of the main component")
	_ = fs.Parse(args)
	t, err := parseTime(*when)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 || *license == "" {
		return errors.New("sbom: -license and one FILE are required")
	}
	path := fs.Arg(0)
	var bom map[string]any
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read sbom: %w", err)
	}
	if err := unmarshal(raw, &bom); err != nil {
		return fmt.Errorf("read sbom %s: %w", path, err)
	}
	meta, _ := bom["metadata"].(map[string]any)
	main, _ := meta["component"].(map[string]any)
	if main == nil {
		return fmt.Errorf("sbom %s: no metadata.component", path)
	}
	meta["timestamp"] = t.Format(time.RFC3339)
	setLicense(main, *license)
	comps, _ := bom["components"].([]any)
	for _, c := range comps {
		if c, ok := c.(map[string]any); ok && c["name"] == "std" {
			setLicense(c, "BSD-3-Clause") // Go's LICENSE
		}
	}
	delete(bom, "serialNumber")
	out, err := marshal(bom)
	if err != nil {
		return err
	}
	bom["serialNumber"] = contentSerial(out)
	if out, err = marshal(bom); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// setLicense sets a component's license unless it has one.
func setLicense(c map[string]any, id string) {
	if l, _ := c["licenses"].([]any); len(l) == 0 {
		c["licenses"] = []any{map[string]any{"license": map[string]any{"id": id}}}
	}
}

// contentSerial is a urn:uuid made from the SHA-256 of content (the layout
// of a version 5 UUID): the same content, the same serial.
func contentSerial(content []byte) string {
	h := sha256.Sum256(content)
	u := h[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func archive(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ExitOnError)
	out := fs.String("out", "", ".tar.gz to write")
	prefix := fs.String("prefix", "", "the directory the files are under in the archive")
	when := fs.String("time", "", "every entry's mtime: the commit's date, RFC 3339")
	_ = fs.Parse(args)
	t, err := parseTime(*when)
	if err != nil {
		return err
	}
	if *out == "" || *prefix == "" || fs.NArg() == 0 {
		return errors.New("archive: -out, -prefix and FILEs are required")
	}
	files := slices.Clone(fs.Args())
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression) // no name, no time
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	hdr := func(name string, mode int64, size int64, typ byte) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Size: size, Typeflag: typ, ModTime: t, Format: tar.FormatUSTAR}
	}
	if err := tw.WriteHeader(hdr(*prefix+"/", 0o755, 0, tar.TypeDir)); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		fi, err := os.Stat(f)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if fi.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(hdr(*prefix+"/"+filepath.Base(f), mode, int64(len(data)), tar.TypeReg)); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}

func sums(args []string) error {
	fs := flag.NewFlagSet("sums", flag.ExitOnError)
	dir := fs.String("dir", "", "the directory of the files; SHA256SUMS is written there")
	_ = fs.Parse(args)
	if *dir == "" || fs.NArg() == 0 {
		return errors.New("sums: -dir and FILEs are required")
	}
	subjects, err := digests(*dir, fs.Args())
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, s := range subjects {
		fmt.Fprintf(&b, "%s  %s\n", s.Digest["sha256"], s.Name)
	}
	fmt.Print(b.String())
	return os.WriteFile(filepath.Join(*dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

// subject is an in-toto ResourceDescriptor: a name and its digests.
type subject struct {
	Name   string            `json:"name"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest"`
}

// digests are the sha256 of dir's files, sorted by name.
func digests(dir string, files []string) ([]subject, error) {
	files = slices.Clone(files)
	slices.Sort(files)
	files = slices.Compact(files)
	var out []subject
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("digest: %w", err)
		}
		h := sha256.Sum256(data)
		out = append(out, subject{Name: f, Digest: map[string]string{"sha256": hex.EncodeToString(h[:])}})
	}
	return out, nil
}

func unmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return b.Bytes(), err
}

// readTarFile returns the content of name in the tar file at path.
func readTarFile(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no %s", path, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}
