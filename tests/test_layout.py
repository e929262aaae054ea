"""The package layout rules: only backend/ imports cupy, only dask/ imports dask or distributed, no
import cycle, small modules, the linter's rules, and ``import gbflow`` without CuPy, cuDF or
scikit-learn."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gbflow"
RULES = {"cupy": "backend", "cupyx": "backend", "cudf": "backend", "dask": "dask",
         "distributed": "dask", "dask_cudf": "dask", "dask_cuda": "dask",
         "sklearn": "sklearn"}  # sklearn.py (the estimators) and sklearn_data.py (their data)
# Modules of kernels (one function per kernel and its wrapper) may be long; any other module
# over this many lines holds more than one job.
MAX_LINES = 500
KERNEL_MODULES = {"backend/numpy_kernels.py", "backend/cpu_kernels.py",
                  "backend/cuda_kernels.py"}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_device_and_dask_imports_stay_in_their_packages():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        for module in _imports(path):
            home = RULES.get(module)
            if home and not relative.startswith(home):
                offenders.append(f"{relative} imports {module}")
    assert not offenders


def test_every_module_opens_with_a_docstring():
    missing = [p.name for p in PACKAGE.rglob("*.py") if ast.get_docstring(ast.parse(p.read_text()))
               is None]
    assert not missing


def _module_name(path: pathlib.Path, package: pathlib.Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, from every import statement of the module's
    source, at module level and inside functions alike; ``from m import name`` counts as an
    import of the submodule ``m.name`` where one exists, else of ``m``."""
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for a in node.names:
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one module
    (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_gbflow(tmp_path):
    graph = import_graph()
    assert "gbflow.boosting" in graph["gbflow.api"]  # the graph sees relative imports
    assert "gbflow.dask.predict" in graph["gbflow.booster"]  # ... and function-level ones
    assert cycles(graph) == []
    # a function-level import that closes a loop is found
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from .a import g\n")
    assert cycles(import_graph(tmp_path / "pkg")) == [["pkg.a", "pkg.b"]]


def test_modules_hold_one_job_each():
    long = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines())
            for p in PACKAGE.rglob("*.py")}
    too_long = {p: n for p, n in long.items() if n > MAX_LINES and p not in KERNEL_MODULES}
    assert not too_long


def test_the_code_passes_the_linter():
    pytest.importorskip("ruff")  # part of the [test] extra; its settings are in pyproject.toml
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "gbflow", "tests",
                          "benchmarks", "examples"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_without_cupy_cudf_or_sklearn():
    code = ("import sys\n"
            "for name in ('cupy', 'cudf', 'sklearn', 'dask_cudf'):\n"
            "    sys.modules[name] = None\n"
            "import gbflow, numpy as np\n"
            "b = gbflow.train(np.random.rand(50, 2), np.random.rand(50), num_boost_round=2,"
            " verbose=False)\n"
            "assert 'dask' not in sys.modules\n"
            "print(b.num_boosted_rounds())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
