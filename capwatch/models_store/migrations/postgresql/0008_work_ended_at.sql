-- When a work left the queue (done, or failed for good), on the store's clock, written
-- by the transaction that ends it: a replica that learns of the end later (the agent's
-- partition moved while no replica held it) backs off from the end, not from the
-- earliest time it can have been (docs/daemon.md, "No loops"). NULL while the work is
-- live, and for works that ended before this migration (their readers fall back to the
-- earliest time they know).
ALTER TABLE pending_assessments ADD COLUMN ended_at TIMESTAMPTZ;
