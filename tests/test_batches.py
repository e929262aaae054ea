"""Training data in batches (issue F8 item 2): lists and iterators of frames or arrays, Parquet
and CSV paths, and raw values kept on the host when they would not fit the device.

Batches change memory, never the model: every test compares model files (and evaluation
results) by equality with training on the whole table.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gbflow
from gbflow import batches, binning, prepare
from gbflow.backend import get_backend
from gbflow.params import make_params


def _frame(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.normal(size=(n, 5)).astype(np.float32), columns=list("abdef"))
    df.loc[rng.random(n) < 0.05, "b"] = np.nan
    df["colour"] = pd.Categorical(rng.choice(["red", "green", "blue", "grey"], n))
    df["w"] = rng.uniform(0.5, 2.0, n)
    signal = df.a + np.sin(2 * df.b.fillna(0)) + (df.colour == "blue") * 1.5
    df["y"] = (signal + rng.normal(size=n) * 0.5 > 0).astype(np.float64)
    return df


def _pieces(df, size):
    """Row slices of ``df`` whose category columns list their categories in another order
    each (the first with an unused one more): the batches' codes differ."""
    out = []
    for k, i in enumerate(range(0, len(df), size)):
        piece = df.iloc[i:i + size].copy()
        order = list(piece.colour.cat.categories)
        piece["colour"] = piece.colour.cat.reorder_categories(order[k % 4:] + order[:k % 4])
        if k == 0:
            piece["colour"] = piece.colour.cat.add_categories(["purple"])
        out.append(piece)
    return out


PARAMS = {"max_depth": 4, "eval_metric": ["logloss", "auc"], "objective": "binary:logistic"}


def test_frames_in_a_list_or_iterator_train_the_whole_frames_model(device):
    df = _frame()
    params = dict(PARAMS, device=device)
    whole = gbflow.train(df, "y", params, 6, weight="w", verbose=False,
                         evals=[(df, "held")])
    pieces = _pieces(df, 700)
    assert len({tuple(p.colour.cat.categories) for p in pieces}) > 1
    listed = gbflow.train(pieces, "y", params, 6, weight="w", verbose=False,
                          evals=[(pieces, "held")])
    generated = gbflow.train((p for p in pieces), "y", params, 6, weight="w", verbose=False,
                             evals=[(iter(pieces), "held")])
    assert listed.to_json() == whole.to_json() == generated.to_json()
    assert listed.evals_result == whole.evals_result == generated.evals_result
    # the batches' frames are the user's: untouched
    assert list(pieces[1].colour.cat.categories) == ["green", "grey", "red", "blue"]


def test_tuples_of_arrays_carry_label_weight_qid_and_base_margin(device):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=2000) > 0).astype(np.float64)
    w = rng.uniform(0.5, 2, 2000)
    margin = rng.normal(size=2000) * 0.1
    params = {"max_depth": 3, "device": device}
    whole = gbflow.train(X, y, params, 5, weight=w, base_margin=margin, verbose=False)
    cut = [0, 300, 301, 1500, 2000]  # a one-row batch, an empty one is fine too
    parts = [(X[a:b], y[a:b], w[a:b], None, margin[a:b]) for a, b in zip(cut, cut[1:])]
    parts.insert(1, (X[:0], y[:0], w[:0], None, margin[:0]))
    assert gbflow.train(parts, params=params, num_boost_round=5,
                        verbose=False).to_json() == whole.to_json()
    # ranking: query ids in the tuples; a query may span batches in one process
    qid = np.sort(rng.integers(0, 60, 2000)).astype(np.float64)
    rank = {"objective": "rank:ndcg", "max_depth": 3, "device": device}
    whole = gbflow.train(X, y, rank, 4, qid=qid, verbose=False)
    parts = [(X[a:b], y[a:b], None, qid[a:b]) for a, b in zip(cut, cut[1:])]
    assert gbflow.train(iter(parts), params=rank, num_boost_round=4,
                        verbose=False).to_json() == whole.to_json()


