-- The "monotonic" store clock's reading at the last write and the host's wall clock then
-- (SqlBase.clock): a restarted process resumes from it. Unused with the server's clock
-- (the default here); kept in both dialects so that their schemas stay one.
CREATE TABLE store_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    reading TIMESTAMPTZ NOT NULL,
    wall TIMESTAMPTZ NOT NULL
);
