"""Bulk writers of the store besides the node agent: importers of outside traces
(:mod:`gpulens.ingest.importers`) and the cluster simulator (:mod:`gpulens.ingest.simulate`)."""
