"""Settings of one live run and the simulator config that describes the same workload."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import cached_property

from specbatch.errors import require
from specbatch.fields import FieldSpec, at_least, check_ranges, field_specs, knob, like
from specbatch.limits import is_supported_device
from specbatch.simulator.config.schedulers import names as scheduler_names
from specbatch.simulator.config.schedulers import scheduler_entry
from specbatch.simulator.config.sim_config import SimConfig, make_config
from specbatch.simulator.defaults import V1_DEFAULT_BATCHED_TOKENS
from specbatch.simulator.policies.catalogue import names as policy_names
from specbatch.simulator.replay.rules import names as rule_names

#: Policies the live loop runs: the catalogue's rows with ``live`` (simulator.policies.catalogue; a
#: test keeps them equal to the classes with ``live = True``), those that decide from draft-side
#: signals after a full-depth draft (``threshold`` would stop drafting early, ``dsd`` needs a cost
#: model, ``oracle`` and ``hindsight`` read the truth).
LIVE_POLICIES = policy_names(live=True)
VERIFIERS = ("theory", "local")
#: Arrival processes of a live run (the simulator's, but "trace": live prompts carry no times).
LIVE_ARRIVALS = ("burst", "poisson", "gamma")
#: The prompt-lookup drafter's name (:data:`specbatch.traces.capture.ngram.NGRAM`; a test keeps them
#: equal), here so a ``--help`` need not import the drafters.
NGRAM = "ngram"
#: Drafters of a live run: a draft model, or prompt lookup (:mod:`specbatch.live.ngram`).
DRAFTS = ("model", NGRAM)
DTYPES = ("float32", "float16", "bfloat16")
#: Step composers of a live run: the scheduler catalogue's rows with ``live``
#: (simulator.config.schedulers): vLLM V1's one token budget per step with mixed decode +
#: prefill steps, or V0's prefill-only steps.
SCHEDULERS = scheduler_names(live=True)


@dataclass(frozen=True)
class LiveConfig:
    """Settings of one live run (recorded in ``live.json``).

    policy, k, extra (e), verify: as :class:`simulator.config.sim_config.SimConfig`'s ``policy``,
    ``num_speculative_tokens``, ``extra``, ``verify``; the budget is C = k·n.
    verifier: "theory" decides τ and the extra token with
    :func:`theory.verify.torch_batched.accept_and_residual`; "local" with
    :func:`theory.verify.path_stats.accept_from_stats` on the recorded statistics (the simulator's
    own τ function) and :func:`theory.verify.torch_batched.extra_token_law_torch`.
    max_num_seqs: running slots (None = every request: one static batch when they all
    arrive at once). arrival, rate, cv: the arrival process, as the simulator's ("burst" all at
    t = 0, "poisson" at ``rate`` req/s, "gamma" with mean gap 1/rate and CV ``cv``), drawn by
    the simulator's workload code from ``seed``.
    draft: "model" (a draft LM) or "ngram" (prompt lookup, vLLM's ``ngram`` method);
    ngram_min, ngram_max: its suffix n-gram bounds (vLLM's ``prompt_lookup_min``/``max``;
    None: vLLM's defaults, as :func:`traces.capture.ngram.ngram_bounds` resolves them); n-gram only.
    scheduler: how a step is composed (:mod:`specbatch.live.loop`): "vllm-v1" spends one
    token budget ``max_num_batched_tokens`` per step on the running requests (1 + s_i each),
    then on whole waiting prompts in the same (mixed) step; "vllm-v0" gives joiners a
    prefill-only step. Prompts are never chunked: the budget must hold every running
    request's largest ask and the longest request (:meth:`check_budget`).
    """

    max_new_tokens: int = knob(32, "output tokens per request (EOS is ignored, as in vLLM "
                               "benchmarks)", range=at_least(1))
    policy: str = like(SimConfig, "policy", "fixed", choices=LIVE_POLICIES,
                       help="speculation policy (decides from draft-side signals)")
    k: int = like(SimConfig, "num_speculative_tokens", 3, range=at_least(1), flags=(),
                  help="window k, verified draft tokens per request (fixed: drafted = "
                       "verified = k)")
    extra: int = like(SimConfig, "extra", 0, help="e, extra drafted tokens: tetris drafts "
                                                  "K = k + e (0 for fixed)")
    verify: str = like(SimConfig, "verify", "token")
    temperature: float = knob(0.0, "sampling temperature T; at 0 (greedy) the target's law "
                              "is one-hot, so block verification equals token verification "
                              "(capture's default is T = 1)", range=at_least(0, "T"))
    device: str = knob("cpu", "torch device: cpu, cuda or cuda:N")
    dtype: str = knob("float32", "weights and activations dtype", choices=DTYPES)
    seed: int = like(SimConfig, "seed", 0)
    max_prompt_tokens: int = knob(512, "longer prompts keep their last tokens",
                                  range=at_least(1))
    verifier: str = knob("theory", "theory: theory.verify.torch_batched; local: the recorded "
                         "statistics through theory.verify.path_stats.accept_from_stats",
                         choices=VERIFIERS)
    max_num_seqs: int | None = like(SimConfig, "max_num_seqs", None, help="running slots",
                                    none="N, every request: a burst is one static batch")
    arrival: str = like(SimConfig, "arrival", "burst", choices=LIVE_ARRIVALS,
                        help="arrival process: burst (all at t = 0), poisson (rate) or gamma "
                             "(rate, cv), drawn by the simulator's workload code from seed")
    rate: float = like(SimConfig, "rate", 10.0)
    cv: float = like(SimConfig, "cv", 1.0)
    draft: str = knob("model", "drafter: a draft model, or ngram (prompt lookup)",
                      choices=DRAFTS, flag=False)
    scheduler: str = knob("vllm-v1", "step composer: vllm-v1 (one token budget per step, "
                          "running requests' 1 + drafts first, then whole waiting prompts in "
                          "the same step) or vllm-v0 (prefill-only steps for joiners)",
                          choices=SCHEDULERS)
    max_num_batched_tokens: int | None = knob(
        None, "vllm-v1: tokens scheduled per step (decode 1 + drafts, then prompts)",
        range=at_least(1), none=f"{V1_DEFAULT_BATCHED_TOKENS}, the simulator's vllm-v1 default")
    ngram_min: int | None = knob(None, "shortest suffix n-gram of the ngram drafter (vLLM "
                                 "prompt_lookup_min)", range=at_least(1),
                                 none="vLLM's default", flag=False)
    ngram_max: int | None = knob(None, "longest suffix n-gram of the ngram drafter (vLLM "
                                 "prompt_lookup_max)", range=at_least(1),
                                 none="vLLM's default", flag=False)

    @property
    def ngram(self) -> tuple[int, int]:
        """The n-gram drafter's resolved ``(n_min, n_max)``."""
        from specbatch.traces.capture.ngram import ngram_bounds

        return ngram_bounds(self.ngram_min, self.ngram_max)

    def slots(self, n_requests: int) -> int:
        """Running slots of a run of N requests: ``max_num_seqs``, at most N."""
        return n_requests if self.max_num_seqs is None else min(self.max_num_seqs, n_requests)

    @property
    def token_budget(self) -> int | None:
        """Tokens one step may schedule: ``max_num_batched_tokens`` or the scheduler's default
        budget under a scheduler with mixed steps (vllm-v1); None (unlimited) otherwise."""
        row = scheduler_entry(self.scheduler)
        if not row.mixed_steps:
            return None
        return row.default_budget if self.max_num_batched_tokens is None \
            else self.max_num_batched_tokens

    def sim_values(self, n_requests: int) -> dict:
        """SimConfig fields of the same workload: N requests in order, the same arrival
        process and seed, ``max_num_seqs`` running slots (vLLM-style continuous batching,
        non-chunked prefill), the same step composer and token budget, the same policy,
        window and verification rule; verification is not priced apart (``verify_cost =
        "none"``): a live step's measured overhead holds it; no client side of TTFT
        (``client_ttft_s = 0``): the loop stamps a token at its step's end, in process; no
        async scheduling (``async_scheduling = false``): the loop schedules a step after the
        last one's output is on the host."""
        values = {"requests": n_requests, "sampling": "in_order", "arrival": self.arrival,
                  "rate": self.rate, "cv": self.cv,
                  "max_num_seqs": self.slots(n_requests), "policy": self.policy,
                  "num_speculative_tokens": self.k,
                  "extra": self.extra if self.policy == "tetris" else 0, "verify": self.verify,
                  "verify_cost": "none", "seed": self.seed}
        values.update(scheduler=self.scheduler, enable_chunked_prefill=False,
                      max_num_batched_tokens=self.token_budget)
        values["client_ttft_s"] = 0.0
        values["async_scheduling"] = False  # the loop runs each step to its end, then the next
        return values

    def check_budget(self, prompt_len, n_requests: int) -> None:
        """One-line errors for a vllm-v1 budget the live loop cannot keep: every running
        request's 1 + k tokens must fit one step (the loop never cuts a running request), and
        the longest prompt + output − 1 tokens too (whole prompts, as the simulator asks
        without chunked prefill)."""
        budget = self.token_budget
        if budget is None:
            return
        ask = self.slots(n_requests) * (1 + self.k)
        require(budget >= ask, f"--max-num-batched-tokens: expected >= max_num_seqs x (1 + k) "
                f"= {ask} (every running request's tokens in one step), got {budget}")
        longest = int(max(prompt_len)) + self.max_new_tokens - 1
        require(budget >= longest, f"--max-num-batched-tokens: expected >= the longest prompt "
                f"+ max_new_tokens - 1 = {longest} (prompts are not chunked), got {budget}")

    def sim_config(self, n_requests: int = 1) -> SimConfig:
        """The validated :class:`simulator.config.sim_config.SimConfig` of :meth:`sim_values`."""
        return make_config(self.sim_values(n_requests), "live config")

    @cached_property
    def depth(self) -> int:
        """Draft passes per step: the policy class's required depth (K = k for ``fixed``,
        k + e for ``tetris``), as in the simulator (computed once per config)."""
        from specbatch.simulator.policies.registry import policy_depth_of, resolve_policy

        return policy_depth_of(resolve_policy(self.policy, "--policy"), self.sim_config())

    def check(self) -> None:
        """One-line errors naming the CLI flag for settings the loop cannot run."""
        require(self.scheduler in SCHEDULERS, f"--scheduler: expected one of "
                f"{', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        require(scheduler_entry(self.scheduler).mixed_steps
                or self.max_num_batched_tokens is None,
                "--max-num-batched-tokens: expected only with --scheduler vllm-v1, got "
                f"{self.max_num_batched_tokens} with {self.scheduler}")
        require(self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1,
                f"--max-num-batched-tokens: expected >= 1, got {self.max_num_batched_tokens}")
        require(self.policy in LIVE_POLICIES,
                f"--policy: expected one of {', '.join(LIVE_POLICIES)}, got {self.policy!r}")
        require(self.verify in rule_names(), f"--verify: expected one of "
                f"{', '.join(rule_names())}, got {self.verify!r}")
        require(self.k >= 1, f"--k: expected k >= 1, got {self.k}")
        require(self.extra >= 0, f"--extra: expected e >= 0, got {self.extra}")
        require(self.max_new_tokens >= 1,
                f"--max-new-tokens: expected >= 1, got {self.max_new_tokens}")
        require(math.isfinite(self.temperature) and self.temperature >= 0,
                f"--temperature: expected T >= 0, got {self.temperature}")
        require(self.seed >= 0, f"--seed: expected >= 0, got {self.seed}")
        require(is_supported_device(self.device),
                f"--device: expected cpu, cuda, cuda:N or mps, got {self.device!r}")
        require(self.verifier in VERIFIERS,
                f"verifier: expected theory or local, got {self.verifier!r}")
        require(self.max_num_seqs is None or self.max_num_seqs >= 1,
                f"--max-num-seqs: expected >= 1, got {self.max_num_seqs}")
        require(self.arrival in LIVE_ARRIVALS, f"--arrival: expected one of "
                f"{', '.join(LIVE_ARRIVALS)}, got {self.arrival!r}")
        require(math.isfinite(self.rate) and self.rate > 0,
                f"--rate: expected requests/s > 0, got {self.rate}")
        require(math.isfinite(self.cv) and self.cv > 0, f"--cv: expected > 0, got {self.cv}")
        require(self.depth <= 64, f"--k/--extra: expected k + e <= 64, got {self.depth}")
        require(self.draft in DRAFTS, f"draft: expected one of {', '.join(DRAFTS)}, got "
                f"{self.draft!r}")
        if self.draft == NGRAM:
            from specbatch.traces.capture.ngram import ngram_bounds

            ngram_bounds(self.ngram_min, self.ngram_max)
        else:
            require(self.ngram_min is None and self.ngram_max is None,
                    f"--ngram-min/--ngram-max: expected only with --draft {NGRAM}, got a "
                    "draft model")
        check_ranges(self, live_specs(), "live config", by_flag=True)


@functools.cache
def live_specs() -> dict[str, FieldSpec]:
    """Every LiveConfig field's declaration (type, default, choices, range, help)."""
    return field_specs(LiveConfig)
