"""The seam between the server and whatever writes completions: the `CompletionBackend` protocol and its results.

Two backends implement it: the in-process engine (completer.Completer) and an OpenAI-compatible endpoint
(remote.RemoteCompleter). The server, its background work and the loading code call only these members; what a
backend cannot do it says through a capability (`supports_prefill`, ...) and a method that does nothing, so nobody
probes a backend's attributes. docs/architecture.md#the-backend-seam describes it for a newcomer.

Cancel: every call that runs on the backend takes the engine's CancelToken; setting it (any thread) is the cancel.
A cancelled request resolves with outcome "cancelled"; it does not raise.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

from engine.types import CancelToken, CompletionResult, CompletionStats, FinishReason

from .confidence import first_line_confidence
from .config import Settings
from .prompt import BuiltPrompt, OpenDocument

# completed: the model ended it (eos, a stop, max tokens); cancelled: its token was set; failed: the backend could
# not answer (an endpoint down, a 5xx, a timeout), told apart from "the model wrote nothing".
Outcome = Literal["completed", "cancelled", "failed"]


@dataclass
class Completion:
    """What a submitted request resolves to: the model's raw text (`finish` post-processes it) and how it ended."""
    text: str
    outcome: Outcome
    finish_reason: FinishReason  # the engine's reason; a failed request says "cancelled" (nothing was generated)
    token_ids: list[int] = field(default_factory=list)
    token_probs: list[float] | None = None  # each token's probability, in token_ids' order; None: not known
    error: str | None = None  # why, when the outcome is "failed"
    stats: CompletionStats = field(default_factory=CompletionStats)
    reported_tokens: int | None = None  # tokens generated, where token_ids does not list them (a remote engine's count)
    # The target's probability of the first line (confidence.py); None where the backend gave no probabilities.
    confidence: float | None = None

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids) if self.reported_tokens is None else self.reported_tokens

    @classmethod
    def from_engine(cls, result: CompletionResult, token_texts: Sequence[str] = ()) -> Completion:
        """token_texts: each token's text, for the confidence (without them it is None)."""
        outcome: Outcome = "cancelled" if result.finish_reason == "cancelled" else "completed"
        probs = list(result.token_probs) if len(result.token_probs) == len(result.token_ids) else None
        confidence = (first_line_confidence(zip(token_texts, probs))
                      if probs is not None and len(token_texts) == len(probs) else None)
        return cls(text=result.text, outcome=outcome, finish_reason=result.finish_reason,
                   token_ids=list(result.token_ids), token_probs=probs, stats=result.stats, confidence=confidence)

    @classmethod
    def failed(cls, error: str, stats: CompletionStats | None = None) -> Completion:
        return cls(text="", outcome="failed", finish_reason="cancelled", error=error,
                   stats=stats or CompletionStats())


@dataclass(frozen=True)
class Health:
    """Whether the backend answers: None until a request has finished; the last failure's message for the user."""
    healthy: bool | None
    last_error: str | None = None


@dataclass(frozen=True)
class BackendStats:
    """The backend's side of `codecue.stats` (a backend without such state reports zeros)."""
    sessions: int = 0  # documents whose caches the backend holds
    busy: bool = False  # a request or background pass is running
    phase: str = "idle"  # what it is doing ("prefill", "decode", ...)
    index_documents: int = 0  # entries of the lookup index (open documents and completion histories)
    workspace_documents: int = 0  # of them, open documents


class PreparedPrompt(Protocol):
    """A prompt `prepare` built, ready to submit. Each backend has its own; the server reads only these."""
    built: BuiltPrompt  # the prompt as built: mode, layout, pieces (post-processing reads it)

    @property
    def grows(self) -> bool:
        """Its layout was chosen at a cold start's smaller size: the full one is to be made ready (growth.py)."""
        ...

    @property
    def reranks(self) -> bool:
        """It was built with project context: a fresh ranking at the next pause may change it (growth.py)."""
        ...

    @property
    def ready_tokens(self) -> int:
        """How many of its tokens make it ready (prefilled or grown): all but the last, which a request runs."""
        ...


