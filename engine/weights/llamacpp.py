"""llama.cpp's kernels behind CodeCue's own decode loop: weight format "llamacpp".

The GGUF is loaded once by llama.cpp (through llama-cpp-python's C API, `llama_cpp.llama_cpp`); every session gets
one sequence of a shared context, and `LlamaCppCache` gives the loop the same interface as `kvcache.TrackedCache`:
`ids`, `forward(new_ids, logits)`, `truncate`, `reuse_prefix`, `extend_to`. So drafting, verification, the
policy and cancellation run unchanged, on llama.cpp's kernels, faster than torch's int4 kernel (docs/performance.md,
"Weight formats"). Lossless is relative to this format: the speculative output equals this model decoding alone.

Cancel: llama.cpp asks an abort callback between graph nodes. A Python callback there would take the GIL hundreds
of times per pass, so the callback is libc's `strlen` over a two-byte flag buffer (a C function that returns
non-zero exactly when the first byte is set). The request's CancelToken sets that byte the moment it is set (a
listener), so nothing polls: an extra runnable thread costs the two compute threads of a 2-core machine dearly. Other
`cancelled` callables are asked before each pass only. An aborted pass keeps the ubatches it finished: the sequence
is cut back to `ids`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from collections import deque
from pathlib import Path

import numpy as np
import torch

from engine.interrupt import PassCancelled
from engine.types import CancelToken
from engine.weights.prefill_plan import common_prefix_length, prefill_pieces
from engine.weights.torch_prefill import (
    HANDOFF_MIN_TOKENS,
    HandoffUnsupported,
    handoff_prefill,
)

log = logging.getLogger(__name__)

PIP_REQUIREMENT = "llama-cpp-python==0.3.36"  # verified; vendors llama.cpp 0c1e57098, as the peer build
N_CTX_PER_SEQUENCE = 4096  # prompts are budgeted well below this (codecue_lsp settings)
N_SEQUENCES = 6  # live caches per model: the engine's 4 sessions, its spare (codecue_lsp/growth.py), a one-off request
N_BATCH = 512  # tokens per llama_decode call: prefill chunks are cut to this
# Prefill chunk: 64-512 tokens prefill within noise of each other on 2 Zen 4 cores; a cancel stops a chunk between
# graph nodes anyway, and between chunks a plain `cancelled()` is asked.
# A chunk inside the prompt part the next request shares ends even when cancelled, unless the next request does not
# share it (prefill_plan.prefill_pieces, SharedPasses); so the chunk bounds how long a cancel with no next request
# keeps the engine busy: on a slow CPU (an AVX2-only Zen 3) a 128-token chunk takes seconds. The loader sizes the chunk
# from the calibrated prefill rate (`prefill_chunk_for`): at most CHUNK_SECONDS. Smaller chunks cost efficiency: on
# that Zen 3 every smaller chunk prefilled slower (docs/performance.md, "Drafting modes and switches"); so only a CPU
# slower than that one gets chunks under 128 tokens.
PREFILL_CHUNK = 128
MIN_PREFILL_CHUNK = 16
CHUNK_SECONDS = 3.0


def prefill_chunk_for(tok_s: float, pinned: int | None = None) -> int:
    """Tokens per prefill pass at this measured rate: the largest power-of-two chunk from PREFILL_CHUNK down that
    takes at most CHUNK_SECONDS, never below MIN_PREFILL_CHUNK. pinned (EngineOptions.prefill_chunk, set by
    CODECUE_PREFILL_CHUNK or `codecue-lsp --prefill-chunk`) overrides it."""
    if pinned is not None:
        return max(1, pinned)
    chunk = PREFILL_CHUNK
    while chunk > MIN_PREFILL_CHUNK and tok_s > 0 and chunk / tok_s > CHUNK_SECONDS:
        chunk //= 2
    return chunk


def available() -> bool:
    """llama-cpp-python is installed and its library loads."""
    try:
        _lib()
        return True
    except (ImportError, OSError):
        return False


def _lib():
    import llama_cpp.llama_cpp as lib  # the C API only: no high-level Llama object, no chat templates

    return lib


_backend_ready = False
_backend_lock = threading.Lock()


def _init_backend(lib) -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            _quiet_logs(lib)
            lib.llama_backend_init()
            _backend_ready = True


# llama.cpp's own messages go to the debug log: it logs every tensor at load, and every cancelled pass as a failed
# decode (expected here). Its last warnings and errors are kept to explain a file it refuses to load.
_recent_problems: deque[str] = deque(maxlen=4)


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _log_callback(level, text, user_data):
    if not text or not text.strip():
        return
    message = text.decode("utf-8", "replace").rstrip()
    if level in (3, 4):  # ggml_log_level: 3 warn, 4 error (5 continues a line)
        _recent_problems.append(message)
    log.debug("llama.cpp: %s", message)


def _quiet_logs(lib) -> None:
    lib.llama_log_set(_log_callback, ctypes.c_void_p(0))


_strlen = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").strlen


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class LlamaCppModel:
    """One GGUF in llama.cpp: the weights, a context whose sequences are the sessions' caches, one batch buffer."""

    def __init__(self, path: Path | str, n_threads: int | None = None, n_ctx_per_sequence: int = N_CTX_PER_SEQUENCE,
                 n_sequences: int = N_SEQUENCES, label: str = "model", extra_buffers: bool = False):
        """extra_buffers: load into llama.cpp's extra buffer types (repacked weights, AMX); the loader asks
        engine/weights/llamacpp_probe.py whether they run on this machine."""
        lib = self.lib = _lib()
        _init_backend(lib)
        self.path, self.label = Path(path), label
        self.extra_buffers = extra_buffers
        params = lib.llama_model_default_params()
        params.use_extra_bufts = extra_buffers
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            raise ValueError(f"llama.cpp could not load {self.path} ({'; '.join(_recent_problems) or 'no reason given'})")
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        threads = n_threads or default_threads()
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx_per_sequence * n_sequences
        cparams.n_seq_max = n_sequences
        cparams.kv_unified = False  # each sequence its own n_ctx_per_sequence cells: one session cannot starve another
        cparams.n_batch = cparams.n_ubatch = N_BATCH
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = True
        self._abort_flag = ctypes.create_string_buffer(2)
        cparams.abort_callback = lib.ggml_abort_callback(ctypes.cast(_strlen, ctypes.c_void_p).value)
        cparams.abort_callback_data = ctypes.cast(self._abort_flag, ctypes.c_void_p)
        self._abort_callback = cparams.abort_callback  # keep the ctypes object alive as long as the context
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ValueError(f"llama.cpp could not create a context for {self.path}")
        self.memory = lib.llama_get_memory(self.ctx)
        self.capacity = lib.llama_n_ctx_seq(self.ctx)
        self.batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self._all_sequences = list(range(n_sequences))
        self._free_sequences = self._all_sequences[::-1]
        self._sequences_lock = threading.Lock()
        self._pass_id = 0  # which pass an abort is for: a token set late must not stop the next request's pass
        self._pass_lock = threading.Lock()
        # engine/weights/torch_prefill.TorchPrefill: prompt extensions of at least torch_prefill_from new tokens run
        # there and their keys/values are handed over (set by the loader where the calibration measured it faster).
        self.torch_prefill = None
        self.torch_prefill_from = HANDOFF_MIN_TOKENS
        self.prefill_chunk = PREFILL_CHUNK  # set by the loader from the calibrated prefill rate (prefill_chunk_for)

    # --- what the engine asks of a model -----------------------------------------------------------------------------
    def new_cache(self) -> "LlamaCppCache":
        return LlamaCppCache(self)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    # --- sequences -------------------------------------------------------------------------------------------------
    def take_sequence(self) -> int:
        """A free sequence, emptied here: on the thread that will run its passes (a context is not thread-safe)."""
        with self._sequences_lock:
            if not self._free_sequences:
                raise RuntimeError(f"llama.cpp {self.label}: all {len(self._all_sequences)} sequences are in use")
            seq = self._free_sequences.pop()
        self.lib.llama_memory_seq_rm(self.memory, seq, -1, -1)
        return seq

    def give_back_sequence(self, seq: int) -> None:
        """Called from a cache's __del__, on whatever thread dropped it last: no llama.cpp call here."""
        with self._sequences_lock:
            self._free_sequences.append(seq)

    def remove_from(self, seq: int, position: int) -> None:
        """Drop the sequence's keys and values at position and after."""
        self.lib.llama_memory_seq_rm(self.memory, seq, position, -1)

    # --- one pass --------------------------------------------------------------------------------------------------
    def decode(self, seq: int, start: int, tokens: list[int], outputs: str, cancelled=None) -> np.ndarray | None:
        """Run tokens at positions start.. of sequence seq. outputs: "all" | "last" | "none". Returns the logits
        [outputs, vocab] (a copy), or None. Raises PassCancelled (the caller cuts the sequence back)."""
        n = len(tokens)
        if n > N_BATCH:
            raise ValueError(f"llama.cpp pass of {n} tokens: at most {N_BATCH}")
        b = self.batch
        b.n_tokens = n
        for i, token in enumerate(tokens):
            b.token[i] = token
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = outputs == "all" or (outputs == "last" and i == n - 1)
        status = self._run(b, cancelled)
        if status == 2:
            raise PassCancelled
        if status != 0:
            raise RuntimeError(f"llama.cpp {self.label}: llama_decode returned {status} for {n} tokens at position "
                               f"{start} (1: no room in the context of {self.capacity} tokens)")
        if outputs == "none":
            return None
        rows = n if outputs == "all" else 1
        logits = np.ctypeslib.as_array(self.lib.llama_get_logits(self.ctx), shape=(rows, self.n_vocab))
        return logits.copy()

    def _run(self, batch, cancelled) -> int:
        if cancelled is not None and cancelled():
            return 2
        token = getattr(cancelled, "__self__", None)
        listens = isinstance(token, CancelToken)
        with self._pass_lock:
            self._pass_id += 1
            this_pass = self._pass_id
            self._abort_flag[0] = b"\0"

        def abort() -> None:
            with self._pass_lock:
                if self._pass_id == this_pass:
                    self._abort_flag[0] = b"\1"

        if listens:
            token.add_listener(abort)
        try:
            return self.lib.llama_decode(self.ctx, batch)
        finally:
            with self._pass_lock:
                self._pass_id += 1
            if listens:
                token.remove_listener(abort)

    def close(self) -> None:
        if getattr(self, "ctx", None) is not None:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = None


