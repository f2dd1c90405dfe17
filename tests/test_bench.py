"""codecue-bench engine end to end on the tiny pair: every mode runs, the report has its fields, and in fp32 every
mode reproduces target-alone."""
import json

from engine.bench import main


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
    assert set(report["modes"]) == {"target", "speculative", "lookup", "hybrid", "hf_assisted"}
    for mode, m in report["modes"].items():
        assert m["identical_to_target"], (mode, report["per_prompt"])
        assert m["new_tokens"] == report["modes"]["target"]["new_tokens"] > 0
        assert m["tokens_per_s"] > 0
    assert report["speedup_vs_target"]["target"] == 1.0
    assert report["speedup_vs_hf_assisted"]["hf_assisted"] == 1.0
    assert report["pass_costs"]["target_1"] > 0 and report["pass_costs"]["draft_cost_ratio"] > 0


def test_bench_reports_missing_models_with_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CODECUE_HOME", str(tmp_path / "empty"))
    assert main(["engine", "--pair", "default", "--limit", "1"]) == 1
    assert "codecue-models fetch" in capsys.readouterr().err


def test_prompt_bench_measures_every_suffix_budget_on_the_same_holes(monkeypatch, tiny_pair_env):
    from codecue_lsp.bench_prompt import holes, run

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    name, text, line, character, truth = holes(1)[0]
    assert text.split("\n")[line] == " " * character and truth and truth not in text.split("\n")[line]
    report = run("tiny", [0, 64], count=2, max_new_tokens=4)
    assert report["holes"] == 2 and set(report["budgets"]) == {"0", "64"}
    # More suffix budget means a longer prompt on the same holes.
    assert report["budgets"]["64"]["mean_prompt_tokens"] > report["budgets"]["0"]["mean_prompt_tokens"]
    assert all(0.0 <= b["line_exact_match"] <= 1.0 for b in report["budgets"].values())
