-- What `gpulens store compact` merged (gpulens/store/compact.py): one row per compacted
-- file. The file itself is the commit (it names its inputs in its Parquet metadata); this
-- table is the record, filled after each run and reconciled by the next one after a crash.
CREATE TABLE IF NOT EXISTS lake_compactions (
    kind          VARCHAR NOT NULL,     -- gpu | net | proc | xid
    day           DATE NOT NULL,        -- the date partition
    node          VARCHAR NOT NULL,     -- the node partition
    output        VARCHAR NOT NULL,     -- compact-<id>.parquet, in that partition
    inputs        INTEGER,              -- files it replaced
    rows          BIGINT,
    bytes_in      BIGINT,               -- size of the replaced files
    bytes_out     BIGINT,               -- size of the compacted file
    compacted_at  TIMESTAMP,            -- UTC
    PRIMARY KEY (kind, day, node, output)
);
