// Package kititest holds the integration tests of the application kit
// (packages outbox and inbox, and the prune, replay, dead-letter and schema
// commands) against the test MariaDB and a Kafka broker (kfake, or
// RELAY_TEST_KAFKA), under the build tag integration:
//
//	go test -tags integration ./internal/kititest/
package kititest
