"""Structure checks for the log reader's modules (round 21's split), shared by the split tests.

A part says its one job (a docstring), exports what it defines (``__all__``), keeps its functions short enough to
read at once, and no name is defined in two of the modules checked together.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

__all__ = ["LOGREAD", "MAX_FUNCTION_LINES", "assert_part", "assert_unique", "defined", "module", "module_file"]

MAX_FUNCTION_LINES = 40
LOGREAD = Path(importlib.import_module("gpulens.diagnosis.logread").__path__[0])


def module_file(name: str) -> Path:
    """The file of a logread module named bare (``kills``) or from its package (``phase.decide``)."""
    if "." in name:
        return LOGREAD.joinpath(*name.split(".")).with_suffix(".py")
    found = sorted(LOGREAD.rglob(f"{name}.py"))
    assert len(found) == 1, (name, found)
    return found[0]


def module(name: str) -> ModuleType:
    rel = module_file(name).relative_to(LOGREAD).with_suffix("")
    return importlib.import_module(".".join(("gpulens.diagnosis.logread", *rel.parts)))


def defined(name: str) -> dict[str, int]:
    """Top-level names a module defines (functions, classes, assignments), with their functions' lengths (0 else)."""
    out: dict[str, int] = {}
    for s in ast.parse(Path(module(name).__file__ or "").read_text()).body:
        if isinstance(s, ast.FunctionDef | ast.ClassDef):
            out[s.name] = (s.end_lineno or s.lineno) - s.lineno + 1 if isinstance(s, ast.FunctionDef) else 0
        elif isinstance(s, ast.Assign | ast.AnnAssign):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            out.update((n.id, 0) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    out.pop("__all__", None)
    return out


def assert_part(name: str) -> None:
    mod = module(name)
    assert (mod.__doc__ or "").strip(), f"{name}: no docstring saying its job"
    assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__), f"{name}: __all__ names what it lacks"
    long = {f: n for f, n in defined(name).items() if n > MAX_FUNCTION_LINES}
    assert not long, (name, long)


def assert_unique(names: Iterable[str]) -> dict[str, str]:
    """Each name defined in only one of these modules; returns name -> the module defining it."""
    seen: dict[str, str] = {}
    for name in names:
        for n in defined(name):
            assert n not in seen, (n, seen.get(n), name)
            seen[n] = name
    return seen
