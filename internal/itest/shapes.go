package itest

// The conformance matrix for transaction shapes (issue 11): each shape is
// written against the shared MariaDB and relayed in several modes (straight
// through, SIGTERM at every Kafka commit boundary, kill -9 at the named crash
// points), then checked by an independent read_committed consumer against
// the outbox table.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
