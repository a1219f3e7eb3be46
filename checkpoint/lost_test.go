package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

func TestJudgeTellsAFirstStartAResetAndALostCheckpointApart(t *testing.T) {
	idA, idB := kadm.TopicID{1}, kadm.TopicID{2}
	a, b := IDString(idA), IDString(idB)
	cp := &Checkpoint{Name: "p", GTIDSet: "0-1-5"}
	op := &Operator{User: "ops@host", Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), From: "0-1-4"}
	cases := []struct {
		name string
		e    Evidence
		want Verdict
		says []string // in Say (and the error, when lost)
	}{
		{"a checkpoint", Evidence{State: TopicState{ID: idA}, Loaded: Loaded{Checkpoint: cp}, Recorded: b}, Present, nil},
		{"nothing recorded: a first start", Evidence{State: TopicState{ID: idA}}, FirstStart, []string{"no checkpoint for p in cps", "first start", "source.start (now)"}},
		{"no topic, nothing recorded: a first start", Evidence{TopicMissing: true}, FirstStart, []string{"does not exist yet", "first start"}},
		{"a record that could not be read leaves it undecided", Evidence{State: TopicState{ID: idA}, RecordErr: errors.New("GROUP_AUTHORIZATION_FAILED")},
			Undecided, []string{"cannot tell a first start from a lost checkpoint", "could not be read (GROUP_AUTHORIZATION_FAILED)",
				"DESCRIBE on the group lock.p"}},
		{"no topic and a record that could not be read: undecided", Evidence{TopicMissing: true, RecordErr: errors.New("TOPIC_AUTHORIZATION_FAILED")},
			Undecided, []string{"cannot tell", "could not be read (TOPIC_AUTHORIZATION_FAILED)"}},
		{"a record that could not be read, an operator's reset: a reset", Evidence{State: TopicState{ID: idA}, Loaded: Loaded{Reset: true, ResetBy: op},
			RecordErr: errors.New("GROUP_AUTHORIZATION_FAILED")}, ResetByOperator, []string{"reset by ops@host"}},
		{"an operator's reset wins over a record", Evidence{State: TopicState{ID: idB}, Loaded: Loaded{Reset: true, ResetBy: op}, Recorded: a},
			ResetByOperator, []string{"reset by ops@host at 2026-12-01T10:00:00Z (it was at 0-1-4)", "source.start (now)"}},
		{"a tombstone", Evidence{State: TopicState{ID: idA}, Loaded: Loaded{Reset: true}, Recorded: a}, ResetByTombstone, []string{"tombstone"}},
		{"recorded, the same topic, nothing deleted: a compacted tombstone", Evidence{State: TopicState{ID: idA}, Recorded: a},
			TombstoneCompacted, []string{"compaction removed it"}},
		{"recorded, the topic gone", Evidence{TopicMissing: true, Recorded: a}, Lost,
			[]string{"the checkpoint topic was deleted (it does not exist; the lock group lock.p recorded the pipeline's checkpoints in topic id " + a}},
		{"recorded, another topic id", Evidence{State: TopicState{ID: idB}, Recorded: a}, Lost,
			[]string{"deleted and created again (topic id " + b + "; the lock group lock.p recorded the pipeline's checkpoints in topic id " + a}},
		{"recorded, records deleted", Evidence{State: TopicState{ID: idA, LogStart: 7}, Recorded: a}, Lost,
			[]string{"records were deleted (log start offset 7)"}},
		{"this process had one, the topic created again", Evidence{State: TopicState{ID: idB}, Had: &Had{TopicID: a, GTIDSet: "0-1-9"}}, Lost,
			[]string{"deleted and created again (topic id " + b + ", was " + a + ")", "with SET '0-1-9'"}},
		{"this process had one, the topic gone", Evidence{TopicMissing: true, Had: &Had{TopicID: a, GTIDSet: "0-1-9"}}, Lost,
			[]string{"the checkpoint topic was deleted", "with SET '0-1-9'"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.e.Name, c.e.Topic, c.e.Start, c.e.Group = "p", "cps", "now", "lock.p"
			j := Judge(c.e)
			if j.Verdict != c.want {
				t.Fatalf("verdict %d, want %d: %s", j.Verdict, c.want, j.Say)
			}
			for _, s := range c.says {
				if !strings.Contains(j.Say, s) {
					t.Fatalf("%q lacks %q", j.Say, s)
				}
			}
			if lost := c.want == Lost; lost != errors.Is(j.Err, ErrLost) || lost == j.Starts() && c.want != Present && c.want != Undecided {
				t.Fatalf("err %v, starts %v for verdict %d", j.Err, j.Starts(), j.Verdict)
			}
			if c.want == Undecided && (j.Err == nil || j.Starts() || j.Err.Error() != j.Say) {
				t.Fatalf("undecided: err %v, starts %v; want an error saying %q, no start", j.Err, j.Starts(), j.Say)
			}
			if c.want == Lost {
				for _, way := range []string{"outbox-relay checkpoint set --config FILE --gtid SET", "outbox-relay checkpoint reset --config FILE --yes", "cps"} {
					if !strings.Contains(j.Err.Error(), way) {
						t.Fatalf("the error lacks %q: %v", way, j.Err)
					}
				}
			}
		})
	}
}
