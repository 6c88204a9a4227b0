"""Progress bars on a line: tqdm's update (count, total, times) and a message printed onto a bar's line
after its last ``\r`` refresh (a traceback, a shell's kill report, slurmstepd's cancel line)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

__all__ = ["BarText", "bar_under_text", "bar_update", "bar_updates", "text_on_bar"]


#: A progress bar's update (tqdm: "| 954/2219 [09:43<12:49,  1.64it/s, loss=0.31]"): its count,
#: its total and its bracket of times and postfix.
_BAR_COUNT = r"(\d+)/(\d+)\s*\[[^\]\r\n]{0,200}\]"
_BAR_UPDATE = re.compile(_BAR_COUNT)
#: The same update right after the bar's blocks ("40%|####      | 40/100 [00:09<00:13, 4.4it/s]"):
#: how tqdm prints a bar whose total it knows.
_BAR_AFTER_BLOCKS = re.compile(r"\|\s*" + _BAR_COUNT)
#: A bar's update cut off inside its bracket of times, where another writer's line came in ("910/1000 [04:01<00:23,"
#: then "slurmstepd: error: *** JOB ... CANCELLED ...", the rest of the refresh, "  3.79it/s]", on the next line): the
#: file got tqdm's refresh in two writes with the other's between them.
_BAR_CUT = re.compile(r"(\d+)/(\d+)\s*\[\d[\d:]*<[\d:?]+,(?:\s*[\d.?]+\s?(?:it/s|s/it))?,?(?=[A-Za-z*])")


def bar_update(shown: str, *, after_blocks: bool = False) -> re.Match[str] | None:
    """The first progress bar update in ``shown`` (what a line shows: its last ``\\r`` refresh):
    tqdm's count, total and bracket of times and postfix ("954/2219 [09:43<12:49, 1.64it/s]";
    groups 1 and 2 are the count and the total); with ``after_blocks``, only one printed right
    after the bar's blocks and their closing ``|`` (a bar with a known total). The one test of
    "is this a bar's update" for the reader (:func:`text_on_bar`, the phase's bar lines)."""
    return (_BAR_AFTER_BLOCKS if after_blocks else _BAR_UPDATE).search(shown)
def bar_updates(shown: str) -> Iterator[re.Match[str]]:
    """Every progress bar update in ``shown`` (:func:`bar_update`'s test), in order."""
    return _BAR_UPDATE.finditer(shown)


#: The cursor moves tqdm writes after a nested bar's refresh (``position=1``: ``\x1b[A``).
_CURSOR = re.compile(r"\x1b\[\d*[A-D]")
#: Characters at the end of a bar's last refresh looked at for it.
_BAR_SHOWN = 2000


@dataclasses.dataclass(frozen=True)
class BarText:
    """A message printed onto a progress bar's line (:func:`text_on_bar`)."""

    #: what the bar shows before its count ("Epoch 0:  12%|█▏        | ")
    head: str
    #: the bar's count and total
    done: int
    total: int
    #: the message printed after the bar's last update
    text: str
    #: the bar's last refresh up to the end of its last update, the message left out
    bar: str


def text_on_bar(line: str) -> BarText | None:
    """The message printed onto a progress bar's line, with that bar: tqdm ends its updates with
    ``\r``, no newline, so whatever writes to the same file next (a traceback, bash's "line 12:
    4242 Killed  python train.py", slurmstepd's cancel line) starts right after the bar's last
    update (``Epoch 1:  40%|####  | 40/100 [00:09<00:13, 4.4it/s]slurmstepd: error: *** JOB 52
    ..."``). None when the line's last refresh is no bar, or nothing that reads as a message (a
    word, a bracketed tag, a path, a Slurm ``***``) follows its last update."""
    if "/" not in line or "[" not in line:
        return None
    shown = line.rstrip("\r\n")
    shown = shown[shown.rfind("\r") + 1:][-_BAR_SHOWN:]  # the last refresh: what the terminal shows
    last = next(reversed(list(bar_updates(shown))), None)  # the last update on it
    if last is None and (last := _BAR_CUT.search(shown)) is None:
        return None
    text = _CURSOR.sub("", shown[last.end():]).strip()
    if not text or not (text[:1].isalpha() or text.startswith(("*", "[", "/", "."))):
        return None
    return BarText(shown[:last.start()], int(last.group(1)), int(last.group(2)), text, shown[:last.end()])


def bar_under_text(line: str) -> str | None:
    """The progress bar's last refresh on a line that has a message printed onto it (:func:`text_on_bar`), up to
    the end of its last update, the message left out; None when the line is no such bar."""
    glued = text_on_bar(line)
    return None if glued is None else glued.bar
