"""Bring your own models: models.toml entries that name the user's own files, and the pair's vocabulary check.

    [models."my-coder-7b"]
    gguf_path = "~/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf"   # or: path = "~/models/Qwen2.5-Coder-7B"
    sha256 = "..."                                                # optional, checked by `codecue-models fetch`

- `path`: a Hugging Face model directory (config.json, tokenizer files, *.safetensors). Used in place, never written
  to: format caches go to $CODECUE_HOME/models/<name>/. Ready as soon as config.json and the tokenizer files exist.
- `gguf_path`: a GGUF file. `codecue-models fetch --pair NAME` checks its sha256 (when given) and converts it into
  $CODECUE_HOME/models/<name>/ with the same code as the default pair's GGUF (engine/store/fetch.py), reading the
  file and never copying or changing it; "llamacpp" and the GGUF formats read it where it is. The conversion records the
  file's path, size and mtime, so a replaced file shows as needing `fetch` again.
- Both may be given: the directory for the torch formats and the tokenizer, the GGUF for llamacpp / gguf / int4.

A pair's target and draft must share one vocabulary: the draft proposes token ids that the target scores.
"""
from __future__ import annotations

import functools
import re
import sys
import time
from pathlib import Path

from engine.store.config import (
    READY_MARKER,
    FetchError,
    ModelsError,
    ModelSpec,
    PairSpec,
    cache_dir,
    model_dir,
    read_marker,
)
from engine.store.convert import (
    convert_model,
    converted_problems,
    gguf_stamp,
    sha256_file,
)

HF_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
# llama.cpp's converter fills the embedding rows past the tokenizer with "[PAD<id>]" tokens, so one family's models
# of different embedding widths (Qwen2.5-Coder 7B: 152,064 rows, 0.5B/1.5B: 151,936) differ only in these.
PADDING_TOKEN = re.compile(r"\[PAD\d+\]")


# ---- state -------------------------------------------------------------------------------------------------------

def missing_hf_files(directory: Path) -> list[str]:
    return [name for name in HF_FILES if not (directory / name).is_file()]


def local_state(spec: ModelSpec, home: Path | None = None) -> str:
    """ready / missing (the user's files are not there) / needs-fetch (a GGUF not converted, or changed since)."""
    if spec.path is not None:
        return "ready" if spec.path.is_dir() and not missing_hf_files(spec.path) else "missing"
    if not spec.gguf_path.is_file():
        return "missing"
    marker = read_marker(spec.name, home) or {}
    converted_from_this = all(marker.get(k) == v for k, v in gguf_stamp(spec.gguf_path).items())
    return "ready" if converted_from_this and marker.get("sha256") == spec.sha256 else "needs-fetch"


def state_hint(spec: ModelSpec, home: Path | None = None, pair: str = "default") -> str | None:
    """What makes a local model ready: the models.toml fix for files that are not there, else the fetch command."""
    state = local_state(spec, home)
    if state == "ready":
        return None
    if state == "missing" and spec.path is not None:
        what = "does not exist" if not spec.path.is_dir() else f"lacks {', '.join(missing_hf_files(spec.path))}"
        return (f"the model directory {spec.path} {what} (a Hugging Face model directory needs "
                f"{', '.join(HF_FILES)} and *.safetensors); fix `path` of {spec.name} in models.toml")
    if state == "missing":
        return f"the GGUF file {spec.gguf_path} does not exist; fix `gguf_path` of {spec.name} in models.toml"
    return f"{spec.gguf_path.name} is not converted yet (or changed since): run `codecue-models fetch --pair {pair}`"


# ---- fetch and verify --------------------------------------------------------------------------------------------

def check_sha256(spec: ModelSpec, progress: bool = True) -> None:
    """Only when models.toml gives a sha256: a local file without one is trusted as it is."""

    if not spec.sha256 or spec.gguf_path is None:
        return
    got = sha256_file(spec.gguf_path, progress)
    if got != spec.sha256.lower():
        raise FetchError(f"{spec.gguf_path}: its sha256 is {got}, but models.toml expects {spec.sha256} for "
                         f"{spec.name}. The file was left as it is: fix the file or the `sha256` in models.toml.")


def fetch_local(spec: ModelSpec, home: Path | None = None, *, converter=None, force: bool = False,
                pair: str = "default", progress: bool = True) -> dict:
    """Bring a local model to `ready`. Returns seconds per stage, as fetch.fetch_model does."""

    state = local_state(spec, home)
    if state == "missing":
        raise FetchError(f"{spec.name}: {state_hint(spec, home, pair)}")
    if spec.gguf_path is not None and not spec.gguf_path.is_file():  # beside a directory that is there
        raise FetchError(f"{spec.name}: the GGUF file {spec.gguf_path} does not exist; fix `gguf_path` in models.toml")
    timings: dict[str, float] = {}
    if spec.path is not None:
        t0 = time.perf_counter()
        check_sha256(spec, progress)
        timings["verify"] = time.perf_counter() - t0
        print(f"{spec.name}: ready (local directory {spec.path}, used in place)", file=sys.stderr)
        return timings
    if not force and state == "ready" and not converted_problems(spec, home):
        print(f"{spec.name}: ready ({cache_dir(spec, home)}, converted from {spec.gguf_path})", file=sys.stderr)
        return timings
    t0 = time.perf_counter()
    check_sha256(spec, progress)
    timings["verify"] = time.perf_counter() - t0
    print(f"{spec.name}: converting {spec.gguf_path} to bf16 safetensors", file=sys.stderr)
    t0 = time.perf_counter()
    convert_model(spec, home, converter)
    timings["convert"] = time.perf_counter() - t0
    print(f"{spec.name}: ready ({cache_dir(spec, home)})", file=sys.stderr)
    return timings


