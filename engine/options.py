"""EngineOptions: every engine setting, and the one module of engine/ that reads the environment.

A process has one current value (`current()`): built from the environment on first use, or set with `use()` by a
program that builds it itself (the server, from its flags and the environment: codecue_lsp/config.py). Deep modules
read `current().<field>` where the call chain is long; shorter chains take the value as an argument.

Two kinds of field: settings a user or admin sets (each has a CODECUE_* variable, VARIABLES), and the alternatives
that benchmarks and tests compare against the default (no variable: they set them with `using()`). Variables of
finished experiments are RETIRED: still set, they give one warning and are ignored. docs/configuration.md lists all.

A leaf: imports nothing from engine (engine/paths.py and the rest import it).
"""
from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Iterator, Mapping

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]  # this checkout
REPO_MODELS_TOML = ROOT / "models.toml"
ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")
LEAN_STEPS = ("native", "python", "off")


def default_home() -> Path:
    return Path.home() / ".cache" / "codecue"


@dataclass(frozen=True)
class EngineOptions:
    # --- set by users and admins (VARIABLES: the environment variable of each) ---
    home: Path = field(default_factory=default_home)  # models, calibrations, kernel builds, caches
    models_toml: Path = REPO_MODELS_TOML  # the model pairs file (the repository's by default)
    device: str | None = None  # cpu, cuda, cuda:1 ... (None: cuda where available, else cpu)
    dtype: str | None = None  # activation dtype: auto, float32, bfloat16, float16 (None: models.toml's)
    target_weights: str | None = None  # target's weight format, or auto (None: models.toml's)
    draft_weights: str | None = None  # draft model's weight format, or auto (None: models.toml's)
    compile: bool | None = None  # compiled static steps (None: the pair's `compile`, else on a GPU only)
    torch_prefill: str = "auto"  # a llama.cpp target's long prompts in torch int8: auto (as calibrated), on, off
    prefill_chunk: int | None = None  # tokens per llama.cpp prefill pass (None: sized from the calibrated rate)
    llamacpp_extra_buffers: bool | None = None  # llama.cpp's repacked/AMX weights (None: probed per machine/file)
    kernel_march: str = "native"  # gcc -march of the vnni kernel build (x86-64-v3: the AVX2 build)
    extensions: Path | None = None  # where kernel builds go (None: home/extensions)
    verbose_build: bool = False  # show the compiler's output while the kernel builds
    # --- compared by benchmarks and tests; no environment variable ---
    lean_step: str = "native"  # short passes: native (C++ layers), python (the lean step's Python layers), off
    weight_arena: bool = True  # the lean step's weights in one arena in the order a pass reads them
    draft_extension: bool = True  # a draft model's draft extended by a lookup of what follows it
    draft_window: bool = True  # the draft model sees the code around the cursor, not the whole prompt
    length_by_confidence: bool = True  # under auto the draft model drafts on while sure (False: the gain model's K)

    @property
    def extensions_dir(self) -> Path:
        return self.extensions or self.home / "extensions"

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> "EngineOptions":
        """The options a process started with `env` (default: this process's environment) has. A value that does
        not parse is logged and left at its default; a retired variable is logged once and ignored."""
        env = os.environ if env is None else env
        for name in RETIRED:
            if name in env:
                log.warning("%s is retired and ignored (%s); docs/configuration.md, 'Upgrade notes'", name,
                            RETIRED[name])
        values = {}
        for name, variable in VARIABLES.items():
            parse = _PARSE[name]
            text = env.get(variable)
            if text is None:
                continue
            try:
                values[name] = parse(text)
            except ValueError as exc:
                log.warning("ignoring %s=%r: %s", variable, text, exc)
        return cls(**values)

    def environment(self) -> dict[str, str]:
        """These options as the CODECUE_* variables `from_environment` reads back (settings left at their default
        are left out, except the home and the models file)."""
        default = EngineOptions(home=self.home)
        out = {}
        for name, variable in VARIABLES.items():
            value = getattr(self, name)
            if value is None or (value == getattr(default, name) and name not in ("home", "models_toml")):
                continue
            out[variable] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out


# field -> the environment variable that sets it
VARIABLES = {
    "home": "CODECUE_HOME",
    "models_toml": "CODECUE_MODELS_TOML",
    "device": "CODECUE_DEVICE",
    "dtype": "CODECUE_DTYPE",
    "target_weights": "CODECUE_TARGET_WEIGHTS",
    "draft_weights": "CODECUE_DRAFT_WEIGHTS",
    "compile": "CODECUE_COMPILE",
    "torch_prefill": "CODECUE_TORCH_PREFILL",
    "prefill_chunk": "CODECUE_PREFILL_CHUNK",
    "llamacpp_extra_buffers": "CODECUE_LLAMACPP_EXTRA_BUFFERS",
    "kernel_march": "CODECUE_KERNEL_MARCH",
    "extensions": "CODECUE_EXTENSIONS",
    "verbose_build": "CODECUE_VERBOSE_BUILD",
}

