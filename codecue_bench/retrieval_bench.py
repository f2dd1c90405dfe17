"""Cross-file retrieval: does a chunk holding an imported name's definition come back for the code before its use?

For real Python projects (wheels fetched with `pip download --no-deps`), every first use of a name imported from
another file of the project inside a function body is a case (as in CrossCodeEval): the 20 lines before the use are
the query, the current file is excluded, and a hit at k is a top-k chunk containing a line that defines the name
("def name", "class name", "name ="). Scored for the product's Jaccard index and for bm25s over the same chunks and
identifiers; index build and query times too, and a scale run (5,000 files) for the product's index.

    python -m codecue_bench.retrieval_bench [--out retrieval.json] [--wheels DIR] [--scale-dir DIR]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile
from dataclasses import dataclass
from pathlib import Path

from codecue_lsp.context import retrieval
from codecue_lsp.context.imports import parse_imports
from codecue_lsp.context.resolve import resolve
from codecue_lsp.prompt.text import IDENTIFIER

PROJECTS = ("mcp==1.9.0", "fastmcp==2.3.0", "smolagents==1.17.0", "pydantic-ai-slim==0.2.0", "openai-agents==0.0.17")
KS = (1, 3, 5)
QUERY_LINES = 20
WINDOWS = ((20, 10), (10, 5), (30, 15), (40, 20))  # (lines, stride) tried for the Jaccard index


@dataclass(frozen=True)
class Case:
    path: str                               # the file being completed
    line: int                               # 0-based row of the use
    name: str                               # the imported name used on that row
    query: str                              # the QUERY_LINES lines before the row
    targets: tuple[tuple[str, int], ...]    # (path, row) of the name's definitions in other files


def definitions(files: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """name -> (path, row) of every `def name`, `class name` and module-level `name =` / `name: T =`."""
    pattern = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")
    found: dict[str, list[tuple[str, int]]] = {}
    for path, text in files.items():
        for row, line in enumerate(text.split("\n")):
            match = pattern.match(line)
            if match:
                found.setdefault(match.group(1) or match.group(2), []).append((path, row))
    return found


def find_cases(files: dict[str, str], max_per_file: int = 40) -> list[Case]:
    """First uses, per function, of names imported from other project files that define them."""
    defined = definitions(files)
    paths = frozenset(files)
    cases = []
    for path, text in sorted(files.items()):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        imported = {}
        for ref in parse_imports("python", text):
            if ref.name in (None, "*") or not resolve(ref, path, paths):
                continue
            targets = tuple(t for t in defined.get(ref.name, ()) if t[0] != path)
            if targets:
                imported[ref.local] = (ref.name, targets)
        lines = text.split("\n")
        per_file = []
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            seen = set()
            body_start = function.body[0].lineno
            uses = sorted((n.lineno, n.id) for n in ast.walk(function) if isinstance(n, ast.Name)
                          and n.id in imported and isinstance(n.ctx, ast.Load) and n.lineno >= body_start)
            for lineno, local in uses:
                if local in seen:
                    continue
                seen.add(local)
                row = lineno - 1
                name, targets = imported[local]
                query = "\n".join(lines[max(0, row - QUERY_LINES):row])
                per_file.append(Case(path, row, name, query, targets))
        cases += sorted(set(per_file), key=lambda c: (c.line, c.name))[:max_per_file]
    return cases


def tokens(text: str) -> list[str]:
    """The identifiers both retrievers compare by (with repeats, for BM25's term frequencies)."""
    stop = retrieval.STOP_WORDS
    return [w for w in IDENTIFIER.findall(text) if len(w) > 1 and w not in stop]


def all_chunks(files: dict[str, str], lines: int, stride: int) -> list:
    saved = retrieval.CHUNK_LINES, retrieval.CHUNK_STRIDE
    retrieval.CHUNK_LINES, retrieval.CHUNK_STRIDE = lines, stride
    try:
        return [c for path, text in sorted(files.items()) for c in retrieval.chunk_text(path, text)]
    finally:
        retrieval.CHUNK_LINES, retrieval.CHUNK_STRIDE = saved


def hit(chunks, targets) -> bool:
    """A chunk holds one of the name's definition lines."""
    return any(c.path == p and c.start_line <= row < c.end_line for c in chunks for p, row in targets)


def mention(chunks, name: str) -> bool:
    """A chunk shows the name in use or defined (weaker than `hit`, still useful context)."""
    return any(name in IDENTIFIER.findall(c.text) for c in chunks)


class JaccardRetriever:
    name = "jaccard"

    def __init__(self, chunks) -> None:
        self.index = retrieval.RetrievalIndex()
        by_path: dict[str, list] = {}
        for chunk in chunks:
            by_path.setdefault(chunk.path, []).append(chunk)
        for path, group in by_path.items():
            self.index.add(path, group)

    def top(self, query: str, k: int, exclude_path: str) -> list:
        return [chunk for _, chunk in self.index.query(query, k, exclude_path=exclude_path)]


class BM25Retriever:
    name = "bm25s"

    def __init__(self, chunks) -> None:
        import bm25s
        import numpy

        self.chunks = chunks
        self.numpy = numpy
        self.model = bm25s.BM25()
        self.model.index([tokens(c.text) or [""] for c in chunks], show_progress=False)
        self.paths = numpy.array([c.path for c in chunks])

    def top(self, query: str, k: int, exclude_path: str) -> list:
        words = [w for w in tokens(query) if w in self.model.vocab_dict]
        if not words:
            return []
        mask = (self.paths != exclude_path).astype("float32")
        ids, scores = self.model.retrieve([words], k=min(k, len(self.chunks)), show_progress=False,
                                          weight_mask=mask)
        return [self.chunks[i] for i, s in zip(ids[0], scores[0]) if s > 0]


def evaluate(files: dict[str, str], cases: list[Case], retriever_class, lines=20, stride=10) -> dict:
    """recall@k (definition line) and mention@k for each k in KS, index build seconds, query ms (mean, p95)."""
    chunks = all_chunks(files, lines, stride)
    start = time.perf_counter()
    retriever = retriever_class(chunks)
    build = time.perf_counter() - start
    hits, mentions = dict.fromkeys(KS, 0), dict.fromkeys(KS, 0)
    times = []
    for case in cases:
        start = time.perf_counter()
        top = retriever.top(case.query, max(KS), case.path)
        times.append(time.perf_counter() - start)
        for k in KS:
            hits[k] += hit(top[:k], case.targets)
            mentions[k] += mention(top[:k], case.name)
    times.sort()
    n = max(len(cases), 1)
    return {"retriever": retriever_class.name, "lines": lines, "stride": stride, "chunks": len(chunks),
            "cases": len(cases), **{f"recall@{k}": hits[k] / n for k in KS},
            **{f"mention@{k}": mentions[k] / n for k in KS}, "build_s": build,
            "query_ms_mean": 1e3 * sum(times) / n, "query_ms_p95": 1e3 * times[int(0.95 * (len(times) - 1))]
            if times else 0.0}


def download(specs, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        name = spec.split("==")[0].replace("-", "_")
        if not any(dest.glob(f"{name}-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", str(dest), spec],
                           check=True)
    return sorted(dest.glob("*.whl"))


def wheel_files(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name).decode("utf-8", "replace") for name in archive.namelist()
                if name.endswith(".py") and ".dist-info/" not in name}


def scale(directory: Path, n_files: int = 5000, queries: int = 200) -> dict:
    """The product index over up to n_files .py files: build time, bytes per chunk, query p50/p95, and how often
    the bounded query's top 5 equals an exhaustive Jaccard top 5."""
    texts = []
    for path in sorted(directory.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if 500 < len(text) < 20_000:
            texts.append((str(path.relative_to(directory)), text))
        if len(texts) >= n_files:
            break
    chunked = [(p, retrieval.chunk_text(p, t)) for p, t in texts]
    index = retrieval.RetrievalIndex()
    start = time.perf_counter()
    for path, chunks in chunked:
        index.add(path, chunks)
    build = time.perf_counter() - start
    tracemalloc.start()
    measured = retrieval.RetrievalIndex()
    for path, chunks in chunked:
        measured.add(path, chunks)
    index_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del measured
    step = max(len(texts) // queries, 1)
    samples = []
    for path, text in texts[::step][:queries]:
        lines = text.split("\n")
        row = len(lines) // 2
        samples.append((path, "\n".join(lines[max(0, row - QUERY_LINES):row])))
    times, same = [], 0
    for path, query in samples:
        start = time.perf_counter()
        got = index.query(query, 5, exclude_path=path)
        times.append(time.perf_counter() - start)
        same += [round(s, 9) for s, _ in got] == [round(s, 9) for s, _ in exhaustive(index, query, 5, path)]
    times.sort()
    n_chunks = len(index)
    return {"files": len(texts), "chunks": n_chunks, "build_s": build, "index_mb": index_bytes / 1e6,
            "bytes_per_chunk": index_bytes / max(n_chunks, 1), "query_ms_p50": 1e3 * times[len(times) // 2],
            "query_ms_p95": 1e3 * times[int(0.95 * (len(times) - 1))], "top5_scores_exact": same / len(samples)}


def exhaustive(index, query: str, k: int, exclude_path: str) -> list:
    """Every chunk scored by exact Jaccard (the reference for the bounded query)."""
    wanted = retrieval.identifiers(query)
    scored = []
    for chunk, words in index._entries.values():
        if chunk.path != exclude_path and wanted:
            shared = len(wanted.intersection(words))
            if shared:
                scored.append((shared / (len(wanted) + len(words) - shared), chunk))
    return sorted(scored, key=lambda item: -item[0])[:k]


def table(rows: list[dict]) -> str:
    head = f"{'project':<18}{'retriever':<9}{'window':>7}{'cases':>6}" + "".join(f"{'R@' + str(k):>6}" for k in KS)
    head += "".join(f"{'M@' + str(k):>6}" for k in KS)
    head += f"{'build s':>9}{'q ms':>7}{'q p95':>7}"
    out = [head]
    for r in rows:
        out.append(f"{r['project']:<18}{r['retriever']:<9}{str(r['lines']) + '/' + str(r['stride']):>7}"
                   f"{r['cases']:>6}" + "".join(f"{100 * r[f'recall@{k}']:>6.1f}" for k in KS)
                   + "".join(f"{100 * r[f'mention@{k}']:>6.1f}" for k in KS)
                   + f"{r['build_s']:>9.3f}{r['query_ms_mean']:>7.2f}{r['query_ms_p95']:>7.2f}")
    return "\n".join(out)


def pooled(rows: list[dict], retriever: str, lines: int, stride: int) -> dict:
    """All projects' cases together (recall weighted by cases)."""
    mine = [r for r in rows if (r["retriever"], r["lines"], r["stride"]) == (retriever, lines, stride)]
    cases = sum(r["cases"] for r in mine)
    out = {"project": "ALL", "retriever": retriever, "lines": lines, "stride": stride, "cases": cases,
           "build_s": sum(r["build_s"] for r in mine),
           "query_ms_mean": sum(r["query_ms_mean"] * r["cases"] for r in mine) / max(cases, 1),
           "query_ms_p95": max((r["query_ms_p95"] for r in mine), default=0.0)}
    for key in [f"{metric}@{k}" for metric in ("recall", "mention") for k in KS]:
        out[key] = sum(r[key] * r["cases"] for r in mine) / max(cases, 1)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="retrieval.json")
    parser.add_argument("--wheels", help="folder for the downloaded wheels (default: a temporary one)")
    parser.add_argument("--projects", nargs="*", default=list(PROJECTS))
    parser.add_argument("--scale-dir", help="a folder of .py files for the 5,000-file run (default: site-packages)")
    parser.add_argument("--scale-files", type=int, default=5000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        wheels = download(args.projects, Path(args.wheels or temp))
        projects = {w.name.split("-")[0]: wheel_files(w) for w in wheels}
    rows = []
    for project, files in projects.items():
        cases = find_cases(files)
        for lines, stride in WINDOWS:
            rows.append({"project": project, **evaluate(files, cases, JaccardRetriever, lines, stride)})
        rows.append({"project": project, **evaluate(files, cases, BM25Retriever)})
    combos = dict.fromkeys((r["retriever"], r["lines"], r["stride"]) for r in rows)
    rows += [pooled(rows, *combo) for combo in combos]
    print(table(rows))
    import sysconfig

    scale_dir = Path(args.scale_dir or sysconfig.get_paths()["purelib"])
    at_scale = scale(scale_dir, args.scale_files)
    print(f"\nscale ({scale_dir}): " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                for k, v in at_scale.items()))
    Path(args.out).write_text(json.dumps({"rows": rows, "scale": at_scale}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
