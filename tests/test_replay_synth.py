"""Trace synthesis: deterministic, faithful to the source file, realistic typing, FIM holes, UTF-16 positions."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from codecue_lsp.replay import synth
from codecue_lsp.replay.__main__ import main as replay_main
from codecue_lsp.replay.trace import (
    Document,
    TraceError,
    read_trace,
    replay_documents,
    utf16_len,
)

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
PROJECT_FILE = REPO / "codecue_lsp" / "replay" / "trace.py"


def walk(events):
    """Yield (request event, its truth, document text at that moment) for every request."""
    docs, truths = {}, {}
    for event in events:
        if event["type"] == "open":
            docs[event["uri"]] = Document(event["text"])
        elif event["type"] == "change":
            docs[event["uri"]].apply(event["range"], event["text"])
        elif event["type"] == "truth":
            truths[(event["uri"], event["line"], event["character"])] = event["text"]
        elif event["type"] == "request":
            yield event, truths.get((event["uri"], event["line"], event["character"])), docs[event["uri"]].text


def test_same_seed_same_trace_other_seed_other_timing():
    sources = synth.humaneval_sources([0, 1])
    first = synth.synth_typing(sources, seed=7)
    assert synth.synth_typing(synth.humaneval_sources([0, 1]), seed=7) == first
    other = synth.synth_typing(sources, seed=8)
    assert [e["t"] for e in other] != [e["t"] for e in first]
    assert [e for e in other if e["type"] == "change"] != [] and synth.keystroke_count(other) == \
        synth.keystroke_count(first)  # same keystrokes, other timing


@pytest.mark.parametrize("sources", [
    synth.humaneval_sources([2, 3, 4]),
    [synth.file_source(PROJECT_FILE, start_fraction=0.0)],
    [synth.file_source(PROJECT_FILE, start_fraction=0.6)],
])
def test_applying_all_changes_rebuilds_the_files(sources):
    events = synth.synth_typing(sources, seed=1)
    final = replay_documents(events)
    assert {s.uri: s.text for s in sources} == final


def test_max_keystrokes_and_keep_suffix():
    source = synth.file_source(PROJECT_FILE, start_fraction=0.5)
    cut = synth.synth_typing([source], seed=2, max_keystrokes=120)
    assert synth.keystroke_count(cut) == 120
    typed = replay_documents(cut)[source.uri]
    assert source.text.startswith(typed) and len(typed) < len(source.text)

    kept = synth.synth_typing([source], seed=2, max_keystrokes=120, keep_suffix=True)
    opened = kept[0]["text"]
    assert opened.endswith(source.text[len(typed):])      # the rest of the file is there from the start
    assert replay_documents(kept)[source.uri] == source.text


def test_read_first_delays_the_first_keystroke_only():
    source = synth.file_source(PROJECT_FILE, start_fraction=0.5)
    plain = synth.synth_typing([source], seed=2, max_keystrokes=30, keep_suffix=True)
    reading = synth.synth_typing([source], seed=2, max_keystrokes=30, keep_suffix=True, read_first=20.0)
    first_change = next(i for i, e in enumerate(plain) if e["type"] == "change")
    assert [e["type"] for e in reading] == [e["type"] for e in plain]
    assert [e["t"] for e in reading[:first_change]] == [e["t"] for e in plain[:first_change]]  # open + 1st request
    shifts = {round(b["t"] - a["t"], 3) for a, b in zip(plain[first_change:], reading[first_change:])}
    assert shifts == {20.0}  # every later event 20 s later, the rhythm unchanged


@pytest.mark.parametrize("at_open, first_events", [
    ("request", ["open", "truth", "request", "change"]),  # the first traces' assumption
    ("cursor", ["open", "cursor", "change"]),             # what the editor clients send: the resting cursor
    ("none", ["open", "change"]),
])
def test_what_the_editor_sends_at_open(at_open, first_events, tmp_path):
    source = synth.file_source(PROJECT_FILE, start_fraction=0.5)
    plain = synth.synth_typing([source], seed=2, max_keystrokes=12, keep_suffix=True, read_first=5.0)
    events = synth.synth_typing([source], seed=2, max_keystrokes=12, keep_suffix=True, read_first=5.0,
                                at_open=at_open)
    assert [e["type"] for e in events[:len(first_events)]] == first_events
    def from_first_keystroke(trace):
        return trace[next(i for i, e in enumerate(trace) if e["type"] == "change"):]
    assert from_first_keystroke(events) == from_first_keystroke(plain)  # then the same typing
    if at_open == "cursor":
        cursor, asked = events[1], next(e for e in plain if e["type"] == "request")
        assert (cursor["t"], cursor["line"], cursor["character"]) == (asked["t"], asked["line"], asked["character"])
        assert events[2]["t"] - cursor["t"] > 5.0  # the user reads after the cursor came to rest
    out = tmp_path / "t.jsonl"
    args = ["synth", str(PROJECT_FILE), "--start-fraction", "0.5", "--keep-suffix", "--max-keystrokes", "12",
            "--seed", "2", "--read-first", "5", "--at-open", at_open, "--out", str(out)]
    assert replay_main(args) == 0 and read_trace(out) == events


@pytest.mark.parametrize("source, keep_suffix", [
    (synth.humaneval_sources([0])[0], False),                         # after the docstring's last line
    (synth.file_source(PROJECT_FILE, start_fraction=0.5), True),      # inside a file, the rest of it kept
    (synth.file_source(PROJECT_FILE, start_fraction=0.3), True),
])
def test_enter_first_starts_at_a_lines_end_with_enter(source, keep_suffix, tmp_path):
    events = synth.synth_typing([source], seed=2, max_keystrokes=40, keep_suffix=keep_suffix, at_open="cursor",
                                enter_first=True)
    opened, cursor, first = events[0], events[1], next(e for e in events if e["type"] == "change")
    lines = opened["text"].split("\n")
    assert cursor["type"] == "cursor" and len(lines[cursor["line"]]) == cursor["character"]  # at the line's end
    assert lines[cursor["line"]].strip()  # a line that is not blank
    assert first["text"].startswith("\n") and first["text"][1:].strip(" \t") == ""  # Enter, then indentation
    assert first["range"][:2] == [cursor["line"], cursor["character"]]
    if keep_suffix:
        assert replay_documents(events)[source.uri] == source.text
        assert 40 <= synth.keystroke_count(events) < 40 + 120  # on to the end of the line the budget reached
    else:
        assert source.text.startswith(replay_documents(events)[source.uri])
        assert synth.keystroke_count(events) == 40
        out = tmp_path / "t.jsonl"  # the flag, through the command line
        assert replay_main(["synth", "--humaneval", "0", "--max-keystrokes", "40", "--seed", "2", "--at-open",
                            "cursor", "--enter-first", "--out", str(out)]) == 0
        assert read_trace(out) == events


@pytest.mark.parametrize("pauses, shifts_by_request", [
    ([(3, 30.0)], {0: 0, 3: 0, 4: 30.0, 9: 30.0}),               # after request 3: the 4th on is later
    ([(2, 5.0), (6, 10.0)], {2: 0, 3: 5.0, 6: 5.0, 7: 15.0}),     # pauses add up
    ([(99, 5.0)], {0: 0, 9: 0}),                                  # past the last request: nothing moves
])
def test_pauses_move_everything_after_their_request(pauses, shifts_by_request):
    source = synth.file_source(PROJECT_FILE, start_fraction=0.5)
    plain = synth.synth_typing([source], seed=2, max_keystrokes=9, keep_suffix=True)
    paused = synth.with_pauses(plain, pauses)
    assert [dict(e, t=None) for e in paused] == [dict(e, t=None) for e in plain]  # the same events, in order
    requests = [(a["t"], b["t"]) for a, b in zip(plain, paused) if a["type"] == "request"]
    for n, shift in shifts_by_request.items():
        assert round(requests[n][1] - requests[n][0], 3) == shift, n
    assert [e["t"] for e in paused] == sorted(e["t"] for e in paused)


def test_pause_after_flag(tmp_path, capsys):
    out, paused = tmp_path / "t.jsonl", tmp_path / "p.jsonl"
    base = ["synth", "--humaneval", "0", "--max-keystrokes", "20", "--seed", "1"]
    assert replay_main([*base, "--out", str(out)]) == 0
    assert replay_main([*base, "--pause-after", "10:30", "--out", str(paused)]) == 0
    assert read_trace(paused)[-1]["t"] == pytest.approx(read_trace(out)[-1]["t"] + 30.0, abs=0.01)
    assert replay_main([*base, "--pause-after", "ten", "--out", str(paused)]) == 2
    assert "--pause-after" in capsys.readouterr().err


def test_every_request_has_a_truth_that_is_what_comes_next():
    source = synth.humaneval_sources([5])[0]
    events = synth.synth_typing([source], seed=3)
    count = 0
    for request, truth, text in walk(events):
        doc = Document(text)
        offset = doc.offset(request["line"], request["character"])
        assert offset == len(text)                          # typing top-down: the cursor is at the end
        assert source.text.startswith(text)
        rest = source.text[offset:]
        assert truth == "\n".join(rest.split("\n")[:synth.TRUTH_LINES])[:synth.TRUTH_MAX_CHARS]
        count += 1
    assert count == synth.keystroke_count(events) + 1       # one at open, one after every keystroke


def test_enter_inserts_the_next_lines_indentation():
    source = synth.humaneval_sources([0])[0]
    events = synth.synth_typing([source], seed=4)
    newlines = [e for e in events if e["type"] == "change" and "\n" in e["text"]]
    assert newlines
    for change in newlines:
        assert change["text"].startswith("\n") and change["text"][1:].strip(" \t") == ""
    indented = [c for c in newlines if len(c["text"]) > 1]
    assert indented  # the solution is inside a function: most Enters auto-indent
    # Indentation is never typed as keystrokes: no change is a lone leading space after an Enter.
    after_enter = [events[i + 3] for i, e in enumerate(events[:-3]) if e in indented and events[i + 3]["type"] == "change"]
    assert all(e["text"] != " " for e in after_enter)


def test_typing_rhythm_bursts_in_words_pauses_at_line_ends():
    events = synth.synth_typing(synth.humaneval_sources(list(range(10))), seed=5, wpm="80")
    changes = [e for e in events if e["type"] == "change"]
    times = [e["t"] for e in events]
    assert times == sorted(times)
    in_word, line_end = [], []
    for before, after in zip(changes, changes[1:]):
        gap = after["t"] - before["t"]
        if after["text"].startswith("\n"):
            line_end.append(gap)
        elif before["text"].isalnum() and after["text"].isalnum():
            in_word.append(gap)
    assert statistics.median(in_word) < 0.15 < statistics.median(line_end)
    assert 40 < synth.mean_wpm(events) < 90  # 80 wpm bursts, slowed by pauses


def test_fim_holes_put_back_give_the_file():
    source = synth.file_source(PROJECT_FILE)
    events = synth.synth_holes([source], count=6, seed=9)
    opens = [e for e in events if e["type"] == "open"]
    assert len(opens) == 6
    blocks = 0
    for request, truth, text in walk(events):
        offset = Document(text).offset(request["line"], request["character"])
        assert text[:offset] + truth + text[offset:] == source.text
        assert truth.strip()
        blocks += "\n" in truth
    assert synth.synth_holes([source], count=6, seed=9) == events


@pytest.mark.parametrize("line, character, index", [
    ("abc", 0, 0), ("abc", 2, 2), ("abc", 9, 3),          # past the end clamps to the end
    ("a😀b", 1, 1), ("a😀b", 3, 2), ("a😀b", 4, 3),          # the emoji is 2 UTF-16 units
    ("é█x", 1, 1),
])
def test_utf16_columns(line, character, index):
    from codecue_lsp.replay.trace import utf16_to_index

    assert utf16_to_index(line, character) == index


def test_non_ascii_file_round_trips(tmp_path):
    path = tmp_path / "emoji.py"
    path.write_text('greeting = "héllo 😀 wörld"\nprint(greeting)  # 😀😀\n', encoding="utf-8")
    events = synth.synth_typing([synth.file_source(path)], seed=0)
    assert replay_documents(events)[synth.file_source(path).uri] == path.read_text(encoding="utf-8")
    last = [e for e in events if e["type"] == "request"][-1]
    assert last["character"] == 0 and last["line"] == 2
    middle = [e for e in events if e["type"] == "request" and e["line"] == 1][-1]
    assert middle["character"] == utf16_len("print(greeting)  # 😀😀")


def test_cli_writes_a_trace_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert replay_main(["synth", "--humaneval", "0-1", "--out", str(out), "--seed", "1", "--max-keystrokes", "50"]) == 0
    events = read_trace(out)
    assert synth.keystroke_count(events) == 50
    assert replay_main(["synth", "--humaneval", "0-1", "--out", str(tmp_path / "u.jsonl"), "--seed", "1",
                        "--max-keystrokes", "50"]) == 0
    assert (tmp_path / "u.jsonl").read_bytes() == out.read_bytes()
    assert replay_main(["synth", str(tmp_path / "missing.py"), "--out", str(out)]) == 2
    assert replay_main(["synth", "--humaneval", "0", "--wpm", "fast", "--out", str(out)]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0, "type": "open"}\nnot json\n')
    with pytest.raises(TraceError, match="bad.jsonl:2"):
        read_trace(bad)


@pytest.mark.parametrize("name", ["replay_humaneval_demo.jsonl", "replay_project_source.jsonl",
                                  "replay_humaneval_holes.jsonl"])
def test_shipped_traces_are_small_and_consistent(name):
    path = DATA / name
    assert path.stat().st_size < 100_000
    events = read_trace(path)
    for request, truth, text in walk(events):
        assert truth is not None
        lines = text.split("\n")  # the request's position is in the document as it stands then
        assert request["line"] < len(lines) and request["character"] <= utf16_len(lines[request["line"]])


def test_demo_trace_has_about_300_keystrokes():
    events = read_trace(DATA / "replay_humaneval_demo.jsonl")
    assert 250 <= synth.keystroke_count(events) <= 350
    final = replay_documents(events)
    problems = synth.humaneval_problems()
    for uri, text in final.items():
        number = int(uri.rsplit("_", 1)[1].removesuffix(".py"))
        assert (problems[number]["prompt"] + problems[number]["canonical_solution"]).startswith(text)
