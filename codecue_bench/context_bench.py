"""`codecue-bench context`: cross-file completion through the real language server, as an editor drives it.

Holes come from real projects released after the model's training data (codecue_bench/crossfile.py). For each
project and setting one `codecue-lsp` process runs with the project's copy as its workspace folder:

- `file`: project context off, only the holed file open;
- `tabs`: project context off, the files that define the line's imported names opened first, then the holed file;
- `index`: project context on (the workspace index), only the holed file open; the index is awaited first.

Per hole the file is saved with the line blank, opened with the line's indentation typed, and completed at the
cursor (cold: a document just opened); then its first character is typed and completed again (warm). `--in-file`
runs the in-file holes (lines that use no project import) in `file` and `index` beside a naive prompt of the same
model run in-process afterwards: the last 1,024 prefix tokens, the first 512 suffix tokens, greedy to the line's end.
The `ceiling` setting (asked for by name) runs the holes in-process with exactly the definitions their lines use in the
prompt (context_ceiling.py): the most any choice of definitions can add.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from difflib import SequenceMatcher
from pathlib import Path
from typing import Callable

from lsprotocol import types as lsp

from .context_ceiling import CEILING, ceiling_rows
from .crossfile import (
    CROSS,
    CROSS_PER_PROJECT,
    IN_FILE,
    IN_FILE_PER_PROJECT,
    PROJECTS,
    Hole,
    blanked,
    fetch_project,
    select_holes,
    typed,
)
from .lsp_session import running
from .server_bench import BenchClient
from .timing import ms, percentile

SETTINGS = {"file": {"context": False}, "tabs": {"context": False}, "index": {"context": True}}
# Every request gets the full prompt (no small cold prompt grown later) and the engine does only what is asked:
# quality is measured on the prompt a user gets once a file's prompt has grown, latency without background work.
SERVER_DEFAULTS = ("--debounce-ms", "0", "--next-line", "off", "--cold-prompt-tokens", "off")
READY_TIMEOUT_S, INDEX_TIMEOUT_S, REQUEST_TIMEOUT_S, POLL_S = 600.0, 120.0, 300.0, 0.05
NAIVE_PREFIX_TOKENS, NAIVE_SUFFIX_TOKENS = 1024, 512
WARMUP_TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    "


def score(answer: str, expected: str) -> tuple[bool, float]:
    """(exact match, difflib similarity) of two lines, trailing whitespace aside (as prompt_bench compares)."""
    answer, expected = answer.rstrip(), expected.rstrip()
    return answer == expected, SequenceMatcher(None, answer.strip(), expected.strip()).ratio()


def answer_line(line_before_cursor: str, result) -> str:
    """The cursor's line once the first item is taken: what its range keeps of the line, then its first line."""
    if not result or not result.items:
        return line_before_cursor
    item = result.items[0]
    start = item.range.start.character if item.range is not None else len(line_before_cursor)
    text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    return (line_before_cursor[:start] + text).split("\n", 1)[0]


def stat_delta(before: dict, after: dict) -> dict:
    eb, ea = before["engine"], after["engine"]
    return {"typethrough": after["typethrough_hits"] - before["typethrough_hits"],
            "engine_results": ea["results"] - eb["results"],
            "prompt_tokens": (ea["prompt_tokens_new"] + ea["prompt_tokens_reused"]
                              - eb["prompt_tokens_new"] - eb["prompt_tokens_reused"]),
            "prompt_tokens_new": ea["prompt_tokens_new"] - eb["prompt_tokens_new"]}


def answered_by(delta: dict) -> str:
    return "typethrough" if delta["typethrough"] else "engine" if delta["engine_results"] else "none"


async def counted(bench: BenchClient, before: dict) -> dict:
    """codecue.stats once the request's answer is counted (an engine result is added on the server's loop just
    after the answer; a short wait, never a hang)."""
    deadline = time.perf_counter() + 2.0
    while True:
        after = await bench.stats()
        delta = stat_delta(before, after)
        if delta["typethrough"] or delta["engine_results"] or time.perf_counter() > deadline:
            return after
        await asyncio.sleep(POLL_S)


async def wait_ready(bench: BenchClient) -> float:
    started = time.perf_counter()
    while not (s := await bench.stats())["ready"]:
        if s["load_error"]:
            raise RuntimeError(s["load_error"])
        if time.perf_counter() - started > READY_TIMEOUT_S:
            raise TimeoutError("the model pair did not load")
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


