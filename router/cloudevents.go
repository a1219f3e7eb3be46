package router

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// CloudEvents 1.0 with the Kafka protocol binding (value format
// cloudevents). The attributes of a row's event:
//
//	specversion      "1.0"
//	id               the event id
//	source           Config.CloudEventsSource (a URI-reference)
//	type             the event type (required: a row without one is bad)
//	subject          the aggregate id
//	time             the record timestamp (commit time, or timestamp_column), RFC 3339 in UTC
//	datacontenttype  application/json when the payload is JSON, else application/octet-stream
//
// Structured mode: the value is the event in the JSON event format, the
// payload embedded as JSON under "data" (a latin1 column's text converted
// to UTF-8, as the event is; other bytes, as stored, base64 under
// "data_base64"), header content-type application/cloudevents+json.
// Binary mode: the value is the payload's bytes as stored, the attributes
// go to ce_<name> headers and datacontenttype to content-type
// (application/json only for bytes that are JSON in UTF-8). A NULL payload
// stays a tombstone (null value) in both modes, its attributes in ce_*
// headers as binary mode has them (an event without data).

// CloudEvents modes.
const (
	ModeStructured = "structured"
	ModeBinary     = "binary"
)

// Media types of the binding.
const (
	ContentTypeCloudEventsJSON = "application/cloudevents+json; charset=UTF-8"
	contentTypeJSON            = "application/json"
	contentTypeOctets          = "application/octet-stream"
)

// ceAttrs are one event's context attributes.
type ceAttrs struct {
	id, source, typ, subject, time, contentType string
}

func newCEAttrs(id, source, typ, subject string, at time.Time) ceAttrs {
	a := ceAttrs{id: id, source: source, typ: typ, subject: subject}
	if !at.IsZero() {
		a.time = at.UTC().Format(time.RFC3339Nano)
	}
	return a
}

// contentTypeOf is the datacontenttype of data: application/json for JSON
// text (valid JSON in UTF-8), else application/octet-stream; none for nil.
func contentTypeOf(data []byte) string {
	switch {
	case data == nil:
		return ""
	case utf8.Valid(data) && json.Valid(data):
		return contentTypeJSON
	}
	return contentTypeOctets
}

// headers appends the binary mode's headers: ce_* for each attribute set,
// content-type for the datacontenttype of payload, the record's value.
func (a ceAttrs) headers(h []Header, payload []byte) []Header {
	a.contentType = contentTypeOf(payload)
	h = append(h,
		Header{Key: "ce_specversion", Value: []byte("1.0")},
		Header{Key: "ce_id", Value: []byte(a.id)},
		Header{Key: "ce_source", Value: []byte(a.source)},
		Header{Key: "ce_type", Value: []byte(a.typ)},
		Header{Key: "ce_subject", Value: []byte(a.subject)})
	if a.time != "" {
		h = append(h, Header{Key: "ce_time", Value: []byte(a.time)})
	}
	if a.contentType != "" {
		h = append(h, Header{Key: "content-type", Value: []byte(a.contentType)})
	}
	return h
}

// structured renders the event in the JSON event format (CloudEvents JSON
// Event Format 1.0): the payload's JSON text (jsonText; nil when it has
// none) embedded as JSON under "data", else its bytes as stored base64
// under "data_base64".
func (a ceAttrs) structured(text, payload []byte) []byte {
	a.contentType = contentTypeOctets
	if text != nil {
		a.contentType = contentTypeJSON
	}
	var b bytes.Buffer
	b.Grow(len(payload)*4/3 + 256)
	str := func(name, v string) {
		b.WriteString(`,"`)
		b.WriteString(name)
		b.WriteString(`":`)
		enc, _ := json.Marshal(v) // a string always encodes (invalid UTF-8 becomes U+FFFD; the router refuses it earlier)
		b.Write(enc)
	}
	b.WriteString(`{"specversion":"1.0"`)
	str("id", a.id)
	str("source", a.source)
	str("type", a.typ)
	str("subject", a.subject)
	if a.time != "" {
		str("time", a.time)
	}
	str("datacontenttype", a.contentType)
	if text != nil {
		b.WriteString(`,"data":`)
		b.Write(text)
	} else {
		str("data_base64", base64.StdEncoding.EncodeToString(payload))
	}
	b.WriteByte('}')
	return b.Bytes()
}
