-- Per consumer group and partition, the offset below which agent_activity counts every
-- record (the next offset at the checkpoint that added the counts, written in the same
-- transaction). A replica given the partition reads it: a record replayed below it after
-- a crash is observed but not added to the counts again. A table of its own, not rows of
-- consumer_offsets under another group's name: readers sum consumer_offsets as the
-- checkpoint (session 20's attempt doubled them, and was reverted).
CREATE TABLE activity_positions (
    consumer_group TEXT NOT NULL,
    topic TEXT NOT NULL,
    kafka_partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (consumer_group, topic, kafka_partition)
);
