"""``specbatch conform --endpoint``: is a running server's speculative decoding lossless?

A black-box test a user points at a deployment (THEORY.md §4: speculation is lossless iff
the law of the output is the target's). The same prompts go to the server under test and to
a reference without speculation, at several temperatures, many requests in flight at once
(so the server batches them: 1Cat-vLLM #656 broke only above two running requests):

- T > 0: N completions of m tokens per (prompt, T) from the server; the reference is either
  a second server (``--reference URL``, speculation off: the same N from it) or the exact law
  of the first m tokens under plain sampling of the target (``--target-model DIR``,
  :mod:`.reference`). For every j = 1..m the law of the first j tokens is tested: against
  the exact law by :func:`theory.conform.power.law_test` (the G test with calibrated
  p-values of ``specbatch conform``), against a second server's sample by the two-sample G
  test with a sequential Monte Carlo permutation p-value (:func:`two_sample_test`, valid at
  every N: under H0 the pooled draws are exchangeable). Holm's step-down over all tests of
  all prompts and temperatures holds the family-wise false alarm at α;
- T = 0: every greedy completion must equal the reference's greedy decoding token for token
  (an exact check, no statistics).

The power is stated as in ``specbatch conform``: the smallest total-variation deviation of
the joint law of the first m tokens caught with probability 0.95 at the draws spent
(:func:`theory.conform.power.detectable_tv_law` at the smallest Holm threshold). Against a
second server it is the same formula at the effective size N₁N₂/(N₁+N₂) on the pooled
empirical law: an approximation (stated as such in the report).

Acceptance is read from both servers' ``/metrics`` before and after the run
(:func:`.client.acceptance`: MAL = 1 + A/D, rate A/T, THEORY.md §9) and printed beside the
verdict: a lossless but slow sampler (vllm-ascend #15673: "block" silently run as "token";
z-lab/dflash #74: equality matching) passes the law tests and shows here.

The draws are kept in the result folder (``draws.json``, written atomically after every
chunk of requests): a run stopped by the request budget, an error or Ctrl-C resumes where it
stopped when rerun with the same settings; a larger ``--samples`` tops the draws up.
"""

from __future__ import annotations

import functools
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from specbatch.analysis.endpoint.client import Endpoint, acceptance, spec_counters
from specbatch.errors import SpecbatchError, require

#: Bundled prompts: short code and prose openings (any tokenizer).
PROMPTS = ("def add(a, b):", "The quick brown fox", "class Point:\n",
           "jumps over the lazy dog and the")
DEFAULT_TEMPERATURES = (0.0, 0.6, 1.0)
DEFAULT_SAMPLES = 300
DEFAULT_TOKENS = 3
DEFAULT_ALPHA = 1e-3
DEFAULT_GREEDY = 8  # greedy requests per prompt (a batch-dependent fault shows as disagreement)
GREEDY_TOKENS = 12
KIND = "conform-endpoint"


