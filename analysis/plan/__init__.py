"""``specbatch plan``: the cheapest deployment and speculation setting that meets the SLOs.

Reading order: ``planner`` (the question and the answer), ``space`` (deployments x settings),
``bound`` (latency lower bounds from the cost model), ``slo`` (the verdict on one run),
``search`` (cheapest level first, pruned), ``entry`` (what one run is judged to be),
``runner`` (the runs, stored and reused, on one pool), ``rejected`` (what did not make the answer),
``cost_source``, ``figure``, ``out_dir`` (the output folder), ``engine_advice`` (the answer as
each engine's setting), ``max_rate`` (``plan --max-rate``: one deployment's capacity).
"""
