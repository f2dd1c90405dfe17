"""Shared fixtures. `tiny_pair_env`: env vars that make every CodeCue tool load the random tiny pair "tiny"."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair_env(tmp_path_factory) -> dict[str, str]:
    from engine.testing import build_tiny_pair

    home, toml = build_tiny_pair(tmp_path_factory.mktemp("tiny"))
    return {"CODECUE_HOME": str(home), "CODECUE_MODELS_TOML": str(toml), "CODECUE_DTYPE": "float32"}
