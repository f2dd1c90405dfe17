"""llama.cpp as the benchmark peer, against fake llama-servers on 127.0.0.1 (no real llama.cpp in CI): what is sent,
what is read back, that the engine bench feeds it the same prompt ids as its own modes, and that a started server's
whole process group is gone afterwards."""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from codecue_bench import llama_cpp
from codecue_bench.__main__ import main
from codecue_bench.server_bench import run_llama_infill, typing_plan

TIMINGS = {"prompt_n": 7, "prompt_ms": 70.0, "predicted_n": 4, "predicted_ms": 200.0}


class FakeLlama:
    """Answers /completion and /infill like llama-server: fixed tokens and timings; records every request."""

    def __init__(self, tokens=(40, 41, 42, 0, 43), content="abc"):
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, body: dict, code: int = 200):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.reply({"status": "ok"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body))
                self.reply({"content": content, "tokens": list(tokens), "stop_type": "eos", "timings": TIMINGS})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    server = FakeLlama()
    yield server
    server.close()


def test_completion_sends_token_ids_greedy_with_the_prompt_cache_and_reads_the_answer(fake):
    with llama_cpp.http_client(fake.url) as client:
        answer = llama_cpp.complete(client, [5, 6, 7], 16, stop_ids={0, 1})
    path, body = fake.requests[0]
    assert path == "/completion"
    assert body["prompt"] == [5, 6, 7] and body["n_predict"] == 16 and body["cache_prompt"] is True
    assert body["temperature"] == 0 and body["top_k"] == 1 and body["stream"] is False
    assert answer.token_ids == [40, 41, 42]  # cut at the first stop id
    assert (answer.prompt_n, answer.prompt_ms, answer.predicted_n, answer.predicted_ms) == (7, 70.0, 4, 200.0)
    assert answer.seconds > 0


def test_engine_bench_runs_llama_cpp_as_a_mode_on_the_same_prompt_ids(fake, tmp_path, monkeypatch, tiny_pair_env):
    from transformers import AutoTokenizer

    from engine.store.config import load_config, model_dir

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    rows = [{"name": "add", "prefix": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))\n"},
            {"name": "rep", "prefix": "x = 1\ny = 2\nx = 1\n", "suffix": ""}]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "report.json"
    assert main(["engine", "--pair", "tiny", "--prompts", str(prompts), "--max-new-tokens", "12",
                 "--modes", "target,lookup,llama_cpp", "--llama-server", fake.url, "--json", str(out)]) == 0
    report = json.loads(out.read_text())

    # One warm-up request, then one per prompt with exactly the ids CodeCue's modes decode from.
    fim = load_config().pair("tiny").target.fim
    tokenizer = AutoTokenizer.from_pretrained(model_dir("tiny-target"))
    expected = [tokenizer.encode(fim.format(r["prefix"], r["suffix"]), add_special_tokens=False) for r in rows]
    sent = [body for _, body in fake.requests]
    assert len(sent) == 3 and [b["prompt"] for b in sent[1:]] == expected
    assert all(b["n_predict"] == 12 and b["cache_prompt"] for b in sent[1:])

    llama = report["modes"]["llama_cpp"]
    assert llama["new_tokens"] == 6  # 3 tokens before the stop id, twice
    # From its own timings: predicted_ms times the passes after the first token (that one comes with the prompt).
    assert llama["decode_tokens_per_s"] == pytest.approx(3 / 0.2)
    assert llama["seconds_prefill"] == pytest.approx(0.14)
    assert [r["llama_cpp"]["prompt_evaluated"] for r in report["per_prompt"]] == [7, 7]
    # Its tokens differ from the tiny target's (another format in real life): recorded, not a failure.
    for r in report["per_prompt"]:
        assert r["llama_cpp"]["identical"] == ("first_difference" not in r["llama_cpp"])
        assert "divergence" not in r["llama_cpp"]  # no torch pass spent on a known format difference
    for mode in ("target", "lookup", "llama_cpp"):
        m = report["modes"][mode]
        assert report["speedup_vs_llama_cpp"][mode] == pytest.approx(m["tokens_per_s"] / llama["tokens_per_s"])
        assert report["decode_speedup_vs_llama_cpp"][mode] == pytest.approx(m["decode_tokens_per_s"] / 15.0)
    assert report["modes"]["lookup"]["identical_to_target"]


