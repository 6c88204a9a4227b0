-- Bad-node flags carry their confidence (1 - Benjamini-Hochberg q) so alerts can
-- fire only above diagnose.node_alert_confidence (issue 17, docs/diagnosis.md).
ALTER TABLE node_flags ADD COLUMN IF NOT EXISTS confidence DOUBLE;
