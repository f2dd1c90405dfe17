"""`codecue-bench server`'s cancel measures on the real server (tiny pair): the server reports which phase the
engine is in, cancels sent in prefill and in decode stop the engine, and the next request (same place, or in prefill
also another document) is answered."""
from __future__ import annotations

from pathlib import Path

from codecue_bench.cancel_bench import MEASURES
from codecue_bench.server_bench import CANCEL_PHASES, run_server_bench

TRIALS = 2
FILE = Path(__file__).resolve().parents[1] / "engine" / "decode" / "speculative.py"


def test_cancels_in_prefill_and_in_decode_stop_the_engine(tiny_pair_env):
    # The step delay keeps decode running long enough to be caught even when a generation is one or two steps (25 ms
    # missed some on a loaded CI machine); one torch thread on a shared machine.
    env = dict(tiny_pair_env, CODECUE_TEST_STEP_DELAY_MS="100", OMP_NUM_THREADS="1")
    result = run_server_bench(FILE, pair="tiny", keystrokes=1, cancel_trials=TRIALS, env=env)

    rows = result["cancel_trials"]
    for phase, seen in CANCEL_PHASES.items():
        caught = [r for r in rows if r["phase"] == phase and r["caught"]]
        summary = result["cancel"][phase]
        assert summary["caught_trials"] == len(caught) == len(MEASURES[phase]) * TRIALS
        assert summary["cancel_to_engine_idle_ms"]["n"] == TRIALS
        assert summary["cancel_to_next_result_ms"]["n"] == TRIALS
        assert summary["cancel_to_next_start_ms"]["n"] == TRIALS
        if phase == "prefill":  # a next request in another document, too
            assert summary["cancel_to_elsewhere_result_ms"]["n"] == TRIALS
            assert summary["cancel_to_elsewhere_start_ms"]["n"] == TRIALS
        for r in caught:
            if "cancel_to_next_result_ms" in r:  # the next request's own engine time is part of its wait
                assert 0 < r["next_engine_ms"] <= r["cancel_to_next_result_ms"]
        assert {r["phase_seen"] for r in caught} <= set(seen)
        # The engine's result said "cancelled", and pygls answered the request as cancelled.
        assert all(r["answered"] == "cancelled" for r in caught)
    resources = result["server_stats"]["resources"]
    assert (resources["engine_busy"], resources["engine_phase"]) == (False, "idle")


def test_keystrokes_while_a_workspace_is_indexed(tiny_pair_env, tmp_path):
    # The typed file is the project's own; a second folder added just before typing is indexed meanwhile.
    project, big = tmp_path / "project", tmp_path / "big"
    project.mkdir()
    typed = project / "typed.py"
    typed.write_text(FILE.read_text())
    for i in range(400):
        (big / f"pkg{i % 20}").mkdir(parents=True, exist_ok=True)
        (big / f"pkg{i % 20}" / f"mod{i}.py").write_text(
            "".join(f"def helper_{i}_{j}(value):\n    return value + {j}\n\n\n" for j in range(30)))
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    result = run_server_bench(typed, pair="tiny", keystrokes=3, cancel_trials=0, env=env, root=str(project),
                              index_while_typing=str(big))
    assert len(result["requests"]) == 4 and all("indexing" in r for r in result["requests"])
    assert result["server_stats"]["context"]["roots"] == [str(project), str(big)]
    assert result["server_stats"]["context"]["files"] == 401
