package checkpoint

import (
	"fmt"
	"time"
)

// The one judgement of a pipeline without a checkpoint: never had one
// (start at source.start), reset by an operator (start there, said
// loudly), or lost (stop: an operator decides). `run` and every command
// that reads the checkpoint (check, checkpoint show, audit) judge by Judge,
// so that they tell the same truth.
//
// "Had a checkpoint" is known three ways:
//   - in the process: the checkpoint a relay's attempt loaded or committed
//     (Evidence.Had), so a later attempt of the same process that finds
//     none stops;
//   - across restarts: the lock group's record (internal/ha) also holds the
//     id of the checkpoint topic the pipeline's checkpoints are in, written
//     once it has a checkpoint (Evidence.Recorded); a topic with another id
//     (it was deleted and created again), none at all (deleted), or one
//     whose log start offset is past 0 (records deleted) without a record
//     of the name is a lost checkpoint;
//   - an operator's word: a reset marker or tombstone, the newest record of
//     the name (`checkpoint reset`), starts at source.start whatever the
//     rest says.

// Had is a checkpoint this process itself loaded or committed (run only).
type Had struct {
	TopicID string // IDString of the checkpoint topic it was in ("" when unknown)
	GTIDSet string
}

// Evidence is what tells a pipeline that never had a checkpoint from one
// whose checkpoint is gone.
type Evidence struct {
	// Name, Topic, Start and Group are the pipeline's name,
	// kafka.checkpoint_topic, source.start and lock group, for the words.
	Name, Topic, Start, Group string
	// TopicMissing: the checkpoint topic does not exist (a command that
	// only reads; run creates it before it judges).
	TopicMissing bool
	State        TopicState
	Loaded       Loaded
	// Recorded is the checkpoint topic id the lock group's record holds
	// ("" when none); RecordErr why it could not be read (a command whose
	// principal may not describe the lock group or topic; then Recorded
	// is "" and a pipeline without a checkpoint is Undecided).
	Recorded  string
	RecordErr error
	// Had is what this process itself loaded or committed; nil for the
	// commands, and for a relay that has had none since its start (or
	// since an operator's reset).
	Had *Had
}

// Verdict is Judge's answer.
type Verdict uint8

// Verdicts.
const (
	// Unjudged: not judged (the checkpoint could not be read).
	Unjudged Verdict = iota
	// Present: the pipeline has a checkpoint; it resumes there.
	Present
	// FirstStart: it never had one; it starts at source.start.
	FirstStart
	// ResetByOperator: the newest record is `checkpoint reset`'s marker;
	// it starts at source.start.
	ResetByOperator
	// ResetByTombstone: the newest record is a tombstone (an older build's
	// reset); it starts at source.start.
	ResetByTombstone
	// TombstoneCompacted: it had a checkpoint in the same topic, nothing
	// was deleted, and none is left: only compaction of an older build's
	// reset tombstone does that; it starts at source.start.
	TombstoneCompacted
	// Lost: it had a checkpoint that is gone; it never starts over by
	// itself (Judgement.Err says what and the way out).
	Lost
	// Undecided: no checkpoint, no reset, and the lock group's record,
	// which tells a first start from a lost checkpoint, could not be read
	// (Evidence.RecordErr: a command's principal without DESCRIBE on the
	// lock group or topic). Run reads the record as a member of the group
	// and may refuse: the commands say they cannot tell (Judgement.Err),
	// never a first start.
	Undecided
)

// Judgement is a Verdict in words.
type Judgement struct {
	Verdict Verdict
	// Say is the verdict in one sentence for an operator (without the
	// checkpoint itself when Present).
	Say string
	// Reset is the operator of a reset marker (ResetByOperator).
	Reset *Operator
	// Err is, when Lost, an error wrapping ErrLost: what was lost and the
	// way out; when Undecided, why it cannot tell and the ACL that would;
	// nil otherwise.
	Err error
}

// Starts reports whether the relay starts at source.start.
func (j Judgement) Starts() bool {
	return j.Verdict == FirstStart || j.Verdict == ResetByOperator || j.Verdict == ResetByTombstone || j.Verdict == TombstoneCompacted
}

