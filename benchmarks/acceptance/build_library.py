"""Write traces/data/acceptance/*.json, the bundled published acceptance profiles, from the
numbers their sources print (each entry below quotes them and cites table or comment).

Run: python benchmarks/acceptance/build_library.py   (deterministic; the files are committed)
"""

from __future__ import annotations

from specbatch.traces.acceptance.library import (
    LIBRARY_DIR,
    constant_chain,
    survival_from_mal_table,
)
from specbatch.traces.acceptance.profile import (
    AcceptanceProfile,
    rates_from_survival,
    write_profile,
)

CONSTANT = ("the source gives the mean accepted length at K only: the rates are the constant "
            "chain a_j = alpha with 1 + sum_{j<=K} alpha^j = MAL, which reproduces that MAL at "
            "that K; the decay with position is not known")


def constant_profile(name, mal, k, **fields) -> AcceptanceProfile:
    alpha = constant_chain(mal, k)
    prov = fields.pop("provenance")
    prov = {**prov, "derivation": f"constant chain alpha = {alpha:.6f} solving MAL({k}) = {mal}"}
    return AcceptanceProfile(rates=(alpha,) * k, name=name, provenance=prov,
                             notes=(CONSTANT,) + tuple(fields.pop("notes", ())), **fields)


def table_profile(name, mals, **fields) -> AcceptanceProfile:
    surv = survival_from_mal_table(mals)
    prov = {**fields.pop("provenance"),
            "derivation": "S_k = MAL(k) - MAL(k-1) from the table of MAL at k = 1..7 "
                          "(MAL(0) = 1), a_k = S_k / S_(k-1); two printed digits"}
    return AcceptanceProfile(rates=rates_from_survival(surv), name=name, provenance=prov,
                             **fields)


NEBIUS_70B = ("nebius/EAGLE3-Llama-3.3-70B-Instruct model card, table 'Comparison with Public "
              "Checkpoints' (measured at temperature = 1 with K = 7, proper rejection sampling)")
REDHAT_MAVERICK = ("RedHatAI/Llama4-Maverick-17B-128E-Instruct-speculator.eagle3 model card, "
                   "Evaluations: 'Acceptance lengths' table (k = 1..7)")


