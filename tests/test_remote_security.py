"""Trust at the edges of the remote backend (issue 63, items 2 and 3): no secret in a log, a message or
`codecue.stats` (credentials in an engine URL are refused; the API key and gateway header values are scrubbed even
when a server repeats them); TLS against the OS trust store (truststore) plus a CA bundle; gateway headers whose
values come from environment variables a setting names."""
from __future__ import annotations

import asyncio
import json
import logging
import ssl
import subprocess
import sys

import pytest
import truststore
import trustme
from fake_engine import ANSWER, HANG_GUARD_S, FakeEngine
from lsp_helpers import complete, items_of, open_doc, running_server, server_env, wait_for_stats

from codecue_lsp.__main__ import main
from codecue_lsp.config import Settings
from codecue_lsp.redact import has_credentials, redact_urls, scrub
from codecue_lsp.remote_endpoint import RemoteBackend, RemotePrepared, RetryPolicy
from codecue_lsp.remote_http import tls_context
from engine.types import CancelToken

PASSWORD = "s3cr3t-pw-71"
CREDENTIAL_URLS = [f"https://alice:{PASSWORD}@gw.example/v1", f"http://{PASSWORD}@127.0.0.1:9/v1"]
API_KEY, GATEWAY_KEY = "sk-e2e-secret-4242", "gw-e2e-secret-1717"
DOC = "def add(a, b):\n    "


def prepared() -> RemotePrepared:
    return RemotePrepared(built=None, prompt=[2, 50, 4, 3], max_tokens=16, stop=None)


# --- item 2: credentials in a URL are refused, secrets scrubbed ---------------------------------------------------

def test_redaction_helpers():
    assert has_credentials(CREDENTIAL_URLS[0]) and has_credentials(CREDENTIAL_URLS[1])
    assert not has_credentials("https://gw.example/v1") and not has_credentials("https://gw.example/v1?a=b@c")
    assert redact_urls(f"failed: {CREDENTIAL_URLS[0]}") == "failed: https://***@gw.example/v1"
    assert scrub(f"bad key Bearer {API_KEY}", [API_KEY, None, "on"]) == "bad key Bearer ***"


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_an_engine_url_with_credentials_is_refused_and_its_secret_never_logged(url, caplog):
    caplog.set_level(logging.DEBUG)
    assert Settings().merged({"engine": url}).engine == "local"  # refused: the code stays on this machine
    assert "credentials" in caplog.text and PASSWORD not in caplog.text
    with pytest.raises(ValueError, match="credentials") as refused:
        RemoteBackend(url)
    assert PASSWORD not in str(refused.value)


def test_the_command_line_refuses_credentials_in_the_engine_url(capsys):
    assert main(["--check", "--engine", CREDENTIAL_URLS[1]]) == 2
    out, err = capsys.readouterr()
    assert "credentials" in err and PASSWORD not in out + err


