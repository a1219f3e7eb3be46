//go:build integration

// Package dashtest checks the Grafana dashboard against a live relay: a
// scratch MariaDB, an embedded Kafka broker (kfake), the relay streaming
// with its /metrics on a loopback port, and Debian's Prometheus server
// (package prometheus, installed by `make deps`) scraping it every second.
// Every panel query of deploy/grafana/outbox-relay-dashboard.json, with the
// dashboard's variables set to the pipeline, must return series.
package dashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/audit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// query runs an instant PromQL query and returns how many series it gave.
func query(base, expr string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, fmt.Errorf("%s: %.200s", err, body)
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("query error: %s", out.Error)
	}
	return len(out.Data.Result), nil
}

func TestEveryPanelQueryReturnsSeries(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("the Prometheus server is not installed (make deps: apt-get install prometheus)")
	}
	raw, err := os.ReadFile("../grafana/outbox-relay-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	db, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "db")})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB is not installed (make deps)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Stop()
	if err := db.Exec("CREATE DATABASE app",
		`CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL UNIQUE,
			aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
			payload LONGTEXT NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))`,
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'relay-pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%'",
		"GRANT SELECT ON app.outbox TO 'relay'@'%'"); err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000", "group.min.session.timeout.ms": "1000"}))

	cfg := config.Default()
	cfg.Name = "dash"
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Source.User, cfg.Source.Password = "relay", "relay-pw"
	cfg.Source.ServerID = 4343
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Source.HeartbeatPeriod = time.Second
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.CheckpointInterval = 200 * time.Millisecond
	cfg.Router.OnError = "dead-letter"
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = 500 * time.Millisecond
	cfg.HTTP.Listen = freeAddr(t)
	cfg.Audit.Interval, cfg.Audit.Wait = time.Second, time.Second // the audit panels' series
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := metrics.New("test")
	r, err := relay.New(cfg, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	rctx, stop := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	audited := make(chan struct{})
	go func() { defer close(audited); audit.Background(rctx, cfg, zerolog.Nop(), m) }()
	defer func() {
		stop()
		<-relayDone
		<-audited
	}()

	// Prometheus, scraping the relay every second with the labels the
	// shipped scrape configurations set (job, pipeline).
	dir := t.TempDir()
	promAddr := freeAddr(t)
	promCfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: outbox-relay
    static_configs:
      - targets: [%q]
        labels: {pipeline: dash}
`, cfg.HTTP.Listen)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(promCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	prom := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr, "--log.level=warn")
	prom.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	promLog, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	prom.Stdout, prom.Stderr = promLog, promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prom.Process.Kill(); _ = prom.Wait() }()
	base := "http://" + promAddr

	// Traffic that gives every family a series: published rows, a bad row
	// (empty key: dead-lettered), an update of an outbox row (invalid op),
	// and a killed binlog connection (an error and a restart).
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(d); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within %s", what, d)
			}
		}
	}
	waitFor("relay streaming", time.Minute, func() bool { return m.State() == metrics.StateStreaming })
	for i := range 20 {
		if err := db.Exec(fmt.Sprintf(`INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ('e%d', 'alarm', 'device-%d', 'raised', '{"n":%d}')`, i, i%3, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Exec(`INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad', 'alarm', '', 'raised', '{}')`,
		`UPDATE app.outbox SET event_type = 'changed' WHERE event_id = 'e1'`); err != nil {
		t.Fatal(err)
	}
	waitFor("rows handled", time.Minute, func() bool {
		n, _ := query(base, `outbox_relay_invalid_ops_total{op="update"}`)
		d, _ := query(base, `outbox_relay_events_total{outcome="dead_letter"}`)
		return n > 0 && d > 0
	})
	rows, err := db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil || len(rows) == 0 {
		t.Fatalf("binlog dump thread: %v %v", rows, err)
	}
	if err := db.Exec("KILL " + rows[0][0]); err != nil {
		t.Fatal(err)
	}
	waitFor("a restart after the killed connection, streaming again", time.Minute, func() bool {
		n, _ := query(base, `outbox_relay_restarts_total > 0`)
		return n > 0 && m.State() == metrics.StateStreaming
	})

	// Idle now: the relay has read everything the server has. Its lag is 0
	// (a heartbeat said so), however old the last commit, and the sampled
	// binlog behind its position is 0 bytes.
	waitFor("lag 0 and nothing behind on the idle source", 30*time.Second, func() bool {
		l, _ := query(base, `outbox_relay_source_lag_seconds{pipeline="dash"} == 0`)
		b, _ := query(base, `outbox_relay_source_behind_bytes{pipeline="dash"} == 0`)
		return l == 1 && b == 1
	})

	// Every variable query and every panel query, with the variables set.
	vars := strings.NewReplacer("$job", "outbox-relay", "$pipeline", "dash", "$instance", ".*", "$__rate_interval", "15s")
	var failed []string
	check := func() []string {
		var missing []string
		for _, v := range dash.Templating.List {
			q, _ := v.Query.(map[string]any)
			if v.Type != "query" || q == nil {
				continue
			}
			// label_values(SELECTOR, LABEL): the selector must have series carrying LABEL.
			s := vars.Replace(fmt.Sprint(q["query"]))
			inner := strings.TrimSuffix(strings.TrimPrefix(s, "label_values("), ")")
			i := strings.LastIndex(inner, ",")
			expr := fmt.Sprintf("count by (%s) (%s)", strings.TrimSpace(inner[i+1:]), inner[:i])
			if n, err := query(base, expr); err != nil || n == 0 {
				missing = append(missing, fmt.Sprintf("variable %s: %s: %d series, %v", v.Name, expr, n, err))
			}
		}
		for _, p := range dash.Panels {
			for _, tg := range p.Targets {
				expr := vars.Replace(tg.Expr)
				if n, err := query(base, expr); err != nil || n == 0 {
					missing = append(missing, fmt.Sprintf("panel %q: %s: %d series, %v", p.Title, expr, n, err))
				}
			}
		}
		return missing
	}
	end := time.Now().Add(45 * time.Second)
	for {
		failed = check()
		if len(failed) == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		t.Fatalf("%d queries return no series:\n%s\nprometheus log:\n%.2000s", len(failed), strings.Join(failed, "\n"), log)
	}
	n := 0
	for _, p := range dash.Panels {
		n += len(p.Targets)
	}
	if n < 20 {
		t.Fatalf("only %d panel queries", n)
	}
	t.Logf("%d panel queries and %d variables return series", n, len(dash.Templating.List)-1)
}
