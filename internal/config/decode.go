package config

import (
	"encoding"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// varRef matches ${VAR} and ${VAR:-default}: environment variable names
// are upper case, so ${routedByValue} in router.topic_replacement is left
// alone; $${ escapes.
var varRef = regexp.MustCompile(`\$?\$\{([A-Z_][A-Z0-9_]*)(:-[^}]*)?\}`)

// decoder walks a parsed YAML document alongside the Config struct. It
// expands ${VAR} inside each scalar value after parsing (so a value arrives
// exactly as the variable holds it, and comments are never expanded), and
// collects every problem with its key path and line.
type decoder struct {
	lookup func(string) (string, bool)
	// optional reports the keys whose variables may be unset (LoadOffline):
	// an unset one expands to "" there.
	optional func(path string) bool
	errs     []string
	paths    []string // of errs
	// expanded lists the values that came from environment variables, so
	// that no error shows one (a secret in the wrong key would be printed
	// as the bad value): each is shown as written, ${VAR}.
	expanded []expandedValue
}

// expandedValue is a scalar whose text referenced variables: value after
// expansion, raw as written.
type expandedValue struct{ path, value, raw string }

// redact replaces, in problem p, every expanded value of p's key (and any
// expanded value long enough not to be mistaken for other text) with its
// text as written, ${VAR}: a problem never shows what a variable holds.
func (d *decoder) redact(p string) string {
	key := problemKey(p)
	for _, e := range d.expanded {
		if e.value == "" || e.value == e.raw || (e.path != key && len(e.value) < 6) {
			continue
		}
		p = strings.ReplaceAll(p, strconv.Quote(e.value), strconv.Quote(e.raw))
		p = strings.ReplaceAll(p, e.value, e.raw)
	}
	return p
}

// failed reports whether decoding key, or an element of it, failed: its
// value kept the default, so validation would report it again.
func (d *decoder) failed(key string) bool {
	for _, p := range d.paths {
		if p == key || strings.HasPrefix(p, key+"[") || strings.HasPrefix(key, p+"[") {
			return true
		}
	}
	return false
}

// fromVariable reports whether key's value referred to a variable.
func (d *decoder) fromVariable(key string) bool {
	for _, e := range d.expanded {
		if e.path == key {
			return true
		}
	}
	return false
}

func (d *decoder) fail(path string, n *yaml.Node, format string, a ...any) {
	d.paths = append(d.paths, path)
	d.errs = append(d.errs, fmt.Sprintf("%s (line %d): %s", path, n.Line, fmt.Sprintf(format, a...)))
}

// expand replaces ${VAR} and ${VAR:-default} in one scalar value; ok
// reports whether a variable was referenced. As in sh, the default is used
// when VAR is unset or empty.
func (d *decoder) expand(path string, n *yaml.Node) (string, bool) {
	used := false
	out := varRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		if strings.HasPrefix(m, "$$") {
			return m[1:] // $${X} is the literal ${X}
		}
		used = true
		sub := varRef.FindStringSubmatch(m)
		name, def := sub[1], sub[2]
		v, ok := d.lookup(name)
		switch {
		case def != "" && v == "":
			return def[len(":-"):]
		case !ok && (d.optional == nil || !d.optional(path)):
			d.fail(path, n, "environment variable %s is not set: export it, or write $${%s} for a literal ${%s}", name, name, name)
		}
		return v
	})
	return out, used || out != n.Value
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// hint says what to write for a value of type t.
func hint(t reflect.Type) string {
	switch {
	case t == durationType:
		return "write a duration such as 5s, 250ms or 1m30s"
	case t.Kind() == reflect.Bool:
		return "write true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("write a whole number from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return fmt.Sprintf("write a whole number from 0 to %d", uint64(1)<<t.Bits()-1)
	case t.Kind() == reflect.Float64:
		return "write a number such as 0.25"
	case t.Kind() == reflect.String:
		return "write a single value (quote it if it contains \": \", \" #\" or starts with a special character)"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "write a list, such as [a, b], one \"- item\" per line, or one value a, b"
	case t.Kind() == reflect.Slice:
		return "write a list, such as [a, b] or one \"- item\" per line"
	case t.Kind() == reflect.Map, t.Kind() == reflect.Struct:
		return "write a mapping of keys, one \"key: value\" per line"
	}
	return "see the configuration reference"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

// decode sets out (addressable) from n.
func (d *decoder) decode(path string, n *yaml.Node, out reflect.Value) {
	n = d.resolve(path, n)
	t := out.Type()
	switch {
	case t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshalerType):
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return // "key:" with nothing: keep the defaults
			}
			d.fail(path, n, "got %s: %s", kindName(n), hint(t))
			return
		}
		d.decodeStruct(path, n, out)
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			out.Set(reflect.Zero(t))
			return
		}
		if n.Kind == yaml.ScalarNode && t.Elem().Kind() == reflect.String {
			d.list(path, n, out) // one value: a comma-separated list
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(path, n, "got %s: %s", kindName(n), hint(t))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i))
		}
		out.Set(s)
	case t.Kind() == reflect.Map:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.MappingNode {
			d.fail(path, n, "got %s: %s", kindName(n), hint(t))
			return
		}
		if out.IsNil() {
			out.Set(reflect.MakeMap(t))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			e := reflect.New(t.Elem()).Elem()
			d.decode(path+"."+k.Value, v, e)
			out.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), e)
		}
	default:
		d.scalar(path, n, out)
	}
}

