"""`codecue-bench engine`'s report: each mode's totals, its ratios per prompt kind and round, the printed table."""
from __future__ import annotations

from engine.calibration.measurements import describe_machine


def mode_summary(t: dict, completions: int) -> dict:
    """One mode's entry of the report from its totals over every prompt and round."""
    return {
        "tokens_per_s": t["new_tokens"] / t["seconds"] if t["seconds"] else 0.0,
        "ms_per_completion": 1000 * t["seconds"] / completions if completions else 0.0,
        "seconds": t["seconds"], "new_tokens": t["new_tokens"],
        "mean_accepted": (t["accepted"] + t["passes"]) / t["passes"] if t["passes"] else None,
        # The passes after the first token, as llama.cpp counts its own decoding (llama.cpp: its own timings).
        "decode_tokens_per_s": t["decode_tokens"] / t["decode_s"] if t["split"] and t["decode_s"] > 0 else None,
        "decode_tokens": t["decode_tokens"] if t["split"] else None,
        "seconds_decode": t["decode_s"] if t["split"] else None,
        "seconds_prefill": t["prefill"] if t["split"] else None, "seconds_drafting": t["draft"],
        "acceptance_rate": t["accepted"] / t["drafted"] if t["drafted"] else None,
        # Drafted tokens the draft model's lookup extension added, and of those accepted.
        "extension_drafted": t["extension"], "extension_accepted": t["extension_kept"],
        # llama.cpp computes in Q4_K_M, CodeCue in its own format: equal output is not expected there.
        # None: not compared (no target-alone run, or this is target alone).
        "identical_to_target": all(t["identical"]) if t["identical"] else None}


def add_speedups(report: dict) -> None:
    """Each mode's rate over target alone's, hf_assisted's and llama.cpp's (end to end, and llama.cpp's in decode)."""
    # Ratios of rates: a mode that writes different tokens (llama.cpp) is compared per token.
    for base in ("target", "hf_assisted", "llama_cpp"):
        base_rate = report["modes"].get(base, {}).get("tokens_per_s")
        if base_rate:
            report[f"speedup_vs_{base}"] = {m: v["tokens_per_s"] / base_rate for m, v in report["modes"].items()}
    llama_decode = report["modes"].get("llama_cpp", {}).get("decode_tokens_per_s")
    if llama_decode:
        report["decode_speedup_vs_llama_cpp"] = {m: v["decode_tokens_per_s"] / llama_decode
                                                 for m, v in report["modes"].items() if v["decode_tokens_per_s"]}


def by_kind(rows: list[dict], modes: list[str]) -> dict:
    """Per prompt kind (line / block / repetitive): each mode's seconds and decode time summed, and its ratio to
    target alone end to end and in decode (per token: a mode that writes other tokens is compared per token)."""
    out: dict[str, dict] = {}
    for row in rows:
        kind = out.setdefault(row["kind"], {})
        for mode in modes:
            run, t = row[mode], kind.setdefault(mode, {"seconds": 0.0, "tokens": 0, "decode_s": 0.0,
                                                       "decode_tokens": 0})
            t["seconds"] += run["seconds"]
            t["tokens"] += run["tokens"]
            t["decode_s"] += run.get("decode_s", 0.0)
            t["decode_tokens"] += run.get("decode_tokens", 0)
    for kind in out.values():
        base = kind.get("target")
        for t in kind.values():
            t["seconds"], t["decode_s"] = round(t["seconds"], 3), round(t["decode_s"], 3)
            if base and t["tokens"] and t["seconds"]:
                t["x_target"] = round((t["tokens"] / t["seconds"]) / (base["tokens"] / base["seconds"]), 3)
            if base and t["decode_s"] and base["decode_s"] and base["decode_tokens"]:
                t["x_target_decode"] = round((t["decode_tokens"] / t["decode_s"])
                                             / (base["decode_tokens"] / base["decode_s"]), 3)
    return out


def x_target_by_round(rows: list[dict], modes: list[str]) -> dict:
    """Each mode's ratio to target alone end to end, round by round (`--rounds`), per prompt kind and over all
    prompts ("all"): {kind: {mode: [ratio of round 1, round 2, ...]}}. A ratio met in one round of several is not
    met reliably: the spread says how far the host's noise moves it."""
    rounds = sorted({row["round"] for row in rows})
    out: dict[str, dict[str, list]] = {}
    for number in rounds:
        in_round = [row for row in rows if row["round"] == number]
        kinds = by_kind(in_round, modes)
        kinds["all"] = by_kind([{**row, "kind": "all"} for row in in_round], modes)["all"]
        for kind, per_mode in kinds.items():
            for mode, t in per_mode.items():
                out.setdefault(kind, {}).setdefault(mode, []).append(t.get("x_target"))
    return out


def not_compared_or(identical: bool | None) -> str:
    return "n/c" if identical is None else str(identical)


def print_table(report: dict) -> None:
    print(f"\n{report['prompts']} prompts, {report['device']} {report['dtype']}, max {report['max_new_tokens']} "
          f"new tokens, K<={report['k']}")
    if report.get("machine"):
        print(f"machine: {describe_machine(report['machine'])}")
    nan = float("nan")
    print(f"{'mode':16s} {'tok/s':>7s} {'ms/compl':>9s} {'decode tok/s':>13s} {'x target':>9s} "
          f"{'x hf_assist':>12s} {'x llama.cpp':>12s} {'mean acc':>9s} {'identical':>10s}")
    for mode, m in report["modes"].items():
        ratio = {base: report.get(f"speedup_vs_{base}", {}).get(mode, nan)
                 for base in ("target", "hf_assisted", "llama_cpp")}
        acc, dec = m["mean_accepted"], m["decode_tokens_per_s"]
        print(f"{mode:16s} {m['tokens_per_s']:7.2f} {m['ms_per_completion']:9.0f} "
              f"{dec if dec is not None else nan:13.2f} {ratio['target']:9.2f} {ratio['hf_assisted']:12.2f} "
              f"{ratio['llama_cpp']:12.2f} {acc if acc is not None else nan:9.2f} "
              f"{not_compared_or(m['identical_to_target']):>10s}")
    for row in report.get("per_prompt", []):
        for mode in report["modes"]:
            if "divergence" in row.get(mode, {}):
                print(f"  {mode} differs from target on {row['name']}: {row[mode]['divergence']}")
    for kind, per_mode in report.get("by_kind", {}).items():
        print(f"  {kind:12s} x target, end to end (decode): " + "  ".join(
            f"{mode} {t.get('x_target', nan):.2f} ({t.get('x_target_decode', nan):.2f})" for mode, t in per_mode.items()))
    for kind, per_mode in report.get("x_target_by_round", {}).items():
        print(f"  {kind:12s} x target, round by round: " + "  ".join(
            f"{mode} {' / '.join(f'{x:.2f}' for x in ratios)} (min {min(ratios):.2f})"
            for mode, ratios in per_mode.items() if mode != "target" and None not in ratios))
    if report.get("bandwidth_gbs_by_round"):
        print("  memory bandwidth before each prompt, median of each round (GB/s): "
              + " / ".join(f"{x:.1f}" for x in report["bandwidth_gbs_by_round"]))
    costs = report.get("pass_costs", {})
    if costs:
        print("pass costs (ms): " + ", ".join(f"{k} {v:.1f}" if k != "draft_cost_ratio" else f"c = {v:.2f}"
                                              for k, v in costs.items()))
