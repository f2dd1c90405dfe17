"""The remote backend: completions from an OpenAI-compatible server (vLLM, llama-server) over /v1/completions.

RemoteCompleter implements backend.CompletionBackend, as completer.Completer does for the local engine, so the
scheduler, type-through cache, post-processing and telemetry do not know which backend runs; it does no background
work (no prefill, growth or next line: supports_prefill and supports_next_line are False). It builds the prompt;
remote_endpoint.RemoteBackend sends it (streaming, retries, cancel, health).

The prompt goes as token ids when the pair's tokenizer.json is here (`codecue-models fetch`): user text encoded with
special-token strings split (`<|fim_prefix|>` typed in a file is ordinary text), each template marker as its one
special id, the ids the local engine would use (Engine.encode_prompt). /v1/completions takes `"prompt": [ids]`
(llama-server, vLLM); the engine's /tokenize is asked once for a probe's ids first (vocabulary_probe), and an engine
whose ids differ gets the prompt as text instead (RemotePrepared.text). Without the tokenizer the prompt is one
string with the markers written out; the server tokenizes it with special tokens on (which the markers need), so
marker strings inside the user's own text also become control tokens there (llama-server has no split-special
option), and a warning says so once.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Callable, Sequence

from engine.decode.prompt_ids import encode_pieces
from engine.types import CancelToken

from .backend import BackendStats, Completion, CompletionBackend, Health, nothing_written, resolved
from .config import Settings
from .postprocess import make_stop_predicate, postprocess
from .prompt import Layouts, OpenDocument, SyntaxCache, budget_for, build_prompt
from .prompt.sizing import context_total
from .prompt.sizing import DEFAULT_TOTAL, prompt_total
from .remote_endpoint import RemoteBackend, RemotePrepared
from .remote_server import VocabularyProbe

logger = logging.getLogger(__name__)

# Without the pair's tokenizer files, prompt budgets count tokens as characters / 3.5: code averages 3-4 characters
# per token with the Qwen2.5 / Llama BPE vocabularies, and counting a little high keeps the prompt inside the window.
CHARS_PER_TOKEN = 3.5


def render_prompt(pieces: Sequence[tuple[str, str]]) -> str:
    """The pieces as one string, markers written out (the remote server turns them into special tokens)."""
    return "".join(value for _kind, value in pieces)


class PromptEncoder:
    """The pair's tokenizer.json (the `tokenizers` library: no torch, no transformers in the server process) giving
    the prompt ids Engine.encode_prompt gives. engine/engine.py's method needs an Engine (torch, a loaded pair), so
    its rule is mirrored here, and tests/test_remote_units.py checks both give the same ids on the same prompts."""

    def __init__(self, tokenizer, markers: Sequence[str], name: str) -> None:
        # Same as transformers' split_special_tokens=True: special-token strings in user text are ordinary text.
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer
        self.lock = threading.Lock()  # a Rust tokenizer object must not be used from two threads at once
        self.special = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()
                        if token.special}
        self.name = name
        for marker in markers:  # a template the tokenizer cannot express is refused at load, as the engine does
            if marker:
                self.special_token_id(marker)

    def encode(self, text: str) -> list[int]:
        with self.lock:
            return self.tokenizer.encode(text, add_special_tokens=False).ids

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def special_token_id(self, marker: str) -> int:
        if marker not in self.special:
            raise ValueError(f"prompt marker {marker!r} is not one special token of the {self.name} tokenizer: "
                             f"fix the model's [fim] template in models.toml")
        return self.special[marker]

    def encode_prompt(self, pieces: Sequence[tuple[str, str]]) -> list[int]:
        """The engine's rule (engine/decode/prompt_ids.py), with this process's torch-free tokenizer."""
        return encode_pieces(pieces, self.encode, self.special_token_id)


class RemoteCompleter(CompletionBackend):
    """The remote backend over a RemoteBackend: the local one's prompt builder and post-processing, no background
    work, no lookup index, no sessions to forget (the endpoint keeps its own prompt cache)."""

    kind = "remote"
    supports_prefill = False
    supports_next_line = False  # every request costs the endpoint; nothing is written ahead
    indexes_workspace = False
    # One suggestion per request: a greedy endpoint's n > 1 gives the same text n times, and an alternative from a
    # next-best first token would cost a request per alternative on a shared server.
    supports_alternatives = False

    def __init__(self, backend: RemoteBackend, fim, count_tokens: Callable[[str], int],
                 syntax: SyntaxCache | None = None, encoder: PromptEncoder | None = None) -> None:
        self.engine = backend
        self.fim = fim
        self.count_tokens = count_tokens
        self.syntax = syntax
        self.encoder = encoder
        self.layouts = Layouts()  # llama-server's cache_prompt reuses the prompt's start too

    def prepare(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                other_docs: Sequence[OpenDocument] = (), project=None) -> RemotePrepared:
        # Always the plain PSM split: a serving engine cannot heal the last token (engine/decode/healing.py), and
        # unhealed the line split completes badly (docs/performance.md#decisions-and-what-retired-them).
        total = self.prompt_tokens(settings)
        built = build_prompt(doc, line, character_utf16, self.fim, self.count_tokens, other_docs=other_docs,
                             budget=budget_for(total, context=context_total(settings, total)), syntax=self.syntax,
                             previous=self.layouts.get(doc.uri), project=project)
        self.layouts.remember(built.layout)
        text = render_prompt(built.pieces)
        prompt = self.encoder.encode_prompt(built.pieces) if self.encoder else text
        return RemotePrepared(built=built, prompt=prompt, max_tokens=settings.max_tokens,
                              stop=make_stop_predicate(built), text=text)

    def prompt_tokens(self, settings: Settings) -> int:
        """"auto" is the default here: a serving engine's prefill rate is not measured (GPUs prefill it in ms)."""
        return prompt_total(settings.prompt_tokens, DEFAULT_TOTAL)

    def cold_prompt_tokens(self, settings: Settings) -> None:
        return None  # prompts start at the full size: the endpoint's prefill is fast

    def submit(self, prepared: RemotePrepared, token: CancelToken,
               on_text: Callable[[str], None] | None = None) -> Future[Completion]:
        return self.engine.submit(prepared, token, on_text)

    def alternative(self, prepared: RemotePrepared, rank: int, token: CancelToken) -> Future[Completion]:
        return resolved(nothing_written())  # supports_alternatives is False

    def finish(self, prepared: RemotePrepared, completion: Completion) -> str:
        return postprocess(completion.text, prepared.built)

    def complete(self, prepared: RemotePrepared, token: CancelToken | None = None) -> tuple[str, Completion]:
        completion = self.engine.complete(prepared, token or CancelToken())
        return self.finish(prepared, completion), completion

    # --- no background work: supports_prefill is False ---------------------------------------------------------
    def prefill(self, prepared: RemotePrepared, token: CancelToken) -> Future[int]:
        return resolved(0)

    def prepare_growth(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                       other_docs: Sequence[OpenDocument] = (), project=None) -> None:
        return None

    def grow(self, prepared: RemotePrepared, token: CancelToken) -> Future[int]:
        return resolved(0)

    def take_growth(self, prepared: RemotePrepared) -> None:
        pass

    # --- documents: the endpoint keeps no index and no sessions of ours -----------------------------------------
    def update_workspace(self, key: str, text: str | None) -> None:
        pass

    def forget(self, uri: str) -> None:
        pass

    # --- state ----------------------------------------------------------------------------------------------
    def stats(self) -> BackendStats:
        return BackendStats()

    def health(self) -> Health:
        return Health(self.engine.health.healthy, self.engine.health.last_error)

    def describe(self) -> dict:
        return self.engine.info()

    def watch_health(self, show: Callable[[str], None]) -> None:
        self.engine.on_unhealthy = show

    def close(self) -> None:
        self.engine.close()


