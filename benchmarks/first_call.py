"""The first call in a fresh environment: gbflow vs XGBoost, each in new processes, same data.

    python benchmarks/first_call.py                 # the CPU (numba's kernels)
    python benchmarks/first_call.py --device cuda   # the GPU (CuPy's kernels, and numba's)
    python benchmarks/first_call.py --device cuda --after-compile   # `gbflow compile` first

A fresh environment is imitated by empty kernel caches (``NUMBA_CACHE_DIR`` and
``CUPY_CACHE_DIR`` pointing at new temporary folders). Each library runs in three new processes
in turn: "fresh" (caches empty), "next process" (the caches the fresh one filled) and, inside
that second process, a "warm" call. Each process imports the library, trains on the
HIGGS-like 10,000 x 28 binary problem (depth 6, 100 rounds), predicts ten rows, and reports the
import's seconds and the training's and prediction's; gbflow also its stage timers, of which
"compile" is the kernels' compilation (left out of the other stages), and whether it announced
the compile. F7's target: the fresh
call at most 3 s more than a warm one, with the compile announced. ``--after-compile`` runs
``gbflow compile --device ...`` in the fresh environment first (an install script's step) and
prints its seconds: the "fresh" call then shows what it leaves to the first training.
``--by-kernel`` prints the fresh call's compile seconds per numba function, each without the
compiles nested in it (numba compiles a callee while compiling its caller): where a fresh
machine's first call goes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, logging, sys, time
started = time.perf_counter()
library, device, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
by_kernel = {}
if sys.argv[5] == "1":
    from numba.core import event
    open_compiles = []  # [name, start, seconds of nested compiles]
    class Compiles(event.Listener):
        def on_start(self, ev):
            f = ev.data["dispatcher"].py_func
            open_compiles.append([f"{f.__module__}.{f.__qualname__}", time.perf_counter(), 0.0])
        def on_end(self, ev):
            name, start, nested = open_compiles.pop()
            seconds = time.perf_counter() - start
            by_kernel[name] = by_kernel.get(name, 0.0) + seconds - nested
            if open_compiles:
                open_compiles[-1][2] += seconds
    event.register("numba:compile", Compiles())
from gpu_binary import make_data
import numpy as np
X, y = make_data(np, 10_000, 28, seed=0)[:2]
X = X.astype(np.float32)  # as make_data gives it on the GPU
announced = []
class Seen(logging.Handler):
    def emit(self, record):
        announced.append(record.getMessage())
logging.getLogger("gbflow").addHandler(Seen(logging.WARNING))
t = time.perf_counter()
if library == "gbflow":
    import gbflow
else:
    import xgboost as xgb
imported = time.perf_counter() - t
out = {"import": imported, "calls": []}
params = {"objective": "binary:logistic", "max_depth": 6, "learning_rate": 0.3,
          "device": device}
for _ in range(calls):
    t = time.perf_counter()
    if library == "gbflow":
        booster = gbflow.train(X, y, params, 100, verbose=False)
        booster.predict(X[:10])  # the first call's prediction kernels, as XGBoost's below
        timings = {k: round(v, 3) for k, v in booster.timings.items()}
    else:
        booster = xgb.train({**params, "tree_method": "hist"}, xgb.DMatrix(X, y), 100)
        booster.predict(xgb.DMatrix(X[:10]))
        timings = {}
    out["calls"].append({"seconds": time.perf_counter() - t, "timings": timings})
out["announced"] = [m for m in announced if "compiling" in m]
out["by_kernel"] = by_kernel
print(json.dumps(out))
"""


def run(library: str, device: str, calls: int, env: dict, by_kernel: bool = False) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", CHILD, library, device, str(calls), here,
                           "1" if by_kernel else "0"],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{library} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--no-xgboost", action="store_true")
    parser.add_argument("--after-compile", action="store_true",
                        help="run `gbflow compile` in the fresh environment first")
    parser.add_argument("--by-kernel", action="store_true",
                        help="the fresh call's compile seconds per numba function")
    args = parser.parse_args()
    if args.device == "cuda":
        import cupy
        print(f"device: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    else:
        print(f"device: CPU, {os.cpu_count()} cores")
    print("data: 10,000 x 28 binary, depth 6, 100 rounds, learning rate 0.3")
    libraries = ["gbflow"] + ([] if args.no_xgboost else ["xgboost"])
    for library in libraries:
        with tempfile.TemporaryDirectory() as caches:
            env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(caches, "numba"),
                   "CUPY_CACHE_DIR": os.path.join(caches, "cupy")}
            if library == "gbflow" and args.after_compile:
                t = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "gbflow", "compile", "--device",
                                       args.device], capture_output=True, text=True, env=env,
                                      timeout=900)
                if done.returncode != 0:
                    raise SystemExit(f"gbflow compile failed:\n{done.stderr}")
                print(f"gbflow compile --device {args.device}: {time.perf_counter() - t:.1f} s")
            fresh = run(library, args.device, 1, env, args.by_kernel and library == "gbflow")
            second = run(library, args.device, 2, env)
        first, nxt, warm = fresh["calls"][0], second["calls"][0], second["calls"][1]
        print(f"{library:8s} import {fresh['import']:.2f} s; fresh call {first['seconds']:.2f} s, "
              f"next process {nxt['seconds']:.2f} s, warm {warm['seconds']:.2f} s; "
              f"fresh - warm {first['seconds'] - warm['seconds']:+.2f} s")
        if library == "gbflow":
            print(f"         fresh call's stages {first['timings']}")
            print(f"         warm call's stages {warm['timings']}")
            print(f"         announced: {fresh['announced'] or 'nothing'}; next process: "
                  f"{second['announced'] or 'nothing'}")
            compiles = sorted(fresh["by_kernel"].items(), key=lambda kv: -kv[1])
            if compiles:
                total = sum(fresh["by_kernel"].values())
                print(f"         compile seconds by numba function (of {total:.1f}):")
                for name, seconds in compiles[:12]:
                    print(f"           {seconds:6.2f}  {name}")


if __name__ == "__main__":
    main()
