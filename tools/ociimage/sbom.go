package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// writeSBOM writes the image's CycloneDX SBOM: the image (a container
// component named by its digest) holding, per platform, the relay binary
// with the modules its own SBOM lists (their bom-refs prefixed with the
// platform, so that the two platforms' stay apart), and the CA bundle as a
// file. Its time is the commit's and it has no serial number: the same
// inputs give the same bytes.
func writeSBOM(o options, digest v1.Hash, ca []byte) error {
	platforms := make([]string, 0, len(o.sboms))
	for p := range o.sboms {
		if _, ok := o.binaries[p]; !ok {
			return fmt.Errorf("image sbom: -sbom %s: no -binary of that platform", p)
		}
		platforms = append(platforms, p)
	}
	if len(platforms) != len(o.binaries) {
		return fmt.Errorf("image sbom: %d SBOMs for %d platforms: give one per -binary", len(platforms), len(o.binaries))
	}
	slices.Sort(platforms)
	name := path.Base(o.repo)
	purl := fmt.Sprintf("pkg:oci/%s@%s?repository_url=%s&tag=%s", name, url.QueryEscape(digest.String()), url.QueryEscape(o.repo), url.QueryEscape(o.version))
	license := []any{map[string]any{"license": map[string]any{"id": o.license}}}
	caSum := sha256.Sum256(ca)
	var components, dependencies []any
	var tools any
	imageDeps := []any{"ca-certificates"}
	for _, p := range platforms {
		var bom map[string]any
		raw, err := os.ReadFile(o.sboms[p])
		if err != nil {
			return fmt.Errorf("image sbom: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&bom); err != nil {
			return fmt.Errorf("image sbom: %s: %w", o.sboms[p], err)
		}
		meta, _ := bom["metadata"].(map[string]any)
		app, _ := meta["component"].(map[string]any)
		if app == nil {
			return fmt.Errorf("image sbom: %s: no metadata.component", o.sboms[p])
		}
		tools = meta["tools"]
		prefix := p + "/"
		app["bom-ref"] = prefix + fmt.Sprint(app["bom-ref"])
		if mods, ok := bom["components"].([]any); ok {
			for _, m := range mods {
				if m, ok := m.(map[string]any); ok {
					m["bom-ref"] = prefix + fmt.Sprint(m["bom-ref"])
				}
			}
			app["components"] = mods
		}
		app["properties"] = meta["properties"] // the binary's hashes and build settings
		components = append(components, app)
		imageDeps = append(imageDeps, app["bom-ref"])
		deps, _ := bom["dependencies"].([]any)
		for _, d := range deps {
			d, _ := d.(map[string]any)
			if d == nil {
				continue
			}
			d["ref"] = prefix + fmt.Sprint(d["ref"])
			if on, ok := d["dependsOn"].([]any); ok {
				for i, r := range on {
					on[i] = prefix + fmt.Sprint(r)
				}
			}
			dependencies = append(dependencies, d)
		}
	}
	components = append(components, map[string]any{
		"bom-ref": "ca-certificates", "type": "file", "name": strings.TrimPrefix(caPath, "/"),
		"description": "the CA bundle of the build machine's Debian ca-certificates",
		"hashes":      []any{map[string]any{"alg": "SHA-256", "content": hex.EncodeToString(caSum[:])}},
	})
	dependencies = append([]any{map[string]any{"ref": "image", "dependsOn": imageDeps}}, dependencies...)
	bom := map[string]any{
		"$schema":     "http://cyclonedx.org/schema/bom-1.6.schema.json",
		"bomFormat":   "CycloneDX",
		"specVersion": "1.6",
		"version":     1,
		"metadata": map[string]any{
			"timestamp": o.created.Format(time.RFC3339),
			"tools":     tools,
			"component": map[string]any{
				"bom-ref": "image", "type": "container", "name": o.repo, "version": o.version,
				"purl": purl, "licenses": license,
				"hashes":             []any{map[string]any{"alg": "SHA-256", "content": digest.Hex}},
				"externalReferences": []any{map[string]any{"type": "vcs", "url": o.source}},
			},
		},
		"components":   components,
		"dependencies": dependencies,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(bom); err != nil {
		return err
	}
	return os.WriteFile(o.sbomOut, b.Bytes(), 0o644)
}
