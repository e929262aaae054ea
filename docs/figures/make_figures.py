"""Draw the figures of docs/usage.md's "Plots" (matplotlib): python docs/figures/make_figures.py"""
from __future__ import annotations

import pathlib

import matplotlib
import numpy as np
import pandas as pd

import gbflow

matplotlib.use("Agg")
HERE = pathlib.Path(__file__).parent


def main() -> None:
    rng = np.random.default_rng(0)
    n = 6000
    df = pd.DataFrame(rng.normal(size=(n, 6)).astype(np.float32),
                      columns=["age", "income", "tenure", "visits", "score", "noise"])
    logit = df.age - 0.5 * df.income ** 2 + np.sin(2 * df.tenure) + 0.3 * df.visits
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    booster = gbflow.train(df.iloc[:4500], label="y",
                           params={"objective": "binary:logistic", "max_depth": 3,
                                   "eval_metric": "logloss"},
                           num_boost_round=300, evals=[(df.iloc[:4500], "train"),
                                                       (df.iloc[4500:], "valid")],
                           early_stopping_rounds=20, verbose=False)
    for name, draw, size in [("importance", gbflow.plot_importance, (6, 4)),
                             ("metric", gbflow.plot_metric, (6, 4)),
                             ("tree", gbflow.plot_tree, (12, 5))]:
        ax = draw(booster, figsize=size)
        ax.figure.tight_layout()
        ax.figure.savefig(HERE / f"{name}.png", dpi=80)
        print(f"wrote {HERE / (name + '.png')}")


if __name__ == "__main__":
    main()
