-- The "monotonic" store clock's reading at the last write and the host's wall clock then
-- (SqlBase.clock): a restarted process resumes from it, so a wall clock stepped back does
-- not hold back, by the step, work the old process queued as due.
CREATE TABLE store_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    reading TEXT NOT NULL,
    wall TEXT NOT NULL
);
