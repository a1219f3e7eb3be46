package main

import (
	"encoding/json"
	"testing"
)

// TestConfigSchemaPrintsJSONSchema: `config schema` prints a draft 2020-12
// JSON Schema that refuses unknown keys and describes the keys.
func TestConfigSchemaPrintsJSONSchema(t *testing.T) {
	code, stdout, stderr := run(t, "config", "schema")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var s struct {
		Schema     string `json:"$schema"`
		Additional *bool  `json:"additionalProperties"`
		Properties map[string]struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.Additional == nil || *s.Additional {
		t.Fatalf("$schema %q, additionalProperties %v", s.Schema, s.Additional)
	}
	if s.Properties["kafka"].Properties["delivery"].Description == "" {
		t.Fatal("kafka.delivery has no description")
	}
	if code, _, _ := run(t, "config", "scheme"); code != 2 {
		t.Fatalf("config scheme: exit %d, want 2 (unknown command)", code)
	}
}
