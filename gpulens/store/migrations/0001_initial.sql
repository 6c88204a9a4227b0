-- gpulens state schema, version 1.
-- Time series (GPU, network, per-process samples, XID events) are not here:
-- they live in hive-partitioned Parquet, see gpulens/store/samples.py.

CREATE TABLE nodes (
    node              VARCHAR PRIMARY KEY,
    gpus              INTEGER,
    gpu_model         VARCHAR,
    gpu_memory_bytes  BIGINT,
    source            VARCHAR,          -- collector | simulate | philly | slurm
    first_seen        TIMESTAMP,
    last_seen         TIMESTAMP
);

CREATE TABLE gpus (
    node               VARCHAR NOT NULL,
    gpu_index          INTEGER NOT NULL,
    uuid               VARCHAR,
    model              VARCHAR,
    memory_total_bytes BIGINT,
    price_per_hour     DOUBLE,
    PRIMARY KEY (node, gpu_index)
);

CREATE TABLE jobs (
    job_id          VARCHAR PRIMARY KEY,
    "user"          VARCHAR,
    vc              VARCHAR,
    name            VARCHAR,
    submitted       TIMESTAMP,
    status          VARCHAR,            -- passed | killed | failed | running | queued
    requested_gpus  INTEGER,
    inputs          VARCHAR[],          -- declared input paths / dataset ids
    framework       VARCHAR,
    source          VARCHAR             -- simulate | philly | slurm | collector
);

CREATE TABLE attempts (
    job_id      VARCHAR NOT NULL,
    attempt     INTEGER NOT NULL,       -- 0-based
    start_time  TIMESTAMP,
    end_time    TIMESTAMP,              -- NULL while running
    status      VARCHAR,                -- passed | killed | failed | running
    exit_code   INTEGER,
    signal      INTEGER,
    log_path    VARCHAR,                -- relative to the data directory, or absolute
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE placements (
    job_id      VARCHAR NOT NULL,
    attempt     INTEGER NOT NULL,
    node        VARCHAR NOT NULL,
    gpu_index   INTEGER NOT NULL,
    start_time  TIMESTAMP,
    end_time    TIMESTAMP
);

CREATE TABLE job_metrics (
    job_id  VARCHAR NOT NULL,
    step    INTEGER NOT NULL,           -- epoch or optimizer step
    metric  VARCHAR NOT NULL,           -- loss | accuracy | ...
    value   DOUBLE
);

CREATE TABLE failures (
    job_id       VARCHAR NOT NULL,
    attempt      INTEGER NOT NULL,
    category     VARCHAR NOT NULL,
    origin       VARCHAR NOT NULL,      -- user | data | framework | infrastructure | unknown
    confidence   DOUBLE,
    evidence     VARCHAR[],
    origin_posterior JSON,
    method       VARCHAR,               -- rule | svm | bn | simulate
    diagnosed_at TIMESTAMP,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE blacklist (
    input          VARCHAR PRIMARY KEY,
    state          VARCHAR NOT NULL,    -- suspected | blacklisted | cleared
    reason         VARCHAR,
    evidence_jobs  VARCHAR[],
    updated_at     TIMESTAMP
);

CREATE SEQUENCE blacklist_audit_seq;
CREATE TABLE blacklist_audit (
    id         BIGINT PRIMARY KEY DEFAULT nextval('blacklist_audit_seq'),
    ts         TIMESTAMP NOT NULL,
    input      VARCHAR NOT NULL,
    old_state  VARCHAR,
    new_state  VARCHAR NOT NULL,
    actor      VARCHAR NOT NULL,
    reason     VARCHAR
);

CREATE TABLE node_flags (
    node        VARCHAR NOT NULL,
    flagged_at  TIMESTAMP NOT NULL,
    reason      VARCHAR,
    evidence    JSON,
    score       DOUBLE,
    active      BOOLEAN DEFAULT TRUE
);

CREATE TABLE node_anomaly (
    node   VARCHAR NOT NULL,
    hour   TIMESTAMP NOT NULL,
    score  DOUBLE,
    PRIMARY KEY (node, hour)
);

CREATE SEQUENCE validations_seq;
CREATE TABLE validations (
    id                 BIGINT PRIMARY KEY DEFAULT nextval('validations_seq'),
    ts                 TIMESTAMP NOT NULL,
    "user"             VARCHAR,
    command            VARCHAR,
    verdict            VARCHAR NOT NULL,   -- pass | fail | inconclusive
    category           VARCHAR,
    origin             VARCHAR,
    steps_completed    INTEGER,
    seconds            DOUBLE,
    peak_memory_bytes  BIGINT,
    device             VARCHAR,
    requested_gpus     INTEGER,
    gpu_type           VARCHAR,
    evidence           VARCHAR[]
);

CREATE SEQUENCE imports_seq;
CREATE TABLE imports (
    id        BIGINT PRIMARY KEY DEFAULT nextval('imports_seq'),
    ts        TIMESTAMP NOT NULL,
    kind      VARCHAR NOT NULL,
    path      VARCHAR NOT NULL,
    rows      BIGINT,
    quirks    JSON
);
