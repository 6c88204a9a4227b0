"""How a job's last attempt ended: healthy or failed (README "Healthy or failed").

Positive evidence of completion (trainers', launchers' and trackers' completion messages, the last progress
reaching its end, the run's frontier), what leaves an end normal after a completion (teardown noise, errors a
process went on from, caught reports), and what says the end was a failure after all (an uncaught exception, a
handler's stop, a runner's failed items, the shell's last words). :mod:`.terminal` gathers them into the
terminal failure lines.
"""

__all__: list[str] = []
