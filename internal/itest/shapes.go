package itest

// The conformance matrix for transaction shapes (issue 11): each shape is
// written against the shared MariaDB and relayed in several modes (straight
// through, SIGTERM at every Kafka commit boundary, kill -9 at the named crash
// points), then checked by an independent read_committed consumer against
// the outbox table.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Mode is how the relay runs over a shape.
type Mode string

// Modes of the matrix.
const (
	// Straight: the relay streams live while the shape is written.
	Straight Mode = "straight"
	// TermEveryCommit: the shape is written while the relay is stopped.
	// matrix sweeps k = 1, 2, ...: for each k a fresh pipeline over the same
	// shape, one run with SIGTERM right after its kth Kafka commit
	// (any-commit:k:term, see TermAt), then a restart to the end; the sweep
	// ends once the kth commit lies past the shape. (A single pipeline
	// restarted with any-commit:1:term cannot do this: a relay that finishes
	// its work in hand on SIGTERM commits the rest of the shape at the first
	// stop.) Drive in this mode restarts one pipeline with any-commit:1:term.
	TermEveryCommit Mode = "sigterm-every-commit"
	// KillAfterFlush: the shape is written while the relay is stopped; each
	// run commits one batch and is killed (SIGKILL) after the next batch is
	// flushed, before its commit (after-flush:2), until the shape is
	// published. As in the other kill modes, a run whose commits moved
	// nothing (checkpoint-only heartbeats while a long source transaction
	// streams) makes the next run act one occasion later.
	KillAfterFlush Mode = "kill-after-flush"
	// KillAfterCommit: each run is killed right after its first commit.
	KillAfterCommit Mode = "kill-after-commit"
	// KillAfterPartial: each run is killed right after its first commit of a
	// part of a split source transaction; once none is left, the run is
	// stopped by SIGTERM.
	KillAfterPartial Mode = "kill-after-partial"
)

// AllModes is every mode, straight first.
var AllModes = []Mode{Straight, TermEveryCommit, KillAfterFlush, KillAfterCommit, KillAfterPartial}

// failpoint is the mode's failpoint acting at the nth occasion of a run.
func (m Mode) failpoint(n int) string {
	switch m {
	case TermEveryCommit:
		return fmt.Sprintf("any-commit:%d:term", n)
	case KillAfterFlush:
		return fmt.Sprintf("after-flush:%d", n+1)
	case KillAfterCommit:
		return fmt.Sprintf("after-commit:%d", n)
	case KillAfterPartial:
		return fmt.Sprintf("after-partial:%d", n)
	}
	return ""
}

// ShapeOptions tune one run of a shape.
type ShapeOptions struct {
	// MaxRecords is kafka.batch.max_records (default 2): small, so that
	// shapes of a few rows span several Kafka transactions.
	MaxRecords int
	// Setup edits the configuration before the relay first starts.
	Setup func(cfg *config.Config)
	// SourceAddr, when set, replaces the source host (e.g. a throttling
	// proxy in front of the shared server).
	SourceAddr string
	// RunTimeout bounds one relay run (default 60s).
	RunTimeout time.Duration
	// MaxTermCommit bounds k in the SIGTERM-at-commit-k sweep (default 40).
	MaxTermCommit int
}

// ShapeRun is one shape relayed in one mode.
type ShapeRun struct {
	T      testing.TB
	Env    *Env
	Mode   Mode
	Kafka  *Kafka
	S      *Schema
	Cfg    config.Config
	Path   string // config file
	Prefix string // topic prefix of the pipeline

	// Live is the running relay in Straight mode.
	Live *Proc
	// Runs counts relay processes started; Terms the clean stops by the
	// SIGTERM failpoint; Kills the SIGKILLs by a crash failpoint.
	Runs, Terms, Kills int
	// Logs of every relay process, in start order.
	Logs []string

	opts   ShapeOptions
	seqMu  sync.Mutex
	seq    map[string]int
	nextID int
	// Ghosts are event ids written and then rolled back: never to be
	// published. Skipped are ids the test expects to stay unpublished for
	// another reason (an operator skipped their transaction). Maybe are ids
	// of committed rows that may or may not be published (rows of a skipped
	// transaction read before the relay stopped in it); never twice.
	Ghosts, Skipped, Maybe []string
	unclean                int // SIGTERM stops that were not clean
}

