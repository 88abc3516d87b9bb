"""The trace format (traces/FORMAT.md): the in-memory :class:`Trace`, its files and checks.

Reading order: ``trace`` (the dataclass and its value checks), ``checks`` (column checks),
``parquet_columns`` (reading one file), ``files`` (read, validate, write), ``tree_nodes`` /
``tree_trie`` / ``tree_files`` (version-2 draft trees), ``identity`` (who the models are),
``describe`` / ``tree_summary`` (what ``trace info`` prints).
"""
