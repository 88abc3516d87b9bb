"""How far the simulator is from a measured run: a live run of ours, or a real vLLM server.

Reading order: ``live`` (``specbatch validate`` on live runs), ``vllm_settings`` (a vLLM run's
meta.json mapped onto SimConfig), ``vllm_metrics`` (serving metrics and two-sample tests),
``vllm_run`` (``validate --vllm``: replay and report the error).
"""
