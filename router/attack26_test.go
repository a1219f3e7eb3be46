package router

import (
	"fmt"
	"testing"
	"time"
)

// attack26Pairs: a value in a signed and in an unsigned Go type (the
// reader gives UNSIGNED columns unsigned types whatever the binlog's
// metadata; the router must render both alike anyway).
var attack26Pairs = [][2]any{
	{int8(7), uint8(7)}, {int16(7), uint16(7)}, {int32(7), uint32(7)}, {int64(7), uint64(7)},
	{int32(0), uint32(0)}, {int32(2147483647), uint32(2147483647)},
}

func attack26Row(v any) Row {
	return Row{
		Columns:    []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "n", "ver", "part"},
		Values:     []any{v, "alarm", v, v, []byte(`{}`), v, v, v},
		CommitTime: time.Unix(1700000000, 0),
	}
}

// Every role of an integer column gives the same record for int32(7) and
// uint32(7): key, id header, type header, header field, envelope field,
// schemaVersion, partition.
func TestAttack26SignedAndUnsignedRouteAlike(t *testing.T) {
	for _, format := range []string{FormatPayload, FormatEnvelope} {
		cfg := Config{EventIDColumn: "event_id", AggregateTypeColumn: "aggregate_type", AggregateIDColumn: "aggregate_id",
			EventTypeColumn: "event_type", PayloadColumn: "payload", SchemaVersionColumn: "ver", TopicPrefix: "p.", Format: format,
			Additional: []Field{{Column: "n", Placement: PlaceHeader}, {Column: "part", Placement: PlacePartition}}}
		if format == FormatEnvelope {
			cfg.Additional = append(cfg.Additional, Field{Column: "n", Placement: PlaceEnvelope, Alias: "nn"})
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range attack26Pairs {
			a, errA := r.Route(attack26Row(p[0]))
			b, errB := r.Route(attack26Row(p[1]))
			if fmt.Sprint(errA) != fmt.Sprint(errB) || fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
				t.Errorf("%s %T vs %T:\n %+v %v\n %+v %v", format, p[0], p[1], a, errA, b, errB)
			}
		}
	}
}
