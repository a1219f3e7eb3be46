package router

import (
	"errors"
	"strings"
	"testing"
)

// The pipeline "alarms" with its checkpoint topic and lock topic moved out
// of the relay's namespace, and a per-table dead-letter topic of its own.
var ownTopics = NewReserved("cp.alarms", "locks", "dlq.alarms", "outbox-relay.dead-letter.alarms")

func TestReservedRefusesTheRelaysAndKafkasTopics(t *testing.T) {
	for _, tt := range []struct {
		topic string
		want  string // part of the reason; "" when the topic is free
	}{
		{"cp.alarms", "relay's own topics"},
		{"locks", "relay's own topics"},
		{"dlq.alarms", "relay's own topics"},
		{"outbox-relay.dead-letter.alarms", "relay's own topics' prefix"},
		{"outbox-relay.dead-letter.other", "relay's own topics' prefix"}, // another pipeline's
		{"outbox-relay.lock", "relay's own topics' prefix"},              // the default lock topic
		{"outbox-relay.lock.alarms", "relay's own topics' prefix"},       // the lock group's name
		{"outbox-relay.checkpoints", "relay's own topics' prefix"},       // the default checkpoint topic
		{"__consumer_offsets", "Kafka's internal topics"},
		{"__transaction_state", "Kafka's internal topics"},
		{"__anything", "Kafka's internal topics"},
		{"outbox.event.alarm", ""},
		{"cp.alarms2", ""}, // exact names only
		{"_schemas", ""},   // one underscore: not Kafka's
		{"outbox-relay", ""},
		{"outbox-relayx.y", ""},
		{"alarms", ""},
	} {
		got := ownTopics.Refuses(tt.topic)
		if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
			t.Errorf("Refuses(%q) = %q, want %q", tt.topic, got, tt.want)
		}
	}
}

func TestReservedConfinesAHeadInsideItsPrefixes(t *testing.T) {
	for _, tt := range []struct {
		head string
		want string // "" when some value after head leads to a free topic
	}{
		{"outbox-relay.", "outbox-relay.*"},
		{"outbox-relay.events.", "outbox-relay.*"},
		{"outbox-relay.dead-letter.", "outbox-relay.*"},
		{"__", "__*"},
		{"__x.", "__*"},
		{"", ""},             // the value alone names the topic: refused row by row
		{"cp.", ""},          // "cp." + "alarms" is the checkpoint topic, "cp." + "x" is not
		{"outbox-relay", ""}, // "outbox-relay" + "s" is free
		{"_", ""},
		{"outbox.event.", ""},
	} {
		if got := ownTopics.Confines(tt.head); got != tt.want {
			t.Errorf("Confines(%q) = %q, want %q", tt.head, got, tt.want)
		}
	}
}

func TestNewReservedKeepsOnlyNamesOutsideItsPrefixes(t *testing.T) {
	r := NewReserved("", "outbox-relay.checkpoints", "__x", "mine")
	if len(r.Names) != 1 || r.Names[0] != "mine" {
		t.Fatalf("names %q, want only mine (the others are covered by a prefix, or empty)", r.Names)
	}
}

func TestRouteRefusesARowNamingAReservedTopic(t *testing.T) {
	cfg := defaults()
	cfg.TopicPrefix = ""
	cfg.Reserved = ownTopics
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, aggType := range []string{"cp.alarms", "locks", "dlq.alarms", "outbox-relay.dead-letter.alarms",
		"outbox-relay.dead-letter.other", "outbox-relay.lock.alarms", "outbox-relay.checkpoints", "__consumer_offsets"} {
		rec, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e-1", aggType, "d", "X", "{}", nil}})
		if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), `"aggregate_type"`) {
			t.Errorf("aggregate type %s: error %v, want a bad row naming the column", aggType, err)
		}
		if rec.EventID != "e-1" {
			t.Errorf("aggregate type %s: event id %q in the refused record, want e-1 (for the error and the dead letter)", aggType, rec.EventID)
		}
	}
	if rec, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e-2", "alarm", "d", "X", "{}", nil}}); err != nil || rec.Topic != "alarm" {
		t.Fatalf("free topic: %v %q", err, rec.Topic)
	}
	// topic_replacement: the replaced topic is checked, whatever the regex.
	cfg = defaults()
	cfg.TopicReplacement = "${routedByValue}"
	cfg.Reserved = ownTopics
	if r, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e-3", "__consumer_offsets", "d", "X", "{}", nil}}); !errors.Is(err, ErrBadRow) {
		t.Fatalf("replacement to __consumer_offsets: %v, want a bad row", err)
	}
}

func TestRouteRefusesARowWithAnUndecodedValue(t *testing.T) {
	r, err := New(defaults())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e-1", "alarm", "d", "X", "{}", nil},
		Undecoded: `column "meta": JSON nested deeper than 100 levels`})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "deeper than 100") || rec.EventID != "e-1" {
		t.Fatalf("error %v (event id %q), want a bad row saying why, with its event id", err, rec.EventID)
	}
}

func TestRouteErrorsQuoteOnlyAShortPrefixOfAValue(t *testing.T) {
	r, err := New(defaults())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 1<<20)
	for _, v := range []string{long, long + " "} { // too long a topic; a character Kafka refuses
		_, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e-1", v, "d", "X", "{}", nil}})
		if err == nil || len(err.Error()) > 400 {
			t.Fatalf("error of %d bytes for a 1 MB aggregate type, want a short one", len(err.Error()))
		}
	}
}