async def wait_index(bench: BenchClient) -> dict | None:
    """The index's stats once it is built (None where the server reports none: nothing to wait for)."""
    started = time.perf_counter()
    while (context := (await bench.stats()).get("context")) is not None and context.get("indexing"):
        if time.perf_counter() - started > INDEX_TIMEOUT_S:
            raise TimeoutError(f"the workspace index was not built in {INDEX_TIMEOUT_S:.0f} s: {context}")
        await asyncio.sleep(0.2)
    return None if context is None else dict(context, wait_s=round(time.perf_counter() - started, 2))


async def warm_up(bench: BenchClient, root: Path) -> float:
    """One completion in a scratch document (never saved) before the first hole, so that what a server's first
    request pays once is not counted in the first hole's cold latency (its time is reported apart)."""
    uri = (root / "codecue_bench_warmup.py").as_uri()
    bench.open(uri, WARMUP_TEXT)
    started = time.perf_counter()
    await asyncio.wait_for(bench.complete(uri, WARMUP_TEXT.count("\n"), 4), REQUEST_TIMEOUT_S)
    bench.close(uri)
    return ms(time.perf_counter() - started)


async def run_hole(bench: BenchClient, root: Path, hole: Hole, setting: str, original: str,
                   saved=lambda uri: None) -> dict:
    """One hole: the file saved with the line blank (`saved(uri)` tells the server), the tabs opened, the holed
    document opened with the line's indentation typed; a cold request, a keystroke, a warm one; all undone."""
    path = root / hole.path
    uri = path.as_uri()
    path.write_text(blanked(original, hole.line), encoding="utf-8")
    saved(uri)
    opened = []
    try:
        for other in hole.files if setting == "tabs" else ():
            other_uri = (root / other).as_uri()
            bench.open(other_uri, (root / other).read_text(encoding="utf-8"))
            opened.append(other_uri)
        bench.open(uri, typed(original, hole.line, hole.indent))
        opened.append(uri)
        before = await bench.stats()
        col = len(hole.indent)
        started = time.perf_counter()
        result = await asyncio.wait_for(bench.complete(uri, hole.line, col), REQUEST_TIMEOUT_S)
        cold_ms = ms(time.perf_counter() - started)
        after = await counted(bench, before)
        cold = stat_delta(before, after)
        line = answer_line(hole.indent, result)

        first = hole.expected[col]
        bench.insert(uri, hole.line, col, first)
        warm_before = await bench.stats()
        started = time.perf_counter()
        result = await asyncio.wait_for(bench.complete(uri, hole.line, col + 1), REQUEST_TIMEOUT_S)
        warm_ms = ms(time.perf_counter() - started)
        warm_after = await counted(bench, warm_before)
        warm = stat_delta(warm_before, warm_after)
        warm_line = answer_line(hole.indent + first, result)
    finally:
        for opened_uri in opened:
            bench.close(opened_uri)
        path.write_text(original, encoding="utf-8")
        saved(uri)
    exact, similarity = score(line, hole.expected)
    last = after.get("last_prompt") or {}
    sections = last.get("sections") or {}
    return {"project": hole.project, "path": hole.path, "line": hole.line, "kind": hole.kind, "setting": setting,
            "expected": hole.expected, "answer": line, "exact": exact, "similarity": round(similarity, 4),
            "warm_answer": warm_line, "warm_exact": score(warm_line, hole.expected)[0],
            "cold_ms": cold_ms, "warm_ms": warm_ms, "cold_answered_by": answered_by(cold),
            "warm_answered_by": answered_by(warm), "prompt_tokens": cold["prompt_tokens"] or last.get("tokens"),
            "warm_prompt_tokens_new": warm["prompt_tokens_new"],
            "context_tokens": last.get("context_tokens", sections.get("context")),
            "context_files": last.get("context_files"),
            "open_documents": before["resources"]["open_documents"],
            "tabs": list(hole.files) if setting == "tabs" else []}


async def run_setting(source: Path, holes: list[Hole], setting: str, server_command: list[str],
                      env: dict | None) -> dict:
    """One server for one project and setting, on a fresh copy of the project (the cache is never written)."""
    from pytest_lsp import ClientServerConfig, client_capabilities

    with tempfile.TemporaryDirectory(prefix="codecue-context-") as tmp:
        root = Path(tmp) / source.name
        shutil.copytree(source, root)
        options = dict(SETTINGS[setting], indexCache=False)
        async with running(ClientServerConfig(server_command=server_command, server_env=env)) as client:
            watchers = []  # as an editor does: accept the server's file watcher, then tell it of files saved
            client.feature(lsp.CLIENT_REGISTER_CAPABILITY)(lambda params: watchers.extend(
                r for r in params.registrations if r.method == lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES))
            await client.initialize_session(lsp.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"), root_uri=root.as_uri(),
                workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
                initialization_options=options))
            bench = BenchClient(client, "python")

            def saved(uri: str) -> None:
                if watchers:
                    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(
                        changes=[lsp.FileEvent(uri=uri, type=lsp.FileChangeType.Changed)]))

            load_s = await wait_ready(bench)
            index = await wait_index(bench) if setting == "index" else None
            warmup_ms = await warm_up(bench, root)
            rows = []
            for hole in holes:
                original = (root / hole.path).read_text(encoding="utf-8")
                rows.append(await run_hole(bench, root, hole, setting, original, saved))
                print(f"{setting:5s} {hole.project}:{hole.path}:{hole.line + 1} "
                      f"{'ok ' if rows[-1]['exact'] else '-- '}{rows[-1]['answer'].strip()!r}",
                      file=sys.stderr, flush=True)
    return {"setting": setting, "load_s": round(load_s, 2), "warmup_ms": warmup_ms, "index": index,
            "watched": bool(watchers), "rows": rows}


