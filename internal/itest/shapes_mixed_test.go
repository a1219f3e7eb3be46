//go:build integration

package itest

// Conformance matrix, part 3 (issue 11): every shape the relay must relay,
// at once, interleaved with plain concurrent writers, while the relay is
// killed (-9) at random instants; then one exact comparison.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

type shapeFailure struct{ err error }

// panicExec is the execer of a goroutine: it panics with a shapeFailure,
// which the goroutine recovers into an error.
func panicExec(c *client.Conn, stmts ...string) {
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			panic(shapeFailure{fmt.Errorf("%s: %w", abbreviate(q), err)})
		}
	}
}

func TestShapeAllTogetherUnderKill9(t *testing.T) {
	r := env.NewShapeRun(t, Straight, ShapeOptions{MaxRecords: 50, Setup: func(cfg *config.Config) {
		SetStatementDML(cfg, "warn") // the statement-business shape: rows of other tables only
	}})
	// The compressed round switches the server's compression on and off;
	// whatever happens, it ends off.
	SetGlobal(t, env, "log_bin_compress_min_len", "10")
	SetGlobal(t, env, "log_bin_compress", "OFF")
	cs := make([]*client.Conn, 3)
	for i := range cs {
		cs[i] = r.Conn()
	}
	shapes := []struct {
		name string
		fn   shapeFn
	}{
		{"savepoint-release", shapeSavepointRelease},
		{"rollback-to-savepoint", shapeRollbackToSavepoint},
		{"xa-commit", shapeXACommit},
		{"several-savepoints", shapeSeveralSavepoints},
		{"xa-rollback", shapeXARollback},
		{"statement-business", shapeStatementBusiness},
		{"xa-one-phase", shapeXAOnePhase},
		{"rotation", shapeRotation},
		{"upserts", shapeUpserts},
		{"compressed", func(r *ShapeRun, x execer, cs []*client.Conn, live bool) {
			x(cs[2], "SET GLOBAL log_bin_compress = ON")
			defer x(cs[2], "SET GLOBAL log_bin_compress = OFF")
			shapeCompressed(r, x, cs, live)
		}},
		{"big-after-savepoint", func(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
			big := r.XID() // aggregates of their own each time: seq restarts at 1
			x(cs[0], "BEGIN", r.Must("mx-big-first", 1), "SAVEPOINT s1",
				fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
					SELECT CONCAT('%s-', seq), 'alarm', CONCAT('%s-', seq %% 10), 'Bulk', JSON_OBJECT('seq', seq)
					FROM %s.seq_1_to_20000`, r.S.Table(), big, big, r.S.Name), "COMMIT")
		}},
		{"business-heavy", func(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
			x(cs[0], "BEGIN", r.Must("mx-heavy", 1),
				fmt.Sprintf(`INSERT INTO %s.alarm_record (device_id, level, temp, seq)
					SELECT CONCAT('heavy-', seq %% 10), 'INFO', seq %% 100, seq FROM %s.seq_1_to_50000`, r.S.Name, r.S.Name),
				r.Must("mx-heavy", 1), "COMMIT")
		}},
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wrote := make(chan error, 1)
	go func() {
		_, err := r.S.Write(ctx, WriteOptions{Writers: 3, Transactions: 700, Devices: 10, RollbackRate: 0.05,
			Pace: 3 * time.Millisecond, Tag: "mx"})
		wrote <- err
	}()
	shaped := make(chan error, 1)
	rounds := 0
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				f, ok := p.(shapeFailure)
				if !ok {
					panic(p)
				}
				err = f.err
			}
			shaped <- err
		}()
		for round := 0; round < 3; round++ {
			// An XA transaction prepared across the whole round.
			xid := r.XID()
			x := panicExec
			c, cerr := r.Env.DB.Root()
			if cerr != nil {
				panic(shapeFailure{cerr})
			}
			x(c, "XA START '"+xid+"'", r.Must("mx-held-"+xid, 2), "XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
			for _, sh := range shapes {
				func() {
					defer func() {
						if p := recover(); p != nil {
							if f, ok := p.(shapeFailure); ok {
								panic(shapeFailure{fmt.Errorf("round %d, shape %s: %w", round, sh.name, f.err)})
							}
							panic(p)
						}
					}()
					sh.fn(r, x, cs, false)
				}()
			}
			x(c, "XA COMMIT '"+xid+"'")
			c.Close()
			rounds = round + 1
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 11))
	kills, writersDone, shapesDone := 0, false, false
	for !(writersDone && shapesDone && kills >= 5) {
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
			writersDone = true
		case err := <-shaped:
			if err != nil {
				t.Fatal(err)
			}
			shapesDone = true
		case <-time.After(time.Duration(200+rng.IntN(1300)) * time.Millisecond):
			if r.Live.Exited() {
				t.Fatalf("the relay exited by itself:\n%s", r.Tail())
			}
			r.Live.Kill()
			kills++
			r.Live = r.start("")
		}
	}
	t.Logf("seed %d: %d kills, %d rounds of %d shapes", seed, kills, rounds, len(shapes))
	if res := r.Drive(); res.Stopped {
		t.Fatalf("the relay stopped (exit %d):\n%s", res.Code, lastLines(res.Output, 15))
	}
	rep := r.Finish()
	r.RequireNeverProduced(r.Ghosts)
	if rep.Expected < 2000 {
		t.Fatalf("only %d outbox rows: the writers did not run", rep.Expected)
	}
}
