// Package ha elects a pipeline's active instance: the election (Elector,
// a member of the lock group outbox-relay.lock.<name>), the lease (Lease)
// and the membership checks and view (membership.go, liveness.go).
//
// A term is one tenure as the active instance: it begins when partition 0
// of the lock topic is assigned to this member and Acquire returns its
// Lease, and ends when the relay calls End (a stop, or the attempt ended),
// when the assignment is revoked (a clean hand-over: the term's Context is
// canceled and the revoke waits for the term's attempt to end), or when the
// lease is lost (the group session ended, or no group request was answered
// for ha.session_timeout - 2 x ha.heartbeat_interval).
//
// The fence: once Lose has run, Err returns ErrLeaseLost (it also checks
// the clock, so a paused process stops before its watcher runs) and Lost is
// closed; the coordinator cannot have given the lease to another member
// before that. The relay passes the Lease explicitly to an attempt's loop
// and delivery, which check Err before every produce, checkpoint write and
// commit, and ends the attempt on Lost with ErrLeaseLost as its cause; a
// context never carries it.
//
// Goroutines: the relay's Run goroutine calls the Elector's methods;
// franz-go's group goroutines call its hooks (assignment, revoke, loss,
// answered requests); each term has one watcher goroutine, started by
// Acquire and joined by End.
//
// The lock group also keeps a record of the checkpoint topic the
// pipeline's checkpoints are in (claim, Mark); the commands that read the
// checkpoint read it without joining (RecordedTopicID, LoadJudged: record.go)
// to judge a missing checkpoint as `run` does (checkpoint.Judge).
//
// The package's sentinels (ErrLeaseLost, ErrRelayLive) carry their class
// in the relay's error policy (internal/errclass); Kafka's answers are read
// through internal/kafkaerr.
package ha