@dataclass(frozen=True)
class EndpointSettings:
    """One ``conform --endpoint`` run (the identity of its result folder leaves out
    ``samples``, ``budget``, ``concurrency``, ``timeout`` and ``retries``: a rerun with more
    samples tops the draws up)."""

    endpoint: str
    reference: str | None = None
    target_model: str | None = None
    prompts: tuple = PROMPTS
    temperatures: tuple = DEFAULT_TEMPERATURES
    samples: int = DEFAULT_SAMPLES
    tokens: int = DEFAULT_TOKENS
    greedy: int = DEFAULT_GREEDY
    greedy_tokens: int = GREEDY_TOKENS
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    floor: float = 1e-4
    concurrency: int = 8
    timeout: float = 60.0
    retries: int = 3
    budget: int = 10**9
    api_key: str | None = None

    def check(self) -> None:
        require(self.reference is not None or self.target_model is not None,
                "--reference/--target-model: expected a reference server URL or the target "
                "model directory (the exact law), got neither")
        require(bool(self.prompts), "--prompts: expected at least one prompt, got none")
        require(bool(self.temperatures) and all(t >= 0 and math.isfinite(t)
                                                for t in self.temperatures),
                f"--temperatures: expected values >= 0, got {list(self.temperatures)}")
        require(self.samples >= 2, f"--samples: expected >= 2, got {self.samples}")
        require(1 <= self.tokens <= 8, f"--tokens: expected 1..8, got {self.tokens}")
        require(0 < self.alpha < 1, f"--alpha: expected a level in (0, 1), got {self.alpha}")
        require(self.concurrency >= 1, f"--concurrency: expected >= 1, got {self.concurrency}")
        require(self.budget >= 1, f"--budget: expected >= 1, got {self.budget}")
        require(0 < self.floor < 0.5, f"--floor: expected (0, 0.5), got {self.floor}")

    def identity(self) -> str:
        import hashlib

        kept = {k: v for k, v in asdict(self).items()
                if k not in ("samples", "budget", "concurrency", "timeout", "retries",
                             "api_key")}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Store:
    """The draws so far, saved atomically in the result folder (module docstring)."""

    path: Path | None
    draws: dict = field(default_factory=dict)  # key -> list of token lists
    spent: int = 0

    def load(self) -> None:
        if self.path is not None and (self.path / "draws.json").is_file():
            data = json.loads((self.path / "draws.json").read_text())
            self.draws, self.spent = data["draws"], int(data.get("spent", 0))

    def save(self) -> None:
        if self.path is not None:
            from specbatch.io import write_json

            write_json(self.path / "draws.json", {"draws": self.draws, "spent": self.spent})


def key(side: str, prompt: int, temperature: float) -> str:
    return f"{side}|{prompt}|{temperature:g}"


def two_sample_test(a: list, b: list, level: float, rng: np.random.Generator,
                    draws: int | None = None) -> dict:
    """Two-sample G test of homogeneity of two samples of outcomes, with Besag-Clifford's
    sequential Monte Carlo permutation p-value (exact validity at every size: under H0 the
    pooled outcomes are exchangeable), paired with nothing: p = h/l or (g+1)/(draws+1)."""
    from specbatch.theory.conform.power import MC_EXCEEDANCES, mc_budget

    cells = {c: i for i, c in enumerate(dict.fromkeys(map(tuple, a + b)))}
    codes = np.array([cells[tuple(o)] for o in a + b])
    n1, c = len(a), len(cells)

    def g(labels: np.ndarray) -> np.ndarray:  # labels # [r, N] bool (True: sample a)
        ones = np.zeros((labels.shape[0], c))
        both = np.bincount(codes, minlength=c).astype(float)
        for r in range(labels.shape[0]):
            ones[r] = np.bincount(codes[labels[r]], minlength=c)
        table = np.stack([ones, both - ones], axis=1)  # [r, 2, C]
        rows = table.sum(axis=2, keepdims=True)
        expected = rows * both[None, None, :] / both.sum()
        safe = np.where(table > 0, table, 1.0)
        return 2.0 * np.sum(np.where(table > 0, table * np.log(safe / expected), 0.0),
                            axis=(1, 2))

    base = np.zeros(len(codes), dtype=bool)
    base[:n1] = True
    g_obs = float(g(base[None])[0])
    budget = draws or mc_budget(level)
    spent, hits, chunk = 0, 0, 64
    tol = 1e-9 * max(1.0, abs(g_obs))
    while spent < budget:
        m = min(chunk, budget - spent)
        perms = np.stack([rng.permutation(base) for _ in range(m)])
        reach = np.cumsum(g(perms) >= g_obs - tol)
        if reach[-1] + hits >= MC_EXCEEDANCES:
            at = int(np.argmax(reach + hits >= MC_EXCEEDANCES))
            return {"g": g_obs, "df": c - 1, "p_value": MC_EXCEEDANCES / (spent + at + 1),
                    "null_draws": spent + at + 1}
        hits += int(reach[-1])
        spent += m
        chunk *= 2
    return {"g": g_obs, "df": c - 1, "p_value": (hits + 1) / (budget + 1), "null_draws": spent}


