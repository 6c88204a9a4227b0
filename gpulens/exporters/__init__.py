"""Prometheus endpoints: the node agent's ``/metrics`` (:mod:`gpulens.exporters.agent`) and
the cluster-level exporter over the store (:mod:`gpulens.exporters.cluster`)."""
