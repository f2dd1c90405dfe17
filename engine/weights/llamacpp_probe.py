"""Whether llama.cpp's repacked weights run on this machine, tried in a child process before the engine uses them.

llama.cpp loads weights into "extra buffer types" where its CPU backend has kernels for them: the AMX buffer where
the CPU reports AMX, else a repacked layout. Seen on an Intel Xeon (family 6 model 167) in a
Firecracker VM reports amx_tile/amx_int8, the kernel grants the tile permission, and torch's oneDNN runs AMX there,
but llama.cpp's AMX matmul faults at its first `ldtilecfg` (SIGSEGV) on any pass over more than one token: prefill
and every verify pass. A crash cannot be caught in-process, so the first load of a GGUF on a machine runs a few such
passes in a child (`python -m engine.weights.llamacpp_probe FILE`, a few seconds) and the answer is cached in
$CODECUE_HOME/llamacpp-probe.json, keyed by processor, kernel, llama-cpp-python version and file. Where the child
dies, the engine loads that file without extra buffer types (llama.cpp's plain kernels, `use_extra_bufts = false`)
and logs why. CPU flags say what could run; only running it says what does.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path

from engine import options
from engine.machine import processor_name
from engine.paths import codecue_home
from engine.store.config import gguf_file
from engine.weights import llamacpp
from engine.weights.llamacpp import LlamaCppModel

log = logging.getLogger(__name__)

PROBE_WIDTHS = (1, 2, 8, 32)  # one-token (AMX's VNNI path), short verify passes and a prefill chunk (tile paths)
PROBE_TIMEOUT_S = 300
LOAD_FAILED = 3  # the child's exit status when the file does not load: not an answer about the kernels
_answers: dict[str, bool] = {}
_lock = threading.Lock()


def cache_file(home: Path) -> Path:
    return home / "llamacpp-probe.json"


def probe_key(path: Path) -> str:
    from importlib.metadata import PackageNotFoundError, version


    try:
        library = version("llama-cpp-python")
    except PackageNotFoundError:
        library = "unknown"
    stat = path.stat()
    return (f"{processor_name()} | kernel {platform.release()} | llama-cpp-python {library} | "
            f"{path.resolve()} {stat.st_size} {int(stat.st_mtime)}")


def extra_buffers_run(path: Path | str, home: Path | None = None) -> bool:
    """True when llama.cpp's extra buffer types ran passes of PROBE_WIDTHS tokens on this file here without
    crashing (asked once per machine and file; CODECUE_LLAMACPP_EXTRA_BUFFERS=1/0 answers without asking)."""
    pinned = options.current().llamacpp_extra_buffers
    if pinned is not None:
        return pinned

    path = Path(path)
    if not path.is_file():
        return True  # nothing to try: the caller's own load says what is missing
    home = home or codecue_home()
    key = probe_key(path)
    with _lock:
        if key in _answers:
            return _answers[key]
        stored = read_answers(home)
        if key not in stored:
            answer = run_child(path)
            if answer is None:  # the file did not load: the caller's own load reports why
                return True
            stored = read_answers(home)
            stored[key] = {"file": str(path.resolve()), "ran": answer}
            write_answers(home, stored)
        _answers[key] = stored[key]["ran"]
        return _answers[key]


def load_checked(path: Path | str, home: Path | None = None, **kwargs):
    """The GGUF in llama.cpp, in its extra buffer types where the probe says they run on this machine."""

    return LlamaCppModel(path, extra_buffers=extra_buffers_run(path, home), **kwargs)


def stored_answer(path: Path | str, home: Path) -> bool | None:
    """The cached answer for this file on this machine, without asking (None: not probed yet)."""
    path = Path(path)
    entry = read_answers(home).get(probe_key(path)) if path.is_file() else None
    return entry["ran"] if entry is not None else None


def describe(ggufs: dict[str, Path | None], home: Path) -> str | None:
    """One line for `codecue-models list` and `codecue-lsp --check`: what the probe found for each role's GGUF."""
    said = {True: "ran", False: "crashed here, so llama.cpp's plain kernels",
            None: "not tried yet (the first llama.cpp load of it tries)"}
    parts = [f"{role} {said[stored_answer(path, home)]}" for role, path in ggufs.items() if path is not None]
    return f"llama.cpp repacked weights (extra buffer types, AMX): {'; '.join(parts)}" if parts else None


def pair_line(spec, home: Path) -> str | None:
    """`describe` for a model pair's GGUF files (a models.PairSpec); None without llama-cpp-python."""

    if not llamacpp.available():
        return None
    return describe({role: gguf_file(model, home) for role, model in (("target", spec.target), ("draft", spec.draft))
                     if model is not None}, home)


def peer_arguments(*paths: Path | str) -> list[str]:
    """Arguments for a llama-server (the benchmark peer, the remote-engine tests) built from the same llama.cpp on
    this machine: `--no-repack` where the probe saw its repacked kernels crash on one of these files. Without
    llama-cpp-python to probe with: none (llama-server's own default)."""

    if not llamacpp.available():
        return []
    return [] if all(extra_buffers_run(p) for p in paths) else ["--no-repack"]


def child_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "engine.weights.llamacpp_probe", str(path)]


def run_child(path: Path) -> bool | None:
    """True: the passes ran; False: the child crashed, failed or hung; None: the file did not load."""

    try:
        done = subprocess.run(child_command(path), env=options.child_environment(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("llama.cpp: the repacked-weights probe of %s took over %d s; loading without extra buffer types",
                    path.name, PROBE_TIMEOUT_S)
        return False
    if done.returncode == 0:
        return True
    if done.returncode == LOAD_FAILED:
        return None
    log.warning("llama.cpp: passes over repacked weights (extra buffer types, AMX where the CPU reports it) %s on "
                "this machine for %s; loading it without them (llama.cpp's plain kernels)",
                f"crashed (signal {-done.returncode})" if done.returncode < 0 else f"failed (exit {done.returncode})",
                path.name)
    return False


def read_answers(home: Path) -> dict[str, dict]:
    """{probe key: {"file": path, "ran": bool}}; a missing or unreadable cache is empty."""
    try:
        data = json.loads(cache_file(home).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("ran"), bool)}


def write_answers(home: Path, answers: dict[str, dict]) -> None:
    """Answers for files that no longer exist are dropped (a test suite's temporary GGUFs, a replaced model)."""
    answers = {k: v for k, v in answers.items() if Path(str(v.get("file", ""))).is_file()}
    home.mkdir(parents=True, exist_ok=True)
    tmp = cache_file(home).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    tmp.replace(cache_file(home))


def main(argv=None) -> int:
    """The child: load the file with extra buffer types and run passes of PROBE_WIDTHS tokens after a short context."""

    path = Path((argv or sys.argv[1:])[0])
    try:
        model = LlamaCppModel(path, n_sequences=1, n_ctx_per_sequence=256, extra_buffers=True, label="probe")
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return LOAD_FAILED
    seq = model.take_sequence()
    tokens = [(7 * i) % min(model.n_vocab, 1000) + 10 for i in range(sum(PROBE_WIDTHS))]
    start = 0
    for width in PROBE_WIDTHS:
        model.decode(seq, start, tokens[start:start + width], "all")
        start += width
    model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
