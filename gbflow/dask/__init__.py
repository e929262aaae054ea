"""Dask integration (F3): the only package that imports dask or distributed."""