def test_parquet_and_csv_paths_are_read_in_batches(tmp_path, device):
    df = _frame()
    params = dict(PARAMS, device=device)
    whole = gbflow.train(df, "y", params, 5, verbose=False)
    folder = tmp_path / "parquet"
    (folder / "more").mkdir(parents=True)
    pieces = _pieces(df, 1100)
    for i, piece in enumerate(pieces):  # files in subfolders, several row groups each
        where = folder / ("more" if i else "") / f"part-{i}.parquet"
        piece.to_parquet(where, row_group_size=250)
    # files sort by path: part-0 first, then more/part-1, more/part-2 (the rows' order)
    from_folder = gbflow.train(str(folder), "y", params, 5, verbose=False,
                               evals=[(folder / "part-0.parquet", "first")])
    assert from_folder.to_json() == whole.to_json()
    assert from_folder.evals_result["first"]["auc"] == gbflow.train(
        df, "y", params, 5, verbose=False,
        evals=[(pieces[0], "first")]).evals_result["first"]["auc"]
    # CSV: no category dtype there, so numeric features only; read in chunks
    numeric = df.drop(columns=["colour", "w"])
    for i, piece in enumerate(_pieces(df, 1100)):
        piece.drop(columns=["colour", "w"]).to_csv(tmp_path / f"c{i}.csv", index=False)
    old = batches.CSV_BATCH_ROWS
    try:
        batches.CSV_BATCH_ROWS = 400
        from_csv = gbflow.train(str(tmp_path / "c*.csv"), "y", params, 5, verbose=False)
    finally:
        batches.CSV_BATCH_ROWS = old
    assert from_csv.to_json() == gbflow.train(numeric, "y", params, 5,
                                              verbose=False).to_json()


def test_raw_values_that_do_not_fit_the_device_reach_it_in_blocks(monkeypatch, device):
    """A limit above the bins but below raw values plus bins: the raw values stay in host
    memory and are sketched and binned a block of rows at a time; the model is the same."""
    df = _frame(n=4000)
    X = df[list("abdef")].to_numpy()
    y = df.y.to_numpy()
    backend = get_backend(device)
    binned = 4000 * 8  # 5 uint8 bins padded to 8 bytes a row
    raw = X.nbytes
    fits = make_params({"device_memory_limit": raw + binned})
    tight = make_params({"device_memory_limit": raw + binned - 1})
    assert prepare.raw_fits(backend, fits, 4000, raw, binned)
    assert not prepare.raw_fits(backend, tight, 4000, raw, binned)
    if device == "cpu":  # the CPU copies nothing unless asked
        assert prepare.raw_fits(backend, make_params({}), 4000, raw, binned)
    monkeypatch.setattr(type(backend), "sketch_block_values", 5 * 300)  # blocks of 300 rows
    calls = []
    bin_part = binning.bin_part
    monkeypatch.setattr(binning, "bin_part", lambda b, X, cuts, block_rows=None: calls.append(
        (X.shape[0], block_rows)) or bin_part(b, X, cuts, block_rows))
    params = {"max_depth": 4, "device": device}
    whole = gbflow.train(X, y, params, 5, verbose=False)
    assert calls == [(4000, None)]
    calls.clear()
    blocked = gbflow.train(X, y, dict(params, device_memory_limit=raw + binned - 1), 5,
                           verbose=False)
    assert calls == [(4000, 300)]  # binned resident, in blocks of 300 rows
    assert blocked.to_json() == whole.to_json()


def test_quantize_in_blocks_equals_quantize_whole(device):
    backend = get_backend(device)
    X = _frame(n=1000)[list("abdef")].to_numpy()
    cuts = gbflow.train(X, np.arange(1000.0), {"device": device}, 1, verbose=False).cuts
    whole = backend.to_host(binning.quantize(backend, X, cuts))
    for block in (1, 7, 999, 1000, 5000):
        assert np.array_equal(backend.to_host(binning.quantize(backend, X, cuts, block)), whole)


def test_what_counts_as_batches():
    X = np.zeros((4, 2), np.float32)
    assert batches.is_batches([pd.DataFrame(X)]) and batches.is_batches([X])
    assert batches.is_batches([(X, np.zeros(4))]) and batches.is_batches(iter([X]))
    assert batches.is_batches("data/") and batches.is_batches(__import__("pathlib").Path("x"))
    assert not batches.is_batches(X) and not batches.is_batches(pd.DataFrame(X))
    assert not batches.is_batches([[1.0, 2.0], [3.0, 4.0]])  # rows of numbers: one table
    assert not batches.is_batches((X, np.zeros(4)))  # a tuple is never batches
    assert not batches.is_batches([])


