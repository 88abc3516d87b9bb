"""The trace format (traces/FORMAT.md): the in-memory :class:`Trace`, its files and checks.

Reading order: ``ranges`` (row gathers over CSR offsets), ``checks`` (column checks),
``tree_nodes`` / ``tree_trie`` (version-2 draft trees), ``trace`` (the dataclass and its value
checks), ``parquet_columns`` (reading one file), ``files`` (read, validate, write),
``tree_files`` (version-2 trace files), ``identity`` (who the models are), ``describe`` /
``tree_summary`` (what ``trace info`` prints).
"""
