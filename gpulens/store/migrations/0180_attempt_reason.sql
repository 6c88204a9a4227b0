-- gpulens schema 180: why an attempt ended as the scheduler records it (Kubernetes:
-- OOMKilled, Evicted, DeadlineExceeded, Error, ...). The diagnosis joins it with the log
-- (gpulens.diagnosis.termination); NULL where the scheduler names no reason.
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS reason VARCHAR;
