"""Lint (ruff) and type-check (mypy) the package, pyflakes' rules over tests/ and benchmarks/ (a name used
but never imported fails there only at run time), and check its layers (import-linter's contracts, plus no import
cycle between modules); exit 1 on any finding. Config: pyproject.toml.

    .venv/bin/python tools/lint.py            # all three
    .venv/bin/python tools/lint.py ruff       # one of them
    .venv/bin/python tools/lint.py mypy
    .venv/bin/python tools/lint.py imports
    .venv/bin/python tools/lint.py words      # status words as strings only in protocol/ and enums
    .venv/bin/python tools/lint.py seams      # AST checks of the seams (tools/seams.py)

mypy checks the import package ``nbworkers`` as it is installed: the four code folders are mapped into it by
setuptools' package-dir (extension/ -> nbworkers, magics/ -> nbworkers.magics, ...), which mypy cannot follow,
so the same tree is laid out with symlinks under build/lint/ and the paths in mypy's report are mapped back to
the repository's. The import graph (import-linter, grimp) is built from the same tree: every import counts, also
one inside a function or under ``TYPE_CHECKING``. tests/integration/test_lint.py runs this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec")
RUFF_PATHS = (*FOLDERS, "tools")
PYFLAKES_PATHS = ("tests", "benchmarks")  # pyflakes rules only (undefined and unused names): not the package's style
TREE = ROOT / "build" / "lint"
SUBPACKAGES = {name: name for name in FOLDERS if name != "extension"}  # nbworkers.<name> -> folder


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # the venv's own, when run with its python
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def package_tree() -> Path:
    """build/lint/nbworkers: extension/'s files, with magics/, distlib/, kernelspec/ linked in."""
    package = TREE / "nbworkers"
    if package.is_symlink() or package.is_file():
        package.unlink()
    package.mkdir(parents=True, exist_ok=True)
    wanted = {path.name: path for path in (ROOT / "extension").iterdir() if path.name != "__pycache__"}
    wanted.update({name: ROOT / folder for name, folder in SUBPACKAGES.items()})
    for entry in package.iterdir():
        if entry.name not in wanted or not entry.is_symlink() or entry.resolve() != wanted[entry.name].resolve():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for name, target in wanted.items():
        link = package / name
        if not link.is_symlink():
            link.symlink_to(target)
    return TREE


def _to_repo_path(line: str) -> str:
    if not line.startswith("nbworkers/"):
        return line
    rest = line[len("nbworkers/"):]
    head = rest.split("/", 1)[0]
    return rest if head in SUBPACKAGES else f"extension/{rest}"


def run_ruff() -> tuple[int, str]:
    result = subprocess.run([_tool("ruff"), "check", "--no-fix", *RUFF_PATHS], cwd=ROOT, capture_output=True,
                            text=True)
    flakes = subprocess.run([_tool("ruff"), "check", "--no-fix", "--select", "F", *PYFLAKES_PATHS], cwd=ROOT,
                            capture_output=True, text=True)
    report = "\n".join(r.stdout + r.stderr for r in (result, flakes)).strip()
    return result.returncode or flakes.returncode, report


def mypy_cache_dir() -> Path:
    """mypy's incremental cache, kept across checkouts of this user (NBWORKERS_MYPY_CACHE names another folder).

    Cold, mypy analyses ~3,000 modules (Ray's 818, JAX's 393, ...: ~60 s of CPU in `make test`, whose CI starts from
    a fresh clone each time); warm, ~1 s. The cache cannot make a check pass that would fail: an entry is used only
    while its file's size and content hash are the same (another path or modification time makes mypy hash the
    file again), and mypy keeps one cache per version of itself and of Python."""
    chosen = os.environ.get("NBWORKERS_MYPY_CACHE")
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nbworkers" / "mypy"


def run_mypy() -> tuple[int, str]:
    tree = package_tree()
    env = {**os.environ, "MYPYPATH": str(tree)}
    command = [_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(mypy_cache_dir()), "-p", "nbworkers"]
    result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    report = "\n".join(_to_repo_path(line) for line in (result.stdout + result.stderr).splitlines())
    return result.returncode, report.strip()


def _in_tree(*args: str) -> subprocess.CompletedProcess:
    """Run in build/lint with the laid-out package first on the path (import-linter and grimp find it there)."""
    tree = package_tree()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(list(args), cwd=tree, env=env, capture_output=True, text=True)


def import_cycles(package: str = "nbworkers") -> list[list[str]]:
    """The groups of modules that import each other, directly or around a ring (function-level imports included):
    strongly connected components of grimp's graph. Run where ``nbworkers`` is the laid-out tree."""
    import grimp

    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in modules:  # Tarjan's algorithm, iterative
        if root in order:
            continue
        work = [(root, iter(edges[root]))]
        order[root] = low[root] = len(order)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in order:
                    order[child] = low[child] = len(order)
                    stack.append(child)
                    work.append((child, iter(edges[child])))
                elif child in stack:
                    low[node] = min(low[node], order[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def run_imports() -> tuple[int, str]:
    # import-linter's command through this interpreter (a copied venv's script shebangs point elsewhere)
    cli = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    contracts = _in_tree(sys.executable, "-c", cli, str(ROOT / "pyproject.toml"), "--no-cache")
    cycles = _in_tree(sys.executable, str(Path(__file__).resolve()), "_cycles")
    report = "\n".join(r.stdout.strip() + r.stderr.strip() for r in (contracts, cycles))
    return contracts.returncode or cycles.returncode, report.strip()


def _print_cycles() -> int:
    cycles = import_cycles()
    for group in cycles:
        print("import cycle between: " + ", ".join(group))
    print(f"module import cycles: {len(cycles)}")
    return 1 if cycles else 0


def run_seams() -> tuple[int, str]:
    """The AST checks of tools/seams.py (nothing outside the loop assigns a loop's or a core's fields)."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "seams.py")], cwd=ROOT, capture_output=True,
                            text=True)
    return result.returncode, (result.stdout + result.stderr).strip()


def run_status_words() -> tuple[int, str]:
    """An AST walk of the package (tools/status_words.py): status words as strings only in protocol/ and enums."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "status_words.py")], cwd=ROOT, capture_output=True,
                            text=True)
    return result.returncode, (result.stdout + result.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    chosen = (argv if argv is not None else sys.argv[1:]) or ["ruff", "mypy", "imports", "seams", "words"]
    if chosen == ["_cycles"]:  # run_imports() runs this in build/lint
        return _print_cycles()
    failed = False
    for name in chosen:
        code, report = {"ruff": run_ruff, "mypy": run_mypy, "imports": run_imports, "seams": run_seams,
                        "words": run_status_words}[name]()
        print(f"== {name}: {'ok' if code == 0 else 'findings'}\n{report}\n")
        failed |= code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
