"""codecue-bench engine end to end on the tiny pair: every mode runs, the report has its fields, and in fp32 every
mode reproduces target-alone."""
import json

import pytest

from codecue_bench.__main__ import main

MODES = {"target", "auto", "speculative", "lookup", "hybrid", "hf_assisted"}
ROWS = [{"name": "add", "prefix": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))\n"},
        {"name": "rep", "prefix": "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\n", "suffix": ""}]


def write_prompts(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in ROWS))
    return prompts


def target_alone_tokens(max_new_tokens: int) -> list[list[int]]:
    """What the tiny target writes alone for each prompt, from the engine directly (not through the bench)."""
    from engine import CompletionRequest, Engine, load_pair

    engine = Engine(load_pair("tiny"))
    try:
        return [engine.complete(CompletionRequest(engine.encode_fim(r["prefix"], r["suffix"]),
                                                  max_new_tokens, drafter="none")).token_ids for r in ROWS]
    finally:
        engine.close()


def test_bench_engine_report_on_the_tiny_pair(tmp_path, monkeypatch, tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "report.json"
    assert main(["engine", "--pair", "tiny", "--prompts", str(write_prompts(tmp_path)), "--max-new-tokens", "12",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["prompts"] == 2 and report["dtype"] == "float32"
    # Which machine the figures came from: its processor as the calibration keys it, its torch and threads.
    from engine.machine import processor_name

    assert report["machine"]["processor"] == processor_name("cpu")
    assert report["machine"]["threads"] >= 1 and report["machine"]["torch"]
    # No llama.cpp is built in the tiny pair's home, and the tiny pair has no GGUF: no llama_cpp mode.
    assert set(report["modes"]) == MODES
    rows = report["per_prompt"]
    # The target mode is target alone: the tokens the engine writes without a drafter.
    expected = target_alone_tokens(12)
    assert [r["target"]["tokens"] for r in rows] == [len(ids) for ids in expected]
    target = report["modes"]["target"]
    assert target["new_tokens"] == sum(len(ids) for ids in expected) > 0
    # Target alone is the reference: not compared with itself.
    assert target["identical_to_target"] is None and [r["target"]["identical"] for r in rows] == [None, None]
    for mode, m in report["modes"].items():
        # The totals are the sums of what each prompt recorded.
        assert m["new_tokens"] == sum(r[mode]["tokens"] for r in rows) == target["new_tokens"]
        assert m["seconds"] == pytest.approx(sum(r[mode]["seconds"] for r in rows), abs=0.001 * len(rows))
        assert m["tokens_per_s"] == pytest.approx(m["new_tokens"] / m["seconds"])
        assert m["ms_per_completion"] == pytest.approx(1000 * m["seconds"] / 2)
        if mode != "target":
            assert m["identical_to_target"] is True, (mode, rows)
            assert [r[mode]["identical"] for r in rows] == [True, True]
            assert report["speedup_vs_target"][mode] == pytest.approx(
                (m["new_tokens"] / m["seconds"]) / (target["new_tokens"] / target["seconds"]))
        if mode == "hf_assisted":
            assert m["decode_tokens_per_s"] is None  # transformers does not split prefill from decoding
        else:
            # Decoding is what follows the first token (counted as llama.cpp counts it): after the prefill, and
            # without the first pass's tokens. (Not necessarily the faster rate: a tiny model's prefill pass costs
            # about what a decode pass does.)
            assert m["seconds_prefill"] > 0 and 0 < m["decode_tokens"] < m["new_tokens"]
            assert 0 < m["seconds_decode"] <= m["seconds"] - m["seconds_prefill"]
            assert m["decode_tokens_per_s"] == pytest.approx(m["decode_tokens"] / m["seconds_decode"])
    # Only the drafting modes draft; target-alone never does.
    assert target["acceptance_rate"] is None and report["modes"]["speculative"]["acceptance_rate"] is not None
    assert "speedup_vs_llama_cpp" not in report
    assert report["pass_costs"]["target_1"] > 0 and report["pass_costs"]["draft_cost_ratio"] > 0
    assert [r["name"] for r in report["per_prompt"]] == ["add", "rep"]


def test_unextended_modes_draft_without_the_lookup_extension(tmp_path, monkeypatch, tiny_pair_env):
    import engine.engine

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    built = []
    real = engine.engine.extension_lookup
    monkeypatch.setattr(engine.engine, "extension_lookup", lambda index=None: built.append(1) or real(index))
    out = tmp_path / "report.json"
    for modes, extended in (("target,speculative_unextended,auto_unextended", False), ("target,speculative", True)):
        built.clear()
        assert main(["engine", "--pair", "tiny", "--prompts", str(write_prompts(tmp_path)), "--max-new-tokens", "8",
                     "--modes", modes, "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        assert list(report["modes"]) == modes.split(",")
        assert all(m["identical_to_target"] for name, m in report["modes"].items() if name != "target")
        assert bool(built) == extended, modes
        if not extended:
            assert [report["modes"][m]["extension_drafted"] for m in modes.split(",")] == [0, 0, 0]


def test_warm_prompts_are_made_ready_untimed_and_the_kinds_are_compared_with_target_alone(tmp_path, monkeypatch,
                                                                                          tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    rows = ROWS + [{"name": "rep2", "kind": "repetitive", "prefix": "a = b\nc = d\na = b\nc =", "suffix": ""}]
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "report.json"
    prompts.write_text("\n".join(json.dumps(r) for r in rows))
    reports = {}
    for warm in (False, True):
        assert main(["engine", "--pair", "tiny", "--prompts", str(prompts), "--max-new-tokens", "8",
                     "--modes", "target,auto,speculative", "--json", str(out)] + ["--warm"] * warm) == 0
        reports[warm] = json.loads(out.read_text())
    for warm, report in reports.items():
        assert report["warm"] is warm
        assert all(m["identical_to_target"] for name, m in report["modes"].items() if name != "target")
        for row in report["per_prompt"]:
            for mode in ("target", "auto", "speculative"):
                # Made ready: the request computes nothing of its prompt; cold: all but what it shares with nothing.
                assert (row[mode]["prompt_evaluated"] == 0) is warm, (warm, mode, row)
        kinds = report["by_kind"]
        assert set(kinds) == {row["kind"] for row in report["per_prompt"]} and "repetitive" in kinds
        for kind, per_mode in kinds.items():
            mine = [row for row in report["per_prompt"] if row["kind"] == kind]
            for mode, t in per_mode.items():
                assert t["tokens"] == sum(row[mode]["tokens"] for row in mine)
                assert t["seconds"] == pytest.approx(sum(row[mode]["seconds"] for row in mine), abs=0.01)
                base = per_mode["target"]
                assert t["x_target"] == pytest.approx((t["tokens"] / t["seconds"]) / (base["tokens"] / base["seconds"]),
                                                      rel=0.01)
            assert per_mode["target"]["x_target"] == 1.0


def test_warm_refuses_modes_without_a_session(tmp_path, monkeypatch, tiny_pair_env, capsys):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    assert main(["engine", "--pair", "tiny", "--prompts", str(write_prompts(tmp_path)), "--modes",
                 "target,hf_assisted", "--warm"]) == 1
    assert "--warm" in capsys.readouterr().err


def test_identical_to_target_is_compared_only_against_a_real_target_run(tmp_path, monkeypatch, capsys,
                                                                        tiny_pair_env):
    from codecue_bench import engine_bench

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    real = engine_bench.run_own_mode

    def lookup_writes_other_tokens(engine, mode, ids, max_new_tokens, k, *rest):
        run = real(engine, mode, ids, max_new_tokens, k, *rest)
        if mode == "lookup":  # a broken mode: every token differs from what the target would write
            run.tokens = [token ^ 1 for token in run.tokens] or [1]
        return run

    monkeypatch.setattr(engine_bench, "run_own_mode", lookup_writes_other_tokens)
    prompts, out = write_prompts(tmp_path), tmp_path / "report.json"
    # No target-alone run: nothing to compare with, so nothing is called identical (or different).
    assert main(["engine", "--pair", "tiny", "--prompts", str(prompts), "--max-new-tokens", "6",
                 "--modes", "lookup,auto", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [m["identical_to_target"] for m in report["modes"].values()] == [None, None]
    assert all(r[mode]["identical"] is None for r in report["per_prompt"] for mode in ("lookup", "auto"))
    table = capsys.readouterr().out
    assert [line.split()[-1] for line in table.splitlines() if line.startswith(("lookup ", "auto "))] == ["n/c"] * 2
    # Target alone listed after the mode: still the reference, and the broken mode is caught.
    assert main(["engine", "--pair", "tiny", "--prompts", str(prompts), "--max-new-tokens", "6",
                 "--modes", "lookup,auto,target", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    modes = report["modes"]
    assert (modes["lookup"]["identical_to_target"], modes["auto"]["identical_to_target"],
            modes["target"]["identical_to_target"]) == (False, True, None)
    assert all(r["lookup"]["identical"] is False and r["lookup"]["divergence"]["position"] == 0
               for r in report["per_prompt"])
    table = capsys.readouterr().out
    assert [line.split()[-1] for line in table.splitlines() if line.startswith(("lookup ", "auto ", "target "))] \
        == ["False", "True", "n/c"]


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
    name, text, line, character, truth, _ = holes(1)[0]
    assert text.split("\n")[line] == " " * character and truth and truth not in text.split("\n")[line]
    # --cursor typed: the first word is typed too, the rest of the line is the hole.
    _, typed_text, typed_line, typed_character, same_truth, _ = holes(1, "typed")[0]
    typed = typed_text.split("\n")[typed_line]
    assert same_truth == truth and typed.strip() and truth.startswith(typed.strip()) and len(typed) == typed_character
    typed_lines, indent_lines = typed_text.split("\n"), text.split("\n")
    assert typed_line == line and typed_lines[:line] + typed_lines[line + 1:] == indent_lines[:line] + indent_lines[line + 1:]
    report = run("tiny", [0, 64], count=2, max_new_tokens=4, cursor="typed", splits=("line", "cursor"))
    assert report["holes"] == 2 and report["cursor"] == "typed"
    runs = {(r["middle_from"], r["suffix_budget"]): r for r in report["runs"]}
    assert set(runs) == {("line", 0), ("line", 64), ("cursor", 0), ("cursor", 64)}
    # More suffix budget means a longer prompt on the same holes, whichever the split.
    for split in ("line", "cursor"):
        assert runs[split, 64]["mean_prompt_tokens"] > runs[split, 0]["mean_prompt_tokens"]
    with pytest.raises(ValueError, match="--cursor"):
        holes(1, "word")


def test_without_a_draft_model_the_draft_modes_are_left_out_or_refused(capsys):
    from types import SimpleNamespace

    from codecue_bench.engine_bench import pick_modes
    from engine.store.config import ModelsError

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


def test_prompt_bench_line_n_split_starts_the_middle_lines_above_the_hole():
    from types import SimpleNamespace

    from codecue_bench.prompt_bench import built_for, holes, parse_split
    from codecue_lsp.prompt import OpenDocument, PromptBudget
    from engine.store.config import FimTemplate

    fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    engine = SimpleNamespace(fim=fim, count_tokens=lambda text: len(text) // 3 + 1)
    name, text, line, character, _, _ = holes(3, "typed")[2]
    doc = OpenDocument("file:///bench/hole.py", "python", text)
    rows = text.split("\n")
    one, three = (built_for(split, doc, line, character, engine, PromptBudget()) for split in ("line", "line:3"))
    assert one.middle == rows[line][:character]
    assert three.middle == "\n".join(rows[line - 2:line + 1])[:len(three.middle)] and three.middle.endswith(one.middle)
    assert three.middle.count("\n") == 2
    # The same text, the middle marker only moved: the prompt before it ends two lines earlier.
    assert three.display.replace(fim.middle, "") != one.display.replace(fim.middle, "")
    assert three.prefix == one.prefix and three.suffix == one.suffix
    assert parse_split("line:8") == ("line", 8) and parse_split("cursor") == ("cursor", 1)
    for bad in ("line:0", "cursor:2", "word", "line:x"):
        with pytest.raises(ValueError, match="--middle-from"):
            parse_split(bad)


def test_prompt_bench_cuts_holes_from_real_files_with_their_imports_open(tmp_path, monkeypatch, tiny_pair_env):
    from codecue_bench.prompt_bench import file_holes, run

    def module(name, imports=""):
        body = "".join(f"def {name}_step_{i}(value):\n    total = value * {i} + {len(name)}\n    return total\n\n\n"
                       for i in range(40))
        return imports + body

    paths = [tmp_path / "shapes.py", tmp_path / "areas.py", tmp_path / "notes.py"]
    paths[0].write_text(module("shapes", "from .areas import areas_step_1\n\n\n"))
    paths[1].write_text(module("areas", "import os\n\n\n"))
    paths[2].write_text("# too short to cut\n")
    names = [str(p) for p in paths]
    cut = file_holes(names)
    assert [h.name for h in cut] == names[:2]  # a file with no code line to cut gives no hole
    assert [[other for other, _ in h.others] for h in cut] == [[names[1]], []]  # what it imports is open beside it
    for hole in cut:
        original = open(hole.name).read().split("\n")
        rows = hole.text.split("\n")
        assert rows[hole.line] == original[hole.line][:hole.character] and rows[hole.line].strip() == ""
        assert original[hole.line].strip() == hole.truth and len(hole.truth) >= 12
        assert rows[:hole.line] + rows[hole.line + 1:] == original[:hole.line] + original[hole.line + 1:]
        assert len(original) // 5 <= hole.line < len(original) * 4 // 5
    assert file_holes(names) == cut  # the same seed, the same lines
    assert {h.line for seed in range(6) for h in file_holes(names[:1], seed=seed)} != {cut[0].line}

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    report = run("tiny", [32], count=2, max_new_tokens=4, totals=(256, 1024), files=names)
    assert report["source"] == "files" and report["holes"] == 2
    runs = {r["total_budget"]: r for r in report["runs"]}
    assert runs[256]["mean_prompt_tokens"] <= 256 < runs[1024]["mean_prompt_tokens"] <= 1024
    # An exact line counts 1 in the similarity too.
    assert all(r["line_exact_match"] <= r["line_similarity"] for r in report["runs"])


def test_layout_bench_counts_prompts_started_over_while_typing(tmp_path, monkeypatch, tiny_pair_env):
    from codecue_bench.layout_bench import main, run

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    source = tmp_path / "long.py"
    source.write_text("".join(f"def helper_{i}(value, scale={i}):\n    total = value * scale\n    return total + {i}\n\n"
                              for i in range(120)))
    report = run("tiny", [str(source)], totals=(256,), growths=(0.0, 0.5), chars=900, every=15)
    plain, grown = report["runs"]
    assert (plain["kept_growth"], grown["kept_growth"]) == (0.0, 0.5) and plain["per_file"][str(source)]["prompts"] == 61
    # Without growth the prefix outgrows the budget again and again; with it, less often and with longer prompts.
    assert plain["fresh_layouts"] > grown["fresh_layouts"] and grown["mean_prompt_tokens"] > plain["mean_prompt_tokens"]
    out = tmp_path / "layout.json"
    assert main([str(source), "--pair", "tiny", "--total-budgets", "256", "--chars", "90", "--json", str(out)]) == 0
    assert [r["total_budget"] for r in json.loads(out.read_text())["runs"]] == [256, 256]


def test_bench_passes_times_the_lean_step_against_transformers_forward(monkeypatch, capsys, tiny_pair_env):
    from engine.weights import lean_step

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    lean_widths = []
    original = lean_step.LeanStep.__call__

    def counted(self, cache, new_ids, *args, **kwargs):
        lean_widths.append(len(new_ids))
        return original(self, cache, new_ids, *args, **kwargs)

    monkeypatch.setattr(lean_step.LeanStep, "__call__", counted)
    assert main(["passes", "--pair", "tiny", "--k", "2", "--context", "64", "--repeats", "1", "--lean-ab"]) == 0
    costs = json.loads(capsys.readouterr().out)
    assert costs["context"] == 64
    for name in ("target_1", "target_2", "target_3", "target_4", "draft_1"):
        assert costs[name] > 0 and costs[f"{name}_transformers"] > 0
        assert costs[f"{name}_lean_speedup"] == pytest.approx(costs[f"{name}_transformers"] / costs[name])
        assert costs[f"{name}_layer_speedup"] == pytest.approx(costs[f"{name}_python"] / costs[name])
    # Each timed pass ran twice through the lean step (native and Python layers) and once through transformers'.
    assert sorted(lean_widths) == [1, 1, 1, 1, 2, 2, 3, 3, 4, 4]


@pytest.mark.parametrize("text,done", [
    ("x = 1", False),
    ("x = 1\n", True),
    ("\n    return x", False),  # a completion that starts on the next line: that line is the one asked for
    ("\n\n    return x\n", True),
    ("    \n", True),  # a line of blanks is a line
    ("", False),
])
def test_side_by_side_benches_end_a_single_line_where_the_server_does(text, done):
    from codecue_bench.side_by_side import first_line_done

    assert first_line_done(text) is done


def bench_row(kind: str, round_number: int, target_s: float, auto_s: float, tokens: int = 10) -> dict:
    return {"name": f"{kind}{round_number}", "kind": kind, "round": round_number,
            "target": {"seconds": target_s, "tokens": tokens}, "auto": {"seconds": auto_s, "tokens": tokens}}


ROUND_CASES = [
    # (rows, kind, expected auto ratios round by round)
    ([bench_row("block", 1, 2.0, 1.0), bench_row("block", 2, 2.0, 1.6)], "block", [2.0, 1.25]),
    # "all" sums each round's prompts: (2 + 1) / (1 + 1) in round 1, (2 + 3) / (2 + 0.5) in round 2
    ([bench_row("block", 1, 2.0, 1.0), bench_row("line", 1, 1.0, 1.0),
      bench_row("block", 2, 2.0, 2.0), bench_row("line", 2, 3.0, 0.5)], "all", [1.5, 2.0]),
    ([bench_row("block", 1, 2.0, 1.0), bench_row("line", 1, 1.0, 1.0),
      bench_row("block", 2, 2.0, 2.0), bench_row("line", 2, 3.0, 0.5)], "line", [1.0, 6.0]),
    # tokens count: a mode that writes fewer tokens in the same time is slower per token
    ([bench_row("block", 1, 1.0, 1.0) | {"auto": {"seconds": 1.0, "tokens": 5}}], "block", [0.5]),
]


@pytest.mark.parametrize("rows, kind, expected", ROUND_CASES)
def test_x_target_by_round_is_each_rounds_own_ratio(rows, kind, expected):
    from codecue_bench.engine_report import x_target_by_round

    by_round = x_target_by_round(rows, ["target", "auto"])
    assert by_round[kind]["auto"] == pytest.approx(expected)
    assert by_round[kind]["target"] == [1.0] * len(expected)


def test_rounds_run_every_prompt_again_and_report_each_rounds_ratios(tmp_path, monkeypatch, tiny_pair_env, capsys):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "report.json"
    assert main(["engine", "--pair", "tiny", "--prompts", str(write_prompts(tmp_path)), "--max-new-tokens", "8",
                 "--modes", "target,speculative", "--warm", "--rounds", "3", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["per_prompt"]
    assert report["rounds"] == 3 and report["prompts"] == 2
    assert [(row["round"], row["name"]) for row in rows] == [(r, name) for r in (1, 2, 3) for name in ("add", "rep")]
    # every round writes the same tokens: the rounds differ only in time
    assert len({(row["name"], row["target"]["tokens"], row["speculative"]["tokens"]) for row in rows}) == 2
    target = report["modes"]["target"]
    assert target["ms_per_completion"] == pytest.approx(1000 * target["seconds"] / 6)
    by_round = report["x_target_by_round"]
    assert set(by_round) == {row["kind"] for row in rows} | {"all"}
    for kind, per_mode in by_round.items():
        assert len(per_mode["speculative"]) == 3 and per_mode["target"] == [1.0] * 3
        for number, ratio in enumerate(per_mode["speculative"], start=1):
            mine = [row for row in rows if row["round"] == number and kind in ("all", row["kind"])]
            rate = {mode: sum(row[mode]["tokens"] for row in mine) / sum(row[mode]["seconds"] for row in mine)
                    for mode in ("target", "speculative")}
            assert ratio == pytest.approx(rate["speculative"] / rate["target"], rel=0.01)
    printed = capsys.readouterr().out
    assert "x target, round by round: speculative" in printed
    # the host's memory bandwidth, probed before each prompt, read beside each round's ratios
    assert all(row["bandwidth_gbs"] > 0 for row in rows)
    per_round = [[row["bandwidth_gbs"] for row in rows if row["round"] == number] for number in (1, 2, 3)]
    assert report["bandwidth_gbs_by_round"] == [round((a + b) / 2, 1) for a, b in per_round]  # two prompts a round
    assert "memory bandwidth before each prompt, median of each round (GB/s): " in printed
