"""Remote engines' token log probabilities: asked of vLLM and llama-server (`logprobs: 1`), parsed in both formats,
and turned into the suggestion's confidence (None where none come back: no gate)."""
from __future__ import annotations

import math

import pytest
from fake_engine import ANSWER, TOKEN_LOGPROB, FakeEngine
from test_remote_vllm import backend_for, prepared

from codecue_lsp.remote_server import token_logprobs
from engine.types import CancelToken

# ANSWER's tokens up to the first line's end: "return", " a", " +", " b", "\n"
FIRST_LINE_TOKENS = 5


@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
def test_vllm_and_llama_server_are_asked_for_logprobs_and_give_the_confidence(kind):
    with FakeEngine(kind) as fake:
        result = backend_for(fake, server=kind, model="m").complete(prepared(), CancelToken())
    assert result.text == ANSWER
    assert fake.completions()[0].body["logprobs"] == 1
    assert result.confidence == pytest.approx(math.exp(TOKEN_LOGPROB * FIRST_LINE_TOKENS))


def test_an_unknown_openai_server_is_not_asked_and_gives_no_confidence():
    with FakeEngine("openai") as fake:
        result = backend_for(fake, model="m").complete(prepared(), CancelToken())
    assert result.text == ANSWER and "logprobs" not in fake.completions()[0].body
    assert result.confidence is None


# (one streamed choice, the (token, logprob) pairs read from it)
CHOICES = [
    ({"text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.0]}}, [("a", -0.5), ("b", -1.0)]),
    ({"text": "a", "logprobs": {"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]}}, [("a", -0.5)]),
    ({"text": "a", "logprobs": None}, []),
    ({"text": "a"}, []),
    ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [None]}}, [("a", None)]),
    ({"text": "a", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0]}}, []),  # lengths differ: unusable
    ({"text": "a", "logprobs": {"content": [{"token": "a", "logprob": "x"}, "junk"]}}, [("a", None)]),
]


@pytest.mark.parametrize("choice,expected", CHOICES)
def test_token_logprobs_formats(choice, expected):
    assert token_logprobs(choice) == expected
