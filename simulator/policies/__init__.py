"""Draft/verify policies: how many tokens each running request drafts and verifies per step.

Reading order: ``base`` (the :class:`Policy` interface every policy implements, its optional
hooks declared), ``view`` (the :class:`StepView` a policy may read before verification),
``step_plan`` (the :class:`Plan` a policy returns), ``catalogue`` (one row per built-in policy),
``knobs`` (the config fields of the engines' policies), ``registry`` (name -> class, users'
policies), then the policies: ``papers`` (ar, fixed, dsd, tetris, oracle), ``engines`` (the
draft-length rules the serving engines ship), ``schedules`` (their tables), ``stops`` (early
stopping), ``adaptive`` / ``adaptive_tables`` (vLLM's adaptive verification), ``trees`` (subtree
policies), ``calibration`` (the held-out requests a policy may calibrate on).
"""