# Variables of finished experiments -> why they are gone and what replaces them (docs/configuration.md).
RETIRED = {
    "CODECUE_LEAN": "the lean step always runs where the model supports it; benchmarks compare "
                    "EngineOptions.lean_step",
    "CODECUE_WEIGHT_ARENA": "the weight arena is always used; tests compare EngineOptions.weight_arena",
    "CODECUE_DRAFT_EXTENSION": "drafts are always extended by lookup; benchmarks compare "
                               "EngineOptions.draft_extension",
    "CODECUE_DRAFT_GUESSES": "the draft model's steps check up to 3 lookup guesses, as measured",
    "CODECUE_DRAFT_LENGTH": "the draft length always follows the draft model's confidence; tests compare "
                            "EngineOptions.length_by_confidence",
    "CODECUE_DRAFT_WINDOW": "the draft model always sees the code around the cursor; benchmarks compare "
                            "EngineOptions.draft_window",
    "CODECUE_DRAFT_VOCAB": "set `draft_vocab` of the pair in models.toml (0: the whole head)",
}


def _text(text: str) -> str | None:
    return text.strip() or None


def _path(text: str) -> Path | None:
    return Path(text) if text.strip() else None


def _switch(text: str) -> bool:
    return text.strip().lower() not in (*OFF, "")  # set and not an "off" word: on (as before)


def _choice(choices: tuple[str, ...], synonyms: dict[str, str]):
    def parse(text: str) -> str:
        value = text.strip().lower() or choices[0]
        value = synonyms.get(value, value)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value
    return parse


def parse_prefill_chunk(text: str) -> int | None:
    """CODECUE_PREFILL_CHUNK and `codecue-lsp --prefill-chunk`: auto (None) or a number of tokens."""
    value = text.strip().lower()
    if value in ("", "auto"):
        return None
    if not value.isdigit():
        raise ValueError("expected auto or a number of tokens")
    return max(1, int(value))


def _extra_buffers(text: str) -> bool | None:
    value = text.strip().lower()
    if value in ("", "auto"):
        return None
    if value not in ON + OFF:
        raise ValueError("expected auto, 1 or 0")
    return value in ON


_PARSE = {  # field -> how its variable's text reads
    "home": lambda text: _path(text) or default_home(),
    "models_toml": lambda text: _path(text) or REPO_MODELS_TOML,
    "device": _text,
    "dtype": _text,
    "target_weights": _text,
    "draft_weights": _text,
    "compile": _switch,
    "torch_prefill": _choice(("auto", "on", "off"), {**dict.fromkeys(ON, "on"), **dict.fromkeys(OFF, "off")}),
    "prefill_chunk": parse_prefill_chunk,
    "llamacpp_extra_buffers": _extra_buffers,
    "kernel_march": lambda text: text.strip() or "native",
    "extensions": _path,
    "verbose_build": _switch,
}
assert set(_PARSE) == set(VARIABLES) <= {f.name for f in fields(EngineOptions)}

_current: EngineOptions | None = None
_lock = threading.Lock()


def current() -> EngineOptions:
    """This process's options: those given to `use`, else the environment's (read once)."""
    global _current
    options = _current
    if options is None:
        with _lock:
            if _current is None:
                _current = EngineOptions.from_environment()
            options = _current
    return options


def use(options: EngineOptions | None) -> None:
    """Make `options` this process's (None: read the environment again at the next `current()`)."""
    global _current
    _current = options


@contextmanager
def using(**changes) -> Iterator[EngineOptions]:
    """The current options with these fields changed, inside the block (benchmarks' and tests' variants)."""
    before = _current
    use(replace(current(), **changes))
    try:
        yield current()
    finally:
        use(before)


def child_environment(options: EngineOptions | None = None) -> dict[str, str]:
    """The environment for a child process of the engine (`python -m engine...`: calibration, probes, cache builds):
    this process's, with `options` (default: the current ones) written as CODECUE_* variables in place of any
    inherited, no retired variable (the child would warn again), and this checkout first on PYTHONPATH. The
    benchmark-only fields do not travel."""
    options = options or current()
    env = {name: value for name, value in os.environ.items()
           if name not in RETIRED and name not in VARIABLES.values()}
    env.update(options.environment())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def set_inductor_cache(folder: Path) -> None:
    """Keep torch inductor's compiled kernels in `folder` (compiled steps: engine/weights/compiled.py), unless the
    user chose a folder. The one write of the environment in CodeCue: torch reads the folder from nowhere else
    (torch/_inductor/runtime/cache_dir_utils.py reads TORCHINDUCTOR_CACHE_DIR, and writes it there itself)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder))
