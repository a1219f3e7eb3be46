package main

import (
	"encoding/json"
	"io"
)

// writeJSON prints v as the --json output of a command, the one convention
// of every command (README "Commands"): one JSON document per invocation,
// compact, ended by a newline; a list is an array ([] when empty), never
// JSON lines or an indented document. Pipe it to `jq .` to read it.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
