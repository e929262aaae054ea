"""The scikit-learn estimators' adapter for Dask collections; it imports no scikit-learn."""
from __future__ import annotations

import numpy as np

# Column names the estimators give y and sample_weight inside the training frame.
LABEL = "__gbflow_label__"
WEIGHT = "__gbflow_weight__"


def _type_name(value) -> str:
    """``value``'s type for a message, with its library: "Dask Series", "pandas DataFrame",
    "numpy ndarray" (so a pandas frame is not called a Dask one)."""
    root = type(value).__module__.split(".")[0]
    library = {"dask": "Dask", "dask_cudf": "Dask", "cudf": "cuDF", "builtins": ""}.get(root, root)
    return f"{library} {type(value).__name__}".strip()


def _check_features(X, what: str = "X"):
    """X as a Dask DataFrame with string column names (kept as the feature names), none of them
    reserved. Raises TypeError/ValueError naming the problem."""
    import dask.dataframe as dd
    if not isinstance(X, dd.DataFrame):
        raise TypeError(f"{what} is a {_type_name(X)}; with a Dask DataFrame X the estimators "
                        f"take Dask DataFrames (one column per feature)")
    names = list(X.columns)
    bad = [c for c in names if not isinstance(c, str)]
    if bad:
        raise TypeError(f"{what}: Dask DataFrame column names must be strings, got {bad[:5]}")
    reserved = [c for c in names if c in (LABEL, WEIGHT)]
    if reserved:
        raise ValueError(f"{what} has column(s) {reserved}, which the estimators use internally")
    return X


def _series(values, what: str):
    """A Dask Series from a Dask Series, a one-column Dask DataFrame, or a Dask array of one
    value a row ((n,) or (n, 1); its chunks are its partitions, as xgboost.dask takes it).
    In-memory values (numpy, pandas) are refused: they would have to be cut by position into
    X's partitions, whose row counts are not known without computing X."""
    import dask.array as da
    import dask.dataframe as dd
    if isinstance(values, dd.DataFrame) and len(values.columns) == 1:
        return values[values.columns[0]]
    if isinstance(values, dd.Series):
        return values
    if isinstance(values, da.Array) and (values.ndim == 1 or
                                         (values.ndim == 2 and values.shape[1] == 1)):
        return dd.from_dask_array(values if values.ndim == 1 else values[:, 0])
    raise TypeError(f"{what} must be a Dask Series (partitioned like X: paired with it partition "
                    f"by partition, by position) when X is a Dask DataFrame, got a "
                    f"{_type_name(values)}")


def _same_partitions(X, series, what: str, x_name: str = "X"):
    """Raises ValueError unless ``series`` (called ``what``) has as many partitions as X: they are
    paired partition by partition, by position (as in xgboost.dask)."""
    if series.npartitions != X.npartitions:
        raise ValueError(f"{x_name} and {what} have different numbers of partitions: "
                         f"{X.npartitions} != {series.npartitions}; {what} is paired with "
                         f"{x_name} partition by partition and row by row (by position, as in "
                         f"xgboost.dask), so it must be partitioned like {x_name}")
    return series


def _numeric(series, what: str):
    import pandas as pd
    dtype = series._meta.dtype
    if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
        raise TypeError(f"{what} must be numeric, got dtype {dtype}")
    return series.astype("float64")


def _join_partition(part, *values, names=(), roles=(), x_name="X", ones=None,
                    partition_info=None):
    """One partition of X with ``values`` (the matching partitions of y and the weights, float64
    Series) as the columns ``names``, by position: each row gets the value of the same row
    number, whatever the indexes say; X's index is kept. ``ones``: a column of weight 1.
    Raises ValueError naming the role (``roles``) and the partition when the lengths differ."""
    columns = {}
    for series, name, role in zip(values, names, roles):
        if len(series) != len(part):
            number = "?" if partition_info is None else partition_info["number"]
            raise ValueError(f"{role} has {len(series)} rows in partition {number} but {x_name} "
                             f"has {len(part)}: {role} is paired with {x_name} partition by "
                             f"partition and row by row (by position, as in xgboost.dask), so "
                             f"it must be partitioned like {x_name}")
        columns[name] = series.to_numpy()
    if ones is not None:
        columns[ones] = np.ones(len(part))
    return part.assign(**columns)


