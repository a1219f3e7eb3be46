-- The relay's user: replication, plus SELECT so `outbox-relay check` can verify the outbox table.
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'change-me';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT ON app.outbox TO 'relay'@'%';
