"""codecue-bench index: the workspace index on a large repository made of the installed packages' Python files.

    codecue-bench index [--files 5000] [--json F] [--keep DIR]

Measures a cold build (no cache), the memory it adds (RSS after, and the peak seen by a sampling thread), a warm
restart from the cache, and a saved file re-indexed. Targets: cold <= 60 s on 2 cores, <= 300 MB added RSS,
<= 100 ms per saved file."""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import shutil
import statistics
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

from codecue_lsp.context import files as context_files
from codecue_lsp.context.index import WorkspaceIndex

TARGETS = {"cold_s": 60.0, "added_rss_mb": 300.0, "update_max_ms": 100.0}
UPDATE_FILES = 20
MB = 1024 * 1024


def rss_bytes() -> int:
    """This process's resident memory (psutil; /proc where psutil is missing)."""
    try:
        import psutil
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return psutil.Process().memory_info().rss


class PeakSampler:
    """Samples RSS every few milliseconds in a thread; `peak` is the highest seen."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def source_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def build_corpus(dest: Path, count: int, source: Path | None = None) -> int:
    """Copy `count` indexable .py files of `source` (the venv's site-packages) into `dest`, keeping their tree
    (folders the index skips, such as build/ or tests of vendored code, are left out so every copy counts)."""
    source = source or source_packages()
    copied = 0
    for folder, subfolders, names in os.walk(source):
        subfolders[:] = sorted(d for d in subfolders if not context_files.is_skipped_dir(d))
        rel_folder = Path(folder).relative_to(source)
        for name in sorted(names):
            if copied >= count:
                return copied
            if not name.endswith(".py") or context_files.is_secret_path(name) \
                    or context_files.is_generated_name(name):
                continue
            src = Path(folder) / name
            if src.stat().st_size > context_files.MAX_FILE_BYTES or src.is_symlink():
                continue
            if context_files.read_source(str(src))[0] is None:
                continue
            target = dest / rel_folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            copied += 1
    return copied


def timed_build(index: WorkspaceIndex) -> tuple[float, dict, int, int]:
    """(seconds, build counts, added RSS after, added peak RSS) of one build."""
    gc.collect()
    before = rss_bytes()
    with PeakSampler() as sampler:
        start = time.perf_counter()
        counts = index.build()
        seconds = time.perf_counter() - start
    after = rss_bytes()
    return seconds, counts, after - before, sampler.peak - before


def time_updates(index: WorkspaceIndex, count: int = UPDATE_FILES) -> list[float]:
    """Milliseconds to re-index `count` saved files (each gets a new function appended first)."""
    rels = sorted(index.paths())[:: max(len(index.paths()) // count, 1)][:count]
    times = []
    for i, rel in enumerate(rels):
        path = index.absolute(rel)
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"\n\ndef bench_saved_{i}(x):\n    return x + {i}\n")
        start = time.perf_counter()
        index.update(path)
        times.append((time.perf_counter() - start) * 1000)
        if not any(d.name == f"bench_saved_{i}" for d in index.definitions_in(rel)):
            raise RuntimeError(f"the update of {rel} missed its new definition")
    return times


def warm_restart(corpus: str, cache_dir: str, files: int) -> dict:
    """A restart: a new index built from the cache, then saved files re-indexed (run in a fresh process, so the
    memory the cold build freed does not hide what this one adds)."""
    index = WorkspaceIndex([corpus], max_files=max(files, 1), cache_dir=cache_dir)
    seconds, counts, added, peak = timed_build(index)
    return {"seconds": seconds, "counts": counts, "added": added, "peak": peak, "updates": time_updates(index)}


def run(files: int, workdir: Path, fresh_process: bool = True) -> dict:
    """The whole measurement in `workdir` (a corpus folder and a cache folder); `fresh_process` runs the warm
    restart in a new interpreter, as a real restart does."""
    corpus, cache_dir = workdir / "repo", workdir / "cache"
    corpus.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    copied = build_corpus(corpus, files)
    copy_s = time.perf_counter() - start

    cold_index = WorkspaceIndex([str(corpus)], max_files=max(files, 1), cache_dir=str(cache_dir))
    cold_s, cold_counts, added, peak = timed_build(cold_index)
    stats = cold_index.stats()
    del cold_index
    gc.collect()

    if fresh_process:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            warm = pool.apply(warm_restart, (str(corpus), str(cache_dir), files))
    else:
        warm = warm_restart(str(corpus), str(cache_dir), files)
    updates = warm["updates"]
    cache_files = list(cache_dir.glob("*"))
    report = {
        "files_copied": copied, "copy_s": round(copy_s, 2), "cpus": os.cpu_count(),
        "cold": {"seconds": round(cold_s, 2), **cold_counts, "added_rss_mb": round(added / MB, 1),
                 "peak_added_rss_mb": round(peak / MB, 1)},
        "index": {k: stats[k] for k in ("files", "definitions", "chunks", "memory_bytes")},
        "warm": {"seconds": round(warm["seconds"], 2), **warm["counts"],
                 "added_rss_mb": round(warm["added"] / MB, 1), "peak_added_rss_mb": round(warm["peak"] / MB, 1),
                 "fresh_process": fresh_process},
        "cache_mb": round(sum(f.stat().st_size for f in cache_files) / MB, 1),
        "update_ms": {"files": len(updates), "median": round(statistics.median(updates), 2) if updates else None,
                      "max": round(max(updates), 2) if updates else None},
        "targets": TARGETS,
    }
    report["within_targets"] = {
        "cold_s": cold_s <= TARGETS["cold_s"],
        "added_rss_mb": max(added, peak) / MB <= TARGETS["added_rss_mb"],
        "update_max_ms": bool(updates) and max(updates) <= TARGETS["update_max_ms"],
    }
    return report


def print_table(report: dict) -> None:
    cold, warm, update = report["cold"], report["warm"], report["update_ms"]
    rows = [
        ("files indexed", f"{report['index']['files']} of {report['files_copied']} copied"),
        ("definitions / chunks", f"{report['index']['definitions']} / {report['index']['chunks']}"),
        ("cold build", f"{cold['seconds']:.2f} s (target <= {TARGETS['cold_s']:.0f} s, {report['cpus']} cpus), "
                       f"parsed {cold['parsed']}"),
        ("added RSS", f"{cold['added_rss_mb']:.1f} MB after, {cold['peak_added_rss_mb']:.1f} MB peak "
                      f"(target <= {TARGETS['added_rss_mb']:.0f} MB)"),
        ("estimate (stats)", f"{report['index']['memory_bytes'] / MB:.1f} MB"),
        ("warm restart", f"{warm['seconds']:.2f} s, parsed {warm['parsed']}, reused {warm['reused']}, "
                         f"{warm['added_rss_mb']:.1f} MB added, {warm['peak_added_rss_mb']:.1f} MB peak"),
        ("cache file", f"{report['cache_mb']:.1f} MB"),
        ("saved file update", f"median {update['median']} ms, max {update['max']} ms over {update['files']} "
                              f"(target <= {TARGETS['update_max_ms']:.0f} ms)"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench index", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--keep", help="build the corpus and cache in this folder and keep them")
    args = parser.parse_args(argv)
    if args.keep:
        report = run(args.files, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="codecue-index-bench-") as tmp:
            report = run(args.files, Path(tmp))
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    return 0 if all(report["within_targets"].values()) else 1
