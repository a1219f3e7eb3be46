package mysqlsource

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// MySQL binary JSON type codes (sql/json_binary.h).
const (
	jsonSmallObject = 0x00
	jsonLargeObject = 0x01
	jsonSmallArray  = 0x02
	jsonLargeArray  = 0x03
	jsonLiteral     = 0x04
	jsonInt16       = 0x05
	jsonUint16      = 0x06
	jsonInt32       = 0x07
	jsonUint32      = 0x08
	jsonInt64       = 0x09
	jsonUint64      = 0x0a
	jsonDouble      = 0x0b
	jsonString      = 0x0c

	jsonNull  = 0x00
	jsonTrue  = 0x01
	jsonFalse = 0x02
)

// EncodeJSON converts JSON text into MySQL's binary JSON, as a JSON
// column's value in a row event: type byte, then the value. Objects keep
// MySQL's key order (shorter keys first, then bytewise; the last of
// duplicate keys wins); integers take the smallest integer type MySQL
// would (int16, int32, int64, uint64 above int64), other numbers are
// doubles; containers use the small format (2-byte offsets) unless they
// exceed 64 KiB.
func EncodeJSON(text string) ([]byte, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("encode json: trailing data after the value")
	}
	typ, body, err := jsonValue(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{typ}, body...), nil
}

// jsonValue returns v's type code and encoding (without the type byte).
func jsonValue(v any) (byte, []byte, error) {
	switch x := v.(type) {
	case nil:
		return jsonLiteral, []byte{jsonNull}, nil
	case bool:
		if x {
			return jsonLiteral, []byte{jsonTrue}, nil
		}
		return jsonLiteral, []byte{jsonFalse}, nil
	case string:
		return jsonString, appendJSONString(nil, x), nil
	case json.Number:
		return jsonNumber(x)
	case []any:
		if typ, b, err := jsonContainer(x, nil, false); err == nil || !errorsIsTooLarge(err) {
			return typ, b, err
		}
		return jsonContainer(x, nil, true)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if len(keys[i]) != len(keys[j]) {
				return len(keys[i]) < len(keys[j])
			}
			return keys[i] < keys[j]
		})
		vals := make([]any, len(keys))
		for i, k := range keys {
			vals[i] = x[k]
		}
		if typ, b, err := jsonContainer(vals, keys, false); err == nil || !errorsIsTooLarge(err) {
			return typ, b, err
		}
		return jsonContainer(vals, keys, true)
	}
	return 0, nil, fmt.Errorf("encode json: unsupported value %T", v)
}

func jsonNumber(n json.Number) (byte, []byte, error) {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			switch {
			case i >= math.MinInt16 && i <= math.MaxInt16:
				return jsonInt16, binary.LittleEndian.AppendUint16(nil, uint16(int16(i))), nil
			case i >= math.MinInt32 && i <= math.MaxInt32:
				return jsonInt32, binary.LittleEndian.AppendUint32(nil, uint32(int32(i))), nil
			}
			return jsonInt64, binary.LittleEndian.AppendUint64(nil, uint64(i)), nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return jsonUint64, binary.LittleEndian.AppendUint64(nil, u), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("encode json: number %q: %w", s, err)
	}
	return jsonDouble, binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)), nil
}

// appendJSONString appends a length (7 bits a byte, low first, high bit
// set while more follow) and the UTF-8 bytes.
func appendJSONString(b []byte, s string) []byte {
	n := uint64(len(s))
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(append(b, byte(n)), s...)
}

type tooLarge struct{}

func (tooLarge) Error() string { return "json container larger than the small format" }

func errorsIsTooLarge(err error) bool { _, ok := err.(tooLarge); return ok }

// inlined reports whether a value of type typ is stored in its value entry.
func inlined(typ byte, large bool) bool {
	switch typ {
	case jsonLiteral, jsonInt16, jsonUint16:
		return true
	case jsonInt32, jsonUint32:
		return large
	}
	return false
}

