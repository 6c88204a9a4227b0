-- Issue 15: importing history from Prometheus (and Kubernetes).

-- Progress of `gpulens import prometheus`: one row per node and time chunk. A re-run
-- skips the chunks marked complete; an incomplete one is imported again and its
-- segment files (named after the chunk) replace the earlier ones, so no sample is
-- stored twice.
CREATE TABLE IF NOT EXISTS prometheus_import_chunks (
    url          VARCHAR NOT NULL,
    source       VARCHAR NOT NULL,     -- dcgm | nvidia_gpu_exporter | gpulens
    selector     VARCHAR NOT NULL,     -- --match, '' when none
    node         VARCHAR NOT NULL,
    chunk_start  TIMESTAMP NOT NULL,
    chunk_end    TIMESTAMP NOT NULL,
    covered_end  TIMESTAMP NOT NULL,   -- the last step imported in this chunk
    step_s       DOUBLE NOT NULL,
    complete     BOOLEAN NOT NULL,
    samples      BIGINT,
    imported_at  TIMESTAMP,
    PRIMARY KEY (url, source, selector, node, chunk_start)
);

-- Which job ran on which GPU, as seen in exporter labels (dcgm-exporter's pod mapping
-- and hpc_job, gpulens_gpu_job_info): first and last step seen. Reconciled into
-- jobs/attempts/placements by gpulens.ingest.importers.reconcile.
CREATE TABLE IF NOT EXISTS observed_placements (
    job_id      VARCHAR NOT NULL,
    node        VARCHAR NOT NULL,
    gpu_index   INTEGER NOT NULL,
    uuid        VARCHAR,
    first_seen  TIMESTAMP NOT NULL,
    last_seen   TIMESTAMP NOT NULL,
    via         VARCHAR,               -- k8s-pod | hpc_job | gpulens
    PRIMARY KEY (job_id, node, gpu_index)
);
