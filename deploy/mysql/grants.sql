-- The relay's user (MariaDB 10.5+, MySQL 8.0/8.4). Replace app.outbox with
-- each captured table (source.tables) and 'change-me' with the password.
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'change-me';
-- Read the binlog (REPLICATION SLAVE), the server's binlog list and
-- positions (REPLICATION CLIENT, called BINLOG MONITOR in MariaDB 10.5+:
-- SHOW BINARY LOGS for `start: earliest`, the purge checks and
-- outbox_relay_source_behind_bytes).
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
-- SELECT on each captured table: `start: now` reads its columns from
-- information_schema (visible only with a privilege on the table), and
-- `check`, `schema` and `replay` read it.
GRANT SELECT ON app.outbox TO 'relay'@'%';
-- Only for `outbox-relay prune` (deletes published rows), if you run it as
-- this user:
-- GRANT DELETE ON app.outbox TO 'relay'@'%';
