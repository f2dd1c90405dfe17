"""codecue-replay gate: minConfidence chosen on one report and reported on another; the replay client reads each
suggestion's confidence from the server's JSON."""
from __future__ import annotations

import json

import pytest

from codecue_lsp.replay.__main__ import main
from codecue_lsp.replay.client import RawInlineCompletionResponse
from codecue_lsp.replay.gate import choose_threshold, outcome
from codecue_lsp.replay.runner import confidence_from, lsp_converter, suggestion_from


def record(confidence, accepted: bool, saved: int = 0, shown: bool = True) -> dict:
    return {"confidence": confidence, "exact_match": accepted, "chars_saved": saved if accepted else 0,
            "shown_in_time": shown, "outcome": "answered" if shown else "cancelled"}


def run(records: list[dict], keystrokes: int = 100, label: str = "base") -> dict:
    return {"label": label, "speed": 1.0, "keystrokes": keystrokes, "records": records}


# Low-confidence suggestions are mostly wrong; one of them saves a few characters.
SET_A = [record(0.9, True, 20), record(0.8, True, 15), record(0.7, True, 3), record(0.3, False), record(0.2, True, 1),
         record(0.1, False), record(None, True, 5), record(0.05, False, shown=False)]


def test_outcome_holds_back_below_the_threshold_and_keeps_unknown_confidence():
    off, gated = outcome(run(SET_A), 0.0), outcome(run(SET_A), 0.7)
    assert (off["shown"], off["accepted"], off["chars_saved_per_keystroke"]) == (7, 5, 0.44)
    assert (gated["shown"], gated["accepted"], gated["chars_saved_per_keystroke"]) == (4, 4, 0.43)
    assert off["shown_in_time"] == 7 / 8 and gated["accepted_per_shown"] == 1.0


# (max drop of chars saved allowed, the threshold chosen)
CHOICES = [(0.05, 0.7), (0.0, 0.2), (1.0, 0.7)]  # 0.8 keeps 1.0 too but saves < 95 %; ties: lowest


@pytest.mark.parametrize("max_drop,expected", CHOICES)
def test_choose_threshold_maximises_accepted_per_shown_within_the_chars_saved_floor(max_drop, expected):
    assert choose_threshold(run(SET_A), max_drop) == expected


def test_no_confidences_means_no_gate():
    assert choose_threshold(run([record(None, True, 3), record(None, False)])) == 0.0


def test_the_gate_subcommand_chooses_on_one_report_and_reports_on_another(tmp_path, capsys):
    set_b = [record(0.95, True, 10), record(0.75, False), record(0.4, False), record(0.6, True, 2)]
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "gate.json"
    a.write_text(json.dumps({"trace": "a.jsonl", "runs": [run(SET_A)]}))
    b.write_text(json.dumps({"trace": "b.jsonl", "runs": [run(set_b)]}))
    assert main(["gate", "--choose", str(a), "--report", str(b), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["threshold"] == 0.7
    assert (result["without_gate"]["shown"], result["with_gate"]["shown"]) == (4, 2)
    assert result["with_gate"]["accepted_per_shown"] == 0.5 and result["without_gate"]["accepted_per_shown"] == 0.5
    assert "accepted / shown" in capsys.readouterr().out
    assert main(["gate", "--choose", str(a), "--report", str(a)]) == 2  # never the same traces
    b.write_text(json.dumps({"runs": [{"label": "x"}]}))
    assert main(["gate", "--choose", str(a), "--report", str(b)]) == 2  # not a report: a clear error


def test_the_replay_client_keeps_the_servers_confidence():
    raw = {"jsonrpc": "2.0", "id": 3, "result": {"items": [
        {"insertText": "return a", "range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 4}},
         "codecue": {"confidence": 0.42}}]}}
    response = lsp_converter.structure(raw, RawInlineCompletionResponse)
    assert confidence_from(response.result) == 0.42
    assert suggestion_from(response.result, "    ", 4) == "return a"
    assert confidence_from({"items": [{"insertText": "x"}]}) is None and confidence_from(None) is None
    assert suggestion_from(None, "", 0) == ""
