//go:build integration

package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// TestCloudEventsRecordsParseWithTheSDK: with value_format cloudevents,
// records of a structured-mode table and of a binary-mode table (a
// per-table override) parse with the CloudEvents Go SDK, every attribute
// as specified: id = event id, source (derived, or configured), type =
// event type, subject = aggregate id, time = commit time, datacontenttype,
// and data (JSON embedded as JSON, other bytes base64). A NULL payload is a
// tombstone that still carries its attributes.
func TestCloudEventsRecordsParseWithTheSDK(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := env.NewSchema(t).Name
	for _, tbl := range []string{"ce_structured", "ce_binary"} {
		if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.%s (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL,
			aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL, payload LONGBLOB NULL)`, db, tbl)); err != nil {
			t.Fatal(err)
		}
	}
	structured, binary := db+".ce_structured", db+".ce_binary"
	cfg := env.RelayConfig(k, structured, binary)
	cfg.Router.ValueFormat = config.FormatCloudEvents
	cfg.Router.Tables = map[string]config.RouterConfig{binary: {CloudEventsMode: config.CloudEventsBinary, CloudEventsSource: "urn:example:alarms"}}
	r := RunRelay(t, cfg)
	r.WaitReady(t)

	type row struct {
		table, id, aggType, aggID, typ string
		payload                        []byte // nil: NULL
		mode, source, contentType      string
	}
	rows := []row{
		{structured, "ce-s-json", "alarm", "dev-1", "AlarmCreated", []byte(`{"temp": 91, "site": "Zürich"}`), "structured", "/outbox-relay/" + cfg.Name + "/" + structured, "application/json"},
		{structured, "ce-s-bytes", "alarm", "dev-2", "AlarmBlob", []byte{0x00, 0x01, 0xfe, 0xff}, "structured", "/outbox-relay/" + cfg.Name + "/" + structured, "application/octet-stream"},
		{structured, "ce-s-null", "alarm", "dev-3", "AlarmDeleted", nil, "tombstone", "/outbox-relay/" + cfg.Name + "/" + structured, ""},
		{binary, "ce-b-json", "device", "dev-4", "DeviceMoved", []byte(`{"room":  "B2"}`), "binary", "urn:example:alarms", "application/json"},
		{binary, "ce-b-bytes", "device", "dev-5", "DeviceBlob", []byte("\x7fELF"), "binary", "urn:example:alarms", "application/octet-stream"},
	}
	for _, rw := range rows {
		payload := "NULL"
		if rw.payload != nil {
			payload = fmt.Sprintf("X'%x'", rw.payload)
		}
		if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', '%s', '%s', '%s', %s)",
			rw.table, rw.id, rw.aggType, rw.aggID, rw.typ, payload)); err != nil {
			t.Fatal(err)
		}
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(recs) != len(rows) {
		t.Fatalf("%d records, want %d", len(recs), len(rows))
	}
	byID := map[string]Record{}
	for _, rec := range recs {
		byID[rec.ID] = rec
	}
	for _, rw := range rows {
		rec, ok := byID[rw.id]
		if !ok {
			t.Fatalf("no record with id %s", rw.id)
		}
		msg := kafkaMessage{rec}
		wantEnc := map[string]binding.Encoding{"structured": binding.EncodingStructured, "binary": binding.EncodingBinary, "tombstone": binding.EncodingBinary}[rw.mode]
		if enc := msg.ReadEncoding(); enc != wantEnc {
			t.Errorf("%s: encoding %v, want %v (headers %v)", rw.id, enc, wantEnc, rec.Headers)
			continue
		}
		ev, err := binding.ToEvent(context.Background(), msg)
		if err != nil {
			t.Errorf("%s: the SDK does not read the record: %v (value %q, headers %v)", rw.id, err, rec.Value, rec.Headers)
			continue
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: invalid event: %v", rw.id, err)
		}
		if rw.mode == "structured" {
			// the value alone is a complete event in the JSON format
			var direct event.Event
			if err := direct.UnmarshalJSON(rec.Value); err != nil || direct.ID() != rw.id {
				t.Errorf("%s: event.UnmarshalJSON: %v (id %q)", rw.id, err, direct.ID())
			}
			if rec.Headers["content-type"] != "application/cloudevents+json; charset=UTF-8" {
				t.Errorf("%s: content-type %q", rw.id, rec.Headers["content-type"])
			}
		} else if !bytes.Equal(rec.Value, rw.payload) {
			t.Errorf("%s: binary value %q, want the payload %q as stored", rw.id, rec.Value, rw.payload)
		}
		if ev.SpecVersion() != "1.0" || ev.ID() != rw.id || ev.Source() != rw.source || ev.Type() != rw.typ ||
			ev.Subject() != rw.aggID || ev.DataContentType() != rw.contentType {
			t.Errorf("%s: attributes specversion %q id %q source %q type %q subject %q datacontenttype %q, want 1.0 %q %q %q %q %q",
				rw.id, ev.SpecVersion(), ev.ID(), ev.Source(), ev.Type(), ev.Subject(), ev.DataContentType(),
				rw.id, rw.source, rw.typ, rw.aggID, rw.contentType)
		}
		if !ev.Time().Equal(rec.Timestamp) || ev.Time().IsZero() {
			t.Errorf("%s: time %v, want the commit time %v (the record timestamp)", rw.id, ev.Time(), rec.Timestamp)
		}
		if rec.Key != rw.aggID || rec.Topic != cfg.Router.TopicPrefix+rw.aggType || rec.Headers["id"] != rw.id {
			t.Errorf("%s: key %q topic %q id header %q", rw.id, rec.Key, rec.Topic, rec.Headers["id"])
		}
		switch {
		case rw.payload == nil:
			if rec.Value != nil || ev.Data() != nil {
				t.Errorf("%s: NULL payload: value %q data %q, want a tombstone without data", rw.id, rec.Value, ev.Data())
			}
		case rw.contentType == "application/json":
			var got, want any
			if err := ev.DataAs(&got); err != nil {
				t.Errorf("%s: data: %v", rw.id, err)
			}
			_ = json.Unmarshal(rw.payload, &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: data %v, want %v", rw.id, got, want)
			}
			if rw.mode == "structured" && !bytes.Contains(rec.Value, []byte(`"data":`+string(rw.payload))) {
				t.Errorf("%s: JSON payload not embedded as JSON under data: %s", rw.id, rec.Value)
			}
		default:
			if !bytes.Equal(ev.Data(), rw.payload) {
				t.Errorf("%s: data %q, want %q", rw.id, ev.Data(), rw.payload)
			}
			if rw.mode == "structured" && !bytes.Contains(rec.Value, []byte(`"data_base64":`)) {
				t.Errorf("%s: bytes not under data_base64: %s", rw.id, rec.Value)
			}
		}
	}
}

// kafkaMessage reads a consumed record as a CloudEvents message of the
// Kafka protocol binding (spec: kafka-protocol-binding.md 3.2, 3.3): a
// content-type of an event format is structured mode, a ce_specversion
// header binary mode, whose ce_<name> headers are the attributes and
// content-type the datacontenttype.
type kafkaMessage struct{ rec Record }

var kafkaSpecs = spec.WithPrefix("ce_")

func (m kafkaMessage) ReadEncoding() binding.Encoding {
	if format.Lookup(m.rec.Headers["content-type"]) != nil {
		return binding.EncodingStructured
	}
	if _, ok := m.rec.Headers[kafkaSpecs.PrefixedSpecVersionName()]; ok {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m kafkaMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.rec.Headers["content-type"])
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.rec.Value))
}

func (m kafkaMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := kafkaSpecs.Version(m.rec.Headers[kafkaSpecs.PrefixedSpecVersionName()])
	if v == nil {
		return binding.ErrNotBinary
	}
	for k, val := range m.rec.Headers {
		switch {
		case k == "content-type":
			if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), val); err != nil {
				return err
			}
		case strings.HasPrefix(k, "ce_"):
			if a := v.Attribute(k); a != nil {
				if err := w.SetAttribute(a, val); err != nil {
					return err
				}
			} else if err := w.SetExtension(strings.TrimPrefix(k, "ce_"), val); err != nil {
				return err
			}
		}
	}
	if m.rec.Value != nil {
		return w.SetData(bytes.NewReader(m.rec.Value))
	}
	return nil
}

func (m kafkaMessage) GetAttribute(kind spec.Kind) (spec.Attribute, any) {
	v := kafkaSpecs.Version(m.rec.Headers[kafkaSpecs.PrefixedSpecVersionName()])
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(kind)
	if val, ok := m.rec.Headers[a.PrefixedName()]; ok {
		return a, val
	}
	return a, nil
}

func (m kafkaMessage) GetExtension(name string) any {
	if val, ok := m.rec.Headers["ce_"+name]; ok {
		return val
	}
	return nil
}

func (m kafkaMessage) Finish(error) error { return nil }
