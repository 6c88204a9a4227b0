"""Generator of the sample_logs/ failure-log corpus (run: python -m scripts.gen_sample_logs)."""
