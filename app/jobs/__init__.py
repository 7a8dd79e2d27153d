"""Background training: jobs run in other processes (a local pool, or a Dask cluster)."""