// NewShapeRun prepares a pipeline (broker, schema, configuration) whose
// start position is pinned at the current head by a first relay run.
func (e *Env) NewShapeRun(t testing.TB, mode Mode, opts ShapeOptions) *ShapeRun {
	t.Helper()
	if opts.MaxRecords == 0 {
		opts.MaxRecords = 2
	}
	if opts.RunTimeout == 0 {
		opts.RunTimeout = 60 * time.Second
	}
	k, s, cfg := e.Pipeline(t)
	cfg.Kafka.Batch.MaxRecords = opts.MaxRecords
	cfg.Log.Level = "info"
	if opts.SourceAddr != "" {
		cfg.Source.Hosts = []string{opts.SourceAddr}
	}
	if opts.Setup != nil {
		opts.Setup(&cfg)
	}
	r := &ShapeRun{T: t, Env: e, Mode: mode, Kafka: k, S: s, Cfg: cfg, Path: WriteConfig(t, cfg),
		Prefix: cfg.Router.TopicPrefix, opts: opts, seq: map[string]int{}}
	// Pin "now" before the shape: every later run resumes from a checkpoint.
	p := r.start("")
	r.waitCheckpoint(p)
	if mode != Straight {
		r.terminate(p, "pinning the start position")
	} else {
		r.Live = p
	}
	return r
}

// start runs the relay binary with a failpoint ("" for none). Unlike
// StartProc it does not dump every process's output on failure: the matrix
// starts dozens; Tail shows the last one.
func (r *ShapeRun) start(failpoint string) *Proc {
	t := r.T
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("relay-%d.log", r.Runs+1))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(r.Env.Binary, "run", "--config", r.Path)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = os.Environ()
	if failpoint != "" {
		cmd.Env = append(cmd.Env, "OUTBOX_RELAY_FAILPOINT="+failpoint)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.Kill)
	r.Runs++
	r.Logs = append(r.Logs, logPath)
	return p
}

// Tail is the end of the newest relay log, for failure messages.
func (r *ShapeRun) Tail() string {
	if len(r.Logs) == 0 {
		return "(no relay run)"
	}
	return tail(r.Logs[len(r.Logs)-1], 4000)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = append([]byte("..."), b[len(b)-n:]...)
	}
	return string(b)
}

// AllLogs is every run's output concatenated.
func (r *ShapeRun) AllLogs() string {
	var sb strings.Builder
	for _, l := range r.Logs {
		b, _ := os.ReadFile(l)
		sb.Write(b)
	}
	return sb.String()
}

func (r *ShapeRun) store() *checkpoint.Store { return Store(r.T, r.Cfg) }

