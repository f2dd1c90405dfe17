"""`codecue-bench ab` (codecue_bench/ab_bench.py) against two fake checkouts: each holds a codecue_bench/__main__.py
that logs how it was run and writes an engine bench JSON with known rates, so the interleaving, the environment of
each run, the ratios and the JSON are checked without a model."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from codecue_bench.__main__ import main as bench_main
from codecue_bench.ab_bench import main, run_order, summarize

# The fake engine bench: its checkout's rates of round N are RATES[mode][N - 1], N counted from the log.
FAKE_MAIN = '''
import json, os, sys
from pathlib import Path

RATES = {rates!r}
EXIT = {exit_code!r}
here = Path(__file__).resolve().parents[1]
log = here.parent / "calls.jsonl"
calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
number = sum(1 for call in calls if call["checkout"] == here.name)
with log.open("a") as f:
    f.write(json.dumps({{"checkout": here.name, "argv": sys.argv[1:], "cwd": os.getcwd(), "module": __file__,
                        "pythonpath": os.environ.get("PYTHONPATH", ""), "python": sys.executable}}) + "\\n")
print("fake engine bench in", here.name)
if EXIT:
    sys.exit(EXIT)
args = sys.argv[1:]
modes = args[args.index("--modes") + 1].split(",")
report = {{"rounds": 1, "modes": {{mode: {{"tokens_per_s": RATES[mode][number],
                                         "decode_tokens_per_s": 2 * RATES[mode][number]}} for mode in modes}}}}
Path(args[args.index("--json") + 1]).write_text(json.dumps(report))
'''


def fake_checkout(root: Path, name: str, rates: dict[str, list[float]], exit_code: int = 0) -> Path:
    package = root / name / "codecue_bench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(FAKE_MAIN.format(rates=rates, exit_code=exit_code))
    return root / name


def calls(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]


BEFORE = {"target": [10.0, 12.0, 11.0], "auto": [20.0, 18.0, 22.0], "llama_cpp": [10.0, 10.0, 10.0]}
AFTER = {"target": [10.0, 13.2, 11.0], "auto": [22.0, 18.0, 24.2], "llama_cpp": [10.0, 12.0, 10.0]}


@pytest.mark.parametrize("rounds, order", [
    (1, [(1, "before"), (1, "after")]),
    (2, [(1, "before"), (1, "after"), (2, "after"), (2, "before")]),
    (3, [(1, "before"), (1, "after"), (2, "after"), (2, "before"), (3, "before"), (3, "after")]),
])
def test_the_checkouts_alternate_which_runs_first(rounds, order):
    assert run_order(rounds) == order


def test_each_round_runs_both_checkouts_in_turn_each_in_its_own_tree(tmp_path, capsys):
    before = fake_checkout(tmp_path, "before", BEFORE)
    after = fake_checkout(tmp_path, "after", AFTER)
    assert main(["--before", str(before), "--after", str(after), "--warm", "--", "--prompts", "p.jsonl"]) == 0
    runs = calls(tmp_path)
    assert [run["checkout"] for run in runs] == ["before", "after", "after", "before", "before", "after"]
    for run in runs:
        folder = tmp_path / run["checkout"]
        assert Path(run["cwd"]) == folder and Path(run["module"]).is_relative_to(folder)  # the checkout's own code
        assert run["pythonpath"].split(os.pathsep)[0] == str(folder)
        assert run["python"] == sys.executable
        json_at = run["argv"].index("--json") + 1
        assert run["argv"][:json_at] == ["engine", "--rounds", "1", "--json"]
        assert run["argv"][json_at + 1:] == ["--modes", "target,auto,llama_cpp", "--warm", "--prompts", "p.jsonl"]
    assert len({run["argv"][4] for run in runs}) == 6  # a JSON of its own for every run
    err = capsys.readouterr().err
    assert "[round 1/3 before] fake engine bench in before" in err
    assert "[round 2/3 after] fake engine bench in after" in err


# (metric, modes, after ÷ before medians, x llama.cpp medians {before, after} or None without llama.cpp)
RATIO_CASES = [
    ("tokens_per_s", ["target", "auto", "llama_cpp"],
     # per round: target 1.0, 1.1, 1.0; auto 1.1, 1.0, 1.1; llama.cpp 1.0, 1.2, 1.0
     {"target": 1.0, "auto": 1.1, "llama_cpp": 1.0},
     # before: target 1.0, 1.2, 1.1 and auto 2.0, 1.8, 2.2; after: target 1.0, 1.1, 1.1 and auto 2.2, 1.5, 2.42
     {"before": {"target": 1.1, "auto": 2.0}, "after": {"target": 1.1, "auto": 2.2}}),
    ("decode_tokens_per_s", ["target", "auto", "llama_cpp"],  # twice every rate: the same ratios
     {"target": 1.0, "auto": 1.1, "llama_cpp": 1.0},
     {"before": {"target": 1.1, "auto": 2.0}, "after": {"target": 1.1, "auto": 2.2}}),
    ("tokens_per_s", ["auto", "target"], {"auto": 1.1, "target": 1.0}, None),
]


@pytest.mark.parametrize("metric, modes, after_over_before, x_llama_cpp", RATIO_CASES)
def test_ratios_are_medians_over_rounds_of_each_rounds_ratio(metric, modes, after_over_before, x_llama_cpp):
    reports = {(number, side): {"modes": {mode: {"tokens_per_s": rates[mode][number - 1],
                                                 "decode_tokens_per_s": 2 * rates[mode][number - 1]}
                                          for mode in rates}}
               for number in (1, 2, 3) for side, rates in (("before", BEFORE), ("after", AFTER))}
    summary = summarize(reports, modes, metric)
    assert summary["after_over_before"] == pytest.approx(after_over_before)
    assert list(summary["after_over_before"]) == modes
    factor = 2 if metric == "decode_tokens_per_s" else 1
    assert [row["before"] for row in summary["per_round"]["auto"]] == [factor * x for x in BEFORE["auto"]]
    assert [row["after_over_before"] for row in summary["per_round"]["target"]] == pytest.approx([1.0, 1.1, 1.0])
    if x_llama_cpp is None:
        assert "x_llama_cpp" not in summary and "x_llama_cpp_by_round" not in summary
    else:
        assert summary["x_llama_cpp"] == {side: pytest.approx(ratios) for side, ratios in x_llama_cpp.items()}
        assert summary["x_llama_cpp_by_round"]["after"]["auto"] == pytest.approx([2.2, 1.5, 2.42])


def test_the_rates_ab_reads_are_those_the_engine_bench_reports():
    from codecue_bench.engine_report import mode_summary

    totals = {"seconds": 2.0, "new_tokens": 40, "passes": 10, "accepted": 20, "drafted": 30, "identical": [True],
              "prefill": 0.5, "draft": 0.3, "decode_s": 1.0, "decode_tokens": 30, "split": True, "extension": 0,
              "extension_kept": 0}
    entry = mode_summary(totals, completions=4)
    assert (entry["tokens_per_s"], entry["decode_tokens_per_s"]) == (20.0, 30.0)  # what the fake checkouts write


def test_an_even_count_of_rounds_takes_the_mean_of_the_middle_two():
    reports = {(number, side): {"modes": {"auto": {"tokens_per_s": rates[number - 1]}}}
               for number in (1, 2) for side, rates in (("before", [10.0, 10.0]), ("after", [11.0, 13.0]))}
    assert summarize(reports, ["auto"], "tokens_per_s")["after_over_before"] == {"auto": pytest.approx(1.2)}


def test_the_json_holds_the_runs_order_ratios_and_each_report(tmp_path, capsys):
    before = fake_checkout(tmp_path, "before", BEFORE)
    after = fake_checkout(tmp_path, "after", AFTER)
    out = tmp_path / "ab.json"
    # Through `codecue-bench ab`, as a user runs it.
    assert bench_main(["ab", "--before", str(before), "--after", str(after), "--rounds", "3",
                       "--modes", "target,auto,llama_cpp", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["before"], result["after"], result["python"]) == (str(before), str(after), sys.executable)
    assert result["rounds"] == 3 and result["metric"] == "tokens_per_s"
    assert result["modes"] == ["target", "auto", "llama_cpp"]
    assert [(o["round"], o["checkout"]) for o in result["order"]] == run_order(3)
    assert [(r["round"], r["checkout"]) for r in result["reports"]] == run_order(3)
    assert result["reports"][2]["report"]["modes"]["auto"]["tokens_per_s"] == AFTER["auto"][1]  # round 2, after
    assert result["after_over_before"] == pytest.approx({"target": 1.0, "auto": 1.1, "llama_cpp": 1.0})
    assert result["x_llama_cpp"]["after"] == pytest.approx({"target": 1.1, "auto": 2.2})
    assert result["per_round"]["llama_cpp"][1] == {"round": 2, "before": 10.0, "after": 12.0,
                                                  "after_over_before": pytest.approx(1.2)}
    assert result["engine_arguments"][:3] == ["engine", "--rounds", "1"]
    printed = capsys.readouterr().out
    assert "after ÷ before, median over rounds: target 1.000  auto 1.100  llama_cpp 1.000" in printed
    assert "x llama.cpp, after  (median over rounds): target 1.10  auto 2.20" in printed
    assert f"wrote {out}" in printed


def test_a_failing_run_names_its_checkout_and_round_and_writes_nothing(tmp_path, capsys):
    before = fake_checkout(tmp_path, "before", BEFORE)
    after = fake_checkout(tmp_path, "after", AFTER, exit_code=3)
    out = tmp_path / "ab.json"
    assert main(["--before", str(before), "--after", str(after), "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"the engine bench failed in {after} (round 1/3 after, exit code 3)" in err
    assert [run["checkout"] for run in calls(tmp_path)] == ["before", "after"]  # stopped at the first failure
    assert not out.exists()


def test_a_mode_missing_from_a_report_is_named():
    reports = {(1, side): {"modes": {"target": {"tokens_per_s": 5.0}}} for side in ("before", "after")}
    with pytest.raises(Exception, match="round 1, before: the engine bench's JSON has no tokens_per_s for mode auto"):
        summarize(reports, ["target", "auto"], "tokens_per_s")


def test_a_folder_that_is_not_a_checkout_is_refused_before_anything_runs(tmp_path, capsys):
    after = fake_checkout(tmp_path, "after", AFTER)
    assert main(["--before", str(tmp_path / "nothing"), "--after", str(after)]) == 1
    assert "is not a CodeCue checkout" in capsys.readouterr().err
    assert not (tmp_path / "calls.jsonl").exists()