def _training_frame(X, y, sample_weight, what: str, weighted: bool):
    """X with y (already encoded as numbers) and the weights as columns ``LABEL``/``WEIGHT``,
    paired with X by position: partition i of y with partition i of X, row j with row j (as
    xgboost.dask pairs them; never by index, which a ``from_dask_array`` frame restarts in every
    partition and which unknown divisions would join through a shuffle). X's index and divisions
    are kept. Raises ValueError when the numbers of partitions differ; a partition whose
    lengths differ fails, naming it, when it is computed.

    weighted: the training has weights, so a set without ``sample_weight`` gets weight 1 (an
    evaluation frame must have the training's weight column).
    """
    of = "" if what == "fit" else f" of {what}"
    X = _check_features(X, f"X{of}")
    values, names, roles = [], [LABEL], [f"y{of}"]
    values.append(_numeric(_series(y, roles[0]), roles[0]))
    if sample_weight is not None:
        roles.append(f"sample_weight{of}")
        names.append(WEIGHT)
        values.append(_numeric(_series(sample_weight, roles[1]), roles[1]))
    for series, role in zip(values, roles):
        _same_partitions(X, series, role, f"X{of}")
    options = dict(names=tuple(names), roles=tuple(roles), x_name=f"X{of}",
                   ones=WEIGHT if weighted and sample_weight is None else None)
    meta = _join_partition(X._meta, *(v._meta for v in values), **options)
    return X.map_partitions(_join_partition, *values, **options, meta=meta,
                            align_dataframes=False)


def _classes(y) -> np.ndarray:
    """The sorted distinct labels of a Dask Series, as a numpy array (computes y once, with its
    count of missing labels). Raises ValueError naming y and the count when labels are missing
    (NaN, None, pd.NA or NaT, of any dtype)."""
    import dask
    series = _series(y, "y")
    values, missing = dask.compute(series.unique(), series.isna().sum())
    if missing:  # (np.unique of strings and None/pd.NA raised a bare TypeError)
        raise ValueError(f"y has {int(missing)} missing label(s) (None, NaN or NA): give every "
                         f"row a class")
    values = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    return np.unique(values)


def _encode_partition(labels, known):
    import pandas as pd
    values = labels.to_numpy()
    index = np.clip(np.searchsorted(known, values), 0, len(known) - 1)
    found = known[index] == values
    if not np.all(found):
        unseen = list(dict.fromkeys(values[~found].tolist()))[:5]
        raise ValueError(f"y has label(s) {unseen} that are not among the classes seen in the "
                         f"training y: {known.tolist()}")
    return pd.Series(index.astype(np.float64), index=labels.index, name=labels.name)


def _encode(y, known: np.ndarray, what: str):
    """Labels -> float64 positions in ``known`` (lazy; an unknown label fails when computed)."""
    series = _series(y, "y" if what == "fit" else f"y of {what}")
    return series.map_partitions(_encode_partition, known,
                                 meta=series._meta.astype("float64"))


def _labels_partition(probability, known, name: str):
    import pandas as pd
    values = probability.to_numpy()
    index = (values > 0.5).astype(np.intp) if values.ndim == 1 else np.argmax(values, axis=1)
    return pd.Series(known[index], index=probability.index, name=name)


def _labels(probability, known: np.ndarray, name: str):
    """Most probable class of each row (lazy Dask Series called ``name``)."""
    import pandas as pd
    # (the dtype pandas infers from the labels themselves: an empty object array would stay
    # object where the partitions' strings become pandas' str)
    meta = pd.Series(known[:1], name=name).iloc[:0].set_axis(probability._meta.index)
    return probability.map_partitions(_labels_partition, known, name, meta=meta)


def _proba_partition(probability, columns):
    import pandas as pd
    values = probability.to_numpy()
    if values.ndim == 1:
        values = np.column_stack((1.0 - values, values))
    return pd.DataFrame(values, index=probability.index, columns=columns)


