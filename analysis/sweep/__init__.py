"""What-if sweeps: a TOML grid over simulation-config fields, run locally or on Dask.

Reading order: ``spec`` (the grid format and its expansion), ``points`` (run keys and stored
results), ``executors`` (in-process, process pool or Dask), ``runner`` (:func:`run_sweep`).
"""
