-- The job's stdout and stderr files of an attempt, as the scheduler expanded them (Slurm
-- epilog, sacct StdOut/StdErr). attempts.log_path stays the file diagnosis reads: the stderr
-- file when the two differ (tracebacks and slurmstepd's messages go there), else the one file.
-- A table of its own, so that the attempts table keeps its columns.
CREATE TABLE IF NOT EXISTS attempt_logs (
    job_id       VARCHAR NOT NULL,
    attempt      INTEGER NOT NULL,
    stdout_path  VARCHAR,
    stderr_path  VARCHAR,
    PRIMARY KEY (job_id, attempt)
);
