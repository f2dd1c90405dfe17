"""codecue-bench engine end to end on the tiny pair: every mode runs, the report has its fields, and in fp32 every
mode reproduces target-alone."""
import json

import pytest

from codecue_bench.__main__ import main

MODES = {"target", "auto", "speculative", "lookup", "hybrid", "hf_assisted"}


def test_bench_engine_report_on_the_tiny_pair(tmp_path, monkeypatch, tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"name": "add", "prefix": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))\n"},
            {"name": "rep", "prefix": "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\n", "suffix": ""}]
    prompts.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "report.json"
    assert main(["engine", "--pair", "tiny", "--prompts", str(prompts), "--max-new-tokens", "12",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["prompts"] == 2 and report["dtype"] == "float32"
    # No llama.cpp is built in the tiny pair's home, and the tiny pair has no GGUF: no llama_cpp mode.
    assert set(report["modes"]) == MODES
    target = report["modes"]["target"]
    for mode, m in report["modes"].items():
        assert m["identical_to_target"], (mode, report["per_prompt"])
        assert m["new_tokens"] == target["new_tokens"] > 0
        assert m["tokens_per_s"] == pytest.approx(m["new_tokens"] / m["seconds"])
        assert m["ms_per_completion"] == pytest.approx(1000 * m["seconds"] / 2)
        assert report["speedup_vs_target"][mode] == pytest.approx(m["tokens_per_s"] / target["tokens_per_s"])
        if mode == "hf_assisted":
            assert m["decode_tokens_per_s"] is None  # transformers does not split prefill from decoding
        else:
            # Decoding leaves out the measured prefill, so it must be the faster rate.
            assert m["seconds_prefill"] > 0 and m["decode_tokens_per_s"] > m["tokens_per_s"]
    # Only the drafting modes draft; target-alone never does.
    assert target["acceptance_rate"] is None and report["modes"]["speculative"]["acceptance_rate"] is not None
    assert "speedup_vs_llama_cpp" not in report
    assert report["pass_costs"]["target_1"] > 0 and report["pass_costs"]["draft_cost_ratio"] > 0
    assert [r["name"] for r in report["per_prompt"]] == ["add", "rep"]


def test_bench_reports_missing_models_with_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CODECUE_HOME", str(tmp_path / "empty"))
    assert main(["engine", "--pair", "default", "--limit", "1"]) == 1
    assert "codecue-models fetch" in capsys.readouterr().err


def test_llama_mode_without_llama_cpp_says_how_to_build_it(tmp_path, monkeypatch, capsys, tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    assert main(["engine", "--pair", "tiny", "--modes", "target,llama_cpp", "--limit", "1"]) == 1
    assert "scripts/build-llama-cpp.sh" in capsys.readouterr().err


def test_prompt_bench_measures_every_suffix_budget_on_the_same_holes(monkeypatch, tiny_pair_env):
    from codecue_bench.prompt_bench import holes, run

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    name, text, line, character, truth = holes(1)[0]
    assert text.split("\n")[line] == " " * character and truth and truth not in text.split("\n")[line]
    report = run("tiny", [0, 64], count=2, max_new_tokens=4)
    assert report["holes"] == 2 and set(report["budgets"]) == {"0", "64"}
    # More suffix budget means a longer prompt on the same holes.
    assert report["budgets"]["64"]["mean_prompt_tokens"] > report["budgets"]["0"]["mean_prompt_tokens"]
    assert all(0.0 <= b["line_exact_match"] <= 1.0 for b in report["budgets"].values())


def test_without_a_draft_model_the_draft_modes_are_left_out_or_refused(capsys):
    from types import SimpleNamespace

    from codecue_bench.engine_bench import pick_modes
    from engine.models import ModelsError

    # The calibration decided the draft model does not pay: "hybrid" would silently run lookup alone.
    pair = SimpleNamespace(draft=None, spec=SimpleNamespace(target=SimpleNamespace(gguf_file=None)))
    assert pick_modes(SimpleNamespace(modes=None, no_llama_cpp=False, llama_server=None), pair) == \
        ["target", "auto", "lookup"]
    assert "--with-draft" in capsys.readouterr().err
    with pytest.raises(ModelsError, match="--with-draft"):
        pick_modes(SimpleNamespace(modes="target,hybrid"), pair)
    with pytest.raises(ModelsError, match="unknown mode"):
        pick_modes(SimpleNamespace(modes="target,llama"), pair)
    # A llama-server URL brings the llama_cpp mode in, unless told otherwise.
    url = "http://127.0.0.1:1"
    assert pick_modes(SimpleNamespace(modes=None, no_llama_cpp=False, llama_server=url), pair)[-1] == "llama_cpp"
    assert "llama_cpp" not in pick_modes(SimpleNamespace(modes=None, no_llama_cpp=True, llama_server=url), pair)