// Checkpoint loads the committed checkpoint (nil when none).
func (r *ShapeRun) Checkpoint() *checkpoint.Checkpoint {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, err := r.store().Load(ctx, r.Cfg.Name)
	if err != nil {
		r.T.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

// tryCheckpoint loads the committed checkpoint within wait; ok is false
// when it cannot be read now, e.g. while a relay killed between flush and
// commit left a transaction open on the checkpoint partition (a reader then
// waits for the next relay run to fence it, or for the broker to abort it).
func (r *ShapeRun) tryCheckpoint(wait time.Duration) (cp *checkpoint.Checkpoint, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cp, err := r.store().Load(ctx, r.Cfg.Name)
	return cp, err == nil
}

// Covers reports whether cp covers the GTID set target completely (no
// partial transaction pending).
func Covers(cp *checkpoint.Checkpoint, target string) bool {
	if cp == nil || cp.Partial != nil {
		return false
	}
	have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	if err != nil {
		return false
	}
	want, err := binlog.ParseSet(cp.Flavor, target)
	if err != nil {
		return false
	}
	return have.Contain(want)
}

// ContainsGTID reports whether the checkpoint's GTID set includes gtid.
func ContainsGTID(cp *checkpoint.Checkpoint, gtid string) bool {
	if cp == nil {
		return false
	}
	have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	if err != nil {
		return false
	}
	want, err := binlog.ParseSet(cp.Flavor, gtid)
	if err != nil {
		return false
	}
	return have.Contain(want)
}

func (r *ShapeRun) waitCheckpoint(p *Proc) {
	r.T.Helper()
	Eventually(r.T, r.opts.RunTimeout, func() error {
		if p.Exited() {
			r.T.Fatalf("relay exited while starting:\n%s", r.Tail())
		}
		if cp, ok := r.tryCheckpoint(2 * time.Second); !ok || cp == nil {
			return fmt.Errorf("no checkpoint yet")
		}
		return nil
	})
}

// terminate sends SIGTERM and requires a clean stop: exit 0, the final
// checkpoint written, and no Kafka transaction left open.
func (r *ShapeRun) terminate(p *Proc, what string) {
	r.T.Helper()
	code, err := p.Terminate(time.Minute)
	if err != nil {
		p.Kill()
		r.T.Fatalf("%s: %v after SIGTERM:\n%s", what, err, r.Tail())
	}
	r.checkCleanStop(p, code, what)
}

// checkCleanStop reports (without ending the test, so that the data checks
// still run) a SIGTERM stop that was not clean; at most three reports per
// shape run.
func (r *ShapeRun) checkCleanStop(p *Proc, code int, what string) {
	r.T.Helper()
	var problem string
	switch {
	case code != 0:
		problem = fmt.Sprintf("relay exited %d after SIGTERM, want 0", code)
	case strings.Contains(p.Output(), `"relay started"`) && !strings.Contains(p.Output(), "final checkpoint written"):
		problem = "relay stopped on SIGTERM without writing its final checkpoint"
	default:
		if open := OpenTransactions(r.T, r.Kafka.Brokers, r.Prefix, r.Cfg.Kafka.CheckpointTopic); len(open) > 0 {
			problem = fmt.Sprintf("after a clean SIGTERM stop, Kafka transactions are still open on %v (last stable offset below the high watermark): "+
				"read_committed consumers are stuck until the broker aborts them", open)
		}
	}
	if problem == "" {
		return
	}
	r.unclean++
	if r.unclean <= 3 {
		r.T.Errorf("%s: %s:\n%s", what, problem, tail(p.Log, 3000))
	}
}

// OpenTransactions lists the partitions (of topics matching prefix, and of
// the named topics) whose last stable offset is below their high
// watermark: a transaction is open there.
func OpenTransactions(t testing.TB, brokers []string, prefix string, topics ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	all, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range all.Sorted() {
		if (prefix != "" && strings.HasPrefix(tp.Topic, prefix)) || slices.Contains(topics, tp.Topic) {
			names = append(names, tp.Topic)
		}
	}
	if len(names) == 0 {
		return nil
	}
	hw, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	hw.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if l, ok := ls.Lookup(o.Topic, o.Partition); ok && l.Err == nil && l.Offset < o.Offset {
			open = append(open, fmt.Sprintf("%s/%d (lso %d, hwm %d)", o.Topic, o.Partition, l.Offset, o.Offset))
		}
	})
	return open
}

// Outcome of driving the relay over a written shape.
type DriveResult struct {
	// Stopped: a run ended by itself with a non-zero exit code (a fatal
	// error), not by a failpoint; Output is its log.
	Stopped bool
	Code    int
	Output  string
}

