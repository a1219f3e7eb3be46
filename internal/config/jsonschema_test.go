package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// compiledSchema compiles JSONSchema with a JSON Schema library, checking
// it against the draft 2020-12 meta-schema.
func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(SchemaID)
	if err != nil {
		t.Fatalf("compile the schema: %v", err)
	}
	return s
}

// validateYAML validates one YAML document against s, as JSON.
func validateYAML(s *jsonschema.Schema, raw []byte) error {
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// relayConfig reports whether a YAML document is a relay configuration
// (not a Compose file or a Kubernetes manifest).
func relayConfig(raw []byte) bool {
	var top map[string]any
	if yaml.Unmarshal(raw, &top) != nil {
		return false
	}
	_, src := top["source"]
	_, k := top["kafka"]
	return src && k
}

var yamlBlock = regexp.MustCompile("(?s)```ya?ml\\n(.*?)```")

// repositoryExamples returns every relay configuration written in the
// repository, by where it is: the config testdata, the Compose and
// Kubernetes deployments (the relay.yaml of a ConfigMap), and the yaml
// code blocks of the README, docs and examples.
func repositoryExamples(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(glob string, each func(path string, raw []byte)) {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			each(f, raw)
		}
	}
	add("testdata/*.good.yaml", func(p string, raw []byte) { out[p] = raw })
	add("../../deploy/compose/*.yaml", func(p string, raw []byte) {
		if relayConfig(raw) {
			out[p] = raw
		}
	})
	add("../../deploy/kubernetes/*.yaml", func(p string, raw []byte) {
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var m struct {
				Kind string            `yaml:"kind"`
				Data map[string]string `yaml:"data"`
			}
			if dec.Decode(&m) != nil {
				return
			}
			for name, v := range m.Data {
				if m.Kind == "ConfigMap" && strings.HasSuffix(name, ".yaml") && relayConfig([]byte(v)) {
					out[p+":"+name] = []byte(v)
				}
			}
		}
	})
	for _, glob := range []string{"../../README.md", "../../docs/*.md", "../../examples/*/*.md", "../../examples/*.md"} {
		add(glob, func(p string, raw []byte) {
			for i, m := range yamlBlock.FindAllSubmatch(raw, -1) {
				if relayConfig(m[1]) {
					out[p+"#"+string(rune('a'+i))] = m[1]
				}
			}
		})
	}
	return out
}

// TestJSONSchemaAcceptsEveryExample: every relay configuration in the
// repository is valid under `config schema`.
func TestJSONSchemaAcceptsEveryExample(t *testing.T) {
	s := compiledSchema(t)
	examples := repositoryExamples(t)
	for _, want := range []string{"../../deploy/compose/relay.yaml", "testdata/full.good.yaml", "testdata/env-default.good.yaml"} {
		if _, ok := examples[want]; !ok {
			t.Fatalf("%s not among the examples found", want)
		}
	}
	for name, raw := range examples {
		if err := validateYAML(s, raw); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	t.Logf("%d examples", len(examples))
}

// TestJSONSchemaRefusesBadShapes: the testdata that is bad by its shape
// (an unknown key, a value of the wrong type, a value outside fixed
// choices) is refused by the schema as by Load.
func TestJSONSchemaRefusesBadShapes(t *testing.T) {
	s := compiledSchema(t)
	for _, f := range []string{
		"unknown-key", "wrong-type", "bad-delivery", "bad-flavor", "bad-preset", "bad-null-payload",
		"compression", "on-error", "on-partitions-added", "statement-dml", "transaction-lanes",
		"sasl-mechanism", "per-table-bad-op", "tracing-sample-ratio",
	} {
		raw, err := os.ReadFile("testdata/" + f + ".bad.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if err := validateYAML(s, raw); err == nil {
			t.Errorf("%s.bad.yaml: the schema accepts it", f)
		}
		if _, err := Parse(raw, env(nil)); err == nil {
			t.Errorf("%s.bad.yaml: Parse accepts it", f)
		}
	}
}
