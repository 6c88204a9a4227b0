"""Static checks that must run in the *job's* interpreter: the import closure, compile, imports.

Run as ``<job python> -c <this file>`` with a JSON request on stdin; prints a JSON
answer on stdout. It never imports the job's code: files are only parsed and
compiled, and imports are resolved with ``importlib.util.find_spec`` on top-level
names (which does not execute anything) and, for the job's own files, with
``PathFinder`` on each dotted part (which does not run ``__init__`` either).
Only the standard library is used, so any Python 3.8+ can run it.

**The import closure** is the entry script (or ``-m`` module) and every module of
the job's own tree (a file under one of ``roots``) that it imports, transitively:
imports at module level, under ``if __name__ == "__main__":``, in loops, in
``try`` blocks, inside functions and methods (they run later, so they count),
relative imports, packages (each ``__init__.py`` on the way),
``importlib.import_module("literal")`` / ``__import__("literal")``, and files run by
``exec(open("literal.py").read())`` / ``runpy.run_path("literal.py")`` (nanoGPT's configurator). Imports under
``if TYPE_CHECKING:`` never run and are left out. A file of the closure that does
not compile fails the job; one outside the closure is only reported.

A missing *installed* module fails the job only where the import surely runs: at
module level (not in ``try`` or a conditional) of a file reached through such
imports from the entry point. Elsewhere (inside functions, ``try`` blocks) it is a
warning.

Request: {"files": [...], "script": path|null, "module": name|null,
          "workdir": dir, "roots": [dir, ...], "check_imports": bool}
Answer:  {"python": version, "executable": path, "syntax": [[file, line, col, msg, text]],
          "unreadable": [[file, reason]], "closure": [file, ...], "via": {file: [file, line]},
          "imports": [[name, line]], "missing": [[name, line, file]],
          "optional_missing": [[name, line, file]], "entry": path|null, "entry_missing": bool}
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

__all__ = ["analyze", "main"]

#: Import kinds: "top" surely runs when its file runs; "lazy" runs later or maybe.
_TOP, _LAZY = "top", "lazy"
_MAX_CLOSURE = 5000


def _compile_one(name: str, out: dict[str, Any], parse: bool = True) -> ast.Module | None:
    """Compile one file (parsed once); its tree when ``parse``; errors go to ``out``."""
    try:
        with open(name, "rb") as fh:
            source = fh.read()
        tree = ast.parse(source, name)
        compile(tree, name, "exec", dont_inherit=True)  # the compiler's own checks ('return' outside a function)
        return tree if parse else None
    except SyntaxError as exc:
        out["syntax"].append(
            [exc.filename or name, exc.lineno or 0, exc.offset or 0, exc.msg, (exc.text or "").rstrip()]
        )
    except (OSError, ValueError) as exc:
        out["unreadable"].append([name, str(exc)])
    return None


def _is_main_test(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == "__main__" for n in ast.walk(test))


def _is_type_checking(test: ast.expr) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "TYPE_CHECKING") or (isinstance(n, ast.Attribute) and n.attr == "TYPE_CHECKING")
        for n in ast.walk(test)
    )


def _literal_import(node: ast.Call) -> str | None:
    """``importlib.import_module("x.y")`` or ``__import__("x")`` with a literal name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
        return first.value
    return None


