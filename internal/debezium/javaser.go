package debezium

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// The offsets file of a Kafka Connect standalone worker or Debezium Server
// (FileOffsetBackingStore, offset.storage.file.filename) is a
// Java-serialized java.util.HashMap<byte[],byte[]>: the serialized source
// partition (key) to the serialized offset (value, null when deleted). This
// reader accepts exactly the bytes ObjectOutputStream writes for that one
// shape (Java Object Serialization Specification, chapter 6) and refuses
// anything else, naming the byte offset: it never instantiates a class, never
// follows a reference to anything but an earlier byte array or the byte
// array's class descriptor, and bounds every size by the file's own length.

// ErrOffsetFile is wrapped by every error ReadOffsetFile returns for bytes
// that are not a Connect offsets file.
var ErrOffsetFile = errors.New("not a Kafka Connect offsets file")

// Bounds of an offsets file: a worker stores one small entry per source
// partition, a few hundred bytes each.
const (
	MaxOffsetFileBytes = 64 << 20
	maxFileEntries     = 1 << 20
)

// The stream's constants (java.io.ObjectStreamConstants).
const (
	streamMagic     = 0xACED
	streamVersion   = 5
	tcNull          = 0x70
	tcReference     = 0x71
	tcClassDesc     = 0x72
	tcObject        = 0x73
	tcArray         = 0x75
	tcBlockData     = 0x77
	tcEndBlockData  = 0x78
	baseWireHandle  = 0x7E0000
	scWriteMethod   = 0x01
	scSerializable  = 0x02
	hashMapName     = "java.util.HashMap"
	hashMapUID      = 362498820763181265   // java.util.HashMap's serialVersionUID
	byteArrayName   = "[B"                 // byte[]
	byteArrayUID    = -5984413125824719648 // byte[]'s serialVersionUID
	hashMapFlags    = scWriteMethod | scSerializable
	byteArrayFlags  = scSerializable
	hashMapMapBytes = 8 // writeObject's block data: buckets, size
)

// ReadOffsetFile reads the offsets file at path (at most
// MaxOffsetFileBytes) and returns its entries.
func ReadOffsetFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read offsets file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxOffsetFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read offsets file %s: %w", path, err)
	}
	if len(b) > MaxOffsetFileBytes {
		return nil, fmt.Errorf("read offsets file %s: %w: larger than %d MB", path, ErrOffsetFile, MaxOffsetFileBytes>>20)
	}
	entries, err := DecodeOffsetFile(b)
	if err != nil {
		return nil, fmt.Errorf("read offsets file %s: %w", path, err)
	}
	return entries, nil
}

// handle kinds: what an earlier handle may be referred back to as.
type handleKind uint8

const (
	handleOther handleKind = iota
	handleByteArrayClass
	handleByteArray
)

type handle struct {
	kind  handleKind
	bytes []byte // a byte array's
}

// javaReader reads one serialization stream.
type javaReader struct {
	b       []byte
	off     int
	handles []handle
}

func (r *javaReader) fail(format string, a ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrOffsetFile, r.off, fmt.Sprintf(format, a...))
}

func (r *javaReader) need(n int, what string) error {
	if n < 0 || len(r.b)-r.off < n {
		return r.fail("truncated: %s needs %d bytes, %d left", what, n, len(r.b)-r.off)
	}
	return nil
}

func (r *javaReader) u8(what string) (byte, error) {
	if err := r.need(1, what); err != nil {
		return 0, err
	}
	r.off++
	return r.b[r.off-1], nil
}

func (r *javaReader) u16(what string) (uint16, error) {
	if err := r.need(2, what); err != nil {
		return 0, err
	}
	r.off += 2
	return binary.BigEndian.Uint16(r.b[r.off-2:]), nil
}

func (r *javaReader) i32(what string) (int32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	r.off += 4
	return int32(binary.BigEndian.Uint32(r.b[r.off-4:])), nil
}

func (r *javaReader) i64(what string) (int64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	r.off += 8
	return int64(binary.BigEndian.Uint64(r.b[r.off-8:])), nil
}

