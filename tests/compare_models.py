"""Compare two model-file records (``GBFLOW_RECORD_MODELS``, see conftest.py): which tests made
models that differ. Not a test module (pytest collects test_*.py only).

    python tests/compare_models.py before.json after.json
"""
from __future__ import annotations

import json
import sys


def main(before_path: str, after_path: str) -> int:
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    changed = [t for t in before if t in after and before[t] != after[t]]
    only_before = [t for t in before if t not in after]
    only_after = [t for t in after if t not in before]
    same = sum(1 for t in before if t in after and before[t] == after[t])
    n_models = sum(len(v) for t, v in before.items() if t in after and before[t] == after[t])
    print(f"{same} tests made the same models ({n_models} model files)")
    for title, tests in (("changed", changed), ("only in the first record", only_before),
                         ("only in the second record", only_after)):
        if tests:
            print(f"{len(tests)} {title}:")
            for t in tests:
                print(f"  {t}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
