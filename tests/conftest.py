"""Shared fixtures. `tiny_pair_env`: env vars that make every CodeCue tool load the random tiny pair "tiny".

Under CI (CI=true) a skipped test or module counts as failed: a missing dependency, editor or model must turn CI
red, not quietly drop the tests that needed it."""
from __future__ import annotations

import os

import pytest

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def share_kernel_builds() -> None:
    """Tests run with homes of their own (and calibration children inherit them): the vnni kernel is built once
    per session in the real home's extensions folder, not once per home (~40 s a build on 2 cores)."""
    from engine.paths import codecue_home

    os.environ.setdefault("CODECUE_EXTENSIONS", str(codecue_home() / "extensions"))


share_kernel_builds()


def fail_skip_under_ci(report) -> None:
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, and CI={os.environ['CI']} allows no skip: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    fail_skip_under_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    fail_skip_under_ci(report)  # a module-level skip (importorskip) skips at collection
    return report


@pytest.fixture(autouse=True)
def engine_options_from_the_environment():
    """Each test starts with the engine's options read from its environment at their first use (a test's
    monkeypatch.setenv before that counts), and leaves none of its own behind (engine/options.py)."""
    from engine import options

    options.use(None)
    yield
    options.use(None)


@pytest.fixture
def engine_options():
    """set_options(**fields): the engine's options for this test, the environment's with these fields changed."""
    from dataclasses import replace

    from engine import options

    def set_options(**changes):
        options.use(replace(options.current(), **changes))
        return options.current()
    return set_options


@pytest.fixture(scope="session")
def tiny_pair_env(tmp_path_factory) -> dict[str, str]:
    from engine.testing import build_tiny_pair

    home, toml = build_tiny_pair(tmp_path_factory.mktemp("tiny"))
    return {"CODECUE_HOME": str(home), "CODECUE_MODELS_TOML": str(toml), "CODECUE_DTYPE": "float32"}
