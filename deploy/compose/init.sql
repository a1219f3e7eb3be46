CREATE DATABASE IF NOT EXISTS app;
CREATE TABLE IF NOT EXISTS app.outbox (
  id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id       VARCHAR(64)  NOT NULL UNIQUE,
  aggregate_type VARCHAR(64)  NOT NULL,
  aggregate_id   VARCHAR(64)  NOT NULL,
  event_type     VARCHAR(64)  NOT NULL,
  payload        JSON         NOT NULL,
  created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
);
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-compose';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT ON app.outbox TO 'relay'@'%';
