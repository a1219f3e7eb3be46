// Command chartgen writes the Helm chart's generated files (values.schema.json's
// relay* definitions, templates/_secretkeys.tpl, files/alerts.yml; see
// internal/chartgen). Run from the repository's root, or give it the root:
// go run ./tools/chartgen [ROOT]. go generate ./internal/config/ (make
// docs) runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/outbox-relay/outbox-relay/internal/chartgen"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	files, err := chartgen.Files(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
	for name, data := range files {
		path := filepath.Join(root, chartgen.Chart, name)
		// a symbolic link (the old files/alerts.yml) is replaced, not written through
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "chartgen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chartgen:", err)
			os.Exit(1)
		}
	}
}