// Judge judges e: the one rule of `run` and the commands.
func Judge(e Evidence) Judgement {
	l := e.Loaded
	starts := fmt.Sprintf("the relay starts at source.start (%s)", e.Start)
	none := fmt.Sprintf("no checkpoint for %s in %s", e.Name, e.Topic)
	switch {
	case l.Checkpoint != nil:
		return Judgement{Verdict: Present, Say: fmt.Sprintf("checkpoint of %s in %s", e.Name, e.Topic)}
	case l.ResetBy != nil:
		by := l.ResetBy
		from := by.From
		if from == "" {
			from = "(none)"
		}
		return Judgement{Verdict: ResetByOperator, Reset: by, Say: fmt.Sprintf("%s: reset by %s at %s (it was at %s): %s",
			none, by.User, by.Time.UTC().Format(time.RFC3339), from, starts)}
	case l.Reset:
		return Judgement{Verdict: ResetByTombstone, Say: none + ": reset by a tombstone (an older build's checkpoint reset): " + starts}
	}
	id := IDString(e.State.ID)
	if h := e.Had; h != nil {
		why := "the checkpoint topic was deleted and created again, or the records deleted"
		switch {
		case e.TopicMissing:
			why = "the checkpoint topic was deleted"
		case h.TopicID != "" && id != "" && h.TopicID != id:
			why = fmt.Sprintf("the checkpoint topic was deleted and created again (topic id %s, was %s)", id, h.TopicID)
		case e.State.LogStart > 0:
			why = fmt.Sprintf("the checkpoint topic's records were deleted (log start offset %d)", e.State.LogStart)
		}
		return lost(e, why, fmt.Sprintf("with SET '%s', the last checkpoint this process committed, it resumes exactly there", h.GTIDSet))
	}
	rec := e.Recorded
	switch {
	case rec == "" && e.RecordErr != nil:
		err := fmt.Errorf("%s: cannot tell a first start from a lost checkpoint: the lock group %s's record of the topic the pipeline's "+
			"checkpoints are in could not be read (%v), and run, which reads it, refuses to start over when it says they were lost; "+
			"grant this principal DESCRIBE on the group %s and on the lock topic, or run the command as the relay's principal",
			none, e.Group, e.RecordErr, e.Group)
		return Judgement{Verdict: Undecided, Say: err.Error(), Err: err}
	case rec == "":
		say := none + ": a first start, " + starts
		if e.TopicMissing {
			say = none + " (the topic does not exist yet): a first start, " + starts + " (it creates the topic compacted with 1 partition)"
		}
		return Judgement{Verdict: FirstStart, Say: say}
	case e.TopicMissing:
		return lost(e, fmt.Sprintf("the checkpoint topic was deleted (it does not exist; the lock group %s recorded the pipeline's checkpoints in topic id %s)",
			e.Group, rec), "")
	case id != "" && rec != id:
		return lost(e, fmt.Sprintf("the checkpoint topic was deleted and created again (topic id %s; the lock group %s recorded the pipeline's checkpoints in topic id %s)",
			id, e.Group, rec), "")
	case e.State.LogStart > 0:
		return lost(e, fmt.Sprintf("the checkpoint topic's records were deleted (log start offset %d)", e.State.LogStart), "")
	}
	// The same topic, nothing deleted: only compaction removes the newest
	// record of a name, and only a tombstone (an older build's checkpoint
	// reset, a day or more ago: delete.retention.ms); compaction keeps a
	// reset marker.
	return Judgement{Verdict: TombstoneCompacted, Say: none + " (it had one in the same topic): it was reset with a tombstone and compaction removed it; " + starts}
}

// lost is the Lost judgement: why says what was lost, restore how
// `checkpoint set` resumes ("": from the consumers' newest records).
func lost(e Evidence, why, restore string) Judgement {
	if restore == "" {
		restore = "SET being the GTID set the pipeline had published (its consumers' newest records tell; an earlier one publishes again what came after it)"
	}
	err := fmt.Errorf("%w: pipeline %s has had a checkpoint, but %s holds none now: %s; the relay does not start over from source.start (%s) "+
		"by itself. Restore the position with `outbox-relay checkpoint set --config FILE --gtid SET`, %s; or start at source.start on purpose "+
		"with `outbox-relay checkpoint reset --config FILE --yes`",
		ErrLost, e.Name, e.Topic, why, e.Start, restore)
	return Judgement{Verdict: Lost, Say: err.Error(), Err: err}
}