def naive_prompt(engine, prefix: str, suffix: str) -> list[int]:
    """<fim prefix> the last 1,024 prefix tokens <fim suffix> the first 512 suffix tokens <fim middle>."""
    fim = engine.fim
    return ([engine.special_token_id(fim.prefix)] + engine.encode(prefix)[-NAIVE_PREFIX_TOKENS:]
            + [engine.special_token_id(fim.suffix)] + engine.encode(suffix)[:NAIVE_SUFFIX_TOKENS]
            + [engine.special_token_id(fim.middle)])


def naive_rows(roots: dict[str, Path], holes: list[Hole], pair: str, max_new_tokens: int = 64) -> list[dict]:
    """The same holes through a naive prompt of the same model, in-process: the last 1,024 prefix tokens and the
    first 512 suffix tokens around the cursor, greedy to the end of the line."""
    from engine.engine import Engine
    from engine.loading.pair import load_pair
    from engine.types import CompletionRequest

    engine = Engine(load_pair(pair))
    rows = []
    try:
        for hole in holes:
            text = typed((roots[hole.project] / hole.path).read_text(encoding="utf-8"), hole.line, hole.indent)
            cursor = sum(len(line) + 1 for line in text.split("\n")[:hole.line]) + len(hole.indent)
            ids = naive_prompt(engine, text[:cursor], text[cursor:])
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, max_new_tokens, stop=lambda t: "\n" in t))
            latency = ms(time.perf_counter() - started)
            line = hole.indent + result.text.split("\n", 1)[0]
            exact, similarity = score(line, hole.expected)
            rows.append({"project": hole.project, "path": hole.path, "line": hole.line, "kind": hole.kind,
                         "setting": "naive", "expected": hole.expected, "answer": line, "exact": exact,
                         "similarity": round(similarity, 4), "cold_ms": latency, "prompt_tokens": len(ids)})
    finally:
        engine.close()
    return rows


def summarize(rows: list[dict]) -> dict:
    def mean(key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.fmean(values), 3) if values else None

    cold = [r["cold_ms"] for r in rows]
    warm = [r["warm_ms"] for r in rows if "warm_ms" in r]
    out = {"holes": len(rows), "exact": mean("exact"), "similarity": mean("similarity"),
           "prompt_tokens": mean("prompt_tokens"), "context_tokens": mean("context_tokens"),
           "cold_ms": {"p50": percentile(cold, 50), "p90": percentile(cold, 90)}}
    if warm:
        out["warm_exact"] = mean("warm_exact")
        out["warm_ms"] = {"p50": percentile(warm, 50), "p90": percentile(warm, 90)}
        sources = [r["warm_answered_by"] for r in rows]
        out["warm_answered_by"] = {s: sources.count(s) for s in sorted(set(sources))}
    return out


