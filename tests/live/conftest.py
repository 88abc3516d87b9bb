"""Live-test fixtures: the tiny model pair, built once per module, one torch thread."""

from __future__ import annotations

import importlib.util

import pytest

from tests.live.helpers import load_saved_pair, one_torch_thread, save_pair


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    if importlib.util.find_spec("torch") is None:
        yield
        return
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return save_pair(tmp_path_factory.mktemp("livepair"))


@pytest.fixture(scope="module")
def models(pair):
    return load_saved_pair(pair)
