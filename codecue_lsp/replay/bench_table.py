"""One JSON and one Markdown table from the runs of scripts/bench-vllm-clients.sh (vLLM; llama-server's /metrics
read alike): N simulated developers against one engine, for several N.

    python -m codecue_lsp.replay.bench_table --work DIR --clients "1 2 4" --out OUT.json --what TEXT
           [--home CODECUE_HOME] [--repo REPO] [--trace-note TEXT]

DIR holds, for each client count N and run mode (typing, holes), what the script left there:
  {mode}-{N}.json          codecue-replay run --clients N --json (clients.py)
  metrics-{mode}-{N}.txt   the engine's Prometheus /metrics after that run (cumulative on that engine)
  command-{N}.txt          the engine's command line for N clients
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

MODES = ("typing", "holes")
# A Prometheus sample: `prefix:name{labels} value` (llamacpp:, vllm:). Histograms' parts are left out.
SAMPLE = re.compile(r"^(\w+):(\w+)(\{[^}]*\})? ([0-9.eE+-]+|NaN|[+-]Inf)$")


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """CPU model and the vector extensions that decide CPU inference speed (machines of one kind differ)."""
    model, flags = "unknown", []
    try:
        lines = Path(cpuinfo).read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        if key.strip() == "flags" and not flags:
            flags = value.split()
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return {"cpu": model, "cpu_flags": wanted, "cores": os.cpu_count()}


def prometheus_counters(text: str) -> dict:
    """Plain samples by name (labels dropped, samples of one name summed); histogram buckets/sums/counts left out."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line.strip())
        if not match:
            continue
        name = match.group(2)
        if name.endswith(("_bucket", "_sum", "_count")):
            continue
        found[name] = found.get(name, 0.0) + float(match.group(4))
    return found


def portable(text: str, home: str | None, repo: str | None) -> str:
    """Paths of this machine written as $CODECUE_HOME / repository-relative, so the JSON reads the same anywhere."""
    if home:
        text = text.replace(home.rstrip("/"), "$CODECUE_HOME")
    if repo:
        text = text.replace(repo.rstrip("/") + "/", "")
    return text


def shown_trace(path: str, repo: str | None) -> str:
    """A trace in the repository by its relative path; one the script made in a temporary folder by its name."""
    absolute = os.path.abspath(path)
    if repo and absolute.startswith(repo.rstrip("/") + "/"):
        return os.path.relpath(absolute, repo)
    return os.path.basename(absolute)


def read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def collect_runs(work: Path, counts: list[int], home: str | None, repo: str | None) -> list[dict]:
    runs = []
    for n in counts:
        command = portable(read_text(work / f"command-{n}.txt").strip(), home, repo)
        for mode in MODES:
            path = work / f"{mode}-{n}.json"
            if not path.is_file():
                continue
            report = json.loads(path.read_text())
            run = {"mode": mode, "trace": shown_trace(report["trace"], repo), "speed": report["speed"],
                   **report["runs"][0]}
            run["engine_command"] = command
            run["engine_metrics_after"] = prometheus_counters(read_text(work / f"metrics-{mode}-{n}.txt"))
            run["lsp_command"] = [portable(part, home, repo) for part in report["command"]]
            runs.append(run)
    return runs


def number(value, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown_table(runs: list[dict]) -> str:
    lines = ["| run | clients | requests | completions | cancelled | errors | p50 ms | p99 ms | completions/s | "
             "per client p50 / p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        o = run["overall"]
        per = "; ".join(f"{number(c['latency_ms']['p50'])} / {number(c['latency_ms']['p99'])}"
                        for c in run["per_client"])
        lines.append(f"| {run['mode']} | {run['clients']} | {o['requests']} | {o['completions']} | {o['cancelled']} | "
                     f"{o['errors']} | {number(o['latency_ms']['p50'])} | {number(o['latency_ms']['p99'])} | "
                     f"{number(o['completions_per_s'], '{:.2f}')} | {per} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codecue_lsp.replay.bench_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--clients", required=True, help='client counts, e.g. "1 2 4"')
    parser.add_argument("--out", required=True)
    parser.add_argument("--what", required=True, help="one line: what was measured")
    parser.add_argument("--home", help="$CODECUE_HOME of this machine (written as such)")
    parser.add_argument("--repo", help="the repository root (paths written relative to it)")
    parser.add_argument("--trace-note", default="", help="how the traces were made, for the record")
    parser.add_argument("--engine-info", default="", help="e.g. the GPU, or llama-server threads")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.replace(",", " ").split()]
    runs = collect_runs(args.work, counts, args.home, args.repo)
    if not runs:
        print(f"bench_table: no run reports in {args.work}", file=sys.stderr)
        return 1
    result = {"what": args.what, "machine": cpu_info(), "engine": args.engine_info, "traces": args.trace_note,
              "runs": runs}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    machine = result["machine"]
    print(f"CPU: {machine['cpu']} ({', '.join(machine['cpu_flags']) or 'no AVX2'}), {machine['cores']} cores"
          + (f"; {args.engine_info}" if args.engine_info else "") + (f"; {args.trace_note}" if args.trace_note else ""))
    print()
    print(markdown_table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