class Run:
    """One ``conform --endpoint`` run over its endpoints, reference and store."""

    def __init__(self, settings: EndpointSettings, store: Store, progress=None) -> None:
        from specbatch.analysis.endpoint.client import Budget

        settings.check()
        self.s, self.store, self.progress = settings, store, progress
        self.budget = Budget(settings.budget)
        opts = {"api_key": settings.api_key, "timeout": settings.timeout,
                "retries": settings.retries, "budget": self.budget}
        self.spec = Endpoint(settings.endpoint, flag="--endpoint", **opts)
        self.ref = (Endpoint(settings.reference, flag="--reference", **opts)
                    if settings.reference else None)
        self.model = self.tok = None
        if settings.target_model is not None:
            self.tok, self.model = _load_target(settings.target_model)
        self.prompts = [self._prompt(p) for p in settings.prompts]

    def _prompt(self, text: str):
        """Token ids when the exact target is local (the server must see the same ids), else
        the text."""
        if self.tok is None:
            return text
        return list(self.tok(text, add_special_tokens=True)["input_ids"])

    def _tell(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    # ------------------------------------------------------------ drawing

    def _jobs(self) -> list[tuple[str, Endpoint, int, float, int, int]]:
        """(store key, endpoint, prompt, T, tokens, missing draws) still to draw."""
        s, jobs = self.s, []
        sides = [("spec", self.spec)] + ([("ref", self.ref)] if self.ref else [])
        for i in range(len(self.prompts)):
            for t in s.temperatures:
                for side, ep in sides:
                    want = s.greedy if t == 0 else s.samples
                    have = len(self.store.draws.get(key(side, i, t), []))
                    n = s.greedy_tokens if t == 0 else s.tokens
                    if side == "ref" and t == 0:
                        want = 1
                    if have < want:
                        jobs.append((key(side, i, t), ep, i, t, n, want - have))
        return jobs

    def draw(self) -> None:
        """Send every missing request, ``concurrency`` at a time, saving after each chunk."""
        tasks = [(k, ep, i, t, n) for k, ep, i, t, n, miss in self._jobs() for _ in range(miss)]
        rng = np.random.default_rng([self.s.seed, self.store.spent])
        order = rng.permutation(len(tasks))  # prompts and temperatures interleaved in flight
        tasks = [tasks[j] for j in order]
        chunk = max(4 * self.s.concurrency, 64)
        with ThreadPoolExecutor(max_workers=self.s.concurrency) as pool:
            for start in range(0, len(tasks), chunk):
                part = tasks[start:start + chunk]
                futures = [pool.submit(ep.complete, self.prompts[i], n, t)
                           for _, ep, i, t, n in part]
                error = None
                for (k, *_), fut in zip(part, futures):
                    try:
                        self.store.draws.setdefault(k, []).append(fut.result())
                        self.store.spent += 1
                    except SpecbatchError as exc:
                        error = error or exc
                self.store.save()
                if error is not None:
                    raise error
                self._tell(f"{min(start + chunk, len(tasks))}/{len(tasks)} requests")

    # ------------------------------------------------------------ judging

    def judge(self) -> dict:
        from specbatch.theory.conform.power import (
            detectable_tv_law,
            holm,
            holm_threshold,
            law_test,
        )

        s = self.s
        sampled = [t for t in s.temperatures if t > 0]
        n_tests = len(self.prompts) * len(sampled) * s.tokens
        level = holm_threshold(n_tests, s.alpha)
        rng = np.random.default_rng([s.seed, 0xC0F])
        tests = []
        for i in range(len(self.prompts)):
            for t in sampled:
                got = [tuple(o) for o in self.store.draws[key("spec", i, t)][:s.samples]]
                if self.model is not None and any(isinstance(x, str) for o in got for x in o):
                    raise SpecbatchError("--target-model: the endpoint returns token strings, "
                                         "not ids (vLLM: return_tokens_as_token_ids); compare "
                                         "with a --reference server instead")
                if self.model is not None:
                    from specbatch.analysis.endpoint.target_law import cell_counts, prefix_laws

                    laws = prefix_laws(self.model, self.prompts[i], t, s.tokens, s.floor)
                    for j in range(1, s.tokens + 1):
                        counts, law = cell_counts(got, laws[j - 1], j)
                        fit = law_test(counts, law, level, rng)
                        tests.append({"prompt": i, "temperature": t, "m": j, "g": fit.g,
                                      "df": fit.df, "p_value": fit.p_value,
                                      "observed_tv": 0.5 * float(np.abs(counts / counts.sum()
                                                                        - law).sum()),
                                      "detectable_tv": detectable_tv_law(len(got), law,
                                                                         level)})
                else:
                    ref = [tuple(o) for o in self.store.draws[key("ref", i, t)][:s.samples]]
                    for j in range(1, s.tokens + 1):
                        a, b = [o[:j] for o in got], [o[:j] for o in ref]
                        fit = two_sample_test(a, b, level, rng)
                        n_eff = len(got) * len(ref) / max(1, len(got) + len(ref))
                        tests.append({"prompt": i, "temperature": t, "m": j, **fit,
                                      "observed_tv": _tv(a, b), "detectable_tv":
                                      detectable_tv_law(max(2, int(n_eff)), _empirical(a + b),
                                                        level)})
        rejected = holm([x["p_value"] for x in tests], s.alpha) if tests else []
        for x, r in zip(tests, rejected):
            x["rejected"] = bool(r)
        violations = [f"prompt {x['prompt']} at T = {x['temperature']:g}: the law of the first "
                      f"{x['m']} tokens differs from the reference's (G = {x['g']:.1f}, df "
                      f"{x['df']}, p = {x['p_value']:.2g})" for x in tests if x["rejected"]]
        violations += self._greedy_violations()
        by_m = [max((x["detectable_tv"] for x in tests if x["m"] == j), default=None)
                for j in range(1, s.tokens + 1)]
        return {"tests": tests, "violations": violations, "detectable_tv": by_m[-1],
                "detectable_tv_by_m": by_m,
                "holm_tests": n_tests, "power_approximate": self.model is None}

    def _greedy_violations(self) -> list[str]:
        s, out = self.s, []
        if 0.0 not in [float(t) for t in s.temperatures]:
            return out
        for i in range(len(self.prompts)):
            got = self.store.draws[key("spec", i, 0.0)][:s.greedy]
            if self.model is not None:
                from specbatch.analysis.endpoint.target_law import greedy_tokens

                want = greedy_tokens(self.model, self.prompts[i], s.greedy_tokens)
            else:
                want = self.store.draws[key("ref", i, 0.0)][0]
            bad = [o for o in got if list(o) != list(want)]
            if bad:
                out.append(f"prompt {i} at T = 0: {len(bad)} of {len(got)} greedy completions "
                           f"differ from non-speculative greedy decoding (e.g. {list(bad[0])} "
                           f"vs {list(want)})")
        return out


@functools.lru_cache(maxsize=2)
def _load_target(path: str):
    """(tokenizer, model) of the target directory, loaded once per process."""
    from specbatch.traces.capture.chain import load_target

    return load_target(path)


def _empirical(outcomes: list) -> np.ndarray:
    _, counts = np.unique(np.array([hash(tuple(o)) for o in outcomes]), return_counts=True)
    return counts / counts.sum()


def _tv(a: list, b: list) -> float:
    cells = list(dict.fromkeys(a + b))
    pa = np.array([a.count(c) for c in cells]) / len(a)
    pb = np.array([b.count(c) for c in cells]) / len(b)
    return 0.5 * float(np.abs(pa - pb).sum())


def conform_endpoint(settings: EndpointSettings, out: str | os.PathLike | None = None,
                     progress=None, force: bool = False) -> dict:
    """Run the check (module docstring) and return its report; with ``out``, the draws and
    ``report.json`` are kept there (a rerun with the same settings resumes)."""
    path = _open_result(out, settings, force) if out is not None else None
    store = Store(path)
    store.load()
    run = Run(settings, store, progress)
    before = {"spec": spec_counters(run.spec.metrics()),
              "ref": spec_counters(run.ref.metrics()) if run.ref else None}
    run.draw()
    after = {"spec": spec_counters(run.spec.metrics()),
             "ref": spec_counters(run.ref.metrics()) if run.ref else None}
    verdict = run.judge()
    lossy = bool(verdict["violations"])
    report = {
        "endpoint": settings.endpoint, "reference": settings.reference or
        f"exact target law ({settings.target_model})", "model": run.spec.resolve_model(),
        "prompts": len(run.prompts), "temperatures": list(settings.temperatures),
        "tokens": settings.tokens, "samples": settings.samples, "greedy": settings.greedy,
        "alpha": settings.alpha, "requests_spent": store.spent,
        "requests_this_run": run.budget.spent,
        "power": {"detectable_tv": verdict["detectable_tv"],
                  "detectable_tv_by_m": verdict["detectable_tv_by_m"], "draws": settings.samples,
                  "false_alarm": settings.alpha, "holm_tests": verdict["holm_tests"],
                  "approximate": verdict["power_approximate"]},
        "acceptance": acceptance(before["spec"], after["spec"]),
        "reference_acceptance": acceptance(before["ref"], after["ref"]) if run.ref else None,
        "acceptance_note": None if after["spec"] is not None else
        "the endpoint's /metrics has no vllm:spec_decode_num_drafts_total",
        "violations": verdict["violations"], "lossy": lossy,
        "verdict": "LOSSY" if lossy else "no violation detected",
        "exit_code": 1 if lossy else 0, "tests": verdict["tests"]}
    if path is not None:
        from specbatch.io import write_json

        write_json(path / "report.json", report)
    return report


def _open_result(out, settings: EndpointSettings, force: bool) -> Path:
    """The result folder: new, empty, or one of this kind and settings (resumed); its marker
    is written first (specbatch.io's result marker)."""
    from specbatch.io import RESULT_MARKER, check_result_dir, write_json

    identity = settings.identity()
    path = check_result_dir(out, KIND, identity, force=force)
    path.mkdir(parents=True, exist_ok=True)
    marker = path / RESULT_MARKER
    if not marker.is_file() or force:
        if force:
            for name in ("draws.json", "report.json"):
                (path / name).unlink(missing_ok=True)
        write_json(marker, {"kind": KIND, "identity": identity})
    return path


#: Completions per prompt and temperature tried, in order, by :func:`draws_needed`.
LADDER = (25, 50, 100, 200, 400, 800)


def draws_needed(settings: EndpointSettings, out: str | os.PathLike,
                 ladder: tuple = LADDER) -> tuple[int | None, dict]:
    """The smallest size on ``ladder`` at which the server is caught, and that report (None
    and the last report when no size catches it). Each rung tops up the draws of the one
    before it in ``out`` (resume), so the ladder costs what its last rung costs. A
    measurement of how many draws a fault needs, not a test: looking at the data after every
    rung is optional stopping, which the stated false-alarm rate does not cover."""
    import dataclasses

    report: dict = {}
    for n in ladder:
        report = conform_endpoint(dataclasses.replace(settings, samples=n), out)
        if report["lossy"]:
            return n, report
    return None, report