// list decodes a list of strings written as one value: the value (after
// expanding the variables it refers to, such as brokers: ${KAFKA_BROKERS}
// holding "a:9092,b:9092", or as written: hosts: db1:3306,db2:3306) split
// at commas, each element trimmed; an empty text is an empty list. An
// element's error shows a value from a variable as written.
func (d *decoder) list(path string, n *yaml.Node, out reflect.Value) {
	v, expanded := d.expand(path, n)
	if expanded {
		d.expanded = append(d.expanded, expandedValue{path: path, value: v, raw: n.Value})
	}
	var elems []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			elems = append(elems, e)
		}
	}
	s := reflect.MakeSlice(out.Type(), len(elems), len(elems))
	for i, e := range elems {
		if expanded {
			d.expanded = append(d.expanded, expandedValue{path: fmt.Sprintf("%s[%d]", path, i), value: e, raw: n.Value})
		}
		s.Index(i).SetString(e)
	}
	out.Set(s)
}

// scalar decodes one value: a referenced variable's text arrives exactly in
// a string setting; other types parse the expanded text as YAML would.
func (d *decoder) scalar(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "got %s: %s", kindName(n), hint(out.Type()))
		return
	}
	v, expanded := d.expand(path, n)
	shown := strconv.Quote(v) // the bad value, as an error shows it
	if expanded {
		d.expanded = append(d.expanded, expandedValue{path: path, value: v, raw: n.Value})
		shown = fmt.Sprintf("the value of %s", n.Value)
	}
	if out.Kind() == reflect.String {
		if !expanded && n.Tag == "!!null" {
			return // "key:" or "key: null": keep the default
		}
		out.SetString(v)
		return
	}
	c := *n
	if expanded {
		c.Value, c.Tag, c.Style = v, "", 0
	}
	if c.Tag == "!!null" || (expanded && v == "") {
		if expanded {
			d.fail(path, n, "the variable is empty: %s", hint(out.Type()))
		}
		return
	}
	if k := out.Kind(); k >= reflect.Int && k <= reflect.Uint64 && c.ShortTag() == "!!float" {
		// yaml.v3 would truncate it: 4242.9 into 4242
		d.fail(path, n, "%s is not valid here: %s", shown, hint(out.Type()))
		return
	}
	if err := c.Decode(out.Addr().Interface()); err != nil {
		d.fail(path, n, "%s is not valid here: %s", shown, hint(out.Type()))
	}
}

