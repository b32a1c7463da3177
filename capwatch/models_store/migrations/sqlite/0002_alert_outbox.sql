-- Alerts wait here, written in the transaction of what caused them (a model version, a
-- queued or failed assessment), until the router suppresses or groups them into a
-- delivery. key is the producer's idempotency key: a retried write adds nothing.
CREATE TABLE alert_outbox (
    key TEXT PRIMARY KEY,
    dedup_key TEXT NOT NULL,
    group_key TEXT NOT NULL,
    family TEXT NOT NULL,
    alert_type TEXT NOT NULL,
    alert TEXT NOT NULL,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'routed', 'suppressed')),
    delivery TEXT,
    routed_at TEXT
);
CREATE INDEX alert_outbox_status ON alert_outbox (status, created_at);
-- One row per alert the router let out (alone or grouped), with the sinks that have not
-- acknowledged it yet: a failing sink is retried without re-sending to the others.
CREATE TABLE alert_deliveries (
    key TEXT PRIMARY KEY,
    alert TEXT NOT NULL,
    sinks_pending TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'sent')),
    created_at TEXT NOT NULL,
    not_before TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    sent_at TEXT
);
CREATE INDEX alert_deliveries_ready ON alert_deliveries (status, not_before);
-- Per dedup key, the time of the newest alert let through: suppression windows hold
-- across restarts and replicas.
CREATE TABLE alert_sent (
    dedup_key TEXT PRIMARY KEY,
    sent_at TEXT NOT NULL
);