TYPING_PLANS = [  # (text, keystrokes, the typed characters, their line)
    ("a = 1\nb = 2\nc = 3\n", 16, "b = 2", 1),
    ("a = 1\n\n\nd = 4\n", 3, "d =", 3),  # the middle line is blank: the nearest with code
    ("a = 1\n\n\n\nd = 4\n", 3, "a =", 0),  # two as near: the earlier
    ("x = 1\n" + "\n" * 8 + "y = 2\n", 5, "y = 2", 9),
    ("def f():\n    pass\n\n\n\n\nx = f()\n", 6, "    pa", 1),  # its indentation is typed too
    ("only = 1", 4, "only", 0),
]


@pytest.mark.parametrize("text, keystrokes, typed, line", TYPING_PLANS)
def test_typing_plan_types_the_line_with_code_nearest_the_middle(text, keystrokes, typed, line):
    start, got_line, got_typed, doc = typing_plan(text, keystrokes)
    assert (got_typed, got_line) == (typed, line)
    assert text[start:start + len(typed)] == typed and text.count("\n", 0, start) == line
    assert doc == text[:start] + text[start + len(typed):]


def test_typing_plan_says_when_a_file_has_nothing_to_type():
    with pytest.raises(SystemExit, match="no line to type"):
        typing_plan("\n\n   \n", 16)


def test_infill_sends_the_same_keystrokes_as_the_server_bench(fake, tmp_path):
    text = "def f(x):\n    y = x + 1\n    return y * 2\n\n\nprint(f(3))\n"
    start, line, typed, doc = typing_plan(text, 6)
    assert typed == text[start:start + 6] and doc == text[:start] + text[start + 6:]
    source = tmp_path / "code.py"
    source.write_text(text)
    result = run_llama_infill(source, url=fake.url, keystrokes=6, n_predict=20)
    assert [p for p, _ in fake.requests] == ["/infill"] * 7  # keystroke 0 (cold) and one per typed character
    for i, (_, body) in enumerate(fake.requests):
        assert body["input_prefix"] == text[:start] + typed[:i]
        assert body["input_suffix"] == text[start + 6:]
        assert body["cache_prompt"] is True and body["n_predict"] == 20 and body["stop"] == ["\n"]
    assert result["cold_ms"] > 0 and len(result["requests"]) == 7
    k = result["keystroke_ms"]
    assert 0 < k["p50"] <= k["p90"] <= k["max"]
    assert result["prompt_evaluated_mean"] == 7


FAKE_BINARY = """#!{python}
import json, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
child = subprocess.Popen(["sleep", "300"])
with open(args[args.index("-m") + 1] + ".json", "w") as f:
    json.dump({{"args": args, "child": child.pid}}, f)
started = time.time()

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):  # 503 while "loading", like llama-server
        self.send_response(200 if time.time() - started > 0.5 else 503)
        self.end_headers()

HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Handler).serve_forever()
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_started_server_waits_for_health_and_its_process_group_is_killed(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_BINARY.format(python=sys.executable))
    binary.chmod(0o755)
    model = tmp_path / "model.gguf"
    with llama_cpp.LlamaServer(model, binary=binary, threads=2) as server:
        with llama_cpp.http_client(server.url) as client:
            assert client.get("/health").status_code == 200  # ready before __enter__ returned
        info = json.loads((tmp_path / "model.gguf.json").read_text())
        pid = server.process.pid
        assert os.getpgid(pid) == pid  # its own process group
        assert alive(info["child"])
    args = info["args"]
    assert args[args.index("-m") + 1] == str(model) and args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("-t") + 1] == "2"
    assert not alive(pid) and not alive(info["child"])  # the whole group is gone


def test_a_server_that_dies_while_loading_is_reported_with_its_log(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\nimport sys\nprint('error: cannot load model')\nsys.exit(3)\n")
    binary.chmod(0o755)
    with pytest.raises(RuntimeError, match="exited with 3.*cannot load model"):
        llama_cpp.LlamaServer(tmp_path / "m.gguf", binary=binary).start()
