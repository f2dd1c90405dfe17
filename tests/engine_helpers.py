"""Shared pieces for the engine tests: tiny fp32 pairs built in memory, references computed without any cache,
and drafters that are always right, always wrong or random."""
from __future__ import annotations

import random
from functools import lru_cache

import torch

from engine import Engine
from engine.decode.drafters import Draft
from engine.loading.pair import LoadedPair
from engine.store.config import FimTemplate, ModelSpec, PairSpec
from engine.testing import build_tiny_model, build_tokenizer

# Tiny models run fastest on one thread, and the test machine's two cores are shared with other test processes.
torch.set_num_threads(1)

STOP_IDS = (0, 1, 2, 3, 4, 5, 6, 7)  # the tiny tokenizer's special tokens


def kernel_marches() -> list[str]:
    """The builds of the vnni extension this CPU can run, one per vector path (engine/weights/vnni.py:
    runnable_marches): tests parametrized over them run every path this CPU has, not only its native one."""
    from pathlib import Path

    from engine.weights import vnni

    cpuinfo = Path("/proc/cpuinfo")
    return vnni.runnable_marches(cpuinfo.read_text().split() if cpuinfo.exists() else ())


@lru_cache(maxsize=None)
def tiny_tokenizer():
    return build_tokenizer()


@lru_cache(maxsize=None)
def tiny_model(layers: int, seed: int):
    return build_tiny_model(len(tiny_tokenizer()), layers, seed)


def tiny_pair(draft: str = "random") -> LoadedPair:
    """draft: "random" (an unrelated tiny model), "same" (the target itself: every draft is right) or "none"."""
    target = tiny_model(2, 0)
    draft_model = {"random": lambda: tiny_model(1, 1), "same": lambda: target, "none": lambda: None}[draft]()
    fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    spec = ModelSpec(name="tiny-target", family="tiny", fim=fim, stop_token_ids=STOP_IDS)
    return LoadedPair(spec=PairSpec("tiny", spec, spec if draft_model is not None else None), target=target,
                      draft=draft_model, tokenizer=tiny_tokenizer(), device=torch.device("cpu"),
                      dtype=torch.float32)


def tiny_engine(draft: str = "random") -> Engine:
    return Engine(tiny_pair(draft))


def random_prompt(seed: int, length: int = 48, repeat: bool = False) -> list[int]:
    """Token ids that avoid the special tokens. repeat=True makes the prompt repeat itself so lookup drafts hit."""
    rng = random.Random(seed)
    vocab = len(tiny_tokenizer())
    ids = [rng.randrange(len(STOP_IDS), vocab) for _ in range(length)]
    return ids + ids[: length // 2] if repeat else ids


@torch.inference_mode()
def reference_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Target-alone greedy decoding with a full forward pass per token and no KV cache: the ground truth."""
    ids = list(prompt)
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        token = int(torch.argmax(logits))
        if token in STOP_IDS:
            break
        out.append(token)
        ids.append(token)
    return out


class ReferenceDrafter:
    """Drafts from the target's own greedy choices (computed without cache), optionally made wrong on purpose."""

    def __init__(self, model, mode: str, seed: int = 0):
        self.model, self.mode, self.rng = model, mode, random.Random(seed)

    def propose(self, tokens: list[int], k: int, cancelled, finishes=None) -> Draft:
        vocab = self.model.config.vocab_size
        if self.mode == "random":
            drafted = [self.rng.randrange(vocab) for _ in range(k)]
        else:
            right = reference_greedy_raw(self.model, tokens, k)
            drafted = right if self.mode == "right" else [(t + 1) % vocab for t in right]
        return Draft(tokens=drafted, probs=[None] * len(drafted), source=self.mode)


@torch.inference_mode()
def reference_greedy_raw(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1])))
    return ids[len(prompt):]
