-- Which incarnation of the topic an activity position, and a drift snapshot's position,
-- was counted on: Kafka's topic id,
-- new each time a topic is created, so a topic deleted and created again under the same
-- name (its offsets starting again from 0) is told from the one the position was saved
-- on, whose position would otherwise make the new topic's records up to it read as
-- replays and go uncounted (docs/daemon.md, "Activity counts across a crash"). NULL from a
-- source that knows no topic id (a file, a simulated fleet) and for positions saved before
-- this migration: such a position is used as before.
ALTER TABLE activity_positions ADD COLUMN topic_id TEXT;
ALTER TABLE drift_state ADD COLUMN topic_id TEXT;
