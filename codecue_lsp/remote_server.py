"""What serves the engine URL, and what a request to each kind carries (no I/O here: remote_endpoint.py asks).

- vLLM (`/v1/models` entries `owned_by: "vllm"`): drops special tokens from its output text by default
  (skip_special_tokens), so a FIM marker the model writes never shows up in the text and marker stop strings never
  match; it gets `stop_token_ids` instead, and `stream_options.include_usage` for the token counts.
- llama-server (`owned_by: "llamacpp"`, or a `/props` with `default_generation_settings`): stop strings, as the
  markers appear in its text; it sends the token counts with the last chunk on its own.
- anything else OpenAI-compatible ("openai"): stop strings only, no parameter it may refuse.
vLLM and llama-server are asked for `logprobs: 1`: each token's log probability, for the suggestion's confidence
(confidence.py); where none come back the confidence is None and nothing is held back.
The `remoteServer` setting names the kind instead of asking.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

KINDS = ("vllm", "llama-server", "openai")
LLAMA_PROPS_KEY = "default_generation_settings"  # in every llama-server /props answer


@dataclass(frozen=True)
class Stops:
    strings: tuple[str, ...]  # the FIM template's markers, written out
    token_ids: tuple[int, ...]  # the pair's stop tokens (models.toml stop_token_ids), the markers' ids among them


@dataclass(frozen=True)
class VocabularyProbe:
    """A string with markers and non-ASCII text, and the ids the pair's tokenizer gives it: an engine whose
    /tokenize gives other ids does not share the vocabulary, and token-id prompts would be garbage there."""
    text: str
    ids: tuple[int, ...]
    tokenizer: str  # the tokenizer's name, for the message


def kind_from_models(entries: Sequence[dict]) -> str | None:
    """The kind the `/v1/models` entries name (owned_by), or None when they do not say."""
    owners = {str(entry.get("owned_by", "")).lower() for entry in entries}
    if "vllm" in owners:
        return "vllm"
    if "llamacpp" in owners:
        return "llama-server"
    return None


def kind_from_props(props: object) -> str:
    return "llama-server" if isinstance(props, dict) and LLAMA_PROPS_KEY in props else "openai"


def root_url(base: str) -> str:
    """Where /tokenize and /props live: beside /v1, not under it."""
    return base[: -len("/v1")] if base.endswith("/v1") else base


def completion_body(kind: str, *, model: str, prompt: str | list[int], max_tokens: int, stops: Stops,
                    same_vocabulary: bool) -> dict:
    """The streamed /v1/completions request for this kind of server (greedy: temperature 0)."""
    body: dict = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if kind in ("vllm", "llama-server"):
        body["logprobs"] = 1
    if kind == "vllm":
        body["stream_options"] = {"include_usage": True}
        if same_vocabulary and stops.token_ids:
            body["stop_token_ids"] = list(stops.token_ids)
            return body
        # Another vocabulary: our ids mean nothing there; keep special tokens in the text so the strings match.
        body["skip_special_tokens"] = False
    if stops.strings:
        body["stop"] = list(stops.strings)
    return body


def tokenize_body(kind: str, model: str, text: str) -> dict:
    """POST /tokenize for the probe, markers parsed as special tokens, nothing added (no BOS)."""
    if kind == "vllm":
        return {"model": model, "prompt": text, "add_special_tokens": False}
    return {"content": text, "add_special": False, "parse_special": True}


def usage_counts(usage: dict | None) -> tuple[int | None, int, int | None]:
    """(prompt tokens, of them cached, generated tokens) from an OpenAI `usage` object; None where not told."""
    if not isinstance(usage, dict):
        return None, 0, None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt, generated = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else None, cached if isinstance(cached, int) else 0,
            generated if isinstance(generated, int) else None)


def token_logprobs(choice: dict) -> list[tuple[str, float | None]]:
    """(token text, natural-log probability) of the tokens in one streamed choice: OpenAI's completions format
    (`logprobs.tokens` + `token_logprobs`: vLLM) or the chat format (`logprobs.content[{token, logprob}]`: newer
    llama-server); [] when the chunk has none."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return []
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(values, list) and len(tokens) == len(values):
        return [(str(text), _number(value)) for text, value in zip(tokens, values)]
    content = logprobs.get("content")
    if isinstance(content, list):
        return [(str(entry.get("token", "")), _number(entry.get("logprob")))
                for entry in content if isinstance(entry, dict)]
    return []


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
