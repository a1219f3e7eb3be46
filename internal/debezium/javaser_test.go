package debezium

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures in testdata were written by Java 17's ObjectOutputStream
// (testdata/GenOffsets.java), as Kafka Connect's FileOffsetBackingStore
// writes its file.

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func entryMap(es []Entry) map[string]*string {
	m := map[string]*string{}
	for _, e := range es {
		if e.Value == nil {
			m[string(e.Key)] = nil
			continue
		}
		v := string(e.Value)
		m[string(e.Key)] = &v
	}
	return m
}

func TestOffsetFileReadsWhatJavaWrote(t *testing.T) {
	one, err := ReadOffsetFile(filepath.Join("testdata", "offsets-one.dat"))
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || string(one[0].Key) != `["outbox-debezium",{"server":"dbz"}]` ||
		!strings.Contains(string(one[0].Value), `"gtids":"0-1-41","event":2,"row":1`) {
		t.Fatalf("offsets-one: %q", one)
	}

	several, err := DecodeOffsetFile(fixture(t, "offsets-several.dat"))
	if err != nil {
		t.Fatal(err)
	}
	m := entryMap(several)
	if len(m) != 4 || m[`["billing-outbox",{"server":"old"}]`] != nil || m[`["billing-outbox",{"server":"billing"}]`] == nil ||
		*m[`["billing-outbox",{"server":"billing"}]`] != `{"file":"binlog.000002","pos":99}` {
		t.Fatalf("offsets-several: %v", m)
	}
	if _, ok := m[`["billing-outbox",{"server":"old"}]`]; !ok {
		t.Fatal("the null value's key is missing")
	}

	empty, err := DecodeOffsetFile(fixture(t, "offsets-empty.dat"))
	if err != nil || len(empty) != 0 {
		t.Fatalf("offsets-empty: %v %v", empty, err)
	}

	many, err := DecodeOffsetFile(fixture(t, "offsets-many.dat"))
	if err != nil || len(many) != 300 {
		t.Fatalf("offsets-many: %d entries, %v", len(many), err)
	}
	mm := entryMap(many)
	if v := mm[`["c299",{"server":"s299"}]`]; v == nil || *v != `{"file":"mysql-bin.000001","pos":303}` {
		t.Fatalf("offsets-many: c299 = %v", v)
	}

	// The same array as key and value: Java writes a back reference.
	shared, err := DecodeOffsetFile(fixture(t, "offsets-shared-array.dat"))
	if err != nil || len(shared) != 1 || !bytes.Equal(shared[0].Key, shared[0].Value) {
		t.Fatalf("offsets-shared-array: %q %v", shared, err)
	}
}

// encodeOffsetFile writes entries as ObjectOutputStream does: the test's
// own encoder, checked against Java's bytes, for building variants.
func encodeOffsetFile(es []Entry) []byte {
	var b bytes.Buffer
	w16 := func(v uint16) { _ = binary.Write(&b, binary.BigEndian, v) }
	w32 := func(v int32) { _ = binary.Write(&b, binary.BigEndian, v) }
	w64 := func(v int64) { _ = binary.Write(&b, binary.BigEndian, v) }
	utf := func(s string) { w16(uint16(len(s))); b.WriteString(s) }
	w16(streamMagic)
	w16(streamVersion)
	b.WriteByte(tcObject)
	b.WriteByte(tcClassDesc)
	utf(hashMapName)
	w64(hashMapUID)
	b.WriteByte(hashMapFlags)
	w16(2)
	b.WriteByte('F')
	utf("loadFactor")
	b.WriteByte('I')
	utf("threshold")
	b.WriteByte(tcEndBlockData)
	b.WriteByte(tcNull)
	w32(0x3f400000) // 0.75
	buckets := int32(16)
	for float64(buckets)*0.75 < float64(len(es)) {
		buckets *= 2
	}
	threshold := int32(float64(buckets) * 0.75)
	if len(es) == 0 {
		threshold = 0 // Java allocates the table at the first put
	}
	w32(threshold)
	b.WriteByte(tcBlockData)
	b.WriteByte(8)
	w32(buckets)
	w32(int32(len(es)))
	handle, classDone := int32(baseWireHandle+2), false
	array := func(v []byte) {
		if v == nil {
			b.WriteByte(tcNull)
			return
		}
		b.WriteByte(tcArray)
		if !classDone {
			b.WriteByte(tcClassDesc)
			utf(byteArrayName)
			w64(byteArrayUID)
			b.WriteByte(byteArrayFlags)
			w16(0)
			b.WriteByte(tcEndBlockData)
			b.WriteByte(tcNull)
			classDone = true
			handle++
		} else {
			b.WriteByte(tcReference)
			w32(baseWireHandle + 2)
		}
		handle++
		w32(int32(len(v)))
		b.Write(v)
	}
	for _, e := range es {
		array(e.Key)
		array(e.Value)
	}
	b.WriteByte(tcEndBlockData)
	return b.Bytes()
}

func TestOffsetFileEncoderMatchesJava(t *testing.T) {
	for _, name := range []string{"offsets-one.dat", "offsets-empty.dat"} {
		java := fixture(t, name)
		es, err := DecodeOffsetFile(java)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeOffsetFile(es); !bytes.Equal(got, java) {
			t.Fatalf("%s: the test encoder differs from Java:\n got %x\nwant %x", name, got, java)
		}
	}
}

