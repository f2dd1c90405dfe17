"""How many tokens a prompt may have: promptTokens "auto" sizes it by the calibrated prefill rate, a number is kept."""
import dataclasses

import pytest

from codecue_lsp.config import Settings
from codecue_lsp.prompt import OpenDocument
from codecue_lsp.prompt.sizing import (
    DEFAULT_TOTAL,
    SMALLEST_AUTO_TOTAL,
    budget_for,
    total_for_prefill_rate,
)


@pytest.mark.parametrize("tokens_per_s, total", [
    (None, DEFAULT_TOTAL),      # not measured: the default
    (0.0, DEFAULT_TOTAL),       # screened out, never a zero budget
    (5.0, SMALLEST_AUTO_TOTAL),  # a slow machine: never below what completed as well as the default
    (50.0, 1024),               # llama.cpp on 2 Zen 3 cores: 600 tokens in 12 s, raised to the floor
    (90.0, 1024),               # 1,080 in 12 s, in steps of 128
    (100.0, 1152),
    (128.0, 1536),
    (5000.0, DEFAULT_TOTAL),    # a GPU: never more than the default without being asked
])
def test_auto_total_is_what_the_machine_prefills_in_a_few_seconds(tokens_per_s, total):
    assert total_for_prefill_rate(tokens_per_s) == total


def test_a_budget_gives_the_context_a_third_and_keeps_the_suffix():
    assert budget_for(1536) == dataclasses.replace(budget_for(1536), suffix=128, context=512)
    small = budget_for(1024)
    assert (small.total, small.suffix, small.context) == (1024, 128, 341)


def test_prompt_tokens_setting_takes_auto_or_a_number():
    assert Settings().prompt_tokens == "auto"
    assert Settings().merged({"promptTokens": 768}).prompt_tokens == 768
    assert Settings().merged({"prompt_tokens": "1024"}).prompt_tokens == 1024
    assert Settings().merged({"promptTokens": 768}).merged({"promptTokens": "AUTO"}).prompt_tokens == "auto"
    for bad in (100, "lots", True, 10 ** 6, [512]):
        assert Settings().merged({"promptTokens": bad}).prompt_tokens == "auto", bad


def test_prompt_tokens_flag(capsys):
    from codecue_lsp.__main__ import cli_settings, main, parse_args

    assert cli_settings(parse_args(["--prompt-tokens", "640"])) == {"prompt_tokens": "640"}
    assert Settings().merged(cli_settings(parse_args(["--prompt-tokens", "640"]))).prompt_tokens == 640
    assert main(["--check", "--prompt-tokens", "lots"]) == 2
    assert "--prompt-tokens" in capsys.readouterr().err


class Measured:
    """The calibration's row for the loaded target, as engine/calibration/measurements.py writes it."""
    def __init__(self, tokens_per_s):
        from engine.calibration.measurements import Calibration, Choice, Measurement

        self.calibration = Calibration({"cpu": "test"}, [
            Measurement("target", "llamacpp", "ggml", {1: 60.0}, tokens_per_s),
            Measurement("target", "dense", "bfloat16", {1: 90.0}, 4 * tokens_per_s),  # not the chosen format
        ])
        self.choice = Choice("llamacpp", "ggml", None, None, False)


def long_document() -> tuple[OpenDocument, int, int]:
    body = "".join(f"def function_{i}(value):\n    return value * {i} + helper_{i}(value)\n\n\n" for i in range(120))
    text = "import os\n\n\n" + body + "def last(value):\n    \n" + body
    line = text[: text.index("def last(value):\n    \n") + len("def last(value):\n    ")].count("\n")
    return OpenDocument("file:///long.py", "python", text), line, 4


@pytest.mark.parametrize("rate, asked, most", [
    (None, "auto", DEFAULT_TOTAL),  # no calibration: the default
    (50.0, "auto", 1024),           # measured slow: smaller prompts
    (50.0, 512, 512),               # a number is kept whatever the machine
])
def test_the_completer_sizes_prompts_from_the_engines_measured_prefill(rate, asked, most):
    from engine_helpers import tiny_engine

    from codecue_lsp.completer import Completer

    engine = tiny_engine("none")
    if rate is not None:
        measured = Measured(rate)
        engine.pair.calibration, engine.pair.choice = measured.calibration, measured.choice
    try:
        assert engine.prefill_tokens_per_s == rate
        completer = Completer(engine)
        doc, line, character = long_document()
        # (no cold start: that first prompt is smaller, tests/test_prompt_growth.py)
        prepared = completer.prepare(doc, line, character, Settings(prompt_tokens=asked, cold_prompt_tokens="off"))
        tokens = len(prepared.request.prompt_ids) + bool(prepared.request.heal)  # healing held one token back
        # The document is far longer: the budget bounds the prompt (the prefix starts at a statement boundary).
        assert 0.75 * most < tokens <= most
        assert prepared.request.kind == prepared.built.mode in ("line", "block")  # the policy pools per kind
    finally:
        engine.close()


def test_a_remote_engine_keeps_the_default_unless_told():
    from codecue_lsp.remote import RemoteCompleter

    completer = RemoteCompleter(backend=None, fim=None, count_tokens=len)
    assert completer.prompt_tokens(Settings()) == DEFAULT_TOTAL
    assert completer.prompt_tokens(Settings(prompt_tokens=640)) == 640