def local_problems(spec: ModelSpec, home: Path | None = None, pair: str = "default",
                   progress: bool = True) -> list[str]:
    """`codecue-models verify` for a local model: its files, the GGUF's sha256 (when given), the conversion."""

    hint = state_hint(spec, home, pair)
    if local_state(spec, home) == "missing":
        return [hint]
    problems = []
    if spec.gguf_path is not None and spec.gguf_path.is_file():
        try:
            check_sha256(spec, progress)
        except FetchError as exc:
            problems.append(str(exc))
    if spec.path is None:
        problems += [hint] if hint else converted_problems(spec, home)
    return problems


# ---- one vocabulary per pair ---------------------------------------------------------------------------------------

def check_pair(pair: PairSpec, home: Path | None = None, with_draft: bool = True) -> None:
    """Raise ModelsError, naming the fix, when a model the load needs is not ready or the draft's vocabulary is not
    the target's."""
    for spec in [pair.target] + ([pair.draft] if pair.draft is not None and with_draft else []):
        if not is_ready(spec, home):
            raise ModelsError(not_ready_message(spec, home, pair.name))
    problem = vocab_problem(pair, home) if pair.draft is not None and is_ready(pair.draft, home) else None
    if problem:
        raise ModelsError(problem)


def vocab_problem(pair: PairSpec, home: Path | None = None) -> str | None:
    """None when the target's and the draft's tokenizers map the same tokens to the same ids. Only the ids matter:
    the draft never tokenizes text, it reads and proposes ids."""

    target_file = model_dir(pair.target, home) / "tokenizer.json"
    draft_file = model_dir(pair.draft, home) / "tokenizer.json"
    if not (target_file.is_file() and draft_file.is_file()):
        return None  # a damaged conversion: `codecue-models verify` names the missing file, and loading fails on it
    if target_file.read_bytes() == draft_file.read_bytes():  # one family's files: no need to parse 150k tokens
        return None
    target, draft = tokens_by_id(target_file), tokens_by_id(draft_file)
    difference = first_difference(target, draft)
    if difference is None:
        return None
    return (f"pair {pair.name}: the target {pair.target.name} and the draft {pair.draft.name} have different "
            f"vocabularies ({len(target):,} vs {len(draft):,} token ids; {difference}). The draft proposes token ids "
            f"that the target scores, so both need the same tokenizer: choose a draft of the target's model family, "
            f"or remove `draft` from the pair in models.toml.")


def tokens_by_id(tokenizer_json: Path) -> list[str | None]:
    stat = tokenizer_json.stat()
    return _tokens_by_id(str(tokenizer_json), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)  # keyed by size and mtime too: a replaced file is read again
def _tokens_by_id(path: str, size: int, mtime_ns: int) -> list[str | None]:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(path).get_vocab(with_added_tokens=True)
    tokens: list[str | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for token, i in vocab.items():
        tokens[i] = token
    return tokens


def first_difference(target: list[str | None], draft: list[str | None]) -> str | None:
    """The first id the two map differently, where ids past the shorter list count only when they are not padding."""
    shared = min(len(target), len(draft))
    if target[:shared] != draft[:shared]:  # compared in C; the loop below runs only to name the id
        i = next(i for i in range(shared) if target[i] != draft[i])
        return f"first difference at id {i}: {target[i]!r} in the target, {draft[i]!r} in the draft"
    for role, tokens in (("target", target), ("draft", draft)):
        extra = next((i for i in range(shared, len(tokens))
                      if tokens[i] is not None and not PADDING_TOKEN.fullmatch(tokens[i])), None)
        if extra is not None:
            return f"id {extra} ({tokens[extra]!r}) is only in the {role}'s"
    return None


def is_ready(model: ModelSpec | str, home: Path | None = None) -> bool:
    if isinstance(model, ModelSpec) and model.is_local:
        return local_state(model, home) == "ready"
    return (model_dir(model, home) / READY_MARKER).is_file()


def not_ready_message(spec: ModelSpec, home: Path | None = None, pair: str = "default") -> str:
    """Why a model cannot load yet, naming the command (or the models.toml fix) that makes it ready."""
    if spec.is_local:
        return f"model {spec.name} is not ready: {state_hint(spec, home, pair)}"
    fetch = "codecue-models fetch" if pair == "default" else f"codecue-models fetch --pair {pair}"
    return f"model {spec.name} is not downloaded (looked in {model_dir(spec, home)}). Run `{fetch}` first."


def model_config(spec: ModelSpec, home: Path | None = None):
    from transformers import AutoConfig

    if not is_ready(spec, home):
        raise ModelsError(not_ready_message(spec, home))
    return AutoConfig.from_pretrained(model_dir(spec, home))
