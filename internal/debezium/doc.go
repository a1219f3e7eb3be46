// Package debezium reads the committed offset of a Debezium MySQL connector
// (Kafka Connect's offsets topic of distributed workers, or the offsets file
// of a standalone worker or Debezium Server) and translates it into the
// relay's checkpoint, proven against the records in Kafka: `checkpoint set
// --from-debezium`.
//
// The translation does not trust the offset's in-transaction skips alone
// (their meaning differs between the MySQL connector on MySQL, the MariaDB
// connector, and the MySQL connector on a MariaDB reporting a MySQL
// version). It walks the source's binlog with the relay's own reader from a
// start certainly at or before Debezium's position (the GTID state at the
// start of the offset's binlog file) up to the source's head, routes every
// captured row as the relay would (topic, partition, id header), reads the
// output topics, and takes the rows whose records are there: Debezium
// publishes in binlog order, so they must form a prefix of the walked rows.
// The new position is just after that prefix (a checkpoint.Partial when it
// cuts a transaction). Anything that is not a clean prefix, or that
// disagrees with the offset, is reported, and refused unless forced.
//
// Reading is bounded (file size, records, walked rows, time); nothing is
// written anywhere: the command writes the checkpoint.
package debezium