func TestOffsetFileRefusesOtherShapes(t *testing.T) {
	one := fixture(t, "offsets-one.dat")
	patch := func(b []byte, at int, v ...byte) []byte {
		c := bytes.Clone(b)
		copy(c[at:], v)
		return c
	}
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	keyLen := bytes.Index(one, []byte(`["outbox`)) - 4 // the key array's length field
	// Back over "[B"'s descriptor (end, null, field count, flags, uid,
	// name, its length, TC_CLASSDESC), TC_ARRAY and the entry count.
	arrayAt := keyLen - 1 - 1 - 2 - 1 - 8 - 2 - 2 - 1 - 1
	countAt := arrayAt - 4
	if binary.BigEndian.Uint32(one[countAt:]) != 1 {
		t.Fatalf("entry count not at %d", countAt)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated: the stream magic"},
		{"not java", []byte("PK\x03\x04rest of a zip"), "not a Java serialization stream"},
		{"a map of strings", fixture(t, "hostile-strings.dat"), "entry 0's key: want a byte array (0x75), found 0x74"},
		{"a LinkedHashMap", fixture(t, "hostile-linkedhashmap.dat"), `want class java.util.HashMap, found "java.util.LinkedHashMap"`},
		{"trailing bytes", append(bytes.Clone(one), 0x70), "1 bytes after the map"},
		{"another serialVersionUID", patch(one, 0x19, 1), "serialVersionUID"},
		{"a huge entry count", patch(one, countAt, be32(0x7fffffff)...), "entries in 16 buckets do not fit the file"},
		{"a negative entry count", patch(one, countAt, be32(0xffffffff)...), "do not fit the file"},
		{"a huge array", patch(one, keyLen, be32(0x7ffffff0)...), "truncated: entry 0's key needs 2147483632 bytes"},
		{"a negative array length", patch(one, keyLen, be32(0xfffffff0)...), "truncated: entry 0's key needs -16 bytes"},
		{"a null key", patch(one, arrayAt, tcNull), "entry 0's key is null"},
		{"a reference to the map as a value", append(bytes.Clone(one[:keyLen+4+36]), tcReference, 0, 0x7e, 0, 1, tcEndBlockData),
			"entry 0's value refers to something that is not a byte array"},
		{"a reference to nothing", append(bytes.Clone(one[:keyLen+4+36]), tcReference, 0, 0x7e, 0, 9, tcEndBlockData), "handle 0x7e0009 names nothing read before"},
		{"a NaN load factor", patch(one, 0x3f, 0x7f, 0xc0, 0, 0), "loadFactor NaN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			es, err := DecodeOffsetFile(c.b)
			if err == nil {
				t.Fatalf("decoded %q", es)
			}
			if !errors.Is(err, ErrOffsetFile) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrOffsetFile and %q", err, c.want)
			}
		})
	}
}

// Every cut of a valid file is refused with ErrOffsetFile; no change of
// one byte panics or reads past the data.
func TestOffsetFileTruncatedAndMutated(t *testing.T) {
	for _, name := range []string{"offsets-one.dat", "offsets-several.dat", "offsets-shared-array.dat"} {
		b := fixture(t, name)
		for n := range len(b) {
			if _, err := DecodeOffsetFile(b[:n]); !errors.Is(err, ErrOffsetFile) {
				t.Fatalf("%s cut at %d of %d: %v", name, n, len(b), err)
			}
		}
		for i := range b {
			for _, v := range []byte{0, 0x70, 0x71, 0x75, 0x7f, 0xff} {
				c := bytes.Clone(b)
				c[i] = v
				if _, err := DecodeOffsetFile(c); err != nil && !errors.Is(err, ErrOffsetFile) {
					t.Fatalf("%s byte %d = 0x%02x: %v", name, i, v, err)
				}
			}
		}
	}
}

func TestOffsetFileBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "offsets.dat")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxOffsetFileBytes + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadOffsetFile(p); !errors.Is(err, ErrOffsetFile) || !strings.Contains(err.Error(), "larger than 64 MB") {
		t.Fatalf("a file over the bound: %v", err)
	}
	if _, err := ReadOffsetFile(filepath.Join(t.TempDir(), "missing.dat")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing file: %v", err)
	}
	// Two entries with the same key bytes: which one Connect would use is
	// unknown.
	dup := encodeOffsetFile([]Entry{{Key: []byte(`["a",{"server":"b"}]`), Value: []byte(`{}`)}, {Key: []byte(`["a",{"server":"b"}]`), Value: []byte(`{}`)}})
	if _, err := DecodeOffsetFile(dup); err == nil || !strings.Contains(err.Error(), "stored twice") {
		t.Fatalf("a key stored twice: %v", err)
	}
}

func FuzzDecodeOffsetFile(f *testing.F) {
	for _, name := range []string{"offsets-one.dat", "offsets-several.dat", "offsets-shared-array.dat", "offsets-empty.dat", "hostile-strings.dat"} {
		f.Add(fixture(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := DecodeOffsetFile(b)
		if err != nil {
			if !errors.Is(err, ErrOffsetFile) {
				t.Fatalf("error without ErrOffsetFile: %v", err)
			}
			return
		}
		// What decodes encodes back to the same entries.
		again, err := DecodeOffsetFile(encodeOffsetFile(es))
		if err != nil || len(again) != len(es) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range es {
			if !bytes.Equal(es[i].Key, again[i].Key) || !bytes.Equal(es[i].Value, again[i].Value) || (es[i].Value == nil) != (again[i].Value == nil) {
				t.Fatalf("round trip entry %d: %q -> %q", i, es[i], again[i])
			}
		}
	})
}
