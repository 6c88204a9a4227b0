-- Live straggler detections (issue 25, docs/straggler.md): a machine of a running
-- multi-node job whose telemetry deviated from the job's other machines.
-- Open while until_ts IS NULL; last_seen is refreshed by the watcher while it runs, so
-- readers can tell a current suspicion from one a stopped watcher left open.
CREATE TABLE IF NOT EXISTS straggler_detections (
    job_id      VARCHAR NOT NULL,
    attempt     INTEGER,
    node        VARCHAR NOT NULL,
    since       TIMESTAMP NOT NULL,   -- first deviating tick of the persistent deviation
    detected_at TIMESTAMP NOT NULL,   -- when the continuity window was met
    last_seen   TIMESTAMP NOT NULL,
    until_ts    TIMESTAMP,            -- NULL while suspected
    signals     VARCHAR[],
    score       DOUBLE,               -- max over signals of deviation / threshold (>= 1)
    detail      JSON,                 -- per signal: score and deviation from the other machines
    nodes       INTEGER,              -- machines of the job
    source      VARCHAR,              -- live | simulate
    PRIMARY KEY (job_id, node, since)
);
