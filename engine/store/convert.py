"""A GGUF converted into a Hugging Face model directory (bf16 safetensors), and the checks of converted files."""
from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import struct
from datetime import datetime, timezone
from pathlib import Path

from engine.store.config import (
    READY_MARKER,
    FetchError,
    ModelSpec,
    gguf_location,
    model_dir,
    read_marker,
    write_ready_marker,
)

CHUNK = 8 * 1024 * 1024  # bytes hashed or copied at a time


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


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
        converter(gguf_location(spec, home), tmp)
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
        **(gguf_stamp(spec.gguf_path) if spec.gguf_path else {}),
    }, home)
    return final


def disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


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


def gguf_stamp(path: Path) -> dict:
    """What a conversion was made from, kept in its ready marker: a replaced file no longer matches."""
    stat = path.stat()
    return {"gguf_source": str(path), "gguf_size": stat.st_size, "gguf_mtime_ns": stat.st_mtime_ns}
