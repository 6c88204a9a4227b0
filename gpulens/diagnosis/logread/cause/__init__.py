"""Decision checks that answer a failure's category or origin in place of the classifier (README C1-C10, O1-O7).

Each module reads one mechanism from the log: where the exception was raised, what a file the job could not
read is, a bad data record, who a timeout is owed to, the cause behind a kill, a process that died before the
kill line, an earlier stage's failure. :mod:`.answers` holds the answer type they return.
"""

__all__: list[str] = []