// expect reads one byte that must be want.
func (r *javaReader) expect(want byte, what string) error {
	at := r.off
	got, err := r.u8(what)
	if err != nil {
		return err
	}
	if got != want {
		r.off = at
		return r.fail("want %s (0x%02x), found 0x%02x", what, want, got)
	}
	return nil
}

// utf reads a short modified-UTF-8 string (class and field names: ASCII
// here, compared byte for byte).
func (r *javaReader) utf(what string) (string, error) {
	n, err := r.u16(what + " length")
	if err != nil {
		return "", err
	}
	if err := r.need(int(n), what); err != nil {
		return "", err
	}
	r.off += int(n)
	return string(r.b[r.off-int(n) : r.off]), nil
}

func (r *javaReader) newHandle(h handle) { r.handles = append(r.handles, h) }

// classDesc reads a new class descriptor that must be name with uid, flags
// and exactly fields (type code and name, in order), no annotations and no
// superclass.
func (r *javaReader) classDesc(name string, uid int64, flags byte, fields [][2]string, kind handleKind) error {
	if err := r.expect(tcClassDesc, "a class descriptor"); err != nil {
		return err
	}
	at := r.off
	got, err := r.utf("class name")
	if err != nil {
		return err
	}
	if got != name {
		r.off = at
		return r.fail("want class %s, found %q", name, clip(got))
	}
	gotUID, err := r.i64("serialVersionUID")
	if err != nil {
		return err
	}
	if gotUID != uid {
		return r.fail("class %s: serialVersionUID %d, want %d", name, gotUID, uid)
	}
	r.newHandle(handle{kind: kind})
	gotFlags, err := r.u8("class flags")
	if err != nil {
		return err
	}
	if gotFlags != flags {
		return r.fail("class %s: flags 0x%02x, want 0x%02x", name, gotFlags, flags)
	}
	n, err := r.u16("field count")
	if err != nil {
		return err
	}
	if int(n) != len(fields) {
		return r.fail("class %s: %d fields, want %d", name, n, len(fields))
	}
	for _, f := range fields {
		code, err := r.u8("field type")
		if err != nil {
			return err
		}
		fname, err := r.utf("field name")
		if err != nil {
			return err
		}
		if string(code) != f[0] || fname != f[1] {
			return r.fail("class %s: field %c %q, want %s %s", name, code, clip(fname), f[0], f[1])
		}
	}
	if err := r.expect(tcEndBlockData, "the end of the class annotation"); err != nil {
		return err
	}
	return r.expect(tcNull, "no superclass")
}

