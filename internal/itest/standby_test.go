//go:build integration

package itest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// series reads one series (name and labels exactly as exposed, e.g.
// `outbox_relay_role{role="active"}`) from addr's /metrics; -1 when the
// instance does not answer or has no such series.
func series(addr, name string) float64 {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func readyz(addr string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// member is one `run` process of a pipeline with several instances.
type member struct {
	cfg  config.Config
	path string
	p    *Proc
}

// fleet runs n instances of one pipeline (same name; own server_id and
// http.listen each) and watches their role metric: at most one may say
// active at any time.
type fleet struct {
	t       *testing.T
	mu      sync.Mutex
	members []*member
	most    int      // most instances active in one scrape round
	both    []string // scrape rounds with more than one active
	stop    chan struct{}
	stopped chan struct{}
}

func startFleet(t *testing.T, cfg config.Config, n int) *fleet {
	t.Helper()
	f := &fleet{t: t, stop: make(chan struct{}), stopped: make(chan struct{})}
	for i := 0; i < n; i++ {
		c := cfg
		c.Source.ServerID = cfg.Source.ServerID + uint32(i)
		c.HTTP.Listen = freeAddr(t)
		m := &member{cfg: c, path: WriteConfig(t, c)}
		m.p = env.StartProc(t, m.path)
		f.members = append(f.members, m)
	}
	go f.watch()
	t.Cleanup(f.close)
	return f
}

func (f *fleet) close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.stopped
}

// watch scrapes every instance's role every 50 ms.
func (f *fleet) watch() {
	defer close(f.stopped)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		members := slices.Clone(f.members)
		f.mu.Unlock()
		var active []string
		for i, m := range members {
			if series(m.cfg.HTTP.Listen, `outbox_relay_role{role="active"}`) == 1 {
				active = append(active, strconv.Itoa(i))
			}
		}
		f.mu.Lock()
		f.most = max(f.most, len(active))
		if len(active) > 1 {
			f.both = append(f.both, time.Now().Format("15:04:05.000")+" instances "+strings.Join(active, ","))
		}
		f.mu.Unlock()
	}
}

// streaming returns the index of the instance that streams (state
// streaming) in a process other than not; -1 when none does.
func (f *fleet) streaming(not *Proc) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.members {
		if m.p != not && !m.p.Exited() && series(m.cfg.HTTP.Listen, `outbox_relay_up{state="streaming"}`) == 1 {
			return i
		}
	}
	return -1
}

// waitStreaming waits until an instance in a process other than not streams
// and returns it and how long that took.
func (f *fleet) waitStreaming(not *Proc, timeout time.Duration) (int, time.Duration) {
	f.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if i := f.streaming(not); i >= 0 {
			return i, time.Since(start)
		}
		time.Sleep(25 * time.Millisecond)
	}
	f.t.Fatalf("no instance streams %s after the last change", timeout)
	return -1, 0
}

// restart starts instance i again (the supervisor's restart).
func (f *fleet) restart(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members[i].p = env.StartProc(f.t, f.members[i].path)
}

func (f *fleet) proc(i int) *Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[i].p
}

func (f *fleet) requireOneActive() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.most > 1 {
		f.t.Fatalf("%d instances active at once: %v", f.most, f.both)
	}
	if f.most == 0 {
		f.t.Fatal("the role metric never showed an active instance")
	}
}

// maxTakeover bounds the takeover after a kill -9 with the default
// ha.session_timeout (6s): the session timeout, a heartbeat, the rebalance
// and the new attempt's start. The goal is under 10s: the median of a run's
// takeovers. One takeover may meet a coordinator that ends the killed
// member's session late (a loaded broker: 5 s late seen under load), up to
// a session timeout more (lateTakeover).
const (
	maxTakeover  = 10 * time.Second
	lateTakeover = maxTakeover + 6*time.Second
)

// killActive kills -9 the streaming instance kills times while writers
// commit, restarting each killed one once a standby took over (it comes
// back as a standby), and returns the takeover times.
func killActive(t *testing.T, f *fleet, kills int, rng *rand.Rand) []time.Duration {
	t.Helper()
	active, _ := f.waitStreaming(nil, time.Minute)
	var takeovers []time.Duration
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond) // let it stream a while
		killed := f.proc(active)
		if killed.Exited() {
			t.Fatalf("instance %d exited by itself:\n%s", active, killed.Output())
		}
		killed.Kill()
		next, took := f.waitStreaming(killed, 30*time.Second)
		t.Logf("kill %d: instance %d killed, instance %d streams after %s", i+1, active, next, took.Round(time.Millisecond))
		takeovers = append(takeovers, took)
		f.restart(active) // the supervisor's restart (RestartSec): back as a standby
		active = next
		// The next kill comes once the restarted instance is a settled
		// member: a kill during the rebalance its join started waits for
		// that rebalance too (up to ha.session_timeout more), which is not
		// the takeover time being measured.
		f.waitSettled(30 * time.Second)
	}
	return takeovers
}

