// Package mysqlitest runs the relay against MySQL 8.0 and 8.4 primary
// doubles (internal/mysqlsource): end to end, kill -9 of the relay, the
// MySQL transaction shapes (BEGIN ... XID, XA, standalone DDL,
// Transaction_payload), several source uuids with gaps, tagged GTIDs,
// MINIMAL and FULL table-map metadata, purged binlogs and failover between
// two doubles sharing history. The tests carry the build tag integration;
// they need no MySQL server, only loopback sockets and kfake (or the
// broker named by RELAY_TEST_KAFKA).
package mysqlitest
