-- Model versions: one row per (family, agent, version); agent_id '' is the family baseline
-- because NULL never equals NULL in a primary key.
CREATE TABLE model_versions (
    family TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    parent_family TEXT,
    parent_agent_id TEXT,
    parent_version INTEGER,
    delta_to_parent INTEGER NOT NULL,
    delta_to_baseline INTEGER NOT NULL,
    changed_pal_tuples TEXT NOT NULL,
    summary TEXT NOT NULL,
    evidence TEXT NOT NULL,
    model_json TEXT NOT NULL,
    pddl TEXT NOT NULL,
    created_at TEXT NOT NULL,
    content_key TEXT NOT NULL,
    PRIMARY KEY (family, agent_id, version)
);
CREATE INDEX model_versions_agent_time ON model_versions (agent_id, created_at);
CREATE TABLE pending_assessments (
    key TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    family TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'claimed', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    enqueued_at TEXT NOT NULL,
    not_before TEXT NOT NULL,
    claimed_by TEXT,
    lease_until TEXT,
    last_error TEXT
);
CREATE INDEX pending_assessments_ready ON pending_assessments (status, not_before);
CREATE TABLE consumer_offsets (
    consumer_group TEXT NOT NULL,
    topic TEXT NOT NULL,
    kafka_partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (consumer_group, topic, kafka_partition)
);
