// Command docgen rewrites internal/config/docs_gen.go and
// docs/configuration.md from the source of package config. Run from
// internal/config (go generate does): go run ./docgen/cmd
package main

import (
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/config/docgen"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := docgen.Write(dir); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}
