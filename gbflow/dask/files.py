"""The command line's Dask side: reading and writing Parquet and CSV, clients to clusters."""
from __future__ import annotations

import contextlib


def read_dask(files: list[str], fmt: str, gpu: bool = False):
    """A lazy Dask DataFrame of ``files`` ("parquet" or "csv"; cuDF partitions with ``gpu``)."""
    if gpu:
        import dask_cudf
        return dask_cudf.read_parquet(files) if fmt == "parquet" else dask_cudf.read_csv(files)
    import dask.dataframe as dd
    return dd.read_parquet(files) if fmt == "parquet" else dd.read_csv(files)


def write_dask(frame, path: str, old_parts=None) -> None:
    """Write a Dask DataFrame as a Parquet folder (one file a partition) at ``path``, whole
    or not at all: an earlier folder there, whose files ``old_parts`` names, is replaced, none
    of its parts left among the new ones (``atomic_file.write_through``)."""
    from ..atomic_file import write_through
    write_through(path.rstrip("/") or path, lambda tmp: frame.to_parquet(tmp, write_index=False),
                  old_parts)


@contextlib.contextmanager
def client(scheduler: str | None, local_workers: int | None, gpu: bool):
    """A ``distributed.Client``: to ``scheduler``, or of a local cluster of ``local_workers``
    workers (a LocalCUDACluster, one worker a GPU, with ``gpu``), closed on exit."""
    from distributed import Client
    if scheduler:
        with Client(scheduler) as c:
            yield c
        return
    if gpu:
        from dask_cuda import LocalCUDACluster
        cluster = LocalCUDACluster(n_workers=local_workers or None)
    else:
        from distributed import LocalCluster
        cluster = LocalCluster(n_workers=local_workers or 2, threads_per_worker=1,
                               dashboard_address=":0")
    with cluster, Client(cluster) as c:
        yield c
