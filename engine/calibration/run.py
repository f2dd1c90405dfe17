"""Running the calibration: once per machine and pair, in a child process (`python -m engine.calibration.run`), so
that no torch or llama.cpp thread pool is left behind in the process that serves; llama.cpp's rows added to a cached
table that lacks them."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from engine.calibration import llamacpp_timing as calibrate_llamacpp
from engine.calibration.measurements import (
    CONTEXT_TOKENS,
    Calibration,
    Measurement,
    load_cached,
    machine_key,
    save,
)
from engine.calibration.torch_timing import calibrate
from engine.options import child_environment
from engine.weights import llamacpp, torch_prefill

log = logging.getLogger(__name__)


class CalibrationCrashed(RuntimeError):
    """The measuring child died of a signal: measuring in the caller would kill the server the same way."""


def calibration_for(home: Path, target_config, draft_config=None, device: str = "cpu", force: bool = False,
                    progress: bool = True, gguf_files: dict | None = None, in_process: bool = False) -> Calibration:
    """The cached table for this machine and pair, measuring it first when there is none (once per machine).
    gguf_files ({role: path}): also time those files in llama.cpp where it is installed (a few seconds each; added
    to a cached table that lacks them). The measuring runs in a child process unless in_process: torch and
    llama.cpp ops on the caller's thread (the server's loading thread) would leave OpenMP thread pools beside the
    engine's, and the engine's short passes then run late."""
    key = machine_key(device, target_config, draft_config)
    cal = None if force else load_cached(home, key)
    if not in_process and (cal is None or lacks_llamacpp(cal, gguf_files or {}, device)):
        measured = measured_in_child(home, target_config, draft_config, device, force, progress, gguf_files)
        if measured is not None:
            return measured
    if cal is None:
        log.info("calibrating weight formats on %s (once per machine)", key["processor"])
        started = time.perf_counter()

        rivals = {}  # llama.cpp's models left open, to time again beside torch's best where close
        try:
            first = llamacpp_rows(gguf_files or {}, device, configs={"target": target_config}, keep=rivals)
            cal = calibrate(target_config, draft_config, device, progress=progress, measured_first=first,
                            rivals=rivals)
        finally:
            for timer in rivals.values():
                timer.close()
        cal.seconds = round(time.perf_counter() - started, 1)
        save(home, cal)
    elif add_llamacpp(cal, gguf_files or {}, device, {"target": target_config}):
        save(home, cal)
    return cal


def measured_in_child(home: Path, target_config, draft_config, device: str, force: bool, progress: bool,
                      gguf_files: dict | None) -> Calibration | None:
    """calibration_for in a child process (`python -m engine.calibration.run`), which saves the table; None (and a log
    line) when the child fails or keys the machine differently, and the caller measures itself. A child killed by a
    signal (a kernel that crashes on this machine) raises CalibrationCrashed instead: no second try in the caller."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="codecue-calibrate-") as tmp:
        cmd = [sys.executable, "-m", "engine.calibration.run", "--home", str(home), "--device", device,
               "--threads", str(torch.get_num_threads())]
        for role, config in (("target", target_config), ("draft", draft_config)):
            if config is not None:
                config.save_pretrained(Path(tmp) / role)
                cmd += [f"--{role}-config", str(Path(tmp) / role)]
        for role, path in (gguf_files or {}).items():
            cmd += [f"--{role}-gguf", str(path)]
        cmd += ["--force"] if force else []
        cmd += [] if progress else ["--quiet"]
        done = subprocess.run(cmd, env=child_environment(), stdout=subprocess.DEVNULL, stderr=None if progress else subprocess.PIPE)
    if done.returncode < 0:
        raise CalibrationCrashed(
            f"calibrating the weight formats crashed this machine's child process (signal {-done.returncode}"
            f"{': ' + done.stderr.decode(errors='replace')[-300:].strip() if done.stderr else ''}). Choose the "
            f"formats instead of measuring them, e.g. CODECUE_TARGET_WEIGHTS=gguf CODECUE_DRAFT_WEIGHTS=int4 "
            f"CODECUE_DTYPE=bfloat16 (docs/configuration.md), and run `codecue-models calibrate` to see it again")
    cal = load_cached(home, machine_key(device, target_config, draft_config))
    if done.returncode != 0 or cal is None:
        log.warning("calibrating in a child process failed (exit %s%s); measuring here", done.returncode,
                    f": {done.stderr.decode(errors='replace')[-500:]}" if done.stderr else "")
        return None
    return cal


def main(argv=None) -> int:
    """The child of measured_in_child: measure, save the table in --home, exit."""
    import argparse

    from transformers import AutoConfig

    parser = argparse.ArgumentParser(prog="python -m engine.calibration.run")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--target-config", type=Path, required=True)
    parser.add_argument("--draft-config", type=Path)
    parser.add_argument("--target-gguf", type=Path)
    parser.add_argument("--draft-gguf", type=Path)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    target = AutoConfig.from_pretrained(args.target_config)
    draft = AutoConfig.from_pretrained(args.draft_config) if args.draft_config else None
    ggufs = {role: path for role, path in (("target", args.target_gguf), ("draft", args.draft_gguf)) if path}
    calibration_for(args.home, target, draft, args.device, force=args.force, progress=not args.quiet,
                    gguf_files=ggufs, in_process=True)
    return 0


def llamacpp_rows(gguf_files: dict, device: str, have: tuple[Measurement, ...] = (),
                  configs: dict | None = None, keep: dict | None = None) -> list[Measurement]:
    """The real GGUF files timed in llama.cpp (format "llamacpp"), for each role that `have` has no such row for.
    configs ({role: config}): also time a torch prefill of that architecture handing its keys/values over.
    keep: {role: finalists.PassTimer} of the models left open (the caller closes them)."""

    if device != "cpu" or not gguf_files or not llamacpp.available():
        return []
    rows = []
    for role, path in untimed_ggufs(gguf_files, have).items():
        log.info("timing %s in llama.cpp (%s)", role, path)
        config = (configs or {}).get(role)
        torch_config = config if config is not None and torch_prefill.supports(config) else None
        rows.append(calibrate_llamacpp.measure(role, path, context_tokens=CONTEXT_TOKENS, torch_config=torch_config,
                                               keep=keep))
    return rows


def untimed_ggufs(gguf_files: dict, have) -> dict:
    """{role: GGUF path} for the roles that have no llama.cpp row among the measurements `have`."""
    return {role: path for role, path in gguf_files.items()
            if path is not None and not any(m.role == role and m.weights == "llamacpp" for m in have)}


def lacks_llamacpp(cal: Calibration, gguf_files: dict, device: str) -> bool:
    """True when a GGUF of the pair could be timed in llama.cpp and the table has no row for it yet."""

    return device == "cpu" and bool(untimed_ggufs(gguf_files, cal.measurements)) and llamacpp.available()


def add_llamacpp(cal: Calibration, gguf_files: dict, device: str, configs: dict | None = None) -> bool:
    """Add llama.cpp's rows to a cached table that lacks them (measured before llama-cpp-python was installed).
    The torch rows are not built again here, so these rows are not timed side by side with them."""
    rows = llamacpp_rows(gguf_files, device, tuple(cal.measurements), configs)
    cal.measurements += rows
    return bool(rows)


if __name__ == "__main__":
    raise SystemExit(main())