def _str_arg(node: ast.Call) -> str | None:
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def _executed_file(node: ast.Call) -> str | None:
    """``exec(open("configurator.py").read())`` or ``runpy.run_path("x.py")`` with a literal path."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "run_path":
        return _str_arg(node)
    if not (isinstance(func, ast.Name) and func.id == "exec" and node.args):
        return None
    inner = node.args[0]  # open("x.py").read()
    if (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Attribute)
        and inner.func.attr == "read"
        and isinstance(inner.func.value, ast.Call)
        and isinstance(inner.func.value.func, ast.Name)
        and inner.func.value.func.id == "open"
    ):
        return _str_arg(inner.func.value)
    return None


class _Imports(ast.NodeVisitor):
    """Every import of one file: (module, level, names, line, kind)."""

    def __init__(self) -> None:
        self.found: list[tuple[str, int, list[str], int, str]] = []
        self.executed: list[tuple[str, int]] = []  # files run by exec(open(...).read()) / runpy.run_path
        self.kind = _TOP

    def _with(self, kind: str, nodes: list[Any]) -> None:
        saved = self.kind
        if saved == _TOP:
            self.kind = kind
        for n in nodes:
            self.visit(n)
        self.kind = saved

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, 0, [], node.lineno, self.kind))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = [a.name for a in node.names if a.name != "*"]
        self.found.append((node.module or "", node.level, names, node.lineno, self.kind))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._with(_LAZY, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._with(_LAZY, [node.body])

    def visit_Try(self, node: ast.Try) -> None:
        self._with(_LAZY, node.body + node.orelse + node.finalbody)
        for handler in node.handlers:
            self._with(_LAZY, handler.body)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._with(_LAZY, node.orelse)  # the body never runs
            return
        self.visit(node.test)
        self._with(_TOP if _is_main_test(node.test) else _LAZY, node.body)
        self._with(_LAZY, node.orelse)

    def visit_Call(self, node: ast.Call) -> None:
        name = _literal_import(node)
        if name is not None:
            self.found.append((name, 0, [], node.lineno, _LAZY))
        script = _executed_file(node)
        if script is not None:
            self.executed.append((script, node.lineno))
        self.generic_visit(node)


@functools.lru_cache(maxsize=8192)
def _real(path: str) -> str:
    return os.path.realpath(path)


#: Installed code is never the job's own, even when its virtualenv sits inside the job's directory.
_INSTALLED = tuple(
    {_real(v) for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib") and v}
)
_INSTALLED_PARTS = ("site-packages", "dist-packages", "__pycache__")


def _inside(path: str | None, roots: list[str]) -> bool:
    """True for a file or directory of the job's own tree (under a root, not installed code)."""
    if not path:
        return False
    real = _real(path)
    if any(real == p or real.startswith(p + os.sep) for p in _INSTALLED):
        return False
    for r in roots:
        if real == r or real.startswith(r + os.sep):
            rel = real[len(r) :].split(os.sep)
            return not any(part in _INSTALLED_PARTS or part.startswith(".") for part in rel if part)
    return False


def _resolver(roots: list[str]) -> Callable[[str], bool]:
    """``_resolve`` memoised for one analysis (the same names recur across a repo's files)."""
    memo: dict[str, bool] = {}

    def resolve(name: str) -> bool:
        if name not in memo:
            memo[name] = _resolve(name, roots)
        return memo[name]

    return resolve


def _resolve(name: str, roots: list[str]) -> bool:
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
        if locations is None or not any(_inside(loc, roots) for loc in locations):
            return True
        child = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if child is None:
            return False
        spec = child
    return True


def _file_of(spec: importlib.machinery.ModuleSpec | None) -> str | None:
    if spec is None or not spec.has_location or not spec.origin:
        return None
    return spec.origin if spec.origin.endswith(".py") else None


def _own_files(name: str, path: list[str], roots: list[str]) -> list[str]:
    """The job's own files that ``import name`` runs: each package ``__init__`` and the module."""
    files: list[str] = []
    locations: list[str] | None = path
    for part in name.split("."):
        if locations is None:
            break
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, locations)
        except (ImportError, ValueError):
            break
        if spec is None:
            break
        origin = _file_of(spec)
        own_dirs = [loc for loc in (spec.submodule_search_locations or []) if _inside(loc, roots)]
        if origin is not None and _inside(origin, roots):
            files.append(origin)
        elif not own_dirs:
            break  # an installed package: not the job's tree
        locations = own_dirs or None
    return files


def _relative_files(file: str, level: int, module: str, names: list[str], roots: list[str]) -> list[str]:
    """The files ``from <dots>module import names`` runs, found on the file system."""
    base = os.path.dirname(os.path.abspath(file))
    for _ in range(level - 1):
        base = os.path.dirname(base)
    files = _own_files(module, [base], roots) if module else []
    package = base
    if module:
        last = os.path.join(base, *module.split("."))
        package = last if os.path.isdir(last) else ""
    if package:
        for n in names:
            files.extend(_own_files(n, [package], roots))
    return files


def _targets(imp: tuple[str, int, list[str], int, str], file: str, path: list[str], roots: list[str]) -> list[str]:
    module, level, names, _line, _kind = imp
    if level > 0:
        return _relative_files(file, level, module, names, roots)
    files = _own_files(module, path, roots)
    if files and names:  # `from pkg import sub`: sub may be a module of the package
        last = files[-1]
        if os.path.basename(last) == "__init__.py":
            for n in names:
                files.extend(_own_files(n, [os.path.dirname(last)], roots))
    return files


def _seeds(request: dict[str, Any], path: list[str], roots: list[str], out: dict[str, Any]) -> list[str]:
    script = request.get("script")
    module = request.get("module")
    seeds: list[str] = []
    if module:
        seeds = _own_files(module, path, roots)
        main_file = _module_file(module, path)
        if main_file is not None and main_file not in seeds and _inside(main_file, roots):
            seeds.append(main_file)  # an installed module (python -m pytest) is not the job's code
        out["entry"] = main_file
    elif script:
        out["entry"] = os.path.abspath(script)
        if os.path.isfile(script):
            seeds = [os.path.abspath(script)]
        else:
            out["entry_missing"] = True
    return seeds


