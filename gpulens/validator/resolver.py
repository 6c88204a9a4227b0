"""Static checks that must run in the *job's* interpreter: compile and resolve imports.

Run as ``<job python> resolver.py`` with a JSON request on stdin; prints a JSON
answer on stdout. It never imports the job's code: files are only compiled, and
imports are resolved with ``importlib.util.find_spec`` on top-level names (which
does not execute anything) and, for packages inside the job's directory, with
``PathFinder`` on each dotted part (which does not run ``__init__`` either).
Only the standard library is used, so any Python 3.8+ can run it.

Request: {"files": [...], "script": path|null, "module": name|null,
          "workdir": dir, "root": dir}
Answer:  {"python": version, "executable": path, "syntax": [[file, line, col, msg, text]],
          "unreadable": [[file, reason]], "imports": [[name, line]],
          "missing": [[name, line, file]], "entry": path|null, "entry_missing": bool}
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import sys
from typing import Any

__all__ = ["main"]


def _compile(files: list[str], out: dict[str, Any]) -> None:
    for name in files:
        try:
            with open(name, "rb") as fh:
                source = fh.read()
            compile(source, name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            out["syntax"].append(
                [exc.filename or name, exc.lineno or 0, exc.offset or 0, exc.msg, (exc.text or "").rstrip()]
            )
        except (OSError, ValueError) as exc:
            out["unreadable"].append([name, str(exc)])


def _toplevel_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """Imports executed when the module runs: its body and ``if __name__ == "__main__"``.

    Imports inside ``try`` blocks (optional dependencies), functions and other
    conditionals (``if TYPE_CHECKING``) are left out: they may legitimately fail.
    """
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module, node.lineno))
            elif isinstance(node, ast.If) and "__main__" in ast.dump(node.test):
                visit(node.body)

    visit(tree.body)
    return found


def _inside(path: str | None, root: str) -> bool:
    if not path:
        return False
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def _resolve(name: str, root: str) -> bool:
    """True when ``name`` (dotted) can be found without running any code."""
    top = name.split(".")[0]
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        return False
    if spec is None:
        return False
    # Descend only through the job's own packages (plain directories we can trust).
    for part in name.split(".")[1:]:
        locations = spec.submodule_search_locations
        if locations is None or not any(_inside(loc, root) for loc in locations):
            return True
        child = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if child is None:
            return False
        spec = child
    return True


def _module_file(module: str) -> str | None:
    spec = None
    parts = module.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], sys.path)
        for part in parts[1:]:
            if spec is None or spec.submodule_search_locations is None:
                return None
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.machinery.PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def main() -> int:
    request = json.load(sys.stdin)
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "syntax": [],
        "unreadable": [],
        "imports": [],
        "missing": [],
        "entry": None,
        "entry_missing": False,
    }
    workdir = request.get("workdir") or os.getcwd()
    root = request.get("root") or workdir
    _compile(list(request.get("files") or []), out)
    entry: str | None = request.get("script")
    module = request.get("module")
    if entry:
        sys.path[0] = os.path.dirname(os.path.abspath(entry))
    else:
        sys.path[0] = workdir
    if module:
        if not _resolve(module, root):
            out["missing"].append([module, 0, None])
            out["entry_missing"] = True
        entry = _module_file(module)
    if entry and os.path.isfile(entry):
        out["entry"] = os.path.abspath(entry)
        try:
            with open(entry, "rb") as fh:
                tree = ast.parse(fh.read(), entry)
        except (SyntaxError, OSError, ValueError):
            tree = None
        if tree is not None:
            for name, line in _toplevel_imports(tree):
                out["imports"].append([name, line])
                if not _resolve(name, root):
                    out["missing"].append([name, line, entry])
    elif entry:
        out["entry_missing"] = True
        out["entry"] = os.path.abspath(entry)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