@pytest.mark.parametrize("make, label, kwargs, error, match", [
    (lambda df: iter([]), "y", {}, ValueError, r"training data holds no batches \(the iterator"),
    (lambda df: [df.iloc[:10], df.iloc[10:20].drop(columns="b")], "y", {}, ValueError,
     r"training data, batch 1 lacks training feature column\(s\) 'b'"),
    (lambda df: [df.iloc[:10], df.iloc[10:20].assign(colour=1.0)], "y", {}, TypeError,
     r"\['colour'\] are category dtype in some batches and not in others"),
    (lambda df: [df.iloc[:10]], np.zeros(10), {}, TypeError,
     r"batch 0: with data in batches, label must name a column of every batch"),
    (lambda df: [df.iloc[:10]], None, {}, ValueError,
     r"batch 0: give label= the label column's name"),
    (lambda df: [(df[["a", "b"]].to_numpy(), df.y.to_numpy())], "y", {}, ValueError,
     r"batch 0 is a tuple .* leave label out of the call"),
    (lambda df: [(df[["a"]].to_numpy(), df.y.to_numpy(), df.w.to_numpy()),
                 (df[["a"]].to_numpy(), df.y.to_numpy())], None, {}, ValueError,
     r"training data, batch 1 has no weight where the first batch had one"),
    (lambda df: [(df[["a"]].to_numpy(),)], None, {}, TypeError, r"batch 0 is a tuple of 1"),
    (lambda df: [(df[["a"]].to_numpy(), None)], None, {}, ValueError,
     r"batch 0: the tuple's label \(its second item\) is None"),
    (lambda df: [df.iloc[:0], df.iloc[:0]], "y", {}, ValueError,
     r"training data has no rows \(in any batch\)"),
    (lambda df: [df.iloc[:10], df.iloc[10:20].assign(y=np.nan)], "y", {}, ValueError,
     r"training data, batch 1"),
    (lambda df: [df.iloc[:10]], "y", {"params": {"enable_categorical": False}}, TypeError,
     r"training data, batch 0 has category column\(s\) 'colour' but enable_categorical=False"),
])
def test_bad_batches_are_named(make, label, kwargs, error, match):
    df = _frame(n=50)
    with pytest.raises(error, match=match):
        gbflow.train(make(df), label, num_boost_round=1, verbose=False, **kwargs)


def test_bad_paths_and_sparse_batches(tmp_path):
    import scipy.sparse as sp
    with pytest.raises(ValueError, match=r"training data: no Parquet or CSV file at"):
        gbflow.train(str(tmp_path / "nowhere"), "y", verbose=False)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"evals\[0\] \('e'\): no Parquet or CSV file"):
        gbflow.train(_frame(n=50), "y", evals=[(str(tmp_path / "*.parquet"), "e")],
                     verbose=False)
    X = sp.random(20, 3, density=0.5, format="csr", random_state=0)
    with pytest.raises(TypeError, match=r"batch 0 is a sparse matrix: batches are dense tables"):
        gbflow.train([(X, np.zeros(20))], verbose=False)


def test_unreadable_and_empty_files_are_named(tmp_path):
    """An empty CSV, a corrupt Parquet file: the reader's error with the file's name (it was
    pandas' or pyarrow's alone); a CSV of a header alone has no rows (it read as columns of
    text)."""
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("a,b,y\n")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "ragged.csv").write_text("a,b,y\n1,2,3\n4,5,6,7,8\n")
    for name, match in [("empty.csv", r"cannot read csv file '.*empty\.csv': EmptyDataError"),
                        ("ragged.csv", r"cannot read csv file '.*ragged\.csv': ParserError"),
                        ("bad.parquet", r"cannot read parquet file '.*bad\.parquet': "),
                        ("header.csv", r"training data holds no batches \(its files hold no "
                                       r"rows\)")]:
        with pytest.raises(ValueError, match=match):
            gbflow.train(str(tmp_path / name), "y", verbose=False)


def test_frames_are_copied_a_block_of_rows_at_a_time_with_every_dtype(monkeypatch):
    """pandas frames become the float32 matrix a block of rows at a time: the values of every
    column kind (floats with NaN, ints, bools, nullable Int64/Float64 with NA, categories)
    are those of converting each column whole."""
    from gbflow.backend import frames
    monkeypatch.setattr(frames, "_FRAME_BLOCK_ROWS", 1000)
    rng = np.random.default_rng(3)
    n = 4321
    df = pd.DataFrame({
        "f64": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
        "f32": rng.normal(size=n).astype(np.float32), "i64": rng.integers(-5, 5, n),
        "flag": rng.random(n) < 0.5,
        "i_na": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 9, n)),
                         dtype="Int64"),
        "f_na": pd.array(np.where(rng.random(n) < 0.1, None, rng.random(n)), dtype="Float64"),
        "cat": pd.Categorical(rng.choice(["x", "y", "z"], n))})
    categories = {"cat": np.array(["x", "y", "z"])}
    X = frames.feature_matrix(df, list(df.columns), categories)
    expected = np.stack([frames.encode_categories(df, "cat", categories["cat"]) if name == "cat"
                         else df[name].to_numpy(dtype=np.float32, na_value=np.nan)
                         for name in df.columns], axis=1)
    assert X.flags.c_contiguous and X.dtype == np.float32
    assert np.array_equal(X, expected, equal_nan=True)
    assert np.isnan(X[:, 4]).sum() == df.i_na.isna().sum() > 0


