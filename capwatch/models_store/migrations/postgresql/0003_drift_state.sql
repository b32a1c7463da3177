-- Per consumer group and agent, the daemon's drift state (outcome windows, detector
-- statistics: capwatch.monitor.snapshot's JSON) and the source position it reflects:
-- every record of (source, source_partition) before next_offset is counted in it, none
-- at or after. model_* name the model version the tables were counted against
-- (model_agent_id '' = the family baseline).
CREATE TABLE drift_state (
    consumer_group TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    family TEXT NOT NULL,
    model_agent_id TEXT NOT NULL,
    model_version INTEGER NOT NULL,
    source TEXT NOT NULL,
    source_partition INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    snapshot JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer_group, agent_id)
);
CREATE INDEX drift_state_partition ON drift_state (consumer_group, source, source_partition);