def _probabilities(probability, known: np.ndarray):
    """Class probabilities (lazy Dask DataFrame, one float64 column per class, named after the
    class label as a string)."""
    import pandas as pd
    columns = [str(c) for c in known]
    meta = pd.DataFrame({c: np.zeros(0) for c in columns}, index=probability._meta.index)
    return probability.map_partitions(_proba_partition, columns, meta=meta)


def _probability_partition(margin, probabilities):
    """A partition's margins (a Series or frame) as ``probabilities`` of their values, in the
    same pandas shape."""
    import pandas as pd
    values = probabilities(margin.to_numpy())
    if values.ndim == 2:
        return pd.DataFrame(values, index=margin.index, columns=margin.columns)
    return pd.Series(values, index=margin.index, name=margin.name)


class DaskAdapter:
    """What the scikit-learn estimators do with Dask collections: X a Dask DataFrame with string
    column names (the feature names), y and weights Dask Series partitioned like it (paired with
    X partition by partition, by position, as in xgboost.dask; indexes are ignored). Training
    data becomes one frame with label and weight columns for ``gbflow.train`` on Dask; nothing
    is computed but the classifier's distinct labels, and predictions are lazy. The methods are
    those of ``gbflow.sklearn_data._InMemoryAdapter``; ``column`` names the prediction.
    """

    def __init__(self, estimator, column: str, from_margins: tuple = (),
                 probabilities=None):
        self.estimator = estimator
        self.column = column
        # objectives whose class probabilities are ``probabilities`` of the margins (the
        # in-memory adapter's function; multi:softmax predicts a class, binary:logitraw a
        # margin)
        self.from_margins, self.probabilities = from_margins, probabilities

    # -- fit -------------------------------------------------------------------------------------
    def fit_data(self, X, y, y_numeric: bool = False):
        """-> (X, y), X checked (its column names recorded as the estimator's features) and y's
        number of partitions checked against X's; y's values are checked when the training frame
        is made."""
        X = _check_features(X)
        _same_partitions(X, _series(y, "y"), "y")  # before the classifier computes y's classes
        self.estimator.n_features_in_ = len(X.columns)
        self.estimator.feature_names_in_ = np.asarray(list(X.columns), dtype=object)
        return X, y

    def classes(self, y) -> np.ndarray:
        return _classes(y)

    def encode(self, y, known, what: str):
        """y as gbflow's label (lazy): as it is for a numeric target (``known`` None), else float64
        positions in ``known``."""
        return y if known is None else _encode(y, known, what)

    def training(self, X, y, sample_weight) -> dict:
        weighted = sample_weight is not None
        return dict(data=_training_frame(X, y, sample_weight, "fit", weighted), label=LABEL,
                    weight=WEIGHT if weighted else None)

    def eval_data(self, X, y, weight, index: int, known, weighted: bool):
        what = f"eval_set[{index}]"
        return _training_frame(X, self.encode(y, known, what), weight, what, weighted)

    def trained(self, booster):
        # The label and weight columns were ours, not the user's: the model is then the same as
        # one fitted on in-memory arrays.
        booster.label_name = booster.weight_name = None
        return booster

    # -- fitted model ------------------------------------------------------------------------------
    def predict(self, X, **options):
        """Lazy float64 Dask Series (a DataFrame, one column per class, for multi:softprob);
        ``options`` are ``Booster.predict``'s."""
        return self.estimator.booster_.predict(_check_features(X), name=self.column, **options)

    def _probability(self, X, **options):
        """Lazy probabilities of the classes (of the second class for two)."""
        if self.estimator.booster_.params.objective not in self.from_margins:
            return self.predict(X, **options)
        margin = self.predict(X, output_margin=True, **options)
        return margin.map_partitions(_probability_partition, self.probabilities,
                                     meta=margin._meta)

    def labels(self, X, known, **options):
        return _labels(self._probability(X, **options), known, self.column)

    def proba(self, X, known, **options):
        return _probabilities(self._probability(X, **options), known)

    def transform(self, X, known):
        """X plus a column: the prediction (``known`` None) or the predicted label (lazy)."""
        X = _check_features(X)
        if known is None:
            return self.estimator.booster_.transform(X, name=self.column)
        if self.column in X.columns:
            raise ValueError(f"transform: X already has a column {self.column!r}")
        return X.assign(**{self.column: self.labels(X, known)})
