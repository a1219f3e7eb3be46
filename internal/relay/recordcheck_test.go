package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// The timestamp bounds the relay reads from a topic's configs refuse what
// the broker would refuse, and nothing else.
func TestTopicTimestampBounds(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	const longMax = "9223372036854775807"
	kafka4 := map[string]string{"message.timestamp.type": "CreateTime",
		"message.timestamp.before.max.ms": longMax, "message.timestamp.after.max.ms": "3600000"}
	for _, tc := range []struct {
		name    string
		configs map[string]string
		skew    time.Duration // record timestamp - now
		refused string        // "" or a part of the reason
	}{
		{"kafka 4 default, 2 h ahead", kafka4, 2 * time.Hour, "message.timestamp.after.max.ms"},
		{"kafka 4 default, 59 min ahead", kafka4, 59 * time.Minute, ""},
		{"kafka 4 default, a year behind", kafka4, -365 * 24 * time.Hour, ""},
		{"before bound", map[string]string{"message.timestamp.before.max.ms": "86400000"}, -48 * time.Hour, "message.timestamp.before.max.ms"},
		{"log append time", map[string]string{"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "1000"}, 2 * time.Hour, ""},
		{"difference (Kafka 3)", map[string]string{"message.timestamp.difference.max.ms": "60000",
			"message.timestamp.before.max.ms": longMax, "message.timestamp.after.max.ms": longMax}, -2 * time.Minute, "before"},
		{"no settings (kfake)", map[string]string{}, 48 * time.Hour, ""},
	} {
		var b stampBounds
		for k, v := range tc.configs {
			b.take(k, v)
		}
		got := b.refuses(now.Add(tc.skew), now)
		if tc.refused == "" && got != "" || tc.refused != "" && !strings.Contains(got, tc.refused) {
			t.Errorf("%s: refuses %q, want %q", tc.name, got, tc.refused)
		}
		if b.bounded() == (got == "") && tc.refused != "" {
			t.Errorf("%s: bounded() is %v", tc.name, b.bounded())
		}
	}
}

// A record the broker refuses for its content although the relay's checks
// passed it (here: the topic's max.message.bytes, lowered behind the
// relay's back) ends the batch with a data stop (exit 65) that names the
// topic, the partition and the event ids of the refused batch; a refusal of
// the topic or an authorisation stays a configuration stop.
func TestRecordRefusedByBrokerIsNamedDataStop(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, testOptions{txn: true, deliveryOptions: deliveryOptions{timeout: 10 * time.Second}})
	adm := kadm.NewClient(a.cl)
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2000")}}, "data")
	if err == nil {
		_, err = resp.On("data", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// One key, one partition, one batch: Kafka refuses a partition's batch
	// as a whole, so the error lists every record of it.
	rec := func(id string, size int) *kgo.Record {
		v := make([]byte, size)
		rand.Read(v) // incompressible
		return &kgo.Record{Topic: "data", Key: []byte("k"), Value: v, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
	}
	for _, r := range []*kgo.Record{rec("ok-1", 10), rec("big-1", 5000)} {
		if err := a.produce(ctx, outRecord{Record: r}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.commit(ctx, cpAt("0-1-2"))
	if !errors.Is(err, ErrRecordRefused) || ExitCode(err) != ExitData || errclass.Kind(err) != "record_refused" {
		t.Fatalf("commit ended with %v (exit %d), want ErrRecordRefused (exit %d)", err, ExitCode(err), ExitData)
	}
	for _, want := range []string{"MESSAGE_TOO_LARGE", "topic data partition ", `event_id ["ok-1" "big-1"]`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
}