// Drive takes the relay to the current head of the server: in Straight mode
// it waits for the live relay; otherwise it restarts the relay with the
// mode's failpoint until the committed checkpoint covers the head, checking
// after every run that what read_committed consumers see holds no duplicate
// and nothing that is not in the outbox table. It returns early when the
// relay stops by itself with an error.
func (r *ShapeRun) Drive() DriveResult {
	t := r.T
	t.Helper()
	target := Head(t, r.Env.DB)
	if r.Mode == Straight {
		return r.driveLive(target)
	}
	// n: the failpoint acts at the nth commit (flush, partial) of a run. It
	// starts at 1; a run that moved nothing (its first commits were
	// checkpoint-only heartbeats, e.g. while a long source transaction
	// streams) makes the next run go one commit further.
	last, n, killsBefore := "", 1, 0
	for run := 1; ; run++ {
		var cp *checkpoint.Checkpoint
		ok := false
		if !(r.Mode == KillAfterFlush && r.Kills > killsBefore) {
			// After a kill between flush and commit, the open transaction
			// holds the checkpoint back until the next run fences it.
			cp, ok = r.tryCheckpoint(3 * time.Second)
		}
		if ok && Covers(cp, target) {
			return DriveResult{}
		}
		key := "none"
		if cp != nil {
			key = cp.GTIDSet
			if cp.Partial != nil {
				key += fmt.Sprintf("+%d of %s", cp.Partial.Rows, cp.Partial.GTID)
			}
		}
		switch {
		case !ok:
			// Held back by the killed run's open transaction: the next run
			// fences it; try the same n again.
		case run > 1 && key == last:
			n++
		default:
			n = 1
		}
		if ok {
			last = key
		}
		if n > 30 {
			t.Fatalf("%s: no progress in 30 runs: the checkpoint stays at %s (target %s):\n%s", r.Mode, key, target, r.Tail())
		}
		if run > 200 {
			t.Fatalf("%s: more than 200 runs without reaching %s (checkpoint %s)", r.Mode, target, key)
		}
		killsBefore = r.Kills
		p := r.start(r.Mode.failpoint(n))
		if res, done := r.awaitRun(p, target); done {
			return res
		}
		r.CheckSoFar(fmt.Sprintf("%s, after run %d (failpoint %s)", r.Mode, r.Runs, r.Mode.failpoint(n)))
	}
}

// TermAt runs the relay once over the written shape with SIGTERM right
// after its kth Kafka commit (any-commit:k:term), and requires a clean stop
// and nothing duplicated or invented so far. inside reports whether that
// kth commit was still inside the shape: its checkpoint (every Kafka
// commit carries one) did not cover the head yet.
func (r *ShapeRun) TermAt(k int) (inside bool, res DriveResult) {
	t := r.T
	t.Helper()
	target := Head(t, r.Env.DB)
	begun := time.Now()
	p := r.start(fmt.Sprintf("any-commit:%d:term", k))
	select {
	case <-p.done:
	case <-time.After(r.opts.RunTimeout):
		p.Kill()
		t.Fatalf("SIGTERM at commit %d: the relay did not stop within %s:\n%s", k, r.opts.RunTimeout, r.Tail())
	}
	code := p.cmd.ProcessState.ExitCode()
	if p.Killed() || code != 0 {
		return false, DriveResult{Stopped: true, Code: code, Output: p.Output()}
	}
	r.Terms++
	r.checkCleanStop(p, code, fmt.Sprintf("SIGTERM at commit %d", k))
	r.CheckSoFar(fmt.Sprintf("after the SIGTERM at commit %d", k))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hist, err := r.store().History(ctx, r.Cfg.Name, 10000)
	if err != nil {
		t.Fatalf("checkpoint history: %v", err)
	}
	var mine []*checkpoint.Checkpoint
	for _, cp := range hist {
		if !cp.Time.Before(begun) {
			mine = append(mine, cp)
		}
	}
	if len(mine) < k {
		t.Errorf("SIGTERM at commit %d, but the run committed only %d checkpoints", k, len(mine))
		return false, DriveResult{}
	}
	cp := mine[k-1]
	inside = !Covers(cp, target)
	t.Logf("SIGTERM after commit %d (checkpoint %s, partial %+v; head %s): %d commits in the run, last %s",
		k, cp.GTIDSet, cp.Partial, target, len(mine), mine[len(mine)-1].GTIDSet)
	return inside, DriveResult{}
}

