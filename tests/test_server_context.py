"""Project context through the real server (tiny pair): the index is built from the workspace folder with
`$/progress`, follows saves, created and deleted files, feeds the prompt, and a workspace without a root works."""
from __future__ import annotations

import os

import pytest
from lsp_helpers import (
    change_doc,
    complete,
    open_doc,
    running_server,
    stats,
    wait_for_stats,
    wait_until_loaded,
)
from lsprotocol import types as lsp

pytestmark = pytest.mark.asyncio

SECRET = "sk-live-0123456789abcdef"


def write(root, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def project(tmp_path):
    root = tmp_path / "billing"
    write(root, "billing/__init__.py", "")
    write(root, "billing/errors.py", "class QuotaExceeded(Exception):\n    pass\n")
    write(root, "billing/rates.py", "def unit_price(plan: str) -> float:\n    return 0.5\n")
    write(root, ".env", f"STRIPE_KEY={SECRET}\n")
    write(root, ".gitignore", "scratch/\n")
    write(root, "scratch/notes.py", f"def scratch_secret():\n    return '{SECRET}'\n")
    return root


SERVICE = ("from .errors import QuotaExceeded\nfrom .rates import unit_price\n\n\n"
           "def charge(plan, used, limit):\n    if used > limit:\n        raise QuotaExceeded()\n"
           "    price = unit_price(plan)\n    ")


async def indexed(client) -> dict:
    return await wait_for_stats(client, lambda s: s["context"].get("enabled") and not s["context"]["indexing"],
                                "the index built", timeout=120)


async def test_the_index_feeds_the_prompt_and_follows_the_files(tiny_pair_env, tmp_path):
    root = project(tmp_path)
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, "--pair", "tiny", "--debounce-ms", "0", "--max-tokens", "4",
                              root=root) as client:
        await wait_until_loaded(client)
        state = await indexed(client)
        assert state["context"]["files"] == 3  # __init__, errors, rates: not .env, not the ignored scratch/
        assert state["context"]["definitions"] >= 2
        assert any(token for token in client.progress_reports), "no $/progress while indexing"
        kinds = [getattr(v, "kind", None) for values in client.progress_reports.values() for v in values]
        assert kinds[0] == "begin" and kinds[-1] == "end"

        uri = (root / "billing/service.py").as_uri()
        open_doc(client, uri, SERVICE)
        await complete(client, uri, 8, 4)
        last = (await stats(client))["last_prompt"]
        assert {"billing/errors.py", "billing/rates.py"} <= set(last["context_files"])
        assert last["project"] and last["sections"]["context"] > 0

        # A new file saved in the editor: the index has it after didSave (the client here watches no files).
        write(root, "billing/tax.py", "def vat_rate(country: str) -> float:\n    return 0.2\n")
        tax_uri = (root / "billing/tax.py").as_uri()
        open_doc(client, tax_uri, (root / "billing/tax.py").read_text())
        client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(tax_uri)))
        await wait_for_stats(client, lambda s: s["context"]["files"] == 4, "the saved file indexed")

        # Deleted on disk and reported by a watcher: gone from the index.
        os.remove(root / "billing/rates.py")
        client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(changes=[
            lsp.FileEvent(uri=(root / "billing/rates.py").as_uri(), type=lsp.FileChangeType.Deleted)]))
        await wait_for_stats(client, lambda s: s["context"]["files"] == 3, "the deleted file dropped")

        # A new prompt no longer shows the deleted file; nothing secret was ever shown.
        change_doc(client, uri, 2, SERVICE.replace("price", "cost"))
        await complete(client, uri, 8, 4)
        last = (await stats(client))["last_prompt"]
        assert "billing/rates.py" not in last["context_files"]
        assert not any(path.startswith(("scratch/", ".env")) for path in last["context_files"])


async def test_context_off_shows_no_other_file(tiny_pair_env, tmp_path):
    root = project(tmp_path)
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, "--pair", "tiny", "--debounce-ms", "0", "--max-tokens", "4",
                              init_options={"context": False}, root=root) as client:
        await wait_until_loaded(client)
        uri = (root / "billing/service.py").as_uri()
        open_doc(client, uri, SERVICE)
        await complete(client, uri, 8, 4)
        current = await stats(client)
        assert current["context"] == {"enabled": False}
        assert current["last_prompt"]["context_files"] == [] and not current["last_prompt"]["project"]


async def test_a_workspace_without_a_root_still_completes(tiny_pair_env, tmp_path):
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, "--pair", "tiny", "--debounce-ms", "0", "--max-tokens", "4") as client:
        await wait_until_loaded(client)
        uri = (tmp_path / "loose.py").as_uri()
        open_doc(client, uri, "def add(a, b):\n    ")
        await complete(client, uri, 1, 4)
        current = await stats(client)
        assert current["context"] == {"enabled": False} and current["requests"] == 1
        assert current["completed"] == 1 and current["errors"] == 0  # the engine answered it


async def test_a_workspace_folder_added_later_is_indexed(tiny_pair_env, tmp_path):
    root = project(tmp_path)
    other = tmp_path / "shipping"
    write(other, "shipping/routes.py", "def route_for(zone: str) -> str:\n    return zone\n")
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, "--pair", "tiny", "--debounce-ms", "0", "--max-tokens", "4",
                              root=root) as client:
        await indexed(client)
        saving = client.initialize_result.capabilities.text_document_sync
        assert saving.save is not None  # the client sends didSave: the index follows saved files
        client.workspace_did_change_workspace_folders(lsp.DidChangeWorkspaceFoldersParams(
            event=lsp.WorkspaceFoldersChangeEvent(
                added=[lsp.WorkspaceFolder(uri=other.as_uri(), name="shipping")], removed=[])))
        state = await wait_for_stats(client, lambda s: s["context"].get("files") == 4 and not s["context"]["indexing"],
                                     "the added folder indexed")
        assert sorted(state["context"]["roots"]) == sorted([str(root), str(other)])


async def test_settings_that_change_what_is_indexed_apply_without_a_restart(tiny_pair_env, tmp_path):
    root = project(tmp_path)
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, "--pair", "tiny", "--debounce-ms", "0", "--max-tokens", "4",
                              init_options={"context": False}, root=root) as client:
        await wait_until_loaded(client)
        assert (await stats(client))["context"] == {"enabled": False}
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"codecue": {"context": True, "excludeGlobs": ["billing/rates.py"]}}))
        state = await indexed(client)
        assert state["context"]["files"] == 2  # __init__ and errors: rates.py excluded by the new glob
