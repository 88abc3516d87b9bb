"""Tables and figures over a sweep's results: ``specbatch report`` and the demo.

Reading order: ``compare`` (paired comparisons across seeds), ``render`` (Markdown / HTML),
``figures``, the tables (``engine_comparison``, ``predictor_quality``, ``acceptance_vs_replay``,
``pressure``, ``replication``), ``sweep_report`` (the report of a sweep folder), ``demo``.
"""