// decodeStruct sets out's fields from the mapping n, by yaml tag. A key
// that names no field is an error naming the keys allowed there.
func (d *decoder) decodeStruct(path string, n *yaml.Node, out reflect.Value) {
	t := out.Type()
	fields := map[string]int{}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if seen[k.Value] {
			d.fail(p, k, "set twice: keep one")
			continue
		}
		seen[k.Value] = true
		fi, ok := fields[k.Value]
		if !ok {
			slices.Sort(names)
			if s := suggestKey(k.Value, names); s != "" {
				d.fail(p, k, "unknown key: did you mean %s? (the keys here: %s)", s, strings.Join(names, ", "))
			} else {
				d.fail(p, k, "unknown key: write one of %s", strings.Join(names, ", "))
			}
			continue
		}
		if t == reflect.TypeFor[RouterConfig]() && k.Value == "tables" {
			continue // decoded onto copies of this router once its own keys are set
		}
		d.decode(p, v, out.Field(fi))
	}
	if t == reflect.TypeFor[RouterConfig]() {
		for i := 0; i+1 < len(n.Content); i += 2 { // keys only: a value may be spelled "tables"
			if n.Content[i].Value == "tables" {
				d.routerTables(path+".tables", n.Content[i+1], out.Addr().Interface().(*RouterConfig))
				break
			}
		}
	}
}

// routerTables decodes each per-table override onto a copy of the router
// r: every key the table does not set keeps r's value. A table that picks
// another preset takes that preset's column names for the columns it does
// not name itself.
func (d *decoder) routerTables(path string, n *yaml.Node, r *RouterConfig) {
	n = d.resolve(path, n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "got %s: write a mapping of db.table to router settings", kindName(n))
		return
	}
	r.Tables = map[string]RouterConfig{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		v = d.resolve(path+"."+k.Value, v) // an alias or merge keys: the keys it sets count as set
		out := *r
		out.Tables = nil
		out.complete = true
		out.AdditionalFields = slices.Clone(r.AdditionalFields)
		p := path + "." + k.Value
		if v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "tables" {
					d.fail(p+".tables", v.Content[j], "per-table settings do not nest: move it to router.tables")
					v.Content = slices.Delete(v.Content, j, j+2)
					break
				}
			}
		}
		before := out.Preset
		d.decode(p, v, reflect.ValueOf(&out).Elem())
		if out.Preset != before {
			set := map[string]bool{}
			if v.Kind == yaml.MappingNode {
				for j := 0; j < len(v.Content); j += 2 {
					set[v.Content[j].Value] = true
				}
			}
			for key, f := range map[string]*string{
				"event_id_column": &out.EventIDColumn, "aggregate_type_column": &out.AggregateTypeColumn,
				"aggregate_id_column": &out.AggregateIDColumn, "event_type_column": &out.EventTypeColumn,
				"payload_column": &out.PayloadColumn,
			} {
				if !set[key] {
					*f = "" // the table's preset names it
				}
			}
		}
		out.applyPreset()
		r.Tables[k.Value] = out
	}
}

// resolve follows an alias and applies YAML merge keys ("<<: *common", or
// a list of aliases) to a mapping, returning a copy: a key the mapping
// sets itself wins over a merged one, and an earlier merged mapping wins
// over a later one (the YAML merge key rules). Other nodes come back as
// they are.
func (d *decoder) resolve(path string, n *yaml.Node) *yaml.Node {
	return d.resolveDepth(path, n, 0)
}

func (d *decoder) resolveDepth(path string, n *yaml.Node, depth int) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode || depth > 32 {
		return n
	}
	var own, merged []*yaml.Node
	hasMerge := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!merge" {
			own = append(own, k, v)
			continue
		}
		hasMerge = true
		srcs := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			srcs = v.Content
		}
		for _, src := range srcs {
			m := d.resolveDepth(path, src, depth+1)
			if m.Kind != yaml.MappingNode {
				d.fail(path+".<<", k, "got %s: a merge key takes a mapping or an alias of one (<<: *name), or a list of them", kindName(m))
				continue
			}
			merged = append(merged, m.Content...)
		}
	}
	if !hasMerge {
		return n
	}
	set := map[string]bool{}
	for i := 0; i < len(own); i += 2 {
		set[own[i].Value] = true
	}
	c := *n
	c.Content = slices.Clone(own)
	for i := 0; i+1 < len(merged); i += 2 {
		if !set[merged[i].Value] {
			set[merged[i].Value] = true
			c.Content = append(c.Content, merged[i], merged[i+1])
		}
	}
	return &c
}