class LlamaCppCache:
    """One session's keys and values: a sequence of the model's llama.cpp context, plus the token ids it holds."""

    def __init__(self, model: LlamaCppModel):
        self.model = model
        self.seq = model.take_sequence()
        self.ids: list[int] = []

    def __del__(self):
        seq, self.seq = getattr(self, "seq", None), None
        if seq is not None:
            self.model.give_back_sequence(seq)

    def truncate(self, length: int) -> None:
        if len(self.ids) > length:
            self.model.remove_from(self.seq, length)
            del self.ids[length:]

    def forward(self, new_ids: list[int], logits: str = "all", cancelled=None) -> torch.Tensor | None:
        """As TrackedCache.forward: logits "all" -> [len, vocab], "last" -> [1, vocab], "none" -> None (fp32)."""
        if len(self.ids) + len(new_ids) > self.model.capacity:
            raise RuntimeError(f"llama.cpp {self.model.label}: {len(self.ids) + len(new_ids)} tokens do not fit the "
                               f"{self.model.capacity}-token context of a session")
        out = None
        try:
            for start in range(0, len(new_ids), N_BATCH):
                piece = new_ids[start:start + N_BATCH]
                last_piece = start + N_BATCH >= len(new_ids)
                wanted = logits if last_piece else ("none" if logits == "last" else logits)
                rows = self.model.decode(self.seq, len(self.ids), piece, wanted, cancelled)
                self.ids.extend(piece)
                if rows is not None:
                    out = rows if out is None else np.concatenate([out, rows])
        except BaseException:
            self.model.remove_from(self.seq, len(self.ids))  # an aborted pass keeps its finished ubatches
            raise
        return None if out is None else torch.from_numpy(out)

    def reuse_prefix(self, ids: list[int]) -> int:
        keep = common_prefix_length(self.ids, ids)
        self.truncate(keep)
        return keep

    def extend_to(self, ids: list[int], chunk: int | None = None, cancelled=lambda: False,
                  shared: int = 0, finishing=None) -> tuple[int, int]:
        """As TrackedCache.extend_to, in chunks of the model's `prefill_chunk` tokens; through the model's torch
        prefill when it has one and at least `torch_prefill_from` tokens are new."""
        chunk = chunk or self.model.prefill_chunk
        reused = self.reuse_prefix(ids)
        helper = self.model.torch_prefill
        if helper is not None and len(ids) - reused >= self.model.torch_prefill_from:
            try:
                handoff_prefill(self, helper, ids, cancelled, shared, finishing)
                return reused, len(self.ids) - reused
            except PassCancelled:
                return reused, len(self.ids) - reused
            except HandoffUnsupported as exc:
                log.warning("torch prefill off for %s: %s", self.model.label, exc)
                self.model.torch_prefill = None
        for start, stop, stop_when in prefill_pieces(len(self.ids), len(ids), chunk, shared, cancelled, finishing):
            if cancelled():
                break
            try:
                self.forward(ids[start:stop], logits="none", cancelled=stop_when)
            except PassCancelled:
                break
        log.debug("llama.cpp prefill seq %d: %d reused, %d of %d new", self.seq, reused, len(self.ids) - reused,
                  len(ids) - reused)
        return reused, len(self.ids) - reused