def entries() -> list[AcceptanceProfile]:
    out = []
    # vLLM issue #26191: the earlier measurement it quotes (vLLM PR #17504 comment, confirmed
    # in PR #24322): spec_decode.py, --num_spec_tokens 7, philschmid/mt-bench, 80 prompts,
    # --temp 0.0; num_drafts 4816, num_draft_tokens 33712, num_accepted_tokens 12208.
    mal = 1 + 12208 / 4816  # MAL = 1 + A / D (THEORY.md §13)
    out.append(constant_profile(
        "eagle3-llama3.1-8b-mtbench-t0", round(mal, 6), 7, drafter="eagle3",
        target="meta-llama/Llama-3.1-8B-Instruct", draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        conditions={"dataset": "philschmid/mt-bench (80 prompts)", "temperature": 0.0,
                    "engine": "vLLM V1 (examples/offline_inference/spec_decode.py)"},
        provenance={"source": "published", "citation": "vllm-project/vllm issue #26191 "
                    "(the 'previous AL = 3.53' run it quotes, from PR #17504)",
                    "published": {"num_drafts": 4816, "num_draft_tokens": 33712,
                                  "num_accepted_tokens": 12208, "K": 7,
                                  "mean_acceptance_length": 3.53}}))
    out.append(constant_profile(
        "eagle3-llama3.1-8b-mtbench-t1", 2.77, 7, drafter="eagle3",
        target="meta-llama/Llama-3.1-8B-Instruct", draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        conditions={"dataset": "MT-bench", "temperature": 1.0},
        provenance={"source": "published", "citation": NEBIUS_70B,
                    "published": {"K": 7, "tau": {"MT-bench": 2.77, "HumanEval": 3.49,
                                                  "GSM8K": 3.34}}}))
    out.append(constant_profile(
        "eagle3-llama3.3-70b-mtbench-t1", 2.88, 7, drafter="eagle3",
        target="meta-llama/Llama-3.3-70B-Instruct",
        draft="RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3",
        conditions={"dataset": "MT-bench", "temperature": 1.0},
        provenance={"source": "published", "citation": NEBIUS_70B,
                    "published": {"K": 7, "tau": {"MT-bench": 2.88, "HumanEval": 3.62,
                                                  "GSM8K": 3.29}}}))
    for use, dataset, mals in (
            ("coding", "HumanEval (168 samples)", [1.83, 2.45, 2.94, 3.26, 3.47, 3.57, 3.62]),
            ("summarization", "CNN/Daily Mail (80 samples)",
             [1.69, 2.12, 2.37, 2.52, 2.60, 2.63, 2.63])):
        out.append(table_profile(
            f"eagle3-llama4-maverick-{use}", mals, drafter="eagle3",
            target="meta-llama/Llama-4-Maverick-17B-128E-Instruct",
            draft="RedHatAI/Llama4-Maverick-17B-128E-Instruct-speculator.eagle3",
            conditions={"dataset": dataset, "engine": "vLLM"},
            provenance={"source": "published", "citation": REDHAT_MAVERICK,
                        "published": {"mean_accept_length_at_k": mals}},
            notes=("the card states no temperature for the acceptance table (its throughput "
                   "runs use 0.6, vLLM 0.11.0)",)))
    out.append(AcceptanceProfile(
        rates=(0.875,), drafter="mtp", target="deepseek-ai/DeepSeek-V3",
        draft="DeepSeek-V3 MTP module (1 layer)", name="mtp-deepseek-v3-k1",
        conditions={"dataset": "various generation topics (not listed)"},
        provenance={"source": "published", "citation": "DeepSeek-V3 Technical Report, "
                    "arXiv:2412.19437, section 5.4.3 (Multi-Token Prediction Evaluation)",
                    "published": {"K": 1, "second_token_acceptance": [0.85, 0.90]},
                    "derivation": "a_1 = 0.875, the middle of the reported 85-90 % range"},
        notes=("the source gives a range, 85 % to 90 %, across topics; plan across it with "
               "a scaled profile (x0.971 and x1.029) when the end matters",)))
    out.append(constant_profile(
        "mtp-deepseek-v3-0324-k7-t0", 3.20, 7, drafter="mtp",
        target="deepseek-ai/DeepSeek-V3-0324", draft="DeepSeek-V3-0324 MTP module (original)",
        conditions={"dataset": "MT-bench + HumanEval + GSM8K (pooled)", "temperature": 0.0},
        provenance={"source": "published", "citation": "nebius/MTP-DeepSeek-V3-0324 model "
                    "card, Performance table, row 'Original MTP' (K = 7)",
                    "published": {"K": 7, "tau": {"temperature 0": 3.20,
                                                  "temperature 1": 3.09}}},
        notes=("the one MTP layer is reused for every draft position past the first",)))
    # vLLM PR #24344 (ngram-eagle), the 'method: ngram' run: --num_spec_tokens 5,
    # --prompt_lookup_max 5 --prompt_lookup_min 2, vdaita/edit_5k_char, 90 prompts,
    # --hf-output-len 2048: num_drafts 993, num_draft_tokens 4960, num_accepted_tokens 3562,
    # num_tokens_generated_without_sd 821, acceptance at token 0..4: 0.81 0.74 0.70 0.68 0.66
    # (unconditional, c_j / num_drafts, two digits). Llama-3.1-8B (vLLM issue #17812 lists
    # this PR under 'llama 3.1 8b').
    drafts, bare = 993, 821
    uncond = [0.81, 0.74, 0.70, 0.68, 0.66]
    steps = drafts + bare  # every decode step: with a draft, or without one (no match)
    surv = [u * drafts / steps for u in uncond]
    hist = [1 - surv[0]] + [surv[n] - surv[n + 1] for n in range(4)] + [surv[4]]
    out.append(AcceptanceProfile(
        rates=rates_from_survival(surv), histogram=tuple(hist), drafter="ngram",
        target="meta-llama/Llama-3.1-8B-Instruct", draft="ngram (prompt lookup 2..5)",
        name="ngram-llama3.1-8b-code-edit",
        conditions={"dataset": "vdaita/edit_5k_char (code editing, 90 prompts)",
                    "engine": "vLLM V1 (examples/offline_inference/spec_decode.py)"},
        provenance={"source": "published", "citation": "vllm-project/vllm PR #24344, the "
                    "'method: ngram' run in its description",
                    "published": {"K": 5, "num_drafts": drafts, "num_draft_tokens": 4960,
                                  "num_accepted_tokens": 3562,
                                  "num_tokens_generated_without_sd": bare,
                                  "acceptance_at_token": uncond},
                    "derivation": "per decode step, with the 821 steps that found no match "
                                  "(no draft) as tau = 0: S_j = p_j x 993 / 1814; histogram "
                                  "h_n = S_n - S_(n+1)"},
        notes=("steps without a match proposed no draft; here they are drafting steps that "
               "accept nothing (their draft costs nothing with an n-gram drafter, but the "
               "verify pass of such a step is priced with K tokens)",)))
    return out


def main() -> None:
    LIBRARY_DIR.mkdir(parents=True, exist_ok=True)
    for p in entries():
        write_profile(p, LIBRARY_DIR / f"{p.name}.json")
        print(p.name)


if __name__ == "__main__":
    main()
