"""The exact target law a speculative server must reproduce, from the target model itself.

With ``--target-model DIR`` the reference is not a second server's sample but the law of
the first m tokens under plain sampling of Mb at temperature T (THEORY.md §4: a lossless
server's output has exactly this law), computed by expanding the prefix tree of the first m
tokens: depth j keeps every prefix whose probability is at least ``floor`` (one batched
forward pass per depth over the kept prefixes) and sends the rest of the mass to one cell,
``REST``, whose exact probability is 1 − Σ kept. That is an exact law on a coarser
partition of the outcomes, so the one-sample tests of :mod:`specbatch.theory.conform.power`
apply as they are (their stated power adds the pooled mass, REST included).
"""

from __future__ import annotations

import numpy as np

#: The cell of every outcome whose prefix was not kept.
REST = ("<rest>",)


def prefix_laws(model, prompt_ids: list[int], temperature: float, m: int,
                floor: float = 1e-4, batch: int = 256) -> list[dict[tuple, float]]:
    """``laws[j-1]``: ``{prefix of length j: exact probability}`` of the kept prefixes, plus
    ``REST`` with the remaining mass (module docstring)."""
    import torch

    from specbatch.theory.verify.torch_path_stats import probs_at

    device = next(model.parameters()).device
    frontier: dict[tuple, float] = {(): 1.0}
    laws = []
    with torch.inference_mode():
        for _ in range(m):
            level: dict[tuple, float] = {}
            keys = list(frontier)
            for start in range(0, len(keys), batch):
                chunk = keys[start:start + batch]
                ids = torch.tensor([list(prompt_ids) + list(k) for k in chunk], device=device)
                probs = probs_at(model(input_ids=ids).logits[:, -1], temperature).cpu().numpy()
                for key, row in zip(chunk, probs):  # row # [V]
                    joint = frontier[key] * row
                    for tok in np.flatnonzero(joint >= floor):
                        level[key + (int(tok),)] = float(joint[tok])
            law = dict(level)
            law[REST] = max(0.0, 1.0 - sum(level.values()))
            laws.append(law)
            frontier = level
    return laws


def greedy_tokens(model, prompt_ids: list[int], n: int) -> list[int]:
    """The target's own greedy decoding of n tokens (each prefix recomputed: no cache)."""
    import torch

    device = next(model.parameters()).device
    ids, out = list(prompt_ids), []
    with torch.inference_mode():
        for _ in range(n):
            nxt = int(model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


def cell_counts(outcomes: list[tuple], law: dict[tuple, float], m: int) -> tuple:
    """(counts # [C], probabilities # [C]) of the outcomes' first m tokens on the law's cells
    (an unkept prefix counts in REST)."""
    cells = list(law)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    rest = index[REST]
    for o in outcomes:
        counts[index.get(tuple(o[:m]), rest)] += 1
    return counts, np.array([law[c] for c in cells])
