-- What operators did, with who and why: assess now, approve or reject a learned version,
-- roll an agent back, promote a version to the family baseline. key is the caller's
-- idempotency key (a retried request adds nothing). agent_id '' is the family baseline;
-- target_* name the version acted on; result says what the action wrote (the new
-- version, the queued work).
CREATE TABLE operator_actions (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('assess', 'approve', 'reject', 'rollback', 'promote')),
    family TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    target_agent_id TEXT,
    target_version INTEGER,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    result JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX operator_actions_lineage ON operator_actions (family, agent_id, created_at);
CREATE INDEX operator_actions_time ON operator_actions (created_at);
-- Per agent, what the daemon replicas have seen of it (written at checkpoints): the fleet
-- view lists every agent, not only those with a lineage of their own.
CREATE TABLE agent_activity (
    family TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    transitions BIGINT NOT NULL,
    inconsistent BIGINT NOT NULL,
    last_seen TIMESTAMPTZ NOT NULL,
    replica TEXT NOT NULL,
    PRIMARY KEY (family, agent_id)
);
CREATE INDEX agent_activity_seen ON agent_activity (last_seen);
