//go:build integration

// Package dbzitest is the end-to-end test of the switch from Debezium
// (`checkpoint set --from-debezium`, docs/adopting.md): the real Debezium
// MySQL connector with the Outbox Event Router on Kafka Connect
// (deploy/dev/debezium.sh: distributed and standalone) over the harness's
// MariaDB, on Apache Kafka, then the relay from the translated position.
// It runs only with RELAY_TEST_DEBEZIUM=1 and RELAY_TEST_KAFKA naming an
// Apache Kafka broker (make test-debezium); Java 17 and the jars
// deploy/dev/debezium.sh fetches from Maven Central are needed.
package dbzitest

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/itest"
)

var env *itest.Env

// debeziumVersion is what MariaDB reports: the MySQL connector needs a
// MySQL 5.7-compatible version string (as make bench-debezium starts it).
const debeziumVersion = "5.7.19-10.11-MariaDB-log"

func TestMain(m *testing.M) {
	if os.Getenv("RELAY_TEST_DEBEZIUM") == "" || len(itest.ExternalKafka()) == 0 {
		// Nothing to set up: every test skips (make test-debezium runs them).
		os.Exit(m.Run())
	}
	os.Exit(itest.MainWith(m, &env, map[string]string{"version": debeziumVersion}))
}

func needDebezium(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("RELAY_TEST_DEBEZIUM=1 and RELAY_TEST_KAFKA (Apache Kafka) run it: make test-debezium")
	}
}