@runtime_checkable
class CompletionBackend(Protocol):
    """What the server needs from a completion backend. `prepare` and `prepare_growth` run on the server's prompt
    thread (they touch the syntax cache); every other call may come from the event loop and must not block it."""

    kind: str  # "local" or "remote"
    supports_prefill: bool  # prefill / prepare_growth / grow / take_growth do something (warmup.py, growth.py)
    supports_next_line: bool  # worth writing the next line nobody asked for yet (next_line.py)
    indexes_workspace: bool  # update_workspace feeds a lookup index (workspace_sync.py)
    supports_alternatives: bool  # `alternative` writes other suggestions for a request the user made (alternatives.py)

    # --- prompts --------------------------------------------------------------------------------------------------
    def prepare(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                other_docs: Sequence[OpenDocument] = (), project=None) -> PreparedPrompt:
        """The prompt for this cursor; `character_utf16` counts UTF-16 code units. `project`: the workspace's
        context (context/project.py ProjectContext) or None."""
        ...

    def prompt_tokens(self, settings: Settings) -> int:
        """The prompt budget in use under these settings."""
        ...

    def cold_prompt_tokens(self, settings: Settings) -> int | None:
        """A cold start's smaller budget (growth.py); None where prompts never start small."""
        ...

    # --- requests -------------------------------------------------------------------------------------------------
    def submit(self, prepared: PreparedPrompt, token: CancelToken,
               on_text: Callable[[str], None] | None = None) -> Future[Completion]:
        """Start the completion; `on_text(text so far)` streams it, on the backend's thread."""
        ...

    def alternative(self, prepared: PreparedPrompt, rank: int, token: CancelToken) -> Future[Completion]:
        """Another completion of the same prompt: its first token the target's (rank+1)-th most likely there, then
        as usual (engine CompletionRequest.first_rank). Without supports_alternatives: an empty completion."""
        ...

    def finish(self, prepared: PreparedPrompt, completion: Completion) -> str:
        """The text to show: the completion post-processed for its prompt."""
        ...

    def complete(self, prepared: PreparedPrompt, token: CancelToken | None = None) -> tuple[str, Completion]:
        """Blocking submit + finish, for `codecue-lsp --check` and benchmarks."""
        ...

    # --- a prompt made ready before it is asked for -----------------------------------------------------------------
    def prefill(self, prepared: PreparedPrompt, token: CancelToken) -> Future[int]:
        """Compute the prompt into its document's session; resolves to how many of its tokens are held."""
        ...

    def prepare_growth(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                       other_docs: Sequence[OpenDocument] = (), project=None) -> PreparedPrompt | None:
        """The full-size prompt for a cursor whose layout started small, or whose project context a fresh ranking
        would change; None when there is nothing to grow."""
        ...

    def grow(self, prepared: PreparedPrompt, token: CancelToken) -> Future[int]:
        """Compute a growth prompt into a spare cache; resolves to how many of its tokens the spare holds."""
        ...

    def take_growth(self, prepared: PreparedPrompt) -> None:
        """The grown prompt and its cache are the document's from now on (on the prompt thread)."""
        ...

    # --- documents ------------------------------------------------------------------------------------------------
    def update_workspace(self, key: str, text: str | None) -> None:
        """An open document's text for the lookup index (None: it closed). Blocking: call it off the loop."""
        ...

    def forget(self, uri: str) -> None:
        """A closed document: drop its caches without blocking the caller."""
        ...

    # --- state ----------------------------------------------------------------------------------------------------
    def stats(self) -> BackendStats:
        ...

    def health(self) -> Health:
        ...

    def describe(self) -> dict:
        """`codecue.stats`' "backend": kind, url, healthy, last_error."""
        ...

    def watch_health(self, show: Callable[[str], None]) -> None:
        """Call `show(message)` once when the backend turns unhealthy (any thread), not once per request."""
        ...

    def close(self) -> None:
        ...


def describe_unloaded(settings: Settings, load_error: str | None) -> dict:
    """`describe()` while no backend is loaded (loading, or it failed): the configured one, with the load error."""
    local = settings.engine == "local"
    return {"kind": "local" if local else "remote", "url": None if local else settings.engine,
            "healthy": False, "last_error": load_error}


def nothing_written() -> Completion:
    """The completion a backend returns for what it cannot do: no text, ended by the model."""
    return Completion(text="", outcome="completed", finish_reason="eos")


def resolved(value) -> Future:
    """A future that is already done: what a backend that cannot do something returns."""
    future: Future = Future()
    future.set_result(value)
    return future


class _Converted(Future):
    """A future that cancels as its source does: only while the source has not started (a running request is
    stopped by its CancelToken, and its result still arrives, to be counted)."""

    def __init__(self, source: Future) -> None:
        super().__init__()
        self._source = source

    def cancel(self) -> bool:
        return self._source.cancel()  # the source's done callback cancels this one


def converted(source: Future, convert: Callable[[Any], Any]) -> Future:
    """A future of convert(source's result), cancelled when and only when the source is."""
    out = _Converted(source)

    def done(f: Future) -> None:
        if f.cancelled():
            Future.cancel(out)
            return
        try:
            error = f.exception()
            value = None if error is not None else convert(f.result())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
            error = exc
        out.set_exception(error) if error is not None else out.set_result(value)
    source.add_done_callback(done)
    return out
