"""`codecue-bench bound`: the clairvoyant plan over the drafters' outcomes, the fixed plans beside it, and the
recording of those outcomes on a tiny pair."""
import json
import random

import pytest
from engine_helpers import reference_greedy, tiny_engine

from codecue_bench.bound_bench import (
    Costs,
    Trace,
    costs_from_bench,
    every_draft_right_ms,
    fastest_ms,
    fixed_plan_ms,
    lookup_outcomes,
    main,
    measured_auto,
    mixed_fastest_ms,
    record,
    runs_of_right,
    speedups,
)

FLAT = Costs({1: 10.0, 2: 10.0}, 0.0)  # verify rows free, drafting free: only target passes count
STEEP = Costs({1: 10.0, 9: 50.0}, 4.0)  # each verify row 5 ms, a draft step 4 ms

RUNS = [
    ([], 8, []),
    ([True, True, False, True], 8, [2, 1, 0, 1]),
    ([True] * 5, 3, [3, 3, 3, 2, 1]),
    ([False, False], 8, [0, 0]),
]


@pytest.mark.parametrize("right, cap, expected", RUNS)
def test_runs_of_right_count_accepted_tokens_from_each_position(right, cap, expected):
    assert runs_of_right(right, cap) == expected


def test_lookup_outcomes_offer_what_followed_the_latest_match():
    prompt = [50, 10, 11, 12, 13, 14, 60, 10, 11]
    completion = [12, 13, 99, 70]
    outcomes = lookup_outcomes(prompt, completion, cap=8)
    # At 0 the text ends "10 11": it followed at 1-2 with 12 13 14 60 10 11 (up to where the text ends); 2 right.
    assert outcomes[0] == (6, 2)
    # At 2 the text ends "10 11 12 13": the earlier match continues 14 60 ... and the completion has 99: none right.
    assert outcomes[2][0] > 0 and outcomes[2][1] == 0
    # At 3 the text ends "13 99", which never appeared: nothing offered.
    assert outcomes[3] == (0, 0)


def trace(model_right, lookup=None, kind="block"):
    return Trace(kind, len(model_right), model_right, lookup or [(0, 0)] * len(model_right))