def _walk(
    seeds: list[str],
    path: list[str],
    roots: list[str],
    out: dict[str, Any],
    resolve: Callable[[str], bool] | None,
    workdir: str,
) -> None:
    """Breadth-first over the job's own modules; records closure, via, missing imports."""
    _Walk(path, roots, out, resolve, workdir).run(seeds)


class _Walk:
    """One breadth-first walk of the import closure, filling ``out`` (see :func:`_walk`)."""

    def __init__(self, path: list[str], roots: list[str], out: dict[str, Any],
                 resolve: Callable[[str], bool] | None, workdir: str) -> None:
        self.path, self.roots, self.out, self.resolve, self.workdir = path, roots, out, resolve, workdir
        #: file -> whether it surely runs (reached through imports that surely run)
        self.required: dict[str, bool] = {}
        self.queue: list[tuple[str, bool]] = []
        self.trees: dict[str, ast.Module | None] = {}
        self.entry = out.get("entry")

    def run(self, seeds: list[str]) -> None:
        """Visit the seeds and everything they import or execute, each file once (twice when it
        is first reached lazily, then surely)."""
        self.queue = [(s, True) for s in seeds]
        while self.queue and len(self.required) < _MAX_CLOSURE:
            file, req = self.queue.pop(0)
            file = os.path.abspath(file)
            if file in self.required and (self.required[file] or not req):
                continue
            first_visit = file not in self.required
            self.required[file] = req
            if first_visit:
                self.out["closure"].append(file)
                self.trees[file] = _compile_one(file, self.out)
            tree = self.trees[file]
            if tree is None:
                continue
            visitor = _Imports()
            visitor.visit(tree)
            self._follow_imports(visitor, file, req, first_visit)
            self._follow_executed(visitor, file, req)

    def _enqueue(self, target: str, req: bool, file: str, line: int) -> None:
        """Queue ``target``, recording that ``file:line`` leads to it when it is not visited yet."""
        if os.path.abspath(target) not in self.required:
            self.out["via"].setdefault(os.path.abspath(target), [file, line])
        self.queue.append((target, req))

    def _follow_imports(self, visitor: _Imports, file: str, req: bool, first_visit: bool) -> None:
        """Queue the job's own modules ``file`` imports; record the entry's imports and missing modules."""
        for imp in visitor.found:
            name, level, _names, line, kind = imp
            surely = req and kind == _TOP
            if file == self.entry and first_visit:
                self.out["imports"].append([name, line])
            for target in _targets(imp, file, self.path, self.roots):
                self._enqueue(target, surely, file, line)
            if (self.resolve is None or level != 0 or not name or not (first_visit or surely)
                    or self.resolve(name)):
                continue
            (self.out["missing"] if surely else self.out["optional_missing"]).append([name, line, file])

    def _follow_executed(self, visitor: _Imports, file: str, req: bool) -> None:
        """Queue the job's own files that ``file`` runs (exec(open(...)), runpy.run_path)."""
        for script, line in visitor.executed:  # relative to the working directory, as open() is
            target = os.path.join(self.workdir, script)
            if os.path.isfile(target) and _inside(target, self.roots):
                self._enqueue(target, req, file, line)


def _module_file(module: str, path: list[str]) -> str | None:
    spec = None
    parts = module.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], path)
        for part in parts[1:]:
            if spec is None or spec.submodule_search_locations is None:
                return None
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.machinery.PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def analyze(request: dict[str, Any], search_path: list[str]) -> dict[str, Any]:
    """The answer for one request; ``search_path`` is the job's ``sys.path``."""
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "syntax": [],
        "unreadable": [],
        "closure": [],
        "via": {},
        "imports": [],
        "missing": [],
        "optional_missing": [],
        "entry": None,
        "entry_missing": False,
    }
    workdir = request.get("workdir") or os.getcwd()
    roots = [os.path.realpath(r) for r in (request.get("roots") or [workdir])]
    script = request.get("script")
    first = os.path.dirname(os.path.abspath(script)) if script else workdir
    path = [first] + [p for p in search_path[1:] if p]
    module = request.get("module")
    resolve = _resolver(roots) if request.get("check_imports", True) else None
    if module and resolve is not None and not resolve(module):
        out["missing"].append([module, 0, None])
        out["entry_missing"] = True
    seeds = _seeds(request, path, roots, out)
    _walk(seeds, path, roots, out, resolve, workdir)
    inside = set(out["closure"])
    for name in request.get("files") or []:
        if os.path.abspath(name) not in inside:
            _compile_one(name, out, parse=False)
    return out


def main() -> int:
    request = json.load(sys.stdin)
    script = request.get("script")
    sys.path[0] = os.path.dirname(os.path.abspath(script)) if script else (request.get("workdir") or os.getcwd())
    json.dump(analyze(request, list(sys.path)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
