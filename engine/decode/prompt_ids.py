"""A prompt given as pieces, turned into token ids: one rule for the local engine and the remote backend.

Pieces are ("text", string) and ("special", marker), in order. Adjacent text pieces are encoded together (a token may
span two of them), so the ids are those of the same prompt written as one string with the markers recognised; each
marker is its one special token. `encode` must treat special-token strings in user text as ordinary text.
Torch-free: the remote backend's process never imports torch.
"""
from __future__ import annotations

from typing import Callable, Iterable


def encode_pieces(pieces: Iterable[tuple[str, str]], encode: Callable[[str], list[int]],
                  special_token_id: Callable[[str], int]) -> list[int]:
    ids: list[int] = []
    text = ""
    for kind, value in pieces:
        if kind == "text":
            text += value
        elif kind == "special":
            ids += encode(text) + [special_token_id(value)]
            text = ""
        else:
            raise ValueError(f"unknown prompt piece kind {kind!r} (\"text\" or \"special\")")
    return ids + encode(text)
