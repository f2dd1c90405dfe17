"""A vnni model in fp32 with a format cache starts from a bf16 skeleton (engine/loading/pair.load_model): ~3 GB less at
the peak of a start for the 1.5B. What it ends up as must be exactly what the fp32 start gives."""
from __future__ import annotations

import pytest
import torch
import transformers

from engine.decode.kvcache import TrackedCache
from engine.loading.pair import load_model
from engine.store.config import cache_dir, load_config, model_dir
from engine.testing import build_tiny_model, build_tiny_pair
from engine.weights.formats import format_cache_file


@pytest.fixture
def bf16_tiny_target(tmp_path, engine_options):
    """The tiny target saved in bf16, as `codecue-models fetch` saves every model; returns (spec, home)."""
    home, toml = build_tiny_pair(tmp_path)
    engine_options(home=home, models_toml=toml)
    spec = load_config().pair("tiny").target
    original = build_tiny_model(transformers.AutoConfig.from_pretrained(model_dir(spec, home)).vocab_size, 2, 0)
    original.to(torch.bfloat16).save_pretrained(model_dir(spec, home))
    return spec, home


def loaded_dtypes(monkeypatch) -> list:
    """The dtype of every from_pretrained call from here on."""
    calls = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs.get("dtype"))
        return real(*args, **kwargs)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    return calls


def assert_same_model(a, b):
    state_a = {**dict(a.named_parameters()), **dict(a.named_buffers())}
    state_b = {**dict(b.named_parameters()), **dict(b.named_buffers())}
    assert state_a.keys() == state_b.keys()
    assert any(name.endswith("prefill_weight") for name in state_a)  # the int8 prefill copies are compared too
    for name, tensor in state_a.items():
        assert tensor.dtype == state_b[name].dtype and torch.equal(tensor, state_b[name]), name
    assert a.config.dtype == b.config.dtype == torch.float32
    ids = torch.randint(10, 300, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    outs = []
    for model in (a, b):
        cache = TrackedCache(model)
        with torch.inference_mode():
            outs.append((cache.forward(ids[:32]), cache.forward(ids[32:33]), cache.forward(ids[33:37])))
    for got, want in zip(*outs):
        assert torch.equal(got, want)


def test_a_cached_vnni_start_from_a_bf16_skeleton_equals_the_fp32_start(bf16_tiny_target, monkeypatch):
    spec, home = bf16_tiny_target
    calls = loaded_dtypes(monkeypatch)
    first = load_model(spec, "cpu", torch.float32, home, "vnni", prefill_dense=True)  # builds the cache
    assert format_cache_file(cache_dir(spec, home), "vnni", torch.float32).is_file()
    second = load_model(spec, "cpu", torch.float32, home, "vnni", prefill_dense=True)
    assert calls == [torch.float32, torch.bfloat16]
    assert_same_model(first, second)


def test_an_unusable_cache_under_a_skeleton_starts_again_in_fp32(bf16_tiny_target, monkeypatch):
    spec, home = bf16_tiny_target
    reference = load_model(spec, "cpu", torch.float32, home, "vnni", prefill_dense=True)
    cached = format_cache_file(cache_dir(spec, home), "vnni", torch.float32)
    cached.write_bytes(b"half-written")
    calls = loaded_dtypes(monkeypatch)
    again = load_model(spec, "cpu", torch.float32, home, "vnni", prefill_dense=True)
    assert calls == [torch.bfloat16, torch.float32]  # the skeleton, then the fp32 weights the cache is rebuilt from
    assert cached.stat().st_size > 1000
    assert_same_model(reference, again)


def test_models_saved_in_fp32_never_start_from_a_skeleton(tmp_path, monkeypatch, engine_options):
    home, toml = build_tiny_pair(tmp_path)  # the tiny pair's own files are fp32
    engine_options(home=home, models_toml=toml)
    spec = load_config().pair("tiny").target
    calls = loaded_dtypes(monkeypatch)
    for _ in range(2):
        load_model(spec, "cpu", torch.float32, home, "vnni", prefill_dense=True)
    assert calls == [torch.float32, torch.float32]