// waitSettled waits until every instance is a member of the lock group and
// the group is stable.
func (f *fleet) waitSettled(timeout time.Duration) {
	f.t.Helper()
	cfg := f.members[0].cfg
	WaitLockGroup(f.t, cfg.Kafka.Brokers, cfg.Name, len(f.members), timeout)
}

func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("min %s, median %s, max %s over %d", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond),
		s[len(s)-1].Round(time.Millisecond), len(s))
}

// Two and three instances with the same name under writers: the active one
// is killed -9 again and again; another one takes over each time (default
// ha settings), in maxTakeover at the median and lateTakeover at most; at
// most one is active at any time, and the stream is exactly once: 0
// missing, 0 duplicates.
func TestStandbyKillActive(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d instances", n), func(t *testing.T) { standbyKills(t, n, 10) })
	}
}

func standbyKills(t *testing.T, n, kills int) {
	k, s, cfg := env.Pipeline(t)
	cfg.HA = config.Default().HA // the takeover is measured with the defaults
	cfg.Log.Level = "info"
	f := startFleet(t, cfg, n)
	first, _ := f.waitStreaming(nil, time.Minute)
	waitStarted(t, f.proc(first), cfg) // "now" is pinned before the writers start
	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	wrote := make(chan error, 1)
	var committed []Outcome
	go func() {
		var err error
		committed, err = s.Write(ctx, WriteOptions{Writers: 2, Transactions: 1 << 30, RollbackRate: 0.05, Pace: 2 * time.Millisecond})
		wrote <- err
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	takeovers := killActive(t, f, kills, rng)
	stopWriting()
	if err := <-wrote; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	f.close()
	f.requireOneActive()
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%d instances, %d kills -9 of the active one: takeover %s; %s", n, kills, summary(takeovers), rep)
	requireTakeovers(t, takeovers)
	if len(committed) == 0 || rep.Expected != len(s.OutboxRows(t)) {
		t.Fatalf("writers committed %d events", len(committed))
	}
}

// requireTakeovers checks a run's takeover times: the median within
// maxTakeover, each within lateTakeover.
func requireTakeovers(t *testing.T, takeovers []time.Duration) {
	t.Helper()
	s := slices.Clone(takeovers)
	slices.Sort(s)
	if median := s[len(s)/2]; median > maxTakeover {
		t.Fatalf("takeovers took %s at the median, want at most %s (%s)", median, maxTakeover, summary(takeovers))
	}
	if longest := s[len(s)-1]; longest > lateTakeover {
		t.Fatalf("a takeover took %s, want at most %s (%s)", longest, lateTakeover, summary(takeovers))
	}
}

// at-least-once, two instances: kill -9 may publish records again (the new
// active instance resumes from the last checkpoint), but two instances
// never publish at once. Each attempt produces with its own producer id:
// were two instances active at once, their producer ids would interleave in
// a partition (A, B, A); after a crash and a takeover one producer's records
// simply follow the other's. The active one is also paused (SIGSTOP) for
// longer than the session timeout, so the standby takes over while it still
// exists, then resumed: it must notice, without a heartbeat, that its lease
// is gone and publish nothing more.
func TestStandbyAtLeastOnceNeverTwoActives(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = config.AtLeastOnce
	cfg.Kafka.Batch.MaxRecords = 200
	cfg.HA = config.Default().HA
	cfg.Log.Level = "info"
	f := startFleet(t, cfg, 2)
	first, _ := f.waitStreaming(nil, time.Minute)
	waitStarted(t, f.proc(first), cfg)
	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 1 << 30, RollbackRate: 0.05, Pace: 2 * time.Millisecond})
		wrote <- err
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	takeovers := killActive(t, f, 3, rng)

	// Pause the active one past its session; the standby takes over.
	paused, _ := f.waitStreaming(nil, time.Minute)
	time.Sleep(time.Second)
	p := f.proc(paused)
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	next, took := f.waitStreaming(p, 30*time.Second)
	t.Logf("instance %d paused; instance %d streams after %s", paused, next, took.Round(time.Millisecond))
	time.Sleep(time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	Eventually(t, 30*time.Second, func() error {
		if v := series(f.members[paused].cfg.HTTP.Listen, `outbox_relay_role{role="standby"}`); v != 1 {
			return fmt.Errorf("the resumed instance is not standby (%v)", v)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // the active one keeps publishing meanwhile
	stopWriting()
	if err := <-wrote; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	f.close()
	f.requireOneActive()
	rep := requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
	runs, interleaved := producerRuns(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(interleaved) > 0 {
		t.Fatalf("two producers interleaved in a partition (two actives at once): %v", interleaved)
	}
	if !strings.Contains(f.proc(paused).Output(), "lease lost") {
		t.Fatalf("the paused instance did not report its lost lease:\n%s", f.proc(paused).Output())
	}
	t.Logf("at-least-once, 2 instances, 3 kills and a pause: takeover %s; %d rows, %d records, %d duplicated (crashes); %d producer runs, none interleaved",
		summary(takeovers), rep.Expected, rep.Received, len(rep.Duplicates), runs)
}

// producerRuns reads every record of the topics matching prefix with its
// producer id and reports, per partition, producer ids that come back after
// another producer wrote (interleaving: two producers at once).
func producerRuns(t *testing.T, brokers []string, prefix string) (int, []string) {
	t.Helper()
	type tp struct {
		topic string
		p     int32
	}
	last := map[tp]int64{}
	done := map[tp]map[int64]bool{} // producers whose run in the partition ended
	runs := 0
	var interleaved []string
	EachProduced(t, brokers, prefix, func(r *kgo.Record) {
		key := tp{r.Topic, r.Partition}
		prev, seen := last[key]
		if seen && prev == r.ProducerID {
			return
		}
		if done[key] == nil {
			done[key] = map[int64]bool{}
		}
		if done[key][r.ProducerID] {
			interleaved = append(interleaved, fmt.Sprintf("%s/%d offset %d: producer %d again after %d", r.Topic, r.Partition, r.Offset, r.ProducerID, prev))
		}
		if seen {
			done[key][prev] = true
		}
		last[key] = r.ProducerID
		runs++
	})
	return runs, interleaved
}

// /readyz turns 503 within a few seconds of a broker outage, on the active
// instance; the standby answers 503 (standby) all along; once the broker is
// back an instance streams again.
func TestStandbyReadyzBrokerOutage(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	if k.Cluster == nil && os.Getenv("RELAY_TEST_KAFKA_CTL") == "" {
		t.Skip("stopping an external broker needs RELAY_TEST_KAFKA_CTL")
	}
	cfg.HA = config.Default().HA
	f := startFleet(t, cfg, 2)
	active, _ := f.waitStreaming(nil, time.Minute)
	standby := 1 - active
	if code := readyz(f.members[active].cfg.HTTP.Listen); code != 200 {
		t.Fatalf("active instance: /readyz %d", code)
	}
	if code := readyz(f.members[standby].cfg.HTTP.Listen); code != 503 {
		t.Fatalf("standby instance: /readyz %d, want 503", code)
	}
	stopping := time.Now() // Apache Kafka takes a while to stop
	k.Stop(t)
	down := time.Now() // the broker is gone
	Eventually(t, 10*time.Second, func() error {
		if code := readyz(f.members[active].cfg.HTTP.Listen); code != 503 {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
	took := time.Since(down)
	t.Logf("/readyz 503 %s after the broker was gone (%s after its stop began)", took.Round(time.Millisecond),
		time.Since(stopping).Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("/readyz turned 503 %s after the broker was gone, want within 5s", took)
	}
	time.Sleep(3 * time.Second)
	for i, m := range f.members {
		if code := readyz(m.cfg.HTTP.Listen); code != 503 {
			t.Fatalf("instance %d: /readyz %d while the broker is down", i, code)
		}
		if m.p.Exited() {
			t.Fatalf("instance %d exited during the outage:\n%s", i, m.p.Output())
		}
	}
	k.Start(t)
	_, back := f.waitStreaming(nil, 2*time.Minute)
	t.Logf("streaming again %s after the broker came back", back.Round(time.Millisecond))
	f.close()
	f.requireOneActive()
}
