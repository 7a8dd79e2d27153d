"""Training: the model kinds (``kinds/``, one module each, read through one registry), the
jobs that train them (rows), the runner and executors that run them in other processes
(a local pool, or a Dask cluster), and automatic retraining."""
