"""`codecue-bench ab`: the engine bench of two checkouts interleaved in one run, so that their ratio holds on a
noisy machine (a slow minute slows both alike).

    codecue-bench ab --before DIR --after DIR [--rounds 3] [--modes target,auto,llama_cpp] [--warm] [--json OUT]
                     [--metric tokens_per_s|decode_tokens_per_s] [-- more `codecue-bench engine` arguments]

Each round runs `python -m codecue_bench engine --rounds 1 --json TMP ...` once in each checkout, with the working
directory and PYTHONPATH set to that checkout and this same Python: before then after in odd rounds, after then
before in even ones. It reads each run's JSON (`modes.<mode>.<metric>`) and prints each mode's rate per round in
both checkouts, after ÷ before per mode (the median over rounds) and each mode over llama.cpp in each checkout (each
round's ratio taken within one run, then the median). A checkout of another commit to compare with:
`git worktree add /tmp/codecue-before COMMIT`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUTS = ("before", "after")
DEFAULT_MODES = "target,auto,llama_cpp"  # the engine bench's names: target alone, CodeCue's default, the peer
PEER = "llama_cpp"


class ABError(Exception):
    """A checkout that is not one, or an engine bench that failed: the message says which and where."""


def run_order(rounds: int) -> list[tuple[int, str]]:
    """(round, checkout) in the order they run: before first in odd rounds, after first in even ones, so neither
    checkout always runs in the second half of a round."""
    return [(number, side) for number in range(1, rounds + 1)
            for side in (CHECKOUTS if number % 2 else CHECKOUTS[::-1])]


def engine_arguments(json_path: Path, modes: str, warm: bool, extra: list[str]) -> list[str]:
    """What follows `python -m codecue_bench` for one run."""
    return ["engine", "--rounds", "1", "--json", str(json_path), "--modes", modes, *(["--warm"] if warm else []),
            *extra]


def checkout_environment(checkout: Path) -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH, ahead of any installed CodeCue."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(checkout), env.get("PYTHONPATH", "")) if p)
    return env


def run_engine_bench(checkout: Path, arguments: list[str], json_path: Path, label: str) -> dict:
    """One engine bench in `checkout` writing `json_path`; its output goes to stderr line by line, prefixed with
    `label`."""
    process = subprocess.Popen([sys.executable, "-m", "codecue_bench", *arguments], cwd=checkout,
                               env=checkout_environment(checkout), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        for line in process.stdout:
            print(f"[{label}] {line}", end="", file=sys.stderr, flush=True)
        code = process.wait()
    finally:
        if process.poll() is None:  # interrupted: the engine bench stops the llama-servers it started on SIGTERM
            process.terminate()
            process.wait()
    if code != 0:
        raise ABError(f"the engine bench failed in {checkout} ({label}, exit code {code}); its output is above")
    try:
        return json.loads(json_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ABError(f"the engine bench in {checkout} ({label}) wrote no readable JSON at {json_path}: {exc}") from exc


def rate(report: dict, mode: str, metric: str, label: str) -> float:
    value = report.get("modes", {}).get(mode, {}).get(metric)
    if not value:
        raise ABError(f"{label}: the engine bench's JSON has no {metric} for mode {mode}")
    return float(value)


def summarize(reports: dict[tuple[int, str], dict], modes: list[str], metric: str) -> dict:
    """From each (round, checkout)'s engine bench report: each mode's rate per round in both checkouts and after ÷
    before; the median of those ratios; with llama.cpp among the modes, each mode over it per round and checkout,
    and the median of those."""
    rounds = sorted({number for number, _ in reports})
    rates = {(number, side, mode): rate(reports[number, side], mode, metric, f"round {number}, {side}")
             for number in rounds for side in CHECKOUTS for mode in modes}
    per_round = {mode: [{"round": number, "before": rates[number, "before", mode],
                         "after": rates[number, "after", mode],
                         "after_over_before": rates[number, "after", mode] / rates[number, "before", mode]}
                        for number in rounds] for mode in modes}
    summary = {"metric": metric, "modes": modes, "rounds": len(rounds), "per_round": per_round,
               "after_over_before": {mode: statistics.median(r["after_over_before"] for r in per_round[mode])
                                     for mode in modes}}
    if PEER in modes:
        by_round = {side: {mode: [rates[number, side, mode] / rates[number, side, PEER] for number in rounds]
                           for mode in modes if mode != PEER} for side in CHECKOUTS}
        summary["x_llama_cpp_by_round"] = by_round
        summary["x_llama_cpp"] = {side: {mode: statistics.median(ratios) for mode, ratios in per_mode.items()}
                                  for side, per_mode in by_round.items()}
    return summary


def print_summary(summary: dict, before: Path, after: Path) -> None:
    print(f"\n{summary['metric']}, {summary['rounds']} round(s), checkouts interleaved\n  before: {before}\n"
          f"  after:  {after}")
    print(f"{'mode':16s} {'round':>5s} {'before':>9s} {'after':>9s} {'after/before':>13s}")
    for mode, rows in summary["per_round"].items():
        for row in rows:
            print(f"{mode:16s} {row['round']:5d} {row['before']:9.2f} {row['after']:9.2f} "
                  f"{row['after_over_before']:13.3f}")
    print("after ÷ before, median over rounds: "
          + "  ".join(f"{mode} {ratio:.3f}" for mode, ratio in summary["after_over_before"].items()))
    for side, per_mode in summary.get("x_llama_cpp", {}).items():
        print(f"x llama.cpp, {side:6s} (median over rounds): "
              + "  ".join(f"{mode} {ratio:.2f}" for mode, ratio in per_mode.items()))


def checkout(path: str) -> Path:
    folder = Path(path).resolve()
    if not (folder / "codecue_bench" / "__main__.py").is_file():
        raise ABError(f"{folder} is not a CodeCue checkout (no codecue_bench/__main__.py): "
                      "make one with `git worktree add DIR COMMIT`")
    return folder


def main(argv: list[str]) -> int:
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(prog="codecue-bench ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the checkout to compare against")
    parser.add_argument("--after", required=True, help="the checkout under test")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each checkout, interleaved")
    parser.add_argument("--modes", default=DEFAULT_MODES, help="comma-separated engine bench modes")
    parser.add_argument("--warm", action="store_true", help="the engine bench's --warm (each prompt made ready)")
    parser.add_argument("--metric", default="tokens_per_s", choices=("tokens_per_s", "decode_tokens_per_s"),
                        help="end to end (prefill included), or decode only")
    parser.add_argument("--json", help="write every figure and each run's report here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    modes = [mode for mode in args.modes.split(",") if mode]
    try:
        folders = {"before": checkout(args.before), "after": checkout(args.after)}
        reports: dict[tuple[int, str], dict] = {}
        with tempfile.TemporaryDirectory(prefix="codecue-ab-") as work:
            for number, side in run_order(args.rounds):
                json_path = Path(work) / f"{side}-{number}.json"
                arguments = engine_arguments(json_path, ",".join(modes), args.warm, extra)
                reports[number, side] = run_engine_bench(folders[side], arguments, json_path,
                                                         f"round {number}/{args.rounds} {side}")
        summary = summarize(reports, modes, args.metric)
    except ABError as exc:
        print(f"codecue-bench ab: {exc}", file=sys.stderr)
        return 1
    print_summary(summary, folders["before"], folders["after"])
    if args.json:
        result = {"before": str(folders["before"]), "after": str(folders["after"]), "python": sys.executable,
                  "engine_arguments": engine_arguments(Path("OUT"), ",".join(modes), args.warm, extra),
                  "order": [{"round": number, "checkout": side} for number, side in run_order(args.rounds)],
                  **summary,
                  "reports": [{"round": number, "checkout": side, "report": reports[number, side]}
                              for number, side in run_order(args.rounds)]}
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0
