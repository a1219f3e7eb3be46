-- The relay's user (MariaDB 10.5+, MySQL 8.0/8.4). Replace app.outbox with
-- each captured table (source.tables) and 'change-me' with the password.
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'change-me';
-- Read the binlog (REPLICATION SLAVE), the server's binlog list and
-- positions (REPLICATION CLIENT, called BINLOG MONITOR in MariaDB 10.5+:
-- SHOW BINARY LOGS for `start: earliest`, the purge checks and
-- outbox_relay_source_behind_bytes), and whether the server is a replica
-- (`check`'s log_replica_updates item: SHOW REPLICA STATUS needs
-- REPLICATION CLIENT on MySQL; MariaDB 10.5.9+ split SHOW SLAVE STATUS off
-- into SLAVE MONITOR, which REPLICATION CLIENT no longer gives). The
-- /*M!100509 ... */ part is run by MariaDB 10.5.9+ only; MySQL reads it as a
-- comment. (MariaDB 10.5.0-10.5.8: grant REPLICATION SLAVE ADMIN instead,
-- or let `check` warn that it cannot tell.)
GRANT REPLICATION SLAVE, REPLICATION CLIENT /*M!100509 , SLAVE MONITOR */ ON *.* TO 'relay'@'%';
-- SELECT on each captured table: `start: now` reads its columns from
-- information_schema (visible only with a privilege on the table), and
-- `check`, `schema` and `replay` read it.
GRANT SELECT ON app.outbox TO 'relay'@'%';
-- Amazon RDS / Aurora MySQL only (the table exists nowhere else): the
-- binlog retention behind outbox_relay_checkpoint_purge_margin_seconds
-- and `check` ('binlog retention hours'); without it the margin is NaN.
-- GRANT SELECT ON mysql.rds_configuration TO 'relay'@'%';
-- Only for `outbox-relay prune` (deletes published rows), if you run it as
-- this user:
-- GRANT DELETE ON app.outbox TO 'relay'@'%';
