-- Ground truth planted by `gpulens simulate` (collectors/simulate, docs/simulate.md).
-- Analyses and diagnosis tests compare what they recover against these tables.

-- One row per simulation written into this data directory (a second one is refused
-- unless --force replaces it). status: 'writing' until the samples are complete.
CREATE TABLE IF NOT EXISTS sim_runs (
    run_id      INTEGER PRIMARY KEY,
    created_at  TIMESTAMP,
    seed        BIGINT,
    gpus        INTEGER,
    days        DOUBLE,
    start_time  TIMESTAMP,
    end_time    TIMESTAMP,
    status      VARCHAR,               -- writing | complete
    params      JSON,                  -- collectors.simulate.SimParams as JSON
    summary     JSON
);

-- Why each failed attempt failed, as planted.
CREATE TABLE IF NOT EXISTS sim_truth (
    job_id      VARCHAR NOT NULL,
    attempt     INTEGER NOT NULL,
    category    VARCHAR NOT NULL,      -- diagnosis.types.CATEGORIES
    origin      VARCHAR NOT NULL,      -- user | data | framework | infrastructure
    node_fault  BOOLEAN NOT NULL,      -- failed because it ran on a planted bad node
    planted     VARCHAR,               -- corrupt_input | bad_node | user_repeat | repeat | transient
    node        VARCHAR,               -- the bad node (node_fault) else the first node of the attempt
    input       VARCHAR,               -- the bad input of incorrect_input failures
    log_source  VARCHAR,               -- sample_logs/<file> or builtin:<category>
    PRIMARY KEY (job_id, attempt)
);

-- Planted entities: kind = bad_node | corrupted_input.
CREATE TABLE IF NOT EXISTS sim_planted (
    kind    VARCHAR NOT NULL,
    key     VARCHAR NOT NULL,
    detail  JSON,
    PRIMARY KEY (kind, key)
);

-- Per-job planted values: utilization model and convergence epoch.
CREATE TABLE IF NOT EXISTS sim_job_truth (
    job_id           VARCHAR PRIMARY KEY,
    gpus             INTEGER,
    servers          INTEGER,          -- servers of the last attempt (NULL if never started)
    min_servers      INTEGER,
    model_util       DOUBLE,           -- planted_util(gpus, servers, min_servers), percent
    job_util         DOUBLE,           -- this job's drawn mean utilization, percent
    epochs           INTEGER,          -- epochs in job_metrics (0: no curve)
    converged_epoch  INTEGER,          -- first epoch within 0.1% of the best value
    planned_status   VARCHAR           -- passed | killed | failed
);
