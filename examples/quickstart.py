"""gbflow quickstart: predict loan defaults from a pandas table.

    python examples/quickstart.py                 # 200,000 loan applications
    python examples/quickstart.py --rows 20000    # quicker

What it shows, in order:

1. a realistic table: numeric, boolean and partly missing (NaN) columns, a 0/1 target `default`;
2. a train / valid / test split by rows;
3. ``gbflow.train`` with a validation set, two metrics and early stopping;
4. test-set AUC and log loss, and ``booster.transform`` adding a prediction column;
5. the most important features;
6. saving the model to ./out, loading it back, and checking the predictions are identical;
7. where the training time went (``booster.timings``).

The first run also compiles gbflow's numba kernels (a few seconds); they are cached on disk, so
later runs start at once.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

import gbflow
from gbflow.metrics import auc, logloss


def make_loans(n_rows: int, seed: int = 42) -> pd.DataFrame:
    """A synthetic table of loan applications with a plausible, nonlinear default risk."""
    rng = np.random.default_rng(seed)
    age = rng.integers(21, 76, n_rows)
    income = np.round(rng.lognormal(mean=10.8, sigma=0.55, size=n_rows), -2)  # yearly, ~50k median
    loan_amount = np.round(income * rng.uniform(0.1, 1.2, n_rows), -2)
    debt_ratio = np.clip(rng.beta(2.0, 5.0, n_rows) + 0.15 * loan_amount / income, 0, 2)
    credit_lines = rng.poisson(4 + (age - 21) / 10)
    late_payments = rng.poisson(0.3 + 0.8 * debt_ratio)
    has_mortgage = rng.random(n_rows) < np.clip(0.1 + (age - 21) / 60, 0, 0.8)
    years_employed = np.minimum(rng.exponential(6.0, n_rows), age - 18).round(1)
    credit_score = np.clip(rng.normal(690 - 35 * late_payments + 0.8 * (age - 40), 55), 300, 850)

    # The "true" risk: a nonlinear logit the model has to discover.
    logit = (-2.6
             + 2.2 * np.maximum(debt_ratio - 0.45, 0)              # risk rises past a debt ratio
             - 0.9 * np.log(income / 50_000)                       # richer: safer
             + 0.35 * np.minimum(late_payments, 4)                 # late payments, saturating
             - (credit_score - 690) / 70                           # credit score
             + 0.6 * ((age < 27) & (credit_lines < 3))             # young with thin credit files
             - 0.4 * has_mortgage
             - 0.25 * np.minimum(years_employed, 10) / 10
             + 0.5 * (loan_amount / income > 0.9))                 # loans large for the income
    default = rng.random(n_rows) < 1 / (1 + np.exp(-logit))

    df = pd.DataFrame({
        "age": age,
        "income": income,
        "loan_amount": loan_amount,
        "debt_ratio": debt_ratio,
        "credit_lines": credit_lines,
        "late_payments": late_payments,
        "has_mortgage": has_mortgage,          # a boolean column: fine as a feature
        "years_employed": years_employed,
        "credit_score": credit_score,
        "default": default.astype(np.int8),   # the target, 0/1
    })
    # Real tables have holes. NaN means "missing"; gbflow learns where missing values should go.
    df.loc[rng.random(n_rows) < 0.08, "years_employed"] = np.nan   # not reported
    df.loc[rng.random(n_rows) < 0.05, "credit_score"] = np.nan     # no credit history
    df.loc[rng.random(n_rows) < 0.02, "income"] = np.nan           # not verified
    return df


def main() -> None:
    parser = argparse.ArgumentParser(description="gbflow quickstart: loan default prediction")
    parser.add_argument("--rows", type=int, default=200_000, help="loan applications to generate")
    parser.add_argument("--out", default="out", help="folder for the saved model (created)")
    args = parser.parse_args()
    started = time.perf_counter()

    # 1. Data -----------------------------------------------------------------------------------
    loans = make_loans(args.rows)
    print(f"{len(loans):,} loan applications, {loans['default'].mean():.1%} defaulted")
    print(loans.head(), "\n")

    # 2. Split by rows: 70% train, 15% validation (for early stopping), 15% test ---------------
    n_train, n_valid = int(0.70 * len(loans)), int(0.15 * len(loans))
    train_df = loans.iloc[:n_train]
    valid_df = loans.iloc[n_train:n_train + n_valid]
    test_df = loans.iloc[n_train + n_valid:]

    # 3. Train: `label` names the target column; every other column is a feature ---------------
    #    Progress lines go to stderr; training stops when the last metric (valid AUC) has not
    #    improved for 20 rounds, and the model keeps the trees up to its best round.
    booster = gbflow.train(
        train_df,
        label="default",
        params={"objective": "binary:logistic", "max_depth": 6, "learning_rate": 0.1,
                "eval_metric": ["logloss", "auc"]},
        num_boost_round=300,
        evals=[(valid_df, "valid")],
        early_stopping_rounds=20,
        verbose=25,
    )
    print(f"\ntrained {booster}; best round {booster.best_iteration + 1} "
          f"(valid auc {booster.best_score:.4f})")

    # 4. Evaluate on the test set ---------------------------------------------------------------
    p_test = booster.predict(test_df)  # a Series of probabilities, aligned with test_df's index
    y_test = test_df["default"].to_numpy(dtype=np.float64)
    print(f"test auc {auc(y_test, p_test.to_numpy()):.4f}  "
          f"test logloss {logloss(y_test, p_test.to_numpy()):.4f}")

    #    transform() returns the table with the prediction appended; other columns ride along.
    scored = booster.transform(test_df, name="p_default")
    print(scored[["income", "debt_ratio", "credit_score", "default", "p_default"]].head(), "\n")

    # 5. Feature importances (mean gain of each feature's splits) -------------------------------
    importances = booster.feature_importances("gain")
    print("feature importances (gain):")
    for name, gain in sorted(importances.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<15} {gain:10.1f}")

    # 6. Save, load, and check the reloaded model predicts exactly the same --------------------
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "loan_default_model.json")
    booster.save_model(path)
    reloaded = gbflow.load_model(path)
    assert np.array_equal(reloaded.predict(test_df).to_numpy(), p_test.to_numpy()), \
        "the reloaded model predicts differently"
    print(f"\nsaved {path} ({os.path.getsize(path) / 1e6:.1f} MB); the reloaded model's "
          f"predictions are identical")

    # 7. Where the training time went -----------------------------------------------------------
    print("training time by stage (s): " +
          ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in booster.timings.items()))
    print(f"whole script: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
