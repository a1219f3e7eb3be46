// Package mysqlsource is a MySQL 8.0 / 8.4 primary double for tests; the
// relay binary never imports it. It speaks the real client/server protocol
// (go-mysql's server package: handshake with caching_sha2_password,
// queries, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID), answers the queries
// the relay and `check` send the way MySQL 8.0 and 8.4 answer them, and
// streams a binary log whose bytes come from an implementation
// independent of the relay's decoder: Vitess's event builders
// (vitess.io/vitess/go/mysql: format description, rotate, query, XID,
// table map, write rows v2, heartbeat), and, where Vitess has none, the
// encoders here, written from MySQL's documented formats: the GTID and
// tagged GTID events, Previous_gtids, table map optional metadata
// (binlog_row_metadata MINIMAL and FULL), XA_PREPARE, binary JSON, the
// zstd Transaction_payload event, and UPDATE_ROWS v2 and
// PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON). Row
// images hold every column or, as a session's binlog_row_image MINIMAL or
// NOBLOB logs them, the columns a statement names (Insert.Logged,
// Update.Before and After).
//
// Contract: a Primary holds a history of committed transactions (Commit),
// in binlog files (Rotate, PurgeTo); gtid_executed and gtid_purged follow
// them. A dump is refused as MySQL's dump thread refuses it (error 1236
// with MySQL's text) when the replica has GTIDs of the server's own uuid
// the server lacks, or lacks purged ones; otherwise the server streams
// from the first file whose Previous_gtids the replica has, skipping the
// transactions the replica has, then follows new commits, sending
// heartbeats at the period the replica asked for. Checksums as MySQL's
// dump thread sends them: the binlog's events carry a CRC32 when
// binlog_checksum is CRC32 (Options.BinlogChecksum; NONE: none but the
// format description's own); the fake rotate a dump starts with carries
// one only when the replica declared CRC32 (@source_binlog_checksum, else
// @master_binlog_checksum); a replica that declared nothing is refused
// (error 1236) by a binlog with checksums. A session keeps its user
// variables (SET @v, SELECT @v). The start-up queries of independent
// binlog clients (go-mysql, mysql-binlog-connector-java, Debezium's
// connector and Connector/J, a MySQL replica) are answered as MySQL 8
// answers them (startup_test.go lists them). A statement the double does
// not model is answered with an error and listed by Unmodelled.
package mysqlsource