// jsonContainer encodes an array (keys nil) or an object: element count,
// total size, key entries (offset, 2-byte length), value entries (type,
// offset or inlined value), keys, then values; offsets count from the
// container's first byte.
func jsonContainer(vals []any, keys []string, large bool) (byte, []byte, error) {
	w := 2
	if large {
		w = 4
	}
	put := func(b []byte, at int, v int) {
		if large {
			binary.LittleEndian.PutUint32(b[at:], uint32(v))
		} else {
			binary.LittleEndian.PutUint16(b[at:], uint16(v))
		}
	}
	n := len(vals)
	head := 2*w + n*(1+w)
	if keys != nil {
		head += n * (w + 2)
	}
	buf := make([]byte, head)
	put(buf, 0, n)
	var tail bytes.Buffer
	keyAt := 2 * w
	valAt := 2*w + len(keys)*(w+2)
	for i, k := range keys {
		put(buf, keyAt+i*(w+2), head+tail.Len())
		binary.LittleEndian.PutUint16(buf[keyAt+i*(w+2)+w:], uint16(len(k)))
		tail.WriteString(k)
	}
	for i, v := range vals {
		typ, body, err := jsonValue(v)
		if err != nil {
			return 0, nil, err
		}
		e := valAt + i*(1+w)
		buf[e] = typ
		if inlined(typ, large) {
			copy(buf[e+1:e+1+w], body)
			continue
		}
		put(buf, e+1, head+tail.Len())
		tail.Write(body)
	}
	total := head + tail.Len()
	if !large && total > math.MaxUint16 {
		return 0, nil, tooLarge{}
	}
	put(buf, w, total)
	out := append(buf, tail.Bytes()...)
	switch {
	case keys != nil && large:
		return jsonLargeObject, out, nil
	case keys != nil:
		return jsonSmallObject, out, nil
	case large:
		return jsonLargeArray, out, nil
	}
	return jsonSmallArray, out, nil
}

// RawJSON is a JSON column's value given as MySQL's binary JSON (type byte,
// then the value), logged as it is: documents EncodeJSON would not write.
type RawJSON []byte

// NestedArraysJSON is a binary JSON document of n arrays, each the only
// element of the one around it ([[[...[]...]]]), in the large format (13
// bytes a level): deeper than MySQL stores when n > 100.
func NestedArraysJSON(n int) RawJSON {
	const level = 13 // count, size, one value entry (type, offset)
	doc := make([]byte, 1+level*(n-1)+8)
	doc[0] = jsonLargeArray
	b := doc[1:]
	for i := 0; i < n-1; i++ {
		h := b[level*i:]
		binary.LittleEndian.PutUint32(h, 1)
		binary.LittleEndian.PutUint32(h[4:], uint32(len(b)-level*i))
		h[8] = jsonLargeArray
		binary.LittleEndian.PutUint32(h[9:], level)
	}
	binary.LittleEndian.PutUint32(b[level*(n-1)+4:], 8) // the innermost: empty
	return doc
}

// SelfNestedJSON is a 8-byte binary JSON array whose one element is the
// array itself (its value's offset is 0): endlessly deep to a decoder that
// follows offsets.
func SelfNestedJSON() RawJSON {
	return RawJSON{jsonSmallArray, 1, 0, 7, 0, jsonSmallArray, 0, 0}
}

// SharedStringJSON is a binary JSON array of n elements that all point at
// one string of size bytes: a document of about size + 5n bytes that a
// decoder following offsets inflates to n times size.
func SharedStringJSON(n, size int) RawJSON {
	header := 8 + 5*n
	doc := []byte{jsonLargeArray}
	doc = binary.LittleEndian.AppendUint32(doc, uint32(n))
	str := appendJSONString(nil, strings.Repeat("x", size))
	doc = binary.LittleEndian.AppendUint32(doc, uint32(header+len(str)))
	for range n {
		doc = append(doc, jsonString)
		doc = binary.LittleEndian.AppendUint32(doc, uint32(header))
	}
	return append(doc, str...)
}
