"""What every sub-command shares: thread defaults, plurals and help texts without slips."""

from __future__ import annotations

import argparse

import pytest

from specbatch.cli import build_parser
from specbatch.cli.common import plural, set_threads

torch = pytest.importorskip("torch")


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cpu_runs_default_to_one_thread(restore_threads):
    torch.set_num_threads(2)
    assert set_threads(None, "cpu") == 1 == torch.get_num_threads()
    assert set_threads(2, "cpu") == 2 == torch.get_num_threads()


def test_cuda_runs_keep_torchs_threads_unless_asked(restore_threads):
    torch.set_num_threads(2)
    assert set_threads(None, "cuda:0") == 2
    assert set_threads(1, "cuda") == 1


def test_bad_thread_count_is_a_one_line_error():
    from specbatch.errors import SpecbatchError

    with pytest.raises(SpecbatchError, match="--threads: expected N >= 1, got 0"):
        set_threads(0, "cpu")


def test_plural():
    assert (plural(1, "run"), plural(0, "run"), plural(19, "run")) == ("1 run", "0 runs", "19 runs")


def _helps(parser: argparse.ArgumentParser, name: str = "specbatch"):
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _helps(sub, f"{name} {verb}")


HELPS = dict(_helps(build_parser()))


@pytest.mark.parametrize("name", list(HELPS))
def test_help_texts_have_no_slips(name):
    text = " ".join(HELPS[name].split())
    for slip in ("(default None)", "default None", "a int", "1 runs", "default default"):
        assert slip not in text, f"{name} --help: {slip!r}"


@pytest.mark.parametrize("name", ["specbatch live", "specbatch profile", "specbatch capture"])
def test_model_commands_say_the_thread_default(name):
    assert "--threads N torch CPU threads (default 1 on CPU" in " ".join(HELPS[name].split())


@pytest.mark.parametrize("name", ["specbatch live", "specbatch capture"])
def test_live_and_capture_document_the_same_text_prompt_sources(name):
    text = " ".join(HELPS[name].split())
    assert "JSONL" in text and "default:N[:SEED]" in text and "random:N:LEN" in text


def test_validate_examples_read_what_an_earlier_example_wrote():
    """Each path an example of ``validate --help`` reads is the --out of an example above it
    (profile_grid.csv only from a live run with --profile-grid)."""
    lines = HELPS["specbatch validate"].split("example:")[1].strip().splitlines()
    written: dict[str, list[str]] = {}
    for words in (line.split() for line in lines):
        if words[1] == "validate":
            reads = [words[2]] + [words[i + 1] for i, w in enumerate(words) if w == "--profile"]
            for path in reads:
                out = next((o for o in written if path == o or path.startswith(o + "/")), None)
                assert out is not None, (" ".join(words), path)
                assert not path.endswith("profile_grid.csv") or "--profile-grid" in written[out]
        if "--out" in words:
            written[words[words.index("--out") + 1]] = words
