"""The package layout rules: only backend/ imports cupy, only dask/ imports dask or distributed,
and ``import gbflow`` works without CuPy, cuDF or scikit-learn."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "gbflow"
RULES = {"cupy": "backend", "cupyx": "backend", "cudf": "backend", "dask": "dask",
         "distributed": "dask", "dask_cudf": "dask", "dask_cuda": "dask", "sklearn": "sklearn.py"}


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
