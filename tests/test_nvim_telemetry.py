"""Telemetry that adds up, from Neovim (issue 64, item 5).

Each shown suggestion gets an id (didShowCompletion {uri, length, id}); every accept of it (word, line, Tab, or
typing it to its end) sends didAcceptCompletion with that id, the characters this action took (acceptedLength),
the text and the LSP position where it starts; a suggestion dropped unaccepted sends didRejectCompletion. Exact
notifications against the fixed-answer server; against codecue-lsp on the tiny pair, its counters: one accepted
suggestion per id, so accepted <= shown, and the accepted characters are the ones inserted.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, editor_on_fake_server, real_server_cmd  # noqa: E402

SUGGESTION = "foo.bar(1)"


@pytest.fixture
def editor(tmp_path):
    ed = editor_on_fake_server(tmp_path, SUGGESTION)
    yield ed
    ed.close()


def events(ed: Editor, count: int) -> list[tuple[str, dict]]:
    got = ed.wait_for(lambda: len(e := ed.server_stats()["events"]) >= count and e, f"{count} notifications")
    return [(e["method"].removeprefix("codecue/"), e["params"]) for e in got]


def test_partial_accepts_carry_the_shown_id_text_and_position(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<M-Right>")
    editor.wait_for(lambda: editor.lines() == ["x = foo"], "the first word")
    editor.type("<M-l>")
    editor.wait_for(lambda: editor.lines() == ["x = foo.bar(1)"], "the rest of the line")
    (show, shown), (accept1, word), (accept2, line) = events(editor, 3)[:3]
    uri = shown["uri"]
    assert (show, shown) == ("didShowCompletion", {"uri": uri, "length": 10, "id": shown["id"]})
    assert (accept1, word) == ("didAcceptCompletion", {"uri": uri, "length": 10, "acceptedLength": 3,
                                                       "id": shown["id"], "text": "foo",
                                                       "position": {"line": 0, "character": 4}})
    assert (accept2, line) == ("didAcceptCompletion", {"uri": uri, "length": 10, "acceptedLength": 7,
                                                       "id": shown["id"], "text": ".bar(1)",
                                                       "position": {"line": 0, "character": 7}})


def test_typing_the_whole_suggestion_counts_as_accepting_it(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type(SUGGESTION, delay=0.05)
    (show, shown), (accept, accepted) = events(editor, 2)[:2]
    assert show == "didShowCompletion" and accept == "didAcceptCompletion"
    assert accepted == {"uri": shown["uri"], "length": 10, "acceptedLength": 10, "id": shown["id"],
                        "text": SUGGESTION, "position": {"line": 0, "character": 4}}
    stats = editor.server_stats()
    assert (stats["accepted"], stats["rejected"]) == (1, 0)


def test_typing_the_rest_after_a_word_accept_adds_only_the_rest(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<M-Right>")
    editor.wait_for(lambda: editor.lines() == ["x = foo"], "the first word")
    editor.type(".bar(1)", delay=0.05)
    got = events(editor, 3)
    assert [(m, p["id"], p.get("acceptedLength"), p.get("text")) for m, p in got[:3]] == [
        ("didShowCompletion", got[0][1]["id"], None, None),
        ("didAcceptCompletion", got[0][1]["id"], 3, "foo"),
        ("didAcceptCompletion", got[0][1]["id"], 7, ".bar(1)")]


def test_ids_differ_per_suggestion_and_a_dropped_one_is_rejected_with_its_id(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("z")  # something else: the first is rejected, a second is shown
    editor.wait_for(lambda: (g := editor.ghost()) and g["col"] == 5, "the next suggestion")
    got = events(editor, 3)
    assert [m for m, _ in got[:3]] == ["didShowCompletion", "didRejectCompletion", "didShowCompletion"]
    assert got[1][1] == {"uri": got[0][1]["uri"], "length": 10, "id": got[0][1]["id"]}
    assert got[2][1]["id"] != got[0][1]["id"]


def test_the_real_servers_counters_add_up(tiny_pair_env, tmp_path):
    ed = Editor(real_server_cmd(), tiny_pair_env)
    try:
        path = tmp_path / "example.py"
        path.write_text("def add(a, b):\n    return a + b\n\n")
        ed.open(path)
        ed.wait_ready(timeout=120)
        ed.type("Gox = add(", delay=0.05)
        first = ed.wait_ghost(timeout=60)["text"]
        # Two partial accepts of one suggestion, then the rest dropped.
        ed.type("<M-Right>")
        ed.wait_for(lambda: ed.ghost() is None or ed.ghost()["text"] != first, "the first word taken")
        taken = ed.lua("return require('codecue.telemetry').stats.accepted")
        if ed.ghost() is not None:
            ed.type("<M-l>")
            ed.wait_for(lambda: ed.lua("return require('codecue.telemetry').stats.accepted") == taken + 1,
                        "the line taken")
        ed.type("<Esc>")
        client = ed.client_stats()
        stats = ed.wait_for(lambda: (s := ed.server_stats())["accepted"] >= 1 and s, "the accepts counted")
        assert stats["accepted"] == 1, "partial accepts of one suggestion are one accepted suggestion"
        assert client["accepted"] >= 1 and stats["accepted"] <= stats["shown"]
        inserted = "\n".join(ed.lines()[3:]).removeprefix("x = add(")
        assert stats["accepted_chars"] == len(inserted), "the characters the accepts inserted"
    finally:
        ed.close()