def run_context_bench(projects: list[tuple[str, str, Path]], settings: list[str], *, kind: str = CROSS,
                      per_project: int | None = None, seed: int = 0, pair: str = "default",
                      server_args: tuple[str, ...] = (), env: dict | None = None, naive: bool = False,
                      progress: Callable[[dict], None] | None = None) -> dict:
    """Every setting on every project's holes; `projects` is (name, version, root). Returns the report;
    `progress` gets the report so far after each server (an hour-long run stopped midway keeps what it measured)."""
    for setting in settings:
        if setting not in SETTINGS and setting != CEILING:
            raise ValueError(f"unknown setting {setting!r}: use {', '.join([*SETTINGS, CEILING])}")
    count = per_project or (CROSS_PER_PROJECT if kind == CROSS else IN_FILE_PER_PROJECT)
    command = [sys.executable, "-m", "codecue_lsp", "--stdio", "--pair", pair, *SERVER_DEFAULTS, *server_args]
    holes, servers, rows = {}, [], []
    released = {(p.name, p.version): p.released for p in PROJECTS}

    def report() -> dict:
        names = list(dict.fromkeys(r["setting"] for r in rows))
        ran = [(n, v) for n, v, _ in projects if n in holes]
        return {"pair": pair, "kind": kind, "seed": seed, "server_args": [*SERVER_DEFAULTS, *server_args],
                "projects": [{"name": n, "version": v, "released": released.get((n, v)), "holes": len(holes[n])}
                             for n, v in ran],
                "summary": {s: summarize([r for r in rows if r["setting"] == s]) for s in names},
                "per_project": {s: {n: summarize([r for r in rows if r["setting"] == s and r["project"] == n])
                                    for n, _ in ran if any(r["project"] == n for r in rows)} for s in names},
                "servers": list(servers), "holes": [asdict(h) for hs in holes.values() for h in hs],
                "rows": list(rows)}

    for name, version, root in projects:
        holes[name] = select_holes(name, version, root, kind, count, seed)
        for setting in (s for s in settings if s in SETTINGS):
            run = asyncio.run(run_setting(root, holes[name], setting, command, env))
            rows.extend(run.pop("rows"))
            servers.append(dict(run, project=name))
            if progress is not None:
                progress(report())
    every = [h for project_holes in holes.values() for h in project_holes]
    roots = {name: root for name, _, root in projects}
    if naive:
        rows.extend(naive_rows(roots, every, pair))
    if CEILING in settings:
        rows.extend(ceiling_rows(roots, every, pair, score))
    return report()


def write_json(path: str, report: dict) -> None:
    Path(path).write_text(json.dumps(report, indent=2))


def print_summary(report: dict) -> None:
    print(f"{report['kind']} holes, pair {report['pair']}")
    print(f"{'setting':8s} {'project':18s} {'holes':>5s} {'exact':>6s} {'sim':>5s} {'warm ex':>7s} {'prompt':>7s} "
          f"{'context':>7s} {'cold p50':>8s} {'p90':>7s} {'warm p50':>8s} {'p90':>7s}  warm answered by")
    for setting, summary in report["summary"].items():
        for project, s in [("all", summary), *report["per_project"][setting].items()]:
            warm = s.get("warm_ms", {})
            cells = [s["holes"], s["exact"], s["similarity"], s.get("warm_exact"), s["prompt_tokens"],
                     s["context_tokens"], s["cold_ms"]["p50"], s["cold_ms"]["p90"], warm.get("p50"), warm.get("p90")]
            text = " ".join(f"{c:>{w}.{p}f}" if isinstance(c, (int, float)) and not isinstance(c, bool)
                            else f"{'-':>{w}s}" for c, w, p in zip(cells, (5, 6, 5, 7, 7, 7, 8, 7, 8, 7),
                                                                 (0, 2, 2, 2, 0, 0, 0, 0, 0, 0)))
            print(f"{setting:8s} {project:18s} {text}  {s.get('warm_answered_by', '')}")


def main(argv: list[str] | None = None) -> int:
    from engine.paths import codecue_home

    parser = argparse.ArgumentParser(prog="codecue-bench context", description=__doc__.split("\n")[0])
    parser.add_argument("--pair", default="default")
    parser.add_argument("--settings", help="comma-separated of file,tabs,index,ceiling (default: file,tabs,index; "
                                           "--in-file: file,index)")
    parser.add_argument("--projects", help="comma-separated PyPI names (default: all of crossfile.PROJECTS)")
    parser.add_argument("--limit", type=int, help="at most N holes per project")
    parser.add_argument("--in-file", action="store_true",
                        help="the in-file holes, beside a naive 1,024 + 512 token prompt of the same model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=codecue_home() / "bench-projects",
                        help="where the projects' wheels are unzipped (fetched with pip once)")
    parser.add_argument("--json", help="write the full report here")
    args, server_args = parser.parse_known_args(argv)
    wanted = args.projects.split(",") if args.projects else [p.name for p in PROJECTS]
    unknown = set(wanted) - {p.name for p in PROJECTS}
    if unknown:
        parser.error(f"unknown projects {', '.join(sorted(unknown))}: use {', '.join(p.name for p in PROJECTS)}")
    projects = [(p.name, p.version, fetch_project(p, args.cache)) for p in PROJECTS if p.name in wanted]
    settings = (args.settings or ("file,index" if args.in_file else ",".join(SETTINGS))).split(",")
    report = run_context_bench(projects, settings, kind=IN_FILE if args.in_file else CROSS, per_project=args.limit,
                               seed=args.seed, pair=args.pair, server_args=tuple(server_args), naive=args.in_file,
                               progress=(lambda so_far: write_json(args.json, so_far)) if args.json else None)
    print_summary(report)
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}")
    return 0
