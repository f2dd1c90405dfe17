"""`codecue-replay run --clients N`: N simulated developers at once, each with its own server process and its own
copies of the documents. Checked with the fake server on a virtual clock (exact numbers), through the CLI, and end to
end on the tiny pair's real server."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_replay_report import (
    DELAY_MS,
    HOLD_MS,
    URI,
    VirtualClockReplay,
    fake_server,
    known_trace,
)

from codecue_lsp.replay import synth
from codecue_lsp.replay.__main__ import main as replay_main
from codecue_lsp.replay.bench_table import main as bench_table_main
from codecue_lsp.replay.bench_table import portable, prometheus_counters
from codecue_lsp.replay.clients import (
    ClientsRun,
    StartLine,
    client_events,
    client_uri,
    clients_table,
    load_numbers,
    parse_client_counts,
    run_clients,
    run_clients_async,
    summarize_clients,
)
from codecue_lsp.replay.runner import (
    RequestRecord,
    RunResult,
    ServerConfig,
    finish_record,
)
from codecue_lsp.replay.trace import write_trace

HANG_GUARD_S = 60.0


@pytest.fixture(autouse=True)
def importable_package(monkeypatch):
    """The servers started here import codecue_lsp from this checkout."""
    repo = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))


@pytest.mark.parametrize("uri, client, expected", [
    ("file:///replay/HumanEval_0.py", 1, "file:///replay/client1/client1-HumanEval_0.py"),
    ("file:///replay/HumanEval_0.py", 3, "file:///replay/client3/client3-HumanEval_0.py"),
    ("file:///a.py", 2, "file:///client2/client2-a.py"),
    ("untitled:Untitled-1", 2, "untitled:client2-Untitled-1"),
    ("notes", 4, "client4-notes"),
])
def test_client_uri(uri, client, expected):
    assert client_uri(uri, client) == expected


def test_client_events_copy_every_document_and_leave_the_rest():
    events = known_trace() + [{"t": 1.0, "type": "meta", "source": "record"}]
    copied = client_events(events, 2)
    assert {e["uri"] for e in copied if "uri" in e} == {client_uri(URI, 2)}
    assert [{k: v for k, v in e.items() if k != "uri"} for e in copied] == \
        [{k: v for k, v in e.items() if k != "uri"} for e in events]
    assert {e["uri"] for e in events if "uri" in e} == {URI}  # the trace itself is untouched


@pytest.mark.parametrize("text, expected", [("4", [4]), ("1,2,4", [1, 2, 4]), ("1, 8", [1, 8])])
def test_parse_client_counts(text, expected):
    assert parse_client_counts(text) == expected


@pytest.mark.parametrize("text", ["0", "", "two", "1,-2", "1,,x"])
def test_parse_client_counts_refuses(text):
    with pytest.raises(ValueError, match="--clients wants positive counts"):
        parse_client_counts(text)


class SleepLog:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_start_line_holds_everyone_until_all_are_ready_then_staggers():
    async def scenario():
        line = StartLine(3, stagger_s=1.5)
        replays = {k: SleepLog() for k in (1, 2, 3)}
        first = asyncio.ensure_future(line.wait(replays[1], 1))
        third = asyncio.ensure_future(line.wait(replays[3], 3))
        await asyncio.sleep(0.01)
        held = not first.done() and not third.done()
        line.arrive(2)  # client 2's server failed before it was ready: its run ended, it still arrives
        await asyncio.wait_for(asyncio.gather(first, third), HANG_GUARD_S)
        return held, {k: r.slept for k, r in replays.items()}

    held, slept = asyncio.run(scenario())
    assert held
    assert slept == {1: [], 2: [], 3: [3.0]}


def record(index: int, outcome: str, latency_ms: float | None = None) -> RequestRecord:
    r = RequestRecord(index=index, uri=URI, line=0, character=0, t_sent=1.0, outcome=outcome)
    if latency_ms is not None:
        r.t_response = 1.0 + latency_ms / 1000
    finish_record(r, measure_timing=False)
    return r


def result_of(records: list[RequestRecord], clock_s: float) -> RunResult:
    return RunResult("x", ["srv"], 1.0, records, extra={"clock_s": clock_s})


@pytest.mark.parametrize("outcomes, span_s, expected", [
    # (outcome, latency) per request -> requests, completions, answered, cancelled, errors, p50, p99, per second
    ([("answered", 100), ("answered", 300), ("cancelled", None)], 2.0, (3, 2, 2, 1, 0, 200.0, 298.0, 1.0)),
    ([("empty", 50), ("error", None), ("timeout", None)], 0.5, (3, 1, 0, 0, 2, 50.0, 50.0, 2.0)),
    ([("cancelled", None)], 4.0, (1, 0, 0, 1, 0, None, None, 0.0)),
    ([("answered", 10)], None, (1, 1, 1, 0, 0, 10.0, 10.0, None)),
])
def test_load_numbers(outcomes, span_s, expected):
    records = [record(i, outcome, ms) for i, (outcome, ms) in enumerate(outcomes)]
    n = load_numbers([result_of(records, span_s or 0.0)], span_s)
    got = (n["requests"], n["completions"], n["answered"], n["cancelled"], n["errors"], n["latency_ms"]["p50"],
           n["latency_ms"]["p99"], n["completions_per_s"])
    assert got == pytest.approx(expected)


def test_overall_pools_every_clients_requests_over_the_whole_span():
    run = ClientsRun(2, 1.0, results=[result_of([record(0, "answered", 100), record(1, "answered", 200)], 2.0),
                                      result_of([record(0, "answered", 400), record(1, "cancelled")], 3.0)],
                     offsets=[0.0, 1.0])
    summary = summarize_clients(run)
    overall = summary["overall"]
    assert (overall["requests"], overall["completions"], overall["cancelled"]) == (4, 3, 1)
    assert overall["latency_ms"]["p50"] == pytest.approx(200)
    assert overall["span_s"] == 4.0 and overall["completions_per_s"] == pytest.approx(0.75)  # 3 over 1 s + 3 s
    assert [c["completions_per_s"] for c in summary["per_client"]] == pytest.approx([1.0, 1 / 3])
    table = clients_table([summary])
    assert "completions/s" in table and "0.75" in table
    assert "N=2 client 2 (+1.0 s): p50 400 ms, p99 400 ms, 0.33 completions/s, 1 cancelled, 0 errors" in table


class ClientVirtualReplay(VirtualClockReplay):
    """VirtualClockReplay's due times assume its clock reads 0 when typing starts; the start line's stagger sleep
    has moved it on by the client's offset, so each client's clock restarts at 0 when it starts typing."""

    async def play(self) -> None:
        self.virtual = 0.0
        await super().play()


def test_clients_on_the_virtual_clock_give_known_numbers(tmp_path):
    """Three clients, each the known trace (one request of four superseded) against its own fake server answering
    in 100 ms; clients start 0.5 s apart. Every number is exact on the virtual clock."""
    oracle = tmp_path / "known.py"
    oracle.write_text("abc = 1\nprint(abc)\n")
    log = tmp_path / "received.jsonl"
    config = ServerConfig("fake", fake_server("--delay-ms", str(HOLD_MS), "--oracle", str(oracle), "--log", str(log)))
    run = asyncio.run(run_clients_async(known_trace(), config, 3, 1.0, 0.5, HANG_GUARD_S,
                                        replay_class=ClientVirtualReplay, delay_s=DELAY_MS / 1000))
    assert [r.server_error for r in run.results] == [None] * 3
    for result in run.results:
        assert [r.outcome for r in result.records] == ["answered", "cancelled", "answered", "answered"]
        # Its own server: that server saw this client's four requests only.
        assert result.server_stats == {"requests": 4, "completed": 3, "cancelled": 1}
    opened = [json.loads(line)["params"]["textDocument"]["uri"] for line in log.read_text().splitlines()
              if json.loads(line).get("method") == "textDocument/didOpen"]
    assert sorted(opened) == [client_uri(URI, k) for k in (1, 2, 3)]

    summary = summarize_clients(run)
    overall = summary["overall"]
    assert (overall["requests"], overall["completions"], overall["cancelled"], overall["errors"]) == (12, 9, 3, 0)
    assert overall["latency_ms"]["p50"] == pytest.approx(DELAY_MS) and overall["latency_ms"]["n"] == 9
    # Each client's last answer comes 1.0 s after its start; the third starts 1.0 s after the first.
    assert [c["span_s"] for c in summary["per_client"]] == pytest.approx([1.0, 1.0, 1.0])
    assert [c["offset_s"] for c in summary["per_client"]] == [0.0, 0.5, 1.0]
    assert overall["span_s"] == pytest.approx(2.0) and overall["completions_per_s"] == pytest.approx(4.5)


def test_a_server_that_cannot_start_is_reported_for_every_client_not_hung():
    crash = ServerConfig("crash", [sys.executable, "-c", "import sys; sys.exit(3)"])
    run = run_clients(known_trace(), crash, 2, None, 0.1, tail_timeout=5)
    summary = summarize_clients(run)
    assert len(summary["server_errors"]) == 2 and summary["overall"]["requests"] == 0


def test_cli_clients_writes_json_text_and_html(tmp_path, capsys):
    oracle = tmp_path / "known.py"
    oracle.write_text("abc = 1\nprint(abc)\n")
    trace = tmp_path / "t.jsonl"
    write_trace(trace, known_trace())
    out_json, out_html = tmp_path / "c.json", tmp_path / "c.html"
    server = " ".join(fake_server("--delay-ms", "20", "--oracle", str(oracle)))
    rc = replay_main(["run", str(trace), "--server", server, "--clients", "1,2", "--stagger", "0.1",
                      "--as-fast-as-possible", "--json", str(out_json), "--html", str(out_html)])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["clients", "1", "2"]
    report = json.loads(out_json.read_text())
    assert [run["clients"] for run in report["runs"]] == [1, 2]
    assert [run["overall"]["requests"] for run in report["runs"]] == [4, 8]
    assert [run["overall"]["completions"] for run in report["runs"]] == [4, 8]  # nothing cancelled without a clock
    assert [len(run["per_client"]) for run in report["runs"]] == [1, 2]
    assert all(c["latency_ms"]["p50"] >= 20 for run in report["runs"] for c in run["per_client"])  # lower bound only
    assert report["command"][-4:] == ["--delay-ms", "20", "--oracle", str(oracle)]
    page = out_html.read_text()
    assert "<pre>" in page and "completions/s" in page and "http" not in page


@pytest.mark.parametrize("extra", [["--clients", "0"], ["--clients", "2", "--compare", "a=--delay-ms 1"],
                                   ["--clients", "2", "--soak"]])
def test_cli_clients_refuses_what_it_cannot_run(tmp_path, extra, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, known_trace())
    assert replay_main(["run", str(trace), "--server", " ".join(fake_server()), *extra]) == 2
    assert "codecue-replay:" in capsys.readouterr().err


@pytest.mark.slow
def test_two_clients_on_the_tiny_pairs_real_server(tiny_pair_env, monkeypatch):
    """End to end: two real servers (`python -m codecue_lsp` on the tiny pair), one simulated developer each."""
    for name, value in tiny_pair_env.items():
        monkeypatch.setenv(name, value)
    events = synth.synth_typing(synth.humaneval_sources([2]), seed=11, wpm="100", max_keystrokes=6)
    server = [sys.executable, "-m", "codecue_lsp", "--stdio", "--pair", "tiny", "--max-tokens", "6"]
    run = run_clients(events, ServerConfig("tiny", server), 2, None, 0.5, tail_timeout=120)
    summary = summarize_clients(run)
    assert summary["server_errors"] == [], [r.extra for r in run.results]
    for client, result in zip(summary["per_client"], run.results):
        assert client["requests"] == 7 and client["completions"] == 7 and client["errors"] == 0
        assert result.server_stats["requests"] == 7 and result.server_stats["pair"] == "tiny"  # its own server
        assert {r.uri for r in result.records} == {client_uri("file:///replay/HumanEval_2.py", client["client"])}
    overall = summary["overall"]
    assert overall["requests"] == 14 and overall["latency_ms"]["n"] == 14 and overall["completions_per_s"] > 0


# --- scripts/bench-vllm-clients.sh: what it checks before it starts anything -----------------------------------------

REPO = Path(__file__).resolve().parents[1]
VLLM_SCRIPT = REPO / "scripts" / "bench-vllm-clients.sh"


def fake_tool(path: Path, body: str) -> str:
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def run_vllm_script(tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(VLLM_SCRIPT), "--out", str(tmp_path / "out.json"), *args], env=full,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def fake_vllm(tmp_path) -> tuple[str, Path]:
    """A `vllm` that records its arguments and exits at once, as a vllm serve that failed to start would."""
    calls = tmp_path / "vllm-calls.txt"
    return fake_tool(tmp_path / "vllm", f'printf "%s\\n" "$@" > {calls}; exit 3'), calls


def gpu_lister(tmp_path: Path, lines: str) -> str:
    return fake_tool(tmp_path / "nvidia-smi", f'[[ "$1" == "-L" ]] && printf "{lines}"; exit 0')


def test_vllm_bench_without_vllm_says_so(tmp_path):
    result = run_vllm_script(tmp_path, {"VLLM": str(tmp_path / "no-vllm-here"),
                                        "NVIDIA_SMI": gpu_lister(tmp_path, "GPU 0: H100\\n")})
    assert result.returncode == 1
    assert "vLLM is not installed here" in result.stderr and "codecue-replay run" in result.stderr
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("smi", ["none listed", "no nvidia-smi"])
def test_vllm_bench_without_a_gpu_says_so_and_starts_nothing(tmp_path, fake_vllm, smi):
    vllm, calls = fake_vllm
    lister = gpu_lister(tmp_path, "") if smi == "none listed" else str(tmp_path / "no-nvidia-smi")
    result = run_vllm_script(tmp_path, {"VLLM": vllm, "NVIDIA_SMI": lister})
    assert result.returncode == 1 and "no GPU found" in result.stderr
    assert not calls.exists()  # vllm was never started


@pytest.mark.parametrize("spec, expected", [
    ("draft", {"method": "draft_model", "model": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "num_speculative_tokens": 5}),
    ("ngram", {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}),
    ("none", None),
])
def test_vllm_bench_starts_vllm_serve_with_the_recipe_and_reports_its_failure(tmp_path, fake_vllm, spec, expected):
    vllm, calls = fake_vllm
    result = run_vllm_script(tmp_path, {"VLLM": vllm, "NVIDIA_SMI": gpu_lister(tmp_path, "GPU 0: H100\\n")},
                             "--spec", spec)
    assert result.returncode == 1 and "vllm serve exited while starting" in result.stderr
    args = calls.read_text().splitlines()
    assert args[:2] == ["serve", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    assert "--enable-prefix-caching" in args and args[args.index("--max-model-len") + 1] == "4096"
    config = json.loads(args[args.index("--speculative-config") + 1]) if "--speculative-config" in args else None
    assert config == expected


def test_vllm_bench_refuses_an_unknown_spec(tmp_path, fake_vllm):
    vllm, calls = fake_vllm
    result = run_vllm_script(tmp_path, {"VLLM": vllm, "NVIDIA_SMI": gpu_lister(tmp_path, "GPU 0: H100\\n")},
                             "--spec", "eagle")
    assert result.returncode == 1 and "--spec is draft, ngram or none" in result.stderr and not calls.exists()


# --- bench_table: the scripts' JSON and Markdown ---------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("llamacpp:prompt_tokens_total 243\nllamacpp:n_busy_slots_per_decode 1.14\n",
     {"prompt_tokens_total": 243.0, "n_busy_slots_per_decode": 1.14}),
    ("# HELP x\n# TYPE x counter\nvllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 7.0\n",
     {"spec_decode_num_accepted_tokens_total": 7.0}),
    # one name with several label sets is summed; histogram parts are left out
    ('vllm:prefix_cache_hits_total{a="1"} 2\nvllm:prefix_cache_hits_total{a="2"} 3\n'
     'vllm:e2e_request_latency_seconds_bucket{le="0.1"} 4\nvllm:e2e_request_latency_seconds_sum 9.5\n',
     {"prefix_cache_hits_total": 5.0}),
    ("", {}),
])
def test_prometheus_counters(text, expected):
    assert prometheus_counters(text) == expected


def test_portable_paths():
    assert portable("/root/.cache/codecue/gguf/a.gguf /work/main/.venv/bin/python", "/root/.cache/codecue",
                    "/work/main") == "$CODECUE_HOME/gguf/a.gguf .venv/bin/python"


def test_bench_table_joins_the_runs_of_every_count(tmp_path, capsys):
    oracle = tmp_path / "known.py"
    oracle.write_text("abc = 1\nprint(abc)\n")
    trace = tmp_path / "t.jsonl"
    write_trace(trace, known_trace())
    work = tmp_path / "work"
    work.mkdir()
    server = " ".join(fake_server("--delay-ms", "5", "--oracle", str(oracle)))
    for n in (1, 2):
        (work / f"command-{n}.txt").write_text(f"{tmp_path}/home/llama-server --parallel {n}\n")
        (work / f"metrics-holes-{n}.txt").write_text(f"llamacpp:prompt_tokens_total {10 * n}\n")
        assert replay_main(["run", str(trace), "--server", server, "--clients", str(n), "--as-fast-as-possible",
                            "--stagger", "0", "--json", str(work / f"holes-{n}.json")]) == 0
    capsys.readouterr()
    out = tmp_path / "bench.json"
    assert bench_table_main(["--work", str(work), "--clients", "1 2", "--out", str(out), "--what", "test",
                             "--home", str(tmp_path / "home"), "--repo", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("| holes")]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "2"]
    assert [row.split("|")[3].strip() for row in rows] == ["4", "8"]  # requests
    result = json.loads(out.read_text())
    assert [(r["mode"], r["clients"]) for r in result["runs"]] == [("holes", 1), ("holes", 2)]
    assert result["runs"][1]["engine_command"] == "$CODECUE_HOME/llama-server --parallel 2"
    assert result["runs"][1]["engine_metrics_after"] == {"prompt_tokens_total": 20.0}
    assert result["runs"][0]["trace"] == "t.jsonl" and result["machine"]["cores"] == os.cpu_count()
    assert bench_table_main(["--work", str(tmp_path / "empty"), "--clients", "1", "--out", str(out),
                             "--what", "x"]) == 1
