package relay

import (
	"strings"
	"testing"
	"time"
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