// byteArray reads a byte[] (new, or a reference to an earlier one); null
// only when nullable.
func (r *javaReader) byteArray(what string, nullable bool) ([]byte, bool, error) {
	at := r.off
	tc, err := r.u8(what)
	if err != nil {
		return nil, false, err
	}
	switch tc {
	case tcNull:
		if !nullable {
			r.off = at
			return nil, false, r.fail("%s is null", what)
		}
		return nil, true, nil
	case tcReference:
		h, err := r.reference(what)
		if err != nil {
			return nil, false, err
		}
		if h.kind != handleByteArray {
			r.off = at
			return nil, false, r.fail("%s refers to something that is not a byte array", what)
		}
		return h.bytes, false, nil
	case tcArray:
	default:
		r.off = at
		return nil, false, r.fail("%s: want a byte array (0x%02x), found 0x%02x", what, tcArray, tc)
	}
	// The array's class: byte[]'s descriptor, new the first time.
	if r.off < len(r.b) && r.b[r.off] == tcReference {
		r.off++
		h, err := r.reference("the byte array's class")
		if err != nil {
			return nil, false, err
		}
		if h.kind != handleByteArrayClass {
			return nil, false, r.fail("%s: its class is not byte[]", what)
		}
	} else if err := r.classDesc(byteArrayName, byteArrayUID, byteArrayFlags, nil, handleByteArrayClass); err != nil {
		return nil, false, err
	}
	n, err := r.i32(what + " length")
	if err != nil {
		return nil, false, err
	}
	if err := r.need(int(n), what); err != nil {
		return nil, false, err
	}
	v := bytes.Clone(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	r.newHandle(handle{kind: handleByteArray, bytes: v})
	return v, false, nil
}

// reference reads a handle (after TC_REFERENCE) and returns what it names.
func (r *javaReader) reference(what string) (handle, error) {
	h, err := r.i32(what + " handle")
	if err != nil {
		return handle{}, err
	}
	i := int64(h) - baseWireHandle
	if i < 0 || i >= int64(len(r.handles)) {
		return handle{}, r.fail("%s: handle 0x%x names nothing read before", what, uint32(h))
	}
	return r.handles[i], nil
}

// DecodeOffsetFile decodes the bytes of an offsets file (see ReadOffsetFile).
func DecodeOffsetFile(b []byte) ([]Entry, error) {
	if len(b) > MaxOffsetFileBytes {
		return nil, fmt.Errorf("%w: larger than %d MB", ErrOffsetFile, MaxOffsetFileBytes>>20)
	}
	r := &javaReader{b: b}
	magic, err := r.u16("the stream magic")
	if err != nil {
		return nil, err
	}
	version, err := r.u16("the stream version")
	if err != nil {
		return nil, err
	}
	if magic != streamMagic || version != streamVersion {
		r.off = 0
		return nil, r.fail("not a Java serialization stream (starts 0x%04x%04x, want 0xaced0005)", magic, version)
	}
	if err := r.expect(tcObject, "an object"); err != nil {
		return nil, err
	}
	if err := r.classDesc(hashMapName, hashMapUID, hashMapFlags, [][2]string{{"F", "loadFactor"}, {"I", "threshold"}}, handleOther); err != nil {
		return nil, err
	}
	r.newHandle(handle{kind: handleOther}) // the map itself
	lf, err := r.i32("loadFactor")
	if err != nil {
		return nil, err
	}
	if f := math.Float32frombits(uint32(lf)); !(f > 0) || math.IsInf(float64(f), 0) {
		return nil, r.fail("loadFactor %v", f)
	}
	if _, err := r.i32("threshold"); err != nil {
		return nil, err
	}
	if err := r.expect(tcBlockData, "the map's block data"); err != nil {
		return nil, err
	}
	if err := r.expect(hashMapMapBytes, "8 bytes of block data"); err != nil {
		return nil, err
	}
	buckets, err := r.i32("the bucket count")
	if err != nil {
		return nil, err
	}
	size, err := r.i32("the entry count")
	if err != nil {
		return nil, err
	}
	// Each entry takes at least two bytes (two back references take ten).
	if buckets < 0 || size < 0 || size > maxFileEntries || int(size) > (len(b)-r.off)/2 {
		return nil, r.fail("%d entries in %d buckets do not fit the file", size, buckets)
	}
	entries := make([]Entry, 0, size)
	seen := make(map[string]bool, size)
	for i := range int(size) {
		at := r.off
		k, _, err := r.byteArray(fmt.Sprintf("entry %d's key", i), false)
		if err != nil {
			return nil, err
		}
		if seen[string(k)] {
			r.off = at
			return nil, r.fail("entry %d: key %q stored twice", i, clip(string(k)))
		}
		seen[string(k)] = true
		v, null, err := r.byteArray(fmt.Sprintf("entry %d's value", i), true)
		if err != nil {
			return nil, err
		}
		if null {
			v = nil
		} else if v == nil {
			v = []byte{}
		}
		entries = append(entries, Entry{Key: k, Value: v})
	}
	if err := r.expect(tcEndBlockData, "the end of the map"); err != nil {
		return nil, err
	}
	if r.off != len(b) {
		return nil, r.fail("%d bytes after the map", len(b)-r.off)
	}
	return entries, nil
}

// clip is s cut to 80 bytes for an error message (quoted with %q).
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
