"""The project context holds still while typing and is re-ranked at a pause: the fresh prompt is prefilled into the
engine's spare cache and taken over only once it is ready (completer.prepare_growth, growth.py)."""
from __future__ import annotations

from engine_helpers import tiny_engine
from test_context_prompt import write_project

from codecue_lsp.completer import Completer
from codecue_lsp.config import Settings
from codecue_lsp.context.index import WorkspaceIndex
from codecue_lsp.context.project import ProjectContext
from codecue_lsp.prompt import OpenDocument
from engine.types import CancelToken

# A project name matters once it is used near the cursor: typing a call to one re-ranks at the next pause.
FILLER = "".join(f"\n\ndef step_{i}(value):\n    return value + {i}\n" for i in range(8))
TEXT = ("import os\n" + FILLER
        + "\n\ndef bill(account, amount):\n    ")
ROW = TEXT.count("\n")


def test_typing_keeps_the_context_and_a_pause_re_ranks_it(tmp_path):
    root = tmp_path / "shop"
    write_project(root)
    index = WorkspaceIndex([str(root)])
    index.build()
    project = ProjectContext(index)
    engine = tiny_engine("none")
    try:
        completer, settings = Completer(engine), Settings(max_tokens=4, cold_prompt_tokens="off")
        uri = (root / "pkg/service.py").as_uri()
        first = completer.prepare(OpenDocument(uri, "python", TEXT), ROW, 4, settings, project=project)
        assert "pkg/store/backend.py" not in first.built.context_files  # nothing near the cursor uses it yet
        assert completer.prepare_growth(OpenDocument(uri, "python", TEXT), ROW, 4, settings, project=project) is None

        typed = TEXT + "left = save_usage("
        doc = OpenDocument(uri, "python", typed)
        while_typing = completer.prepare(doc, ROW, len("    left = save_usage("), settings, project=project)
        assert while_typing.built.kept and while_typing.built.context_files == first.built.context_files

        at_pause = completer.prepare_growth(doc, ROW, len("    left = save_usage("), settings, project=project)
        assert at_pause is not None and "pkg/store/backend.py" in at_pause.built.context_files
        # Not switched before it is ready: the next keystroke still gets the kept layout.
        assert completer.prepare(doc, ROW, len("    left = save_usage("), settings,
                                 project=project).built.context_files == first.built.context_files
        held = completer.grow(at_pause, CancelToken()).result()
        assert held == at_pause.ready_tokens
        completer.take_growth(at_pause)
        after = completer.prepare(doc, ROW, len("    left = save_usage("), settings, project=project)
        assert after.built.kept and "pkg/store/backend.py" in after.built.context_files
        result = engine.submit(after.request, CancelToken()).result()
        assert result.stats.reused_prompt_tokens >= at_pause.ready_tokens - 1  # the grown cache was taken over
    finally:
        engine.close()