def test_check_never_prints_the_key_a_gateway_repeats(tiny_pair_env):
    env = dict(tiny_pair_env, CODECUE_API_KEY=API_KEY)
    with FakeEngine("vllm", echo_auth=True) as fake:
        out = subprocess.run([sys.executable, "-m", "codecue_lsp", "--check", "--engine", fake.url, "--pair", "tiny"],
                             env=server_env(env), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 2 and "401" in out.stderr, out.stderr
    assert API_KEY not in out.stdout + out.stderr


def test_the_api_key_and_header_values_stay_out_of_messages_stats_and_logs(monkeypatch, caplog):
    monkeypatch.setenv("MY_KEY_VAR", API_KEY)
    monkeypatch.setenv("GW_KEY", GATEWAY_KEY)
    caplog.set_level(logging.DEBUG)
    with FakeEngine("vllm", echo_auth=True) as fake:  # its 401 body repeats both
        backend = RemoteBackend(fake.url, api_key_env="MY_KEY_VAR", headers_env=[("X-API-Key", "GW_KEY")],
                                retry=RetryPolicy(attempts=2, backoff_s=0.01))
        notices = []
        backend.on_unhealthy = notices.append
        result = backend.complete(prepared(), CancelToken())
    seen = fake.completions()[0].headers
    assert seen["Authorization"] == f"Bearer {API_KEY}" and seen["X-API-Key"] == GATEWAY_KEY  # sent ...
    assert result.outcome == "failed" and "401" in result.error and "***" in result.error
    shown = json.dumps([result.error, notices, backend.info()]) + caplog.text
    assert API_KEY not in shown and GATEWAY_KEY not in shown  # ... never shown


# --- item 3: gateway headers from the environment -----------------------------------------------------------------

def test_header_settings_name_variables_never_values(caplog):
    assert Settings().merged({"remoteHeadersEnv": {"X-API-Key": "GW_KEY"}}).remote_headers_env == (
        ("X-API-Key", "GW_KEY"),)
    both = ["CF-Access-Client-Id=CF_ID", "CF-Access-Client-Secret=CF_SECRET"]
    assert Settings().merged({"remoteHeadersEnv": both}).remote_headers_env == (
        ("CF-Access-Client-Id", "CF_ID"), ("CF-Access-Client-Secret", "CF_SECRET"))
    for bad in ({"X-API-Key": "sk-live-abc123"}, {"Host": "H"}, {"bad header": "V"}, "no-equals-sign"):
        assert Settings().merged({"remoteHeadersEnv": bad}).remote_headers_env == ()
    assert "not an environment variable name" in caplog.text and "sk-live-abc123" not in caplog.text


def test_an_unset_header_variable_sends_nothing_and_says_which(monkeypatch, caplog):
    monkeypatch.delenv("GW_UNSET", raising=False)
    with FakeEngine("vllm") as fake:
        RemoteBackend(fake.url, model="m", server="vllm", headers_env=[("api-key", "GW_UNSET")]).complete(
            prepared(), CancelToken())
    assert "api-key" not in {name.lower() for name in fake.completions()[0].headers}
    assert "GW_UNSET is not set" in caplog.text


# --- item 3: TLS --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def company_ca(tmp_path_factory):
    """A CA of one's own (a company's), the engine's certificate signed by it, and the CA as a PEM file."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    path = tmp_path_factory.mktemp("tls") / "company-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return server, path


def test_certificates_are_checked_against_the_os_trust_store():
    assert isinstance(tls_context(None), truststore.SSLContext)
    with pytest.raises(ValueError, match="remoteCaBundle: no file"):
        tls_context("/nonexistent/company-ca.pem")


def test_an_https_engine_signed_by_a_company_ca_needs_its_bundle(company_ca):
    server, path = company_ca
    with FakeEngine("vllm", tls=server) as fake:
        assert fake.url.startswith("https://")
        refused = RemoteBackend(fake.url, model="m", server="vllm").complete(prepared(), CancelToken())
        trusted = RemoteBackend(fake.url, model="m", server="vllm", stop_token_ids=range(8),
                                ca_bundle=str(path)).complete(prepared(), CancelToken())
    assert refused.outcome == "failed" and "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert trusted.outcome == "completed" and trusted.text == ANSWER


def test_a_ca_in_the_os_store_is_trusted_without_a_bundle(company_ca, monkeypatch):
    """On Linux the OS store is OpenSSL's default verify paths, which truststore reads and SSL_CERT_FILE sets."""
    server, path = company_ca
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    with FakeEngine("vllm", tls=server) as fake:
        result = RemoteBackend(fake.url, model="m", server="vllm", stop_token_ids=range(8)).complete(
            prepared(), CancelToken())
    assert result.outcome == "completed" and result.text == ANSWER


# --- the whole server: a company gateway over https, and nothing secret comes back ----------------------------------

@pytest.mark.asyncio
async def test_codecue_lsp_through_an_https_gateway_with_headers_from_the_environment(company_ca, tmp_path):
    server, path = company_ca
    env = {"CODECUE_API_KEY": API_KEY, "GW_KEY": GATEWAY_KEY}
    init = {"remoteCaBundle": str(path), "remoteHeadersEnv": {"X-API-Key": "GW_KEY"}, "remoteServer": "vllm"}
    with FakeEngine("vllm", tls=server) as fake:
        async with running_server(env, "--engine", fake.url, init_options=init) as client:
            open_doc(client, "file:///add.py", DOC)
            await wait_for_stats(client, lambda s: s["ready"])
            items = items_of(await complete(client, "file:///add.py", 1, 4, timeout=HANG_GUARD_S))
            assert items and items[0].insert_text.startswith("return a + b")
    headers = fake.completions()[0].headers
    assert headers["Authorization"] == f"Bearer {API_KEY}" and headers["X-API-Key"] == GATEWAY_KEY


@pytest.mark.asyncio
async def test_codecue_lsp_never_shows_the_key_a_gateway_repeats(tmp_path):
    log = tmp_path / "codecue.log"
    env = {"CODECUE_API_KEY": API_KEY, "GW_KEY": GATEWAY_KEY}
    init = {"remoteHeadersEnv": {"X-API-Key": "GW_KEY"}, "logLevel": "DEBUG"}
    with FakeEngine("vllm", echo_auth=True) as fake:
        async with running_server(env, "--engine", fake.url, "--log-file", str(log), init_options=init) as client:
            open_doc(client, "file:///add.py", DOC)
            await wait_for_stats(client, lambda s: s["ready"])
            assert items_of(await complete(client, "file:///add.py", 1, 4, timeout=HANG_GUARD_S)) == []
            stats = await wait_for_stats(client, lambda s: s["backend"]["healthy"] is False)
            await asyncio.sleep(0)  # let the message notification be read
            messages = [m.message for m in client.messages]
    assert fake.completions()[0].headers["X-API-Key"] == GATEWAY_KEY  # the gateway got them ...
    assert "401" in stats["backend"]["last_error"] and any("401" in m for m in messages)
    shown = json.dumps(stats) + json.dumps(messages) + log.read_text()
    assert API_KEY not in shown and GATEWAY_KEY not in shown  # ... and nothing shows them
    assert stats["failed"] == 1 and stats["completed"] == 0
