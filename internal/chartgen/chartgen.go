// Package chartgen makes the files of the Helm chart (deploy/helm/outbox-relay)
// that are copies of, or derived from, other parts of the repository, so
// that the chart never drifts from them:
//
//   - values.schema.json: its $defs named relay* are the relay's JSON Schema
//     (`outbox-relay config schema`, internal/config), as a pipeline's
//     config: without name and http.listen (the chart sets them), and with
//     every secret key (config.SecretKeys, the fields tagged secret) refused
//     unless it is a whole ${VAR} reference. The rest of the file is the
//     chart's own and kept as written (in canonical form: sorted keys).
//   - templates/_secretkeys.tpl: the same secret keys, for the templates'
//     own refusal (a render with --skip-schema-validation still refuses).
//   - files/alerts.yml: a copy of deploy/prometheus/alerts.yml (a symbolic
//     link made Helm warn on every command).
//
// Files computes them; tools/chartgen writes them (go generate
// ./internal/config/, make docs); a test in deploy/ fails when one is stale.
package chartgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Chart is the chart's directory, relative to the repository's root.
const Chart = "deploy/helm/outbox-relay"

// alertsSource is the file files/alerts.yml copies.
const alertsSource = "deploy/prometheus/alerts.yml"

// VarOnly matches a value that is one whole variable reference, ${VAR},
// without a default (a default would be an inline secret).
const VarOnly = `^\$\{[A-Z_][A-Z0-9_]*\}$`

// SecretRefusal is the message of the schema's refusal of a secret value:
// what Helm prints after the key's location, never the value itself.
const SecretRefusal = "${VAR} (a secret is never a value: mount a Secret with pipelines[].secrets and set the matching *_file key, or take VAR from a Secret in env with valueFrom.secretKeyRef)"

// Files returns the generated files, by path relative to the chart's
// directory, from the repository whose root is root.
func Files(root string) (map[string][]byte, error) {
	schemaPath := filepath.Join(root, Chart, "values.schema.json")
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		return nil, fmt.Errorf("read chart schema: %w", err)
	}
	schema, err := ValuesSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schemaPath, err)
	}
	alerts, err := os.ReadFile(filepath.Join(root, alertsSource))
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return map[string][]byte{
		"values.schema.json":        schema,
		"templates/_secretkeys.tpl": secretKeysTemplate(),
		"files/alerts.yml":          alerts,
	}, nil
}

// ValuesSchema returns the chart's values schema current: current with its
// relay* $defs made anew from the relay's JSON Schema.
func ValuesSchema(current []byte) ([]byte, error) {
	var values map[string]any
	if err := unmarshal(current, &values); err != nil {
		return nil, err
	}
	defs, _ := values["$defs"].(map[string]any)
	if defs == nil {
		return nil, fmt.Errorf("no $defs: the pipelines' config refers to $defs/relayConfig")
	}
	for name := range defs {
		if strings.HasPrefix(name, "relay") {
			delete(defs, name)
		}
	}
	relay, err := relayDefs()
	if err != nil {
		return nil, err
	}
	for name, d := range relay {
		defs[name] = d
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(values); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// relayDefs are the relay's schema as $defs of the chart's: relayConfig,
// one relay<Name> per $defs entry of its own, and relaySecret.
func relayDefs() (map[string]any, error) {
	var relay map[string]any
	if err := unmarshal(config.JSONSchema(), &relay); err != nil {
		return nil, fmt.Errorf("the relay's schema: %w", err)
	}
	own, _ := relay["$defs"].(map[string]any)
	for _, k := range []string{"$schema", "$id", "$defs"} {
		delete(relay, k)
	}
	defs := map[string]any{}
	renamed := map[string]string{}
	for name, d := range own {
		renamed["#/$defs/"+name] = "#/$defs/relay" + strings.ToUpper(name[:1]) + name[1:]
		defs["relay"+strings.ToUpper(name[:1])+name[1:]] = d
	}
	// The chart sets name (the pipeline's) and http.listen.
	props := relay["properties"].(map[string]any)
	delete(props, "name")
	if req, ok := relay["required"].([]any); ok {
		var left []any
		for _, r := range req {
			if r != "name" {
				left = append(left, r)
			}
		}
		relay["required"] = left
	}
	if http, ok := props["http"].(map[string]any); ok {
		delete(http["properties"].(map[string]any), "listen")
	}
	relay["description"] = "The relay's configuration (docs/configuration.md) without name and http.listen, which the chart sets. Generated from `outbox-relay config schema` (internal/config); do not edit."
	for _, path := range config.SecretKeys() {
		p, err := property(relay, path)
		if err != nil {
			return nil, fmt.Errorf("secret key %s: %w", path, err)
		}
		desc, _ := p["description"].(string)
		for k := range p {
			delete(p, k)
		}
		p["description"] = desc
		p["$ref"] = "#/$defs/relaySecret"
	}
	rewriteRefs(relay, renamed)
	for _, d := range defs {
		rewriteRefs(d, renamed)
	}
	defs["relayConfig"] = relay
	// A secret is a whole ${VAR} or nothing. Anything else fails the
	// "else", whose message says what to write and never shows the value
	// (a pattern's failure would print it).
	defs["relaySecret"] = map[string]any{
		"description": "A key that holds a secret (tagged secret in internal/config): a whole ${VAR} reference, its variable from a Secret, or unset.",
		"if":          map[string]any{"anyOf": []any{map[string]any{"type": "null"}, map[string]any{"type": "string", "pattern": VarOnly}}},
		"then":        true,
		"else":        map[string]any{"const": SecretRefusal},
	}
	return defs, nil
}

// property is the schema of the key at dotted path in an object schema.
func property(schema map[string]any, path string) (map[string]any, error) {
	s := schema
	for _, name := range strings.Split(path, ".") {
		props, _ := s["properties"].(map[string]any)
		next, ok := props[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no property %s in the relay's schema", name)
		}
		s = next
	}
	return s, nil
}

// rewriteRefs replaces the $ref values of v found in renamed.
func rewriteRefs(v any, renamed map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if r, ok := e.(string); ok && k == "$ref" && renamed[r] != "" {
				v[k] = renamed[r]
				continue
			}
			rewriteRefs(e, renamed)
		}
	case []any:
		for _, e := range v {
			rewriteRefs(e, renamed)
		}
	}
}

func unmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// secretKeysTemplate defines outbox-relay.secretKeys, the secret keys as a
// JSON list, and outbox-relay.varOnly, the form a secret may take.
func secretKeysTemplate() []byte {
	keys, _ := json.Marshal(config.SecretKeys())
	var b bytes.Buffer
	b.WriteString(`{{- /*
Code generated by internal/chartgen from internal/config; DO NOT EDIT.
Rewrite it with: go generate ./internal/config/ (or make docs)
*/ -}}

{{- /* The relay's configuration keys that hold a secret (the fields tagged
secret in internal/config), as a JSON list of dotted paths. */ -}}
{{- define "outbox-relay.secretKeys" -}}
`)
	b.Write(keys)
	b.WriteString(`
{{- end -}}

{{- /* The only form a secret key may take in values: a whole ${VAR}. */ -}}
{{- define "outbox-relay.varOnly" -}}
`)
	b.WriteString(VarOnly)
	b.WriteString("\n{{- end -}}\n")
	return b.Bytes()
}