@pytest.mark.gpu
def test_device_batches_leave_the_device_and_train_there(monkeypatch):
    """CuPy batches are copied to the host as they come, and device "auto" trains on the GPU
    (where the batches were): the model of the host arrays on the GPU."""
    from gbflow.backend import cuda_available
    if not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    import cupy
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30_000, 30)).astype(np.float32)  # past "auto"'s small-data limit
    y = (X[:, 0] + rng.normal(size=30_000) > 0).astype(np.float64)
    loaded, on_device = batches.load([(cupy.asarray(X[:10_000]), cupy.asarray(y[:10_000])),
                                      (cupy.asarray(X[10_000:]), cupy.asarray(y[10_000:]))])
    assert on_device and isinstance(loaded.X, np.ndarray) and np.array_equal(loaded.X, X)
    from conftest import record_backends
    chosen = record_backends(monkeypatch)
    params = {"max_depth": 4}
    on_gpu = gbflow.train([(cupy.asarray(X[:10_000]), cupy.asarray(y[:10_000])),
                           (cupy.asarray(X[10_000:]), cupy.asarray(y[10_000:]))],
                          params=params, num_boost_round=4, verbose=False)
    assert chosen == ["cuda"]
    assert on_gpu.to_json() == gbflow.train(X, y, dict(params, device="cuda"), 4,
                                            verbose=False).to_json()


def test_evaluation_sets_and_continued_training_read_large_raw_values_in_blocks(monkeypatch,
                                                                               device):
    """Raw values that do not fit the device beside their bins reach it a block of rows at a
    time for every use: the training's sketch and binning, a continued model's start margins,
    the evaluation sets' margins and bins; the model and evaluation results are the same."""
    from gbflow import evaluation, predictor
    df = _frame(n=3000)
    X, y = df[list("abdef")].to_numpy(), df.y.to_numpy()
    params = {"max_depth": 3, "device": device, "eval_metric": "auc"}
    first = gbflow.train(X, y, params, 3, verbose=False)
    evals = [((X[:1000], y[:1000]), "held")]
    whole = gbflow.train(X, y, params, 3, verbose=False, evals=evals, xgb_model=first)
    backend = get_backend(device)
    monkeypatch.setattr(type(backend), "sketch_block_values", 5 * 256)  # blocks of 256 rows
    monkeypatch.setattr(prepare, "raw_fits", lambda *a: False)
    blocks = {"margins": [], "bins": []}
    predict_margin, binned = predictor.predict_margin, evaluation._binned
    monkeypatch.setattr(predictor, "predict_margin", lambda *a: blocks["margins"].append(
        (a[1].shape[0], a[-1])) or predict_margin(*a))
    monkeypatch.setattr(evaluation, "_binned", lambda b, X, cuts, rows=None: blocks[
        "bins"].append((X.shape[0], rows)) or binned(b, X, cuts, rows))
    blocked = gbflow.train(X, y, params, 3, verbose=False, evals=evals, xgb_model=first)
    assert blocked.to_json() == whole.to_json()
    assert blocked.evals_result == whole.evals_result
    # the training's start margins, then the held-out set's; its bins
    assert blocks == {"margins": [(3000, 256), (1000, 256)], "bins": [(1000, 256)]}


def test_no_batch_outlives_its_turn_and_tuple_evaluation_batches_go_with_named_columns():
    """Each batch can be freed once copied (the first one too: only its names are kept); an
    evaluation set in tuple batches goes with training data that names its label column."""
    import gc
    import weakref
    df = _frame(n=2000)
    alive = []

    def generate():
        for piece in _pieces(df, 500):
            X = piece[list("abdef")].to_numpy()
            alive.append(weakref.ref(X))
            yield X, piece.y.to_numpy()
            del X
            gc.collect()
            assert all(ref() is None for ref in alive[:-1])  # earlier batches are gone

    loaded, _ = batches.load(generate())
    assert loaded.n_rows == 2000
    X, y = df[list("abdef")].to_numpy(), df.y.to_numpy()
    numeric = df[list("abdef") + ["y"]]
    evals = [([(X[:700], y[:700]), (X[700:1000], y[700:1000])], "held")]
    with_tuples = gbflow.train(numeric, "y", {"eval_metric": "auc"}, 3, verbose=False,
                               evals=evals)
    whole = gbflow.train(numeric, "y", {"eval_metric": "auc"}, 3, verbose=False,
                         evals=[((X[:1000], y[:1000]), "held")])
    assert with_tuples.evals_result == whole.evals_result


def test_a_parquet_path_without_row_groups_says_so(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"a": pa.array([], pa.float32()), "y": pa.array([], pa.float64())}),
                   tmp_path / "empty.parquet")
    # (pyarrow writes an empty table as one empty row group)
    with pytest.raises(ValueError, match=r"training data (holds no batches \(its files hold no "
                                         r"row groups\)|has no rows \(in any batch\))"):
        gbflow.train(str(tmp_path), "y", verbose=False)