# (case, trace, costs, the clairvoyant plan's ms)
BOUND_CASES = [
    ("nothing drafts right: target alone", trace([0] * 6), STEEP, 60.0),
    ("the draft model always right, free: 9 tokens a pass", trace(runs_of_right([True] * 18)), FLAT, 20.0),
    ("the draft model right, priced: K = 8 twice", trace(runs_of_right([True] * 18)), STEEP, 2 * (8 * 4.0 + 50.0)),
    ("a lookup right for 5 tokens, then nothing", trace([0] * 8, [(5, 5)] + [(0, 0)] * 7), STEEP,
     (10.0 + 5 * 5.0) + 2 * 10.0),
    ("a lookup offering 8, right for 2: cut at 2", trace([0] * 3, [(8, 2), (0, 0), (0, 0)]), STEEP, 20.0),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
def test_the_clairvoyant_plan_finds_the_fastest_passes(case):
    _, the_trace, costs, expected = case
    assert fastest_ms(the_trace, costs) == pytest.approx(expected)


# (case, trace, costs, the mixed plan's ms, the one-drafter-a-pass plan's ms)
MIXED_CASES = [
    ("nothing drafts right: target alone", trace([0] * 6), STEEP, 60.0, 60.0),
    ("the draft model alone right: the same plan", trace(runs_of_right([True] * 18)), STEEP,
     2 * (8 * 4.0 + 50.0), 2 * (8 * 4.0 + 50.0)),
    # lookup 3 free, the model's 2 steps, one verify of 5 drafts (35 ms) writes all 6; one drafter a pass: the lookup's
    # 3 in a 4-wide verify (25), then the model's 1 in a 2-wide (4 + 15)
    ("a lookup's 3, then the model's 2, in one pass", trace([0, 0, 0, 2, 1, 0], [(3, 3)] + [(0, 0)] * 5), STEEP,
     8.0 + 35.0, 44.0),
    # the model's token, then a lookup of 3 from there (its extension): 4 drafts for one step, a 5-wide verify; one
    # drafter a pass: a plain pass, then the lookup's 3 in a 4-wide verify
    ("the model's token, its lookup extension", trace([1, 0, 0, 0, 0], [(0, 0), (5, 3), (0, 0), (0, 0), (0, 0)]),
     STEEP, 4.0 + 30.0, 10.0 + 25.0),
    # 8 drafts and a 9-wide verify write 9 tokens; the last 3: 2 drafts and the target's own (a 4th row buys nothing)
    ("no more than 8 drafts a pass", trace([0] * 12, [(8, 8)] * 12), STEEP, 50.0 + 20.0, 50.0 + 20.0),
    ("a lookup offering 8, right for 2: only the right ones", trace([0] * 3, [(8, 2), (0, 0), (0, 0)]), STEEP,
     20.0, 20.0),
]


@pytest.mark.parametrize("case", MIXED_CASES, ids=[c[0] for c in MIXED_CASES])
def test_the_mixed_plan_chains_the_drafters_inside_a_pass(case):
    _, the_trace, costs, mixed, one_drafter = case
    assert mixed_fastest_ms(the_trace, costs) == pytest.approx(mixed)
    assert fastest_ms(the_trace, costs) == pytest.approx(one_drafter)


def random_trace(rng: random.Random, model_hit: float) -> Trace:
    """Up to 39 positions: the draft model right with probability model_hit, lookups offering 0-8 tokens (right for
    as many as the completion has left at most)."""
    n = rng.randrange(1, 40)
    right = runs_of_right([rng.random() < model_hit for _ in range(n)])
    lookups = [(o, rng.randrange(0, o + 1)) if (o := rng.choice([0, 0, 2, 5, 8])) else (0, 0) for _ in range(n)]
    return trace(right, [(o, min(r, n - i)) for i, (o, r) in enumerate(lookups)])


def test_the_mixed_bound_is_never_below_the_one_drafter_bound():
    rng = random.Random(7)
    for _ in range(40):
        the_trace = random_trace(rng, 0.7)
        for costs in (STEEP, FLAT, Costs({1: 30.0, 2: 33.0, 4: 45.0, 9: 100.0}, 10.0)):
            assert mixed_fastest_ms(the_trace, costs) <= fastest_ms(the_trace, costs) + 1e-9


def test_no_fixed_plan_beats_the_bound():
    rng = random.Random(5)
    for _ in range(30):
        the_trace = random_trace(rng, 0.8)
        bound = fastest_ms(the_trace, STEEP)
        for k in range(0, 9):
            for lookup_first in (False, True):
                assert bound <= fixed_plan_ms(the_trace, STEEP, k, lookup_first) + 1e-9
        assert bound <= fixed_plan_ms(the_trace, STEEP, 0, False)  # never slower than target alone


def test_speedups_per_kind_and_the_what_ifs():
    traces = [trace(runs_of_right([True] * 18), kind="block"), trace([0] * 6, kind="line")]
    table = speedups(traces, STEEP)
    assert set(table) == {"block", "line", "all"}
    assert table["line"]["bound"] == pytest.approx(1.0)  # nothing to gain: the bound is target alone
    assert table["block"]["draft model, its best fixed K"] == pytest.approx(180.0 / 164.0)
    assert table["block"]["  (that K)"] == 8
    # Mixing the drafters in a pass, halving the draft step or freeing the verify rows can only raise the bound.
    for kind in table:
        mixed = table[kind]["bound, drafts mixed in a pass"]
        assert mixed >= table[kind]["bound"] - 1e-9
        assert table[kind]["mixed bound, draft step x0.5"] >= mixed - 1e-9
        assert table[kind]["mixed bound, verify rows free"] >= mixed - 1e-9
        assert table[kind]["bound"] >= table[kind]["lookup, else the draft model at that K"] - 1e-9
        ceiling = table[kind]["draft model, every draft right, its best K"]
        assert ceiling >= table[kind]["draft model, its best fixed K"] - 1e-9
    # A draft model that is never right still has its ceiling: 6 tokens in one pass of 5 drafts, 5 x 4 + 35 ms.
    assert table["line"]["draft model, every draft right, its best K"] == pytest.approx(60.0 / 55.0)


EVERY_RIGHT = [  # (tokens, K, ms at STEEP: each pass K steps of 4 ms and a verify K + 1 wide, 10 + 5 ms a row)
    (18, 8, 2 * (8 * 4 + 50)),
    (6, 2, 2 * (2 * 4 + 20)),
    (6, 5, 5 * 4 + 35),
    (1, 3, 3 * 4 + 25),  # the last pass is charged whole, past the completion's end too
]


@pytest.mark.parametrize("tokens, k, expected", EVERY_RIGHT)
def test_every_draft_right_prices_full_passes_whatever_the_model_got_right(tokens, k, expected):
    never_right = trace([0] * tokens)
    assert every_draft_right_ms(never_right, STEEP, k) == pytest.approx(expected)
    assert every_draft_right_ms(trace(runs_of_right([True] * tokens)), STEEP, k) == pytest.approx(expected)


def test_costs_from_an_engine_bench_json(tmp_path):
    recorded = tmp_path / "bench.json"
    recorded.write_text(json.dumps({"pass_costs": {"context": 116, "target_1": 27.3, "target_2": 29.1,
                                                   "target_4": 34.7, "target_9": 56.7, "draft_1": 6.8,
                                                   "draft_cost_ratio": 0.25}}))
    costs = costs_from_bench(recorded)
    assert costs.verify_ms == {1: 27.3, 2: 29.1, 4: 34.7, 9: 56.7}
    assert costs.draft_ms == 6.8
    assert costs.verify(6) == pytest.approx(34.7 + 2 * (56.7 - 34.7) / 5)


@pytest.mark.parametrize("content", ['{"pass_costs": {"target_1": 27.3}}', '{"modes": ["target"]}', "[1, 2]",
                                     '{"pass_costs": {"draft_1": 6.8, "target_one": 27.3}}', "not json", None])
def test_costs_from_a_file_without_them_names_the_command_before_loading_anything(tmp_path, content):
    recorded = tmp_path / "bench.json"
    if content is not None:  # None: no such file
        recorded.write_text(content)
    with pytest.raises(SystemExit, match="codecue-bench engine --json"):
        main(["--costs-from", str(recorded)])


@pytest.mark.parametrize("draft", ["same", "random"])
def test_record_takes_target_alones_completion_and_the_draft_models_outcomes(draft):
    engine = tiny_engine(draft)
    prompts = [{"kind": "block", "prefix": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", "suffix": "\n"},
               {"kind": "line", "prefix": "x = 1\ny = ", "suffix": "\nprint(x)\n"}]
    traces = record(engine, prompts, 12)
    assert [t.kind for t in traces] == ["block", "line"]
    ids = engine.encode_fim(prompts[0]["prefix"], prompts[0]["suffix"])
    assert traces[0].tokens == len(reference_greedy(engine.pair.target, ids, 12))
    for t in traces:
        assert len(t.model_right) == len(t.lookup) == t.tokens
    if draft == "same":  # the target drafting for itself is always right
        assert all(r == min(8, traces[0].tokens - i) for i, r in enumerate(traces[0].model_right))
    else:
        assert min(traces[0].model_right) == 0


def test_measured_auto_times_both_modes_per_kind_and_checks_they_agree():
    engine = tiny_engine("same")
    prompts = [{"name": "a", "kind": "block", "prefix": "def add(a, b):\n", "suffix": "\n"},
               {"name": "b", "kind": "line", "prefix": "x = 1\ny = ", "suffix": "\n"}]
    ratios = measured_auto(engine, prompts, 10)
    assert set(ratios) == {"block", "line", "all"} and all(r > 0 for r in ratios.values())
