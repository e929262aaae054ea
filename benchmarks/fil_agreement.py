"""nvForest (RAPIDS FIL) predicts what gbflow predicts, from ``Booster.to_treelite()`` (F11).

    python benchmarks/fil_agreement.py     # needs a GPU, treelite and nvforest-cu13

Trains gbflow models on the CPU (20,000 rows: two numeric features with missing values, and one
categorical feature in the second half of the cases) for squared error, logistic and softprob,
100 rounds of depth 6; exports each with ``to_treelite()``; loads it into nvForest on the GPU in
double and in single precision; prints the largest absolute difference between nvForest's
predictions (predict_proba for the classifiers) and gbflow's. A check of agreement, not a timing.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import treelite

import gbflow

N_ROWS = 20_000


def data():
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.normal(size=N_ROWS).astype(np.float32),
                       "b": rng.normal(size=N_ROWS).astype(np.float32),
                       "c": pd.Categorical(rng.choice(list("pqrstuvw"), N_ROWS))})
    df.loc[rng.random(N_ROWS) < 0.1, "a"] = np.nan
    df.loc[rng.random(N_ROWS) < 0.05, "c"] = np.nan
    y = (df.c.isin(list("qsu")).astype(float) + (df.a > 0) + 0.3 * df.b).astype(float)
    codes = df.c.cat.codes
    X = np.column_stack([df.a, df.b, codes.where(codes >= 0, np.nan)]).astype(np.float32)
    labels = {"reg:squarederror": y, "binary:logistic": (y > 1).astype(float),
              "multi:softprob": np.digitize(y, [0.5, 1.5]).astype(float)}
    return df, X, labels


def main() -> None:
    import nvforest
    print(f"treelite {treelite.__version__}, nvforest {nvforest.__version__}; {N_ROWS} rows")
    df, X, labels = data()
    for categorical in (False, True):
        frame = df if categorical else df[["a", "b"]]
        rows = X if categorical else X[:, :2]
        for objective, label in labels.items():
            params = {"objective": objective, "max_depth": 6}
            if objective == "multi:softprob":
                params["num_class"] = 3
            booster = gbflow.train(frame, label=label, params=params, num_boost_round=100,
                                   verbose=False)
            model = booster.to_treelite()
            expected = booster.predict(frame).to_numpy().reshape(N_ROWS, -1)
            for precision in ("double", "single"):
                fil = nvforest.load_from_treelite_model(model, device="gpu", precision=precision)
                got = fil.predict(rows) if objective == "reg:squarederror" \
                    else fil.predict_proba(rows)
                got = np.asarray(got.get() if hasattr(got, "get") else got).reshape(N_ROWS, -1)
                if objective == "binary:logistic" and got.shape[1] == 2:
                    got = got[:, 1:]
                print(f"categorical={categorical!s:5s} {objective:18s} {precision:6s} "
                      f"max |diff| {np.abs(got - expected).max():.3e}")


if __name__ == "__main__":
    main()
