"""The failure-indicating lines of a failed attempt and where they came from (README rules R1-R9, "Origin").

:mod:`.rootline` picks the indicator lines as an operator does; the other modules each implement one rule: the
last run of the job script (R1), the root error and its chain (R2-R4), one message printed more than once (R5),
a cause line when the process did not end by its own exception (R6), markers of a root error that
began without stating it (R7), launchers' and schedulers' verdicts (R8), and which
rank, node or process printed a line first (:mod:`.origins`, :mod:`.failing`).
"""

__all__: list[str] = []
