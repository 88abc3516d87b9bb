"""The zoo's ingredients: named sizes, the local-text corpus, the tokenizer and the models.

A zoo size (:data:`ZOO_SIZES`) fixes the tokenizer's vocabulary, the draft and target decoder shapes
and the training budget; :func:`build_corpus` gathers the standard library's code and prose (plus
optional files) into train and held-out documents, :func:`train_tokenizer` fits a byte-level BPE on
them and :func:`make_model` builds an untrained ``LlamaForCausalLM`` of a shape. Training both
models (:func:`traces.models.zoo.train_zoo`) lives in :mod:`traces.models.zoo`, which re-exports
every name here; the tests and benchmarks that only need a tokenizer or a small model import these
without the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.traces.corpus import stdlib_documents

EOS = "<|endoftext|>"


@dataclass(frozen=True)
class ModelSize:
    """A Llama-style decoder's shape (the fields of ``LlamaConfig`` that matter)."""

    layers: int
    hidden: int
    heads: int
    intermediate: int


@dataclass(frozen=True)
class ZooSize:
    """One named zoo configuration: tokenizer, both models, and the training budget."""

    name: str
    vocab: int
    draft: ModelSize
    target: ModelSize
    seq_len: int
    batch: int
    steps: int
    lr: float
    code_chars: int          # cap on training code text (characters)
    prose_chars: int         # cap on training prose text
    eval_windows: int        # held-out windows of seq_len tokens for the loss
    draft_fraction: float = 0.5  # the draft trains on the first half of the target's batches


ZOO_SIZES: dict[str, ZooSize] = {
    s.name: s
    for s in (
        ZooSize("tiny", 512, ModelSize(1, 32, 2, 64), ModelSize(2, 96, 4, 192),
                seq_len=64, batch=8, steps=30, lr=3e-3, code_chars=150_000,
                prose_chars=60_000, eval_windows=8),
        ZooSize("small", 2048, ModelSize(2, 64, 2, 192), ModelSize(4, 224, 4, 640),
                seq_len=128, batch=16, steps=300, lr=2e-3, code_chars=3_000_000,
                prose_chars=1_200_000, eval_windows=64),
        ZooSize("base", 8192, ModelSize(4, 256, 4, 704), ModelSize(12, 768, 12, 2048),
                seq_len=512, batch=32, steps=20_000, lr=6e-4, code_chars=10**9,
                prose_chars=10**9, eval_windows=256),
    )
}


def get_zoo_size(name: str) -> ZooSize:
    size = ZOO_SIZES.get(name)
    if size is None:
        raise SpecbatchError(f"zoo size {name!r}: expected one of {', '.join(ZOO_SIZES)}")
    return size


# ----------------------------------------------------------------------------- corpus
def _cap(docs: list[str], chars: int) -> list[str]:
    out, total = [], 0
    for d in docs:
        if total >= chars:
            break
        out.append(d[: chars - total])
        total += len(out[-1])
    return out


def _interleave(a: list[str], b: list[str]) -> list[str]:
    """Deterministic mix of two document lists, spread evenly by position."""
    keyed = [(i / max(len(a), 1), 0, d) for i, d in enumerate(a)]
    keyed += [(i / max(len(b), 1), 1, d) for i, d in enumerate(b)]
    return [d for _, _, d in sorted(keyed, key=lambda x: (x[0], x[1]))]


def build_corpus(size: ZooSize, extra: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(train documents, held-out documents) for a zoo size."""
    code = _cap(stdlib_documents("code", "train"), size.code_chars)
    prose = _cap(stdlib_documents("prose", "train"), size.prose_chars)
    extra_docs = []
    for path in extra or []:
        p = Path(path)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        if not p.exists():
            raise SpecbatchError(f"corpus {path}: expected a file or directory, got no such path")
        for f in files:
            if f.is_file():
                try:
                    extra_docs.append(f.read_text(encoding="utf-8"))
                except (UnicodeDecodeError, OSError):
                    continue
    train = _interleave(code, prose) + extra_docs
    cap = max(size.eval_windows * size.seq_len * 6, 20_000)
    heldout = _interleave(_cap(stdlib_documents("code", "heldout"), cap),
                          _cap(stdlib_documents("prose", "heldout"), cap // 2))
    return train, heldout


def train_tokenizer(docs: list[str], vocab: int):
    """Byte-level BPE with one special token (``<|endoftext|>``, the document separator)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS,
                                   unk_token=EOS, pad_token=EOS)


def encode_stream(tokenizer, docs: list[str]) -> np.ndarray:
    """All documents as one token stream, each followed by ``<|endoftext|>``.  # [tokens]"""
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    out = []
    for seq in ids:
        out.extend(seq)
        out.append(eos)
    return np.asarray(out, dtype=np.int64)


def make_model(shape: ModelSize, vocab: int, seq_len: int, eos_id: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads, max_position_embeddings=max(4096, 4 * seq_len),
        tie_word_embeddings=False, bos_token_id=eos_id, eos_token_id=eos_id,
        pad_token_id=eos_id, rms_norm_eps=1e-5,
    )
    return LlamaForCausalLM(config)