// awaitRun waits for one failpoint run to end. done is true when the relay
// stopped by itself (res says how).
func (r *ShapeRun) awaitRun(p *Proc, target string) (res DriveResult, done bool) {
	t := r.T
	t.Helper()
	deadline := time.Now().Add(r.opts.RunTimeout)
	for !p.Exited() {
		// after-flush:2 and after-partial:1 may never be reached once the
		// shape is published: then the run is stopped by hand.
		if r.Mode == KillAfterFlush || r.Mode == KillAfterPartial {
			if cp, ok := r.tryCheckpoint(time.Second); ok && Covers(cp, target) && !p.Exited() {
				r.waitRunning(p)
				what := fmt.Sprintf("%s run %d (no failpoint left to hit)", r.Mode, r.Runs)
				code, err := p.Terminate(time.Minute)
				if err != nil {
					p.Kill()
					t.Fatalf("%s: %v after SIGTERM:\n%s", what, err, r.Tail())
				}
				if p.Killed() {
					// The failpoint was still armed: the final commit (or a
					// checkpoint written meanwhile) was the flush it waited
					// for, and it killed the relay as asked: a crash like
					// the others. The shape was covered before the stop:
					// the drive is over (the next relay started fences the
					// transaction the kill left open, and the checks read
					// what was committed).
					r.Kills++
					return DriveResult{}, true
				}
				r.checkCleanStop(p, code, what)
				return DriveResult{}, false
			}
		}
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatalf("%s run %d: the relay neither reached its failpoint nor finished within %s:\n%s",
				r.Mode, r.Runs, r.opts.RunTimeout, r.Tail())
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	code := p.cmd.ProcessState.ExitCode()
	switch {
	case p.Killed():
		if r.Mode == TermEveryCommit {
			t.Fatalf("%s run %d: the relay was killed, not terminated", r.Mode, r.Runs)
		}
		r.Kills++
	case r.Mode == TermEveryCommit && code == 0:
		r.Terms++
		r.checkCleanStop(p, code, fmt.Sprintf("%s run %d", r.Mode, r.Runs))
	default:
		return DriveResult{Stopped: true, Code: code, Output: p.Output()}, true
	}
	return DriveResult{}, false
}

func (r *ShapeRun) driveLive(target string) DriveResult {
	t := r.T
	t.Helper()
	p := r.Live
	if p == nil || p.Exited() {
		p = r.start("")
		r.Live = p
	}
	r.waitRunning(p)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if p.Exited() {
			return DriveResult{Stopped: true, Code: p.cmd.ProcessState.ExitCode(), Output: p.Output()}
		}
		cp, ok := r.tryCheckpoint(time.Second)
		if ok && Covers(cp, target) {
			return DriveResult{}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not reach %s within 2 minutes (checkpoint %+v):\n%s", target, cp, r.Tail())
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Resume starts a relay without failpoint (after an operator acted on a
// stop) and waits until it covers the head.
func (r *ShapeRun) Resume() DriveResult {
	r.T.Helper()
	r.Live = r.start("")
	r.waitRunning(r.Live)
	return r.driveLive(Head(r.T, r.Env.DB))
}

// waitRunning waits until a relay process has started its pipeline (or
// exited): a SIGTERM before it installed its signal handler would kill it.
func (r *ShapeRun) waitRunning(p *Proc) {
	r.T.Helper()
	Eventually(r.T, r.opts.RunTimeout, func() error {
		if p.Exited() || strings.Contains(p.Output(), `"relay started"`) {
			return nil
		}
		return fmt.Errorf("relay not started yet")
	})
}

// CheckSoFar fails if what read_committed consumers see now holds a
// duplicate or a record that is not a committed outbox row (rolled back or
// invented); rows still missing are fine.
func (r *ShapeRun) CheckSoFar(when string) {
	r.T.Helper()
	rep := Compare(r.T, r.S, Consume(r.T, r.Kafka.Brokers, r.Prefix))
	if len(rep.Duplicates)+len(rep.Unexpected)+len(rep.WrongKey)+len(rep.OutOfOrder) > 0 {
		r.T.Fatalf("%s: %s\n%s", when, rep, r.Tail())
	}
}

// Finish stops the live relay cleanly (Straight) and requires the exact
// result: every committed outbox row once (but Skipped ones: never), no
// rolled-back row visible, per-aggregate order, and no run ever reported
// being fenced.
func (r *ShapeRun) Finish() Report {
	t := r.T
	t.Helper()
	if r.Live != nil && !r.Live.Exited() {
		r.terminate(r.Live, "final stop")
	}
	recs := Consume(t, r.Kafka.Brokers, r.Prefix)
	rep := Compare(t, r.S, recs)
	skipped := map[string]bool{}
	for _, id := range append(append([]string{}, r.Skipped...), r.Maybe...) {
		skipped[id] = true
	}
	var missing []string
	for _, id := range rep.Missing {
		if !skipped[id] {
			missing = append(missing, id)
		}
	}
	published := map[string]bool{}
	for _, rec := range recs {
		published[rec.ID] = true
	}
	var skippedSeen, ghostsSeen []string
	for _, id := range r.Skipped {
		if published[id] {
			skippedSeen = append(skippedSeen, id)
		}
	}
	for _, id := range r.Ghosts {
		if published[id] {
			ghostsSeen = append(ghostsSeen, id)
		}
	}
	rep.Missing = missing
	if !rep.OK() || len(skippedSeen)+len(ghostsSeen) > 0 {
		t.Fatalf("%s: %s; rolled-back rows visible %v; skipped rows visible %v\n%s", r.Mode, rep, ghostsSeen, skippedSeen, r.Tail())
	}
	if m := regexp.MustCompile(`(?i)"[^"]*fenced[^"]*"`).FindString(r.AllLogs()); m != "" {
		t.Fatalf("%s: a run reported being fenced (%s)", r.Mode, m)
	}
	t.Logf("%s: %d runs (%d SIGTERM stops, %d of them unclean; %d kills): %s", r.Mode, r.Runs, r.Terms, r.unclean, r.Kills, rep)
	return rep
}

// ProducedIDs returns the id header of every data record of the topics
// matching prefix, aborted ones included (read_uncommitted).
func ProducedIDs(t testing.TB, brokers []string, prefix string) map[string]int {
	t.Helper()
	out := map[string]int{}
	EachProduced(t, brokers, prefix, func(r *kgo.Record) {
		for _, h := range r.Headers {
			if h.Key == "id" {
				out[string(h.Value)]++
			}
		}
	})
	return out
}

// RequireNeverProduced fails if any of ids was ever produced, even in a
// transaction that was aborted later.
func (r *ShapeRun) RequireNeverProduced(ids []string) {
	r.T.Helper()
	produced := ProducedIDs(r.T, r.Kafka.Brokers, r.Prefix)
	var seen []string
	for _, id := range ids {
		if produced[id] > 0 {
			seen = append(seen, id)
		}
	}
	if len(seen) > 0 {
		r.T.Fatalf("%s: rows of rolled-back work were produced to Kafka (aborted or not): %v", r.Mode, seen)
	}
}

// WaitVisible polls until every id is visible to read_committed consumers
// (Straight mode, the live relay).
func (r *ShapeRun) WaitVisible(ids ...string) {
	r.T.Helper()
	Eventually(r.T, time.Minute, func() error {
		if r.Live != nil && r.Live.Exited() {
			r.T.Fatalf("the relay stopped:\n%s", r.Tail())
		}
		seen := map[string]bool{}
		for _, rec := range Consume(r.T, r.Kafka.Brokers, r.Prefix) {
			seen[rec.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return fmt.Errorf("%s not published yet", id)
			}
		}
		return nil
	})
}

// Visible returns which of ids read_committed consumers see now.
func (r *ShapeRun) Visible(ids ...string) []string {
	r.T.Helper()
	seen := map[string]bool{}
	for _, rec := range Consume(r.T, r.Kafka.Brokers, r.Prefix) {
		seen[rec.ID] = true
	}
	var out []string
	for _, id := range ids {
		if seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// Conn opens a root connection to the shared server, closed at cleanup.
func (r *ShapeRun) Conn() *client.Conn {
	r.T.Helper()
	c, err := r.Env.DB.Root()
	if err != nil {
		r.T.Fatal(err)
	}
	r.T.Cleanup(func() { c.Close() })
	return c
}

// Exec runs statements on c in order, failing the test on an error.
func (r *ShapeRun) Exec(c *client.Conn, stmts ...string) {
	r.T.Helper()
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			r.T.Fatalf("%s: %v", abbreviate(q), err)
		}
	}
}

func abbreviate(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 100 {
		return q[:100] + "..."
	}
	return q
}

// Rows returns n new outbox events on aggregate agg as the VALUES list of
// an INSERT, and their event ids. Each event's payload carries the
// aggregate's next seq, so commit order per aggregate is checkable: use one
// aggregate per concurrently open transaction.
func (r *ShapeRun) Rows(agg string, n int) (string, []string) {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	var vals, ids []string
	for i := 0; i < n; i++ {
		r.nextID++
		r.seq[agg]++
		id := fmt.Sprintf("%s-%s-%d", r.S.Name, agg, r.nextID)
		ids = append(ids, id)
		vals = append(vals, fmt.Sprintf(`('%s', 'shape', '%s', 'ShapeEvent', '{"seq":%d}')`, id, agg, r.seq[agg]))
	}
	return strings.Join(vals, ", "), ids
}

// Insert returns an INSERT of n new events on agg into the outbox, and ids.
func (r *ShapeRun) Insert(agg string, n int) (string, []string) {
	vals, ids := r.Rows(agg, n)
	return fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s", r.S.Table(), vals), ids
}

// Ghost is Insert for rows the shape rolls back: they are recorded as
// ghosts, never to be published.
func (r *ShapeRun) Ghost(agg string, n int) string {
	q, ids := r.Insert(agg, n)
	r.Ghosts = append(r.Ghosts, ids...)
	return q
}

// Must is Insert without the ids.
func (r *ShapeRun) Must(agg string, n int) string {
	q, _ := r.Insert(agg, n)
	return q
}

// XID returns a new XA transaction id, unique in the test binary.
func (r *ShapeRun) XID() string {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	r.nextID++
	return fmt.Sprintf("%s-x%d", r.S.Name, r.nextID)
}

// LastGTID is the GTID of the last transaction c committed.
func (r *ShapeRun) LastGTID(c *client.Conn) string {
	r.T.Helper()
	res, err := c.Execute("SELECT @@last_gtid")
	if err != nil {
		r.T.Fatal(err)
	}
	defer res.Close()
	g, err := res.GetString(0, 0)
	if err != nil || g == "" {
		r.T.Fatalf("read @@last_gtid: %q %v", g, err)
	}
	return g
}

// BinlogMark is a position in the server's binlog (SHOW MASTER STATUS):
// where GTIDHolding starts looking.
type BinlogMark struct {
	File string
	Pos  string
}

// Mark is the server's binlog position now.
func (r *ShapeRun) Mark() BinlogMark {
	r.T.Helper()
	rows, err := r.Env.DB.Query("SHOW MASTER STATUS")
	if err != nil || len(rows) != 1 || len(rows[0]) < 2 {
		r.T.Fatalf("show master status: %v %v", rows, err)
	}
	return BinlogMark{File: rows[0][0], Pos: rows[0][1]}
}

// BinlogSince is the server's binlog after m as SHOW BINLOG EVENTS lists
// it: one line per event, "Event_type Info".
func (r *ShapeRun) BinlogSince(m BinlogMark) []string {
	r.T.Helper()
	files, err := r.Env.DB.Query("SHOW BINARY LOGS")
	if err != nil {
		r.T.Fatal(err)
	}
	var out []string
	started := false
	for _, f := range files {
		started = started || f[0] == m.File
		if !started {
			continue
		}
		q := fmt.Sprintf("SHOW BINLOG EVENTS IN '%s'", f[0])
		if f[0] == m.File {
			q += " FROM " + m.Pos
		}
		evs, err := r.Env.DB.Query(q)
		if err != nil {
			r.T.Fatal(err)
		}
		for _, ev := range evs { // Log_name, Pos, Event_type, Server_id, End_log_pos, Info
			out = append(out, ev[2]+" "+ev[len(ev)-1])
		}
	}
	return out
}

// GTIDHolding is the GTID of the first event group after m whose events
// mention needle (an event id in a statement-logged INSERT), read from the
// server's own binlog: the oracle for "the relay names the transaction",
// independent of the session's @@last_gtid. On a miss it fails the test
// with the events it read.
func (r *ShapeRun) GTIDHolding(m BinlogMark, needle string) string {
	r.T.Helper()
	evs := r.BinlogSince(m)
	gtid := ""
	for _, ev := range evs {
		if typ, info, _ := strings.Cut(ev, " "); typ == "Gtid" {
			fs := strings.Fields(info)
			gtid = fs[len(fs)-1]
		}
		if strings.Contains(ev, needle) && gtid != "" {
			return gtid
		}
	}
	r.T.Fatalf("no binlog event after %s:%s mentions %q; events:\n%s", m.File, m.Pos, needle, strings.Join(evs, "\n"))
	return ""
}

// SetGlobal sets a global server variable for the test and restores its
// value at cleanup.
func SetGlobal(t testing.TB, e *Env, name, value string) {
	t.Helper()
	rows, err := e.DB.Query("SELECT @@GLOBAL." + name)
	if err != nil || len(rows) != 1 {
		t.Fatalf("read %s: %v", name, err)
	}
	old := rows[0][0]
	if err := e.DB.Exec("SET GLOBAL " + name + " = " + value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v := old
		if _, err := strconv.Atoi(old); err != nil {
			v = "'" + old + "'"
		}
		if err := e.DB.Exec("SET GLOBAL " + name + " = " + v); err != nil {
			t.Errorf("restore %s: %v", name, err)
		}
	})
}

// Throttle is a TCP proxy in front of a server that passes the server's
// bytes on at most Rate bytes a second (the client's bytes unthrottled):
// it makes a large binlog transaction take long to stream.
type Throttle struct {
	Addr   string
	Rate   int
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// StartThrottle starts a proxy to target passing rate bytes a second.
func StartThrottle(t testing.TB, target string, rate int) *Throttle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Throttle{Addr: ln.Addr().String(), Rate: rate, ln: ln}
	go p.serve(target)
	t.Cleanup(p.Close)
	return p
}

func (p *Throttle) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
		go func() { p.slowCopy(c, s); s.Close(); c.Close() }()
	}
}

func (p *Throttle) slowCopy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 16<<10)
	start, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
			due := start.Add(time.Duration(float64(sent) / float64(p.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			} else if d < -time.Second {
				start, sent = time.Now(), 0 // idle: no burst credit beyond a second
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops the proxy and its connections.
func (p *Throttle) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// SetStatementDML sets source.statement_dml (fail | warn: what a change of
// a non-captured table logged as a statement does) where the configuration
// has the setting, and reports whether it does (older versions never
// stopped on such changes). v "" leaves the value as it is.
func SetStatementDML(cfg *config.Config, v string) bool {
	f := reflect.ValueOf(&cfg.Source).Elem().FieldByName("StatementDML")
	if !f.IsValid() || f.Kind() != reflect.String {
		return false
	}
	if v != "" {
		f.SetString(v)
	}
	return true
}

// GTIDSetWith returns set (the server's notation) with gtid added.
func GTIDSetWith(t testing.TB, flavor, set, gtid string) string {
	t.Helper()
	s, err := binlog.ParseSet(flavor, set)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(gtid); err != nil {
		t.Fatal(err)
	}
	return s.String()
}
