"""codecue-replay: typing traces for an inline-completion server, and a harness that replays them against it.

  codecue-replay synth FILE... --out TRACE.jsonl [--wpm 60..120] [--seed N] [--start-fraction F]
                 [--max-keystrokes N] [--keep-suffix] [--humaneval 0,1,2] [--fim-holes N]
                 [--rotate N [--visit-keystrokes 40] [--switch-every 5]]
  codecue-replay record --out TRACE.jsonl -- SERVER COMMAND...
  codecue-replay run TRACE.jsonl [--server "codecue-lsp --stdio"] [--speed 2 | --as-fast-as-possible]
                 [--compare "LABEL=EXTRA SERVER ARGS" ...] [--json REPORT.json] [--html REPORT.html]
                 [--sample-every 50] [--soak]
  codecue-replay run TRACE.jsonl --clients 1,2,4 [--stagger 2] [--server ...] [--json R.json] [--html R.html]
  codecue-replay gate --choose REPORT_A.json --report REPORT_B.json [--label LABEL] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from . import synth
from .trace import TraceError, read_trace, write_trace


def parse_task_numbers(text: str) -> list[int]:
    numbers = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        numbers += list(range(int(low), int(high or low) + 1))
    if not numbers or min(numbers) < 0 or max(numbers) > 163:
        raise ValueError(f"--humaneval wants task numbers 0..163 like 0,3,10-12, got {text!r}")
    return numbers


def parse_speed(text: str) -> float:
    speed = float(text.lower().rstrip("x"))
    if speed <= 0:
        raise ValueError("--speed must be positive")
    return speed


def cmd_synth(args) -> int:
    sources = [synth.file_source(path, args.start_fraction) for path in args.files]
    if args.humaneval:
        sources += synth.humaneval_sources(parse_task_numbers(args.humaneval))
    if not sources:
        raise SystemExit("codecue-replay synth: give source FILEs or --humaneval TASKS")
    if args.fim_holes:
        events = synth.synth_holes(sources, args.fim_holes, args.seed)
    elif args.rotate:
        if not args.max_keystrokes:
            raise ValueError("--rotate needs --max-keystrokes (how long the soak trace is)")
        events = synth.synth_rotation(sources, args.max_keystrokes, args.rotate, args.visit_keystrokes,
                                      args.switch_every, args.seed, args.wpm)
    else:
        events = synth.synth_typing(sources, args.seed, args.wpm, args.max_keystrokes, args.keep_suffix,
                                    args.read_first, args.at_open, args.enter_first)
    events = synth.with_pauses(events, [synth.parse_pause(p) for p in args.pause_after or []])
    write_trace(args.out, events)
    requests = sum(1 for e in events if e["type"] == "request")
    print(f"{args.out}: {synth.keystroke_count(events)} keystrokes, {requests} requests, "
          f"{events[-1]['t']:.1f} s, {Path(args.out).stat().st_size / 1024:.1f} KB", file=sys.stderr)
    return 0


def cmd_record(args) -> int:
    from .proxy import record

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return record(command, args.out)


def cmd_gate(args) -> int:
    """minConfidence chosen on one replay report, its effect reported on another (gate.py)."""
    from .gate import gate_report, gate_table, read_report

    if Path(args.choose).resolve() == Path(args.report).resolve():
        raise ValueError("choose the threshold on one set of traces and report it on another (--choose != --report)")
    try:
        result = gate_report(read_report(args.choose), read_report(args.report), args.label)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a `codecue-replay run --json` report: {exc!r} missing or malformed") from exc
    print(gate_table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


def cmd_clients(args, events: list[dict], base: list[str]) -> int:
    """Each client count in turn: N servers started from the same command, one simulated developer each."""
    from .clients import (
        clients_report,
        clients_table,
        parse_client_counts,
        run_clients,
        summarize_clients,
        write_clients_html,
        write_clients_json,
    )
    from .runner import ServerConfig

    if args.compare or args.soak:
        raise ValueError("--clients runs one server command: leave out --compare and --soak")
    if args.stagger < 0:
        raise ValueError("--stagger must not be negative")
    speed = None if args.as_fast_as_possible else args.speed
    summaries = []
    for clients in parse_client_counts(args.clients):
        print(f"[{clients} clients] {shlex.join(base)}", file=sys.stderr)
        run = run_clients(events, ServerConfig("server", base), clients, speed, args.stagger, args.tail_timeout,
                          args.sample_every)
        summaries.append(summarize_clients(run))
    print(clients_table(summaries))
    report = clients_report(summaries, args.trace, base, speed)
    if args.json:
        write_clients_json(args.json, report)
    if args.html:
        write_clients_html(args.html, report)
    return 1 if any(s["server_errors"] for s in summaries) else 0


def cmd_run(args) -> int:
    from .report import comparison_table, summarize_all, write_json
    from .runner import ServerConfig, default_server_command, run_trace

    events = read_trace(args.trace)
    base = shlex.split(args.server) if args.server else default_server_command()
    if args.clients:
        return cmd_clients(args, events, base)
    specs = args.compare or []
    configs = [ServerConfig.parse(spec, base) for spec in specs] or [ServerConfig("server", base)]
    speed = None if args.as_fast_as_possible else args.speed
    results = []
    for config in configs:
        print(f"[{config.label}] {shlex.join(config.command)}", file=sys.stderr)
        progress = make_progress(len(events), config.label)
        try:
            results.append(run_trace(events, config, speed, args.tail_timeout, progress.update if progress else None,
                                     args.sample_every))
        finally:
            if progress:
                progress.close()
    summaries = summarize_all(results)
    print(comparison_table(summaries))
    soak_failed = False
    if args.soak:
        from .soak import verdict_lines

        for summary in summaries:
            soak = summary["soak"] or {"passed": False, "failures": ["no samples (--sample-every 0?)"],
                                       "samples_after_warmup": 0, "warmup_request": None, "requests": 0}
            print("\n".join(verdict_lines(summary["label"], soak)))
            soak_failed |= not soak["passed"]
    if args.json:
        write_json(args.json, results, args.trace)
    if args.html:
        from .html import write_html

        write_html(args.html, results, args.trace)
    return 1 if soak_failed or any(s["server_error"] for s in summaries) else 0


def make_progress(total: int, label: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, unit="ev", file=sys.stderr, disable=None, leave=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codecue-replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="subcommand", required=True)

    p = commands.add_parser("synth", help="typing traces from real source files")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--out", required=True)
    p.add_argument("--wpm", default="60..120", help="words per minute, N or LOW..HIGH (drawn per file)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-fraction", type=float, default=0.0, help="fraction of lines already in the file")
    p.add_argument("--max-keystrokes", type=int, help="stop after this many keystrokes in total")
    p.add_argument("--keep-suffix", action="store_true",
                   help="the text after the typed region is in the document too (editing inside a file)")
    p.add_argument("--read-first", type=float, default=0.0, metavar="S",
                   help="seconds between opening a file and the first keystroke")
    p.add_argument("--at-open", choices=synth.AT_OPEN, default="request",
                   help="what the editor sends 0.3 s after opening a file: a completion request there (default), "
                        "the resting cursor (codecue/didMoveCursor, as the editor clients do), or nothing")
    p.add_argument("--enter-first", action="store_true",
                   help="the cursor starts at the end of the line before the typed region and the first keystroke "
                        "is Enter (a click at a line's end, then a new line)")
    p.add_argument("--pause-after", action="append", metavar="N:S",
                   help="the user stops for S seconds after request N (from 0), e.g. 100:30; repeatable")
    p.add_argument("--humaneval", help="HumanEval problems (e.g. 0,3,10-12): prompt open, solution typed")
    p.add_argument("--fim-holes", type=int, default=0, metavar="N",
                   help="instead of typing: N documents per file, each with one line/block removed")
    p.add_argument("--rotate", type=int, default=0, metavar="N",
                   help="soak trace: N files open at once, typed in turn; each closes after its visit and the next "
                        "file opens under a new URI (needs --max-keystrokes)")
    p.add_argument("--visit-keystrokes", type=int, default=40, help="with --rotate: keystrokes per visit of a file")
    p.add_argument("--switch-every", type=int, default=5, help="with --rotate: keystrokes before the next file")
    p.set_defaults(func=cmd_synth)

    p = commands.add_parser("record", help="proxy an editor's stdio to a server and record a trace")
    p.add_argument("--out", required=True)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- SERVER COMMAND...")
    p.set_defaults(func=cmd_record)

    p = commands.add_parser("run", help="replay a trace against a real server and report")
    p.add_argument("trace")
    p.add_argument("--server", help="server command (default: this Python's `-m codecue_lsp --stdio`)")
    p.add_argument("--speed", type=parse_speed, default=1.0, help="replay N times faster than typed (2 or 2x)")
    p.add_argument("--as-fast-as-possible", action="store_true",
                   help="no clock: await each answer before the next event (no cancels, no shown-in-time)")
    p.add_argument("--compare", "--config", action="append", metavar="LABEL=ARGS",
                   help="run against the server command plus ARGS; repeat to compare configurations")
    p.add_argument("--json", help="write the full report (summary + every request) here")
    p.add_argument("--html", help="write a self-contained HTML report here")
    p.add_argument("--sample-every", type=int, default=50, metavar="N",
                   help="sample the server's RSS and codecue.stats resources every N requests (0: never)")
    p.add_argument("--soak", action="store_true",
                   help="print the soak verdict (RSS within 5 %% after the first 20 %% of requests, no structure "
                        "growing) and exit 1 when it fails")
    p.add_argument("--clients", metavar="N[,N...]",
                   help="N simulated developers at once, each its own server process (same command) and its own "
                        "copies of the documents; a list (1,2,4) runs each count in turn (clients.py)")
    p.add_argument("--stagger", type=float, default=2.0, metavar="S",
                   help="with --clients: client k starts (k-1)*S seconds after the first")
    p.add_argument("--tail-timeout", type=float, default=60.0,
                   help="seconds to wait for answers still pending at the end (and per request without a clock)")
    p.set_defaults(func=cmd_run)

    p = commands.add_parser("gate", help="choose minConfidence on one replay report, report it on another")
    p.add_argument("--choose", required=True, metavar="REPORT_A", help="`run --json` report the threshold is chosen on")
    p.add_argument("--report", required=True, metavar="REPORT_B", help="`run --json` report of other traces")
    p.add_argument("--label", help="the run of each report to use (default: its first)")
    p.add_argument("--json", help="write the threshold and both outcomes here")
    p.set_defaults(func=cmd_gate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (TraceError, ValueError, OSError) as exc:
        print(f"codecue-replay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
