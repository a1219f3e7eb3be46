package config

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The JSON Schema of the configuration file (`outbox-relay config schema`),
// made from the same Keys as docs/configuration.md. It describes the file
// as written: any value may instead refer to variables (${VAR},
// ${VAR:-default}), and a list of strings may be one value, a
// comma-separated list (or a reference to one).
// Validate checks more than the schema can (host:port, GTID sets, the
// relations between keys); the schema checks the shape: every key known,
// every value of its type, the fixed choices.

// SchemaID is the $id of the schema.
const SchemaID = "https://github.com/outbox-relay/outbox-relay/config.schema.json"

// varPattern matches a value that refers to a variable.
const varPattern = `\$\{[A-Z_][A-Z0-9_]*(:-[^}]*)?\}`

// durationPattern matches what time.ParseDuration accepts.
const durationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// JSONSchema returns the JSON Schema (draft 2020-12) of the configuration,
// documented from the generated docs.
func JSONSchema() []byte { return SourceDocs().JSONSchema() }

// JSONSchema returns the JSON Schema (draft 2020-12) of the configuration,
// documented by d.
func (d Docs) JSONSchema() []byte {
	keys := d.Keys()
	byPath := map[string]Key{}
	for _, k := range keys {
		byPath[k.Path] = k
	}
	root := object(reflect.TypeFor[Config](), "", byPath)
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "outbox-relay configuration"
	root["description"] = "The relay's configuration file (docs/configuration.md). Values may refer to environment variables: ${VAR}, ${VAR:-default}."
	// per-table router settings: any router key but tables (they do not nest)
	table := object(reflect.TypeFor[RouterConfig](), "router.", byPath)
	delete(table["properties"].(map[string]any), "tables")
	root["$defs"] = map[string]any{"tableRouter": table}
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		panic(err) // maps of strings, numbers and bools only
	}
	return append(out, '\n')
}

// object is the schema of a mapping decoded into struct t, whose keys
// start with prefix.
func object(t reflect.Type, prefix string, byPath map[string]Key) map[string]any {
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		k := byPath[prefix+name]
		props[name] = property(k, f.Type, byPath)
		if k.Required && prefix != "" {
			required = append(required, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if prefix == "" {
		required = []string{"name", "source", "kafka"}
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// property is the schema of key k, of Go type t.
func property(k Key, t reflect.Type, byPath map[string]Key) map[string]any {
	var s map[string]any
	ref := map[string]any{"type": "string", "pattern": varPattern}
	orVar := func(v map[string]any) map[string]any { return map[string]any{"anyOf": []any{v, ref}} }
	switch {
	case t == durationType:
		s = map[string]any{"type": "string", "anyOf": []any{map[string]any{"pattern": durationPattern}, map[string]any{"pattern": varPattern}}}
	case t == reflect.TypeFor[map[string]RouterConfig]():
		s = map[string]any{"type": "object", "additionalProperties": map[string]any{"$ref": "#/$defs/tableRouter"},
			"propertyNames": map[string]any{"pattern": `^[^.]+\.[^.]+$`}}
	case t.Kind() == reflect.Struct:
		s = object(t, k.Path+".", byPath)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		s = map[string]any{"type": "array", "items": object(t.Elem(), k.Path+"[].", byPath)}
	case t.Kind() == reflect.Slice:
		// a list, or one value: a comma-separated list (references included)
		s = map[string]any{"anyOf": []any{map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			map[string]any{"type": "string"}}}
	case t.Kind() == reflect.Map:
		s = map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}
	case t.Kind() == reflect.Bool:
		s = orVar(map[string]any{"type": "boolean"})
	case t.Kind() == reflect.Float64:
		// The configuration's numbers with a fraction are shares
		// (tracing.sample_ratio), between 0 and 1 as Validate checks.
		s = orVar(map[string]any{"type": "number", "minimum": 0, "maximum": 1})
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		lo, hi := intBounds(t)
		n := map[string]any{"type": "integer", "minimum": json.Number(lo), "maximum": json.Number(hi)}
		if len(k.Enum) > 0 {
			var vs []any
			for _, e := range k.Enum {
				vs = append(vs, json.Number(e))
			}
			n = map[string]any{"enum": vs}
		}
		s = orVar(n)
	case len(k.Enum) > 0:
		vs := make([]any, len(k.Enum))
		for i, e := range k.Enum {
			vs[i] = e
		}
		s = orVar(map[string]any{"enum": vs})
	default:
		s = map[string]any{"type": "string"}
	}
	// "key:" with nothing (null) keeps the default, as Load reads it
	if typ, ok := s["type"].(string); ok {
		s["type"] = []any{typ, "null"}
	} else if alts, ok := s["anyOf"].([]any); ok {
		s["anyOf"] = append(alts, map[string]any{"type": "null"})
	}
	if k.Doc != "" {
		s["description"] = k.Doc
	}
	if k.Default != "" && !k.Required {
		switch {
		case t.Kind() == reflect.Bool:
			s["default"], _ = strconv.ParseBool(k.Default)
		case t != durationType && t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64, t.Kind() == reflect.Float64:
			s["default"] = json.Number(k.Default)
		case t.Kind() == reflect.String || t == durationType:
			s["default"] = k.Default
		}
	}
	if k.Example != "" && t.Kind() != reflect.Struct {
		var v any
		if err := yaml.Unmarshal([]byte(k.Example), &v); err != nil || v == nil {
			v = k.Example
		}
		s["examples"] = []any{v}
	}
	return s
}
