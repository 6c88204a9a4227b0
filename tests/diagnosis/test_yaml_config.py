"""README C2: a YAML file that cannot be parsed is the job's configuration (semantic_error, user), not its input data."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text


def test_a_config_that_pyyaml_cannot_parse_is_the_jobs_own_setting(rules: Classifier) -> None:
    log = ["Loading config from configs/train_vit.yaml",
           "Traceback (most recent call last):",
           '  File "train.py", line 21, in <module>',
           "    cfg = yaml.safe_load(open(args.config))",
           '  File "/opt/conda/lib/python3.10/site-packages/yaml/scanner.py", line 577, in fetch_value',
           "    raise ScannerError(None, None,",
           "yaml.scanner.ScannerError: mapping values are not allowed here",
           '  in "configs/train_vit.yaml", line 14, column 9']
    d = diagnose_text("\n".join(log), rules).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "user"), d
