"""A workspace's configuration cannot choose where code and keys go, nor which file is read or written (issue 63,
item 1): `engine`, `apiKeyEnv`, `logFile` (and the other USER_ONLY_SETTINGS) from `workspace/configuration` or
`didChangeConfiguration` are ignored unless they match the command line's or the initializationOptions' value; each
ignored one is logged by name. Driven in process (server_harness.InProcessClient): the server asks for the
configuration, the test answers."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

import pytest
from server_harness import HANG_GUARD_S, InProcessClient

from codecue_lsp.config import USER_ONLY_SETTINGS, Settings, snake_case
from codecue_lsp.server import make_server

# What a cloned repository's .vscode/settings.json (or a Neovim project's settings) could hold: each a valid value.
SAMPLES = {"engine": "http://evil.example/v1", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY", "logFile": "/tmp/evil.log",
           "remoteCaBundle": "/tmp/evil.pem", "remoteHeadersEnv": {"X-API-Key": "GITHUB_TOKEN"}}
HOSTILE = {key: value for key, value in SAMPLES.items() if snake_case(key) in USER_ONLY_SETTINGS}
DEFAULTS = Settings()


def user_only(settings: Settings) -> dict:
    return {name: getattr(settings, name) for name in USER_ONLY_SETTINGS}


def test_every_setting_naming_a_url_variable_header_or_file_is_user_only_and_tried_here():
    names_a_place = re.compile(r"^engine$|_env$|_file$|_bundle$|header|_url$")
    named = {f.name for f in dataclasses.fields(Settings) if names_a_place.search(f.name)}
    assert {"engine", "api_key_env", "log_file"} <= named <= set(USER_ONLY_SETTINGS)
    assert {snake_case(key) for key in HOSTILE} == set(USER_ONLY_SETTINGS), "a sample value for each"


async def until(predicate, what: str):
    """Wait for the server's handlers to get there (a hang guard, not a timing)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_GUARD_S
    while not predicate():
        assert loop.time() < deadline, f"never saw {what}"
        await asyncio.sleep(0.01)


async def started(cli: dict, init_options: dict | None, pull: bool) -> InProcessClient:
    """`initialize` only (`initialized` would load the model pair); `pull`: the client can answer
    workspace/configuration, else the server takes didChangeConfiguration's settings."""
    client = InProcessClient(make_server(cli))
    capabilities = {"workspace": {"configuration": True}} if pull else {}
    response = await client.call("initialize", {"processId": None, "capabilities": capabilities, "rootUri": None,
                                                "initializationOptions": init_options})
    assert "result" in response, response
    return client


async def configure(client: InProcessClient, section: dict, pull: bool, marker: int = 7) -> None:
    """The workspace's settings change to `section`, plus maxTokens `marker` to see when they were applied."""
    section = {**section, "maxTokens": marker}
    if not pull:
        client.notify("workspace/didChangeConfiguration", {"settings": {"codecue": section}})
    else:
        asked = len(client.from_server)
        client.notify("workspace/didChangeConfiguration", {"settings": None})
        await until(lambda: any(m.get("method") == "workspace/configuration" for m in client.from_server[asked:]),
                    "the server asking for the configuration")
        request = next(m for m in client.from_server[asked:] if m.get("method") == "workspace/configuration")
        client.feed({"jsonrpc": "2.0", "id": request["id"], "result": [section]})
    await until(lambda: client.server.settings.max_tokens == marker, "the workspace's settings applied")


async def shut(client: InProcessClient) -> None:
    if not client.server.protocol._shutdown:
        await client.call("shutdown", None)


def ignored(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "from the workspace configuration" in r.getMessage()]


@pytest.mark.asyncio
@pytest.mark.parametrize("pull", [True, False], ids=["workspace/configuration", "didChangeConfiguration"])
@pytest.mark.parametrize("key", sorted(HOSTILE))
async def test_a_workspace_setting_only_the_user_may_set_changes_nothing(caplog, key, pull):
    caplog.set_level(logging.WARNING, logger="codecue_lsp.config")
    client = await started({}, {"pair": "tiny"}, pull)
    try:
        await configure(client, {key: HOSTILE[key]}, pull)
        got = client.server.settings
        assert user_only(got) == user_only(DEFAULTS)
        assert got.pair == "tiny"
        assert len(ignored(caplog)) == 1 and key in ignored(caplog)[0], caplog.text
        assert "evil" not in caplog.text and "GITHUB" not in caplog.text, "the value is not logged"
    finally:
        await shut(client)


@pytest.mark.asyncio
async def test_all_at_once_change_nothing_and_are_each_logged(caplog):
    caplog.set_level(logging.WARNING, logger="codecue_lsp.config")
    client = await started({}, None, pull=True)
    try:
        await configure(client, HOSTILE, pull=True)
        got = client.server.settings
        assert (got.engine, got.api_key_env, got.log_file) == ("local", "CODECUE_API_KEY", None)
        assert user_only(got) == user_only(DEFAULTS)
        assert sorted(m.split()[1] for m in ignored(caplog)) == sorted(HOSTILE)
    finally:
        await shut(client)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["flags", "initializationOptions"])
async def test_the_users_own_values_stay_and_a_matching_workspace_value_is_no_warning(caplog, where):
    caplog.set_level(logging.WARNING, logger="codecue_lsp.config")
    mine = {"engine": "http://10.0.0.5:8000/v1", "api_key_env": "TEAM_KEY", "log_file": "/tmp/codecue-mine.log"}
    client = await (started(mine, None, pull=True) if where == "flags"
                    else started({}, {"engine": mine["engine"], "apiKeyEnv": "TEAM_KEY",
                                      "logFile": mine["log_file"]}, pull=True))
    try:
        # VS Code sends the user's engine again in its workspace/configuration answer: the same value is no warning.
        await configure(client, {"engine": "http://10.0.0.5:8000/v1/", "apiKeyEnv": "TEAM_KEY"}, pull=True)
        assert ignored(caplog) == []
        await configure(client, HOSTILE, pull=True, marker=9)
        got = client.server.settings
        assert (got.engine, got.api_key_env, got.log_file) == tuple(mine.values())
        assert len(ignored(caplog)) == len(HOSTILE)
    finally:
        await shut(client)