def fim_markers(fim) -> list[str]:
    return [fim.prefix, fim.suffix, fim.middle, fim.file_sep or "", fim.repo_name or ""]


def load_prompt_encoder(model, fim) -> PromptEncoder | None:
    """The model's tokenizer.json when `codecue-models fetch` has put it here (or, for a models.toml entry with
    `path`, in the user's own model directory), else None. model: a ModelSpec, or a name in the cache."""
    from engine.store.config import model_dir

    path = model_dir(model) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return PromptEncoder(Tokenizer.from_file(str(path)), fim_markers(fim), getattr(model, "name", model))


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


# Markers around code with non-ASCII text: an engine of another vocabulary tokenizes it differently.
PROBE_CODE = "def größe(x):\n    return x  # 数字 → ✓\n"


def vocabulary_probe(encoder: PromptEncoder, fim) -> VocabularyProbe:
    """The probe the endpoint's /tokenize must give the same ids for before token-id prompts are trusted there."""
    pieces = [("special", fim.prefix), ("text", PROBE_CODE), ("special", fim.suffix), ("text", "\n"),
              ("special", fim.middle)]
    return VocabularyProbe(render_prompt(pieces), tuple(encoder.encode_prompt(pieces)), encoder.name)


def build_remote_completer(settings: Settings, syntax: SyntaxCache | None = None) -> RemoteCompleter:
    """The pair's target family gives the FIM template (models.toml) and the tokenizer for budgets and prompt ids;
    no weights load. The served model must share that tokenizer (true within a family: Qwen2.5-Coder 0.5B..32B)."""
    from engine.store.config import load_config

    target = load_config().pair(settings.pair).target
    fim = target.fim
    encoder = load_prompt_encoder(target, fim)
    if encoder is not None:
        count = encoder.count_tokens
        logger.info("remote engine %s: %s FIM template, prompt sent as token ids of the %s tokenizer",
                    settings.engine, fim.prefix, target.name)
    else:
        count = estimate_tokens
        logger.warning("remote engine %s: no tokenizer for %s here (`codecue-models fetch` puts it there), so the "
                       "prompt goes as text and marker strings in user text (e.g. %s in a file) cannot be protected: "
                       "the server reads them as control tokens; prompt tokens estimated at %s characters per token",
                       settings.engine, target.name, fim.prefix, CHARS_PER_TOKEN)
    backend = RemoteBackend(settings.engine, model=settings.remote_model, api_key_env=settings.api_key_env,
                            connect_timeout_s=settings.remote_connect_timeout_s,
                            read_timeout_s=settings.remote_read_timeout_s, deadline_s=settings.remote_deadline_s,
                            stop=fim_markers(fim), stop_token_ids=target.stop_token_ids,
                            server=settings.remote_server, ca_bundle=settings.remote_ca_bundle,
                            headers_env=settings.remote_headers_env, count_tokens=count,
                            probe=vocabulary_probe(encoder, fim) if encoder is not None else None)
    return RemoteCompleter(backend, fim, count, syntax, encoder)
