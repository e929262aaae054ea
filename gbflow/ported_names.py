"""XGBoost and LightGBM names that are not gbflow parameters: where each belongs instead, and
the values gbflow accepts for settings it cannot change."""
from __future__ import annotations

# Names users bring from XGBoost/LightGBM that are not parameters here: say where they belong.
ELSEWHERE = {
    **dict.fromkeys(("n_estimators", "num_boost_round", "num_round", "num_rounds", "nrounds",
                     "num_iterations", "num_iteration", "n_iter"),
                    "the number of rounds is train()'s num_boost_round argument "
                    "(n_estimators in the scikit-learn estimators)"),
    "early_stopping_rounds": "it is an argument of train(), not a parameter",
    **dict.fromkeys(("verbose", "silent"),
                    "progress output is train()'s verbose argument (warnings: verbosity=0 "
                    "silences them)"),
    "num_threads": "gbflow's thread count is XGBoost's nthread (alias n_jobs)",
    "num_leaves": "LightGBM's num_leaves is max_leaves here, with grow_policy='lossguide' for "
                  "LightGBM's leaf-wise growth",
    "verbose_eval": "it is an argument of train() (XGBoost's name for its verbose argument)",
    "gpu_id": "XGBoost's gpu_id (deprecated there since 2.0) is device='cuda' here: training "
              "runs on the current CUDA device (cupy.cuda.Device(i).use() or "
              "CUDA_VISIBLE_DEVICES picks another)",
    "predictor": "XGBoost 2.0 removed it: gbflow predicts on the device the data is on",
}


# XGBoost parameters whose only values gbflow honours are how it always trains: accepted with
# those values (so that ported parameter dicts run), refused with any other, saying why.
FIXED = {
    "tree_method": (("hist", "auto"), "gbflow grows histogram trees"),
    "booster": (("gbtree",), "gbflow grows histogram trees"),
    "lambdarank_pair_method": (("topk",), "gbflow's ranking pairs each of a query's first "
                               "lambdarank_num_pair_per_sample documents with every one below "
                               "it; sampled pairs are not there yet"),
    "lambdarank_unbiased": ((False,), "position debiasing of click data is not there yet"),
    "num_parallel_tree": ((1,), "gbflow grows one tree per output a round (boosted random "
                                "forests are not there)"),
    "validate_parameters": ((True, False), "gbflow always checks its parameters"),
}
