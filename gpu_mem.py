# scratch: where the sparse benchmark's GPU memory goes (not committed)
import sys, time
sys.path.insert(0, "benchmarks")
import cupy as cp, cupyx.scipy.sparse as cusp, numpy as np
import sparse as S
from gbflow import routing, quantize, training, grower
pool = cp.get_default_memory_pool()
def mark(label):
    cp.cuda.Device().synchronize()
    print(f"{label:40s} used {pool.used_bytes()/2**20:8.0f} MiB  pool {pool.total_bytes()/2**20:8.0f} MiB", flush=True)
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        r = f(*a, **k); mark(f"after {mod.__name__}.{name}"); return r
    setattr(mod, name, g)
for mod, name in [(quantize, "compute_cuts"), (routing, "bin_part"), (routing, "bin_counts"), (routing, "build_stores")]:
    wrap(mod, name)
X, y = S.make_data(1_000_000, 20_000, 10, 10, 0)
Xg, yg = cusp.csr_matrix(X), cp.asarray(y)
import gbflow
gbflow.train(Xg[:2000], yg[:2000], params={"max_depth": 8, "device": "cuda"}, num_boost_round=2, verbose=False)
pool.free_all_blocks(); mark("start (data on GPU)")
b = gbflow.train(Xg, yg, params={"objective": "binary:logistic", "max_depth": 8, "device": "cuda"}, num_boost_round=20, verbose=False)
mark("after train")
