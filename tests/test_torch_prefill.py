"""Prefill in torch, decode in llama.cpp (engine/weights/torch_prefill.py, engine/weights/kv_handoff.py), on tiny random
Qwen2 models written as F32 GGUF files: the handed-over keys and values must make llama.cpp compute what its own
prefill makes it compute, and speculation must stay exact against target alone with the handoff in place."""
import numpy as np
import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pyproject pins it; `make venv`)")

from engine_helpers import STOP_IDS, random_prompt, tiny_model, tiny_tokenizer  # noqa: E402

from engine import CancelToken, CompletionRequest, Engine  # noqa: E402
from engine.calibration import llamacpp_timing as calibrate_llamacpp  # noqa: E402
from engine.loading.pair import LoadedPair
from engine.store.config import FimTemplate, ModelSpec, PairSpec  # noqa: E402
from engine.testing import write_gguf  # noqa: E402
from engine.weights import kv_handoff, torch_prefill
from engine.weights.llamacpp import LlamaCppCache, LlamaCppModel  # noqa: E402
from engine.weights.torch_prefill import Qwen2Shape, TorchPrefill  # noqa: E402


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    torch_model = tiny_model(2, 0)
    path = write_gguf(torch_model, tiny_tokenizer(), tmp_path_factory.mktemp("gguf") / "target.gguf")
    model = LlamaCppModel(path, n_threads=1, n_ctx_per_sequence=1024, label="target")
    yield model, torch_model
    model.close()


class CountingPrefill(TorchPrefill):
    """Counts the chunks it runs: a test of the handoff must know the handoff ran."""
    chunks = 0

    def forward_chunk(self, *args, **kwargs):
        self.chunks += 1
        return super().forward_chunk(*args, **kwargs)


def prefiller(torch_model, kind: str) -> CountingPrefill:
    return CountingPrefill(torch_model.state_dict(), Qwen2Shape.from_config(torch_model.config), kind)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch, target):
    monkeypatch.setattr(torch_prefill, "CHUNK", 32)  # several chunks per prompt
    target[0].torch_prefill_from = 8


def next_logits(cache: LlamaCppCache, ids: list[int]) -> torch.Tensor:
    cache.extend_to(ids[:-1])
    return cache.forward(ids[-1:], logits="last")[0]


def test_state_round_trip_is_byte_exact_even_out_of_slot_order(target):
    model, _ = target
    ids = random_prompt(5, length=80)
    cache = model.new_cache()
    cache.forward(ids[:60], logits="none")
    cache.truncate(20)  # frees cells in the middle of the sequence's slots; the next ones land out of order
    cache.forward(ids[20:70], logits="none")
    blob = kv_handoff.read_state(model, cache.seq)
    kv = kv_handoff.parse_state(blob)
    assert list(kv.positions) == list(range(70))
    other = model.new_cache()
    kv_handoff.write_state(model, other.seq, kv_handoff.encode_state(kv.layout, other.seq, kv.keys, kv.values))
    other.ids = list(ids[:70])
    again = kv_handoff.parse_state(kv_handoff.read_state(model, other.seq))
    for a, b in zip(kv.keys + kv.values, again.keys + again.values):
        assert np.array_equal(a, b)
    assert torch.equal(cache.forward(ids[70:71], logits="last"), other.forward(ids[70:71], logits="last"))


def test_parse_refuses_what_it_does_not_know():
    with pytest.raises(kv_handoff.HandoffUnsupported):
        kv_handoff.parse_state(b"\0" * 16)


@pytest.mark.parametrize("reused", [0, 40])
def test_dense_torch_prefill_gives_llamacpps_own_next_token(target, reused):
    """fp32 weights in torch, f16 cells in llama.cpp: the same logits up to f16 rounding, from an empty sequence and
    after a reused prefix of a different earlier prompt."""
    model, torch_model = target
    ids = random_prompt(7, length=150)
    reference = next_logits(model.new_cache(), ids)
    cache = model.new_cache()
    cache.extend_to(ids[:reused] + random_prompt(8, length=30))  # the earlier prompt shares `reused` tokens
    helper = model.torch_prefill = prefiller(torch_model, "dense")
    try:
        reused_now, computed = cache.extend_to(ids[:-1])
        assert (reused_now, computed) == (reused, len(ids) - 1 - reused)
        ours = cache.forward(ids[-1:], logits="last")[0]
        assert model.torch_prefill is helper  # not switched off by a layout it could not handle
    finally:
        model.torch_prefill = None
    assert helper.chunks == -(-(len(ids) - 1 - max(reused, 1)) // torch_prefill.CHUNK) and cache.ids == ids
    assert (ours - reference).abs().max() < 0.02 * reference.abs().max()
    assert ours.argmax() == reference.argmax()


def test_w8a8_prefill_stays_close_to_llamacpps_own(target):
    model, torch_model = target
    agree = 0
    for seed in range(10):
        ids = random_prompt(20 + seed, length=100)
        reference = next_logits(model.new_cache(), ids)
        helper = model.torch_prefill = prefiller(torch_model, "w8a8")
        try:
            ours = next_logits(model.new_cache(), ids)
        finally:
            model.torch_prefill = None
        assert helper.chunks == 4 and not torch.equal(ours, reference)  # int8 rounding shows
        assert (ours - reference).abs().max() < 0.1 * reference.abs().max()
        agree += int(ours.argmax() == reference.argmax())
    assert agree >= 8


def test_a_cancel_keeps_the_chunks_that_finished(target):
    model, torch_model = target
    ids = random_prompt(9, length=120)
    model.torch_prefill = prefiller(torch_model, "dense")
    checks = {"n": 0}

    def cancelled():  # two layers per chunk: give up inside the third chunk
        checks["n"] += 1
        return checks["n"] > 8
    try:
        cache = model.new_cache()
        cache.extend_to(ids, cancelled=cancelled)
        assert len(cache.ids) == 1 + 2 * torch_prefill.CHUNK and cache.ids == ids[:len(cache.ids)]
        resumed = next_logits(cache, ids)  # the rest, uncancelled
        fresh = next_logits(model.new_cache(), ids)
    finally:
        model.torch_prefill = None
    assert torch.allclose(resumed, fresh, atol=1e-4)


@pytest.mark.parametrize("abandoned, kept_chunks", [(False, 3), (True, 2)])
def test_a_shared_chunk_ends_after_a_cancel_unless_the_next_request_abandons_it(target, abandoned, kept_chunks):
    """The handoff keeps prefill_plan.prefill_pieces' rule: a chunk of the shared prefix ends after a cancel (the
    next chunk does not start), unless `finishing` says the next request does not want it
    (engine/decode/kvcache.SharedPasses)."""
    model, torch_model = target
    ids = random_prompt(9, length=120)
    helper = model.torch_prefill = prefiller(torch_model, "dense")
    token = CancelToken()
    real_forward_chunk = helper.forward_chunk

    def forward_chunk(chunk_ids, start, keys, values, cancelled):
        if start == 1 + 2 * torch_prefill.CHUNK:
            token.set()  # a keystroke as the third chunk starts
        return real_forward_chunk(chunk_ids, start, keys, values, cancelled)
    helper.forward_chunk = forward_chunk
    try:
        cache = model.new_cache()
        cache.extend_to(ids, cancelled=token.is_set, shared=len(ids),
                        finishing=lambda stop: token.is_set if abandoned else (lambda: False))
        assert cache.ids == ids[:1 + kept_chunks * torch_prefill.CHUNK]
        resumed = next_logits(cache, ids)
        fresh = next_logits(model.new_cache(), ids)
    finally:
        model.torch_prefill = None
    assert torch.allclose(resumed, fresh, atol=1e-4)


def engine_for(model, draft_model) -> Engine:
    fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    spec = ModelSpec(name="tiny-target", family="tiny", fim=fim, stop_token_ids=STOP_IDS)
    pair = LoadedPair(spec=PairSpec("tiny", spec, spec if draft_model else None), target=model, draft=draft_model,
                      tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                      target_weights="llamacpp", draft_weights="llamacpp" if draft_model else None)
    return Engine(pair)


@pytest.mark.parametrize("drafter", ["lookup", "draft", "hybrid", "auto"])
def test_speculation_equals_target_alone_with_the_handoff(target, drafter):
    """Lossless in this format: prefill in torch (W8A8), decode in llama.cpp, every drafter gives target alone."""
    model, torch_model = target
    helper = model.torch_prefill = prefiller(torch_model, "w8a8")
    try:
        engine = engine_for(model, model)  # the target drafts for itself: long accepted runs
        for seed, repeat in ((1, False), (2, True), (3, True)):
            prompt = random_prompt(seed, length=90, repeat=repeat)
            alone = engine.complete(CompletionRequest(prompt, 24, drafter="none")).token_ids
            spec = engine.complete(CompletionRequest(prompt, 24, drafter=drafter, max_draft_tokens=4,
                                                     adaptive_k=drafter == "auto")).token_ids
            assert spec == alone
    finally:
        model.torch_prefill = None
    assert helper.chunks >= 6


def test_a_cancelled_request_leaves_the_sequence_usable(target):
    model, torch_model = target
    model.torch_prefill = prefiller(torch_model, "w8a8")
    try:
        engine = engine_for(model, None)
        prompt = random_prompt(4, length=150)
        token = CancelToken()
        token.set()
        engine.complete(CompletionRequest(prompt, 8, drafter="none"), token)
        again = engine.complete(CompletionRequest(prompt, 8, drafter="none")).token_ids
        model.torch_prefill = None
        plain = engine_for(model, None).complete(CompletionRequest(prompt, 8, drafter="none")).token_ids
    finally:
        model.torch_prefill = None
    assert len(again) == len(plain) > 0


# --- the choice: measured, never assumed ---------------------------------------------------------------------------
def llamacpp_row(prefill_tok_s: float, torch_tok_s: float, torch_from: int = 48):
    from engine.calibration.measurements import Measurement

    return Measurement("target", "llamacpp", "ggml", {w: 40.0 * w for w in (1, 2, 4, 8, 16)}, prefill_tok_s,
                       prefill_torch_tok_s=torch_tok_s, prefill_torch_from=torch_from)


@pytest.mark.parametrize("torch_tok_s,torch_from,chosen", [(0.0, 0, False), (110.0, 48, False), (200.0, 48, True),
                                                           (200.0, 0, False)])
def test_torch_prefill_is_chosen_only_where_measured_clearly_faster(torch_tok_s, torch_from, chosen):
    from engine.calibration.measurements import Calibration, choose
    from engine.calibration.report import format_table

    cal = Calibration(key={"processor": "cpu", "cpu_capability": "AVX2", "threads": 2, "torch": "x"},
                      measurements=[llamacpp_row(100.0, torch_tok_s, torch_from)])
    choice = choose(cal, ("llamacpp",), (), ("bfloat16",))
    assert choice.target_prefill_torch is chosen
    assert choice.target_prefill_torch_from == torch_from
    assert cal.measurements[0].prefill_used_tok_s == (torch_tok_s if chosen else 100.0)
    assert ("prefill in torch w8a8 from 48 new tokens" in format_table(cal, choice)) is chosen


# (seconds at 64 and 256 new tokens) llama.cpp, torch -> fewest new tokens from which torch is faster
@pytest.mark.parametrize("llama,torch_s,expected", [
    ((0.60, 2.40), (0.30, 1.20), 32),    # no dearer to start, cheaper per token: the floor
    ((0.60, 2.40), (0.80, 1.40), 96),    # dearer to start (0.6 s vs 0), cheaper per token (3.1 vs 9.4 ms): 96
    ((0.60, 2.40), (0.70, 2.50), 0),     # the same per token, dearer to start: never
    ((0.60, 2.40), (0.50, 2.60), 0),     # dearer per token: never, however cheap to start
])
def test_crossover_from_two_sizes(llama, torch_s, expected):
    assert calibrate_llamacpp.crossover(dict(zip((64, 256), llama)), dict(zip((64, 256), torch_s))) == expected


def test_the_measurement_survives_the_cache(tmp_path):
    from engine.calibration import measurements as calibrate

    cal = calibrate.Calibration(key={"k": 1}, measurements=[llamacpp_row(100.0, 187.0, 40)])
    calibrate.save(tmp_path, cal)
    row = calibrate.load_cached(tmp_path, {"k": 1}).measurements[0]
    assert (row.prefill_torch_tok_s, row.prefill_torch_from) == (187.0, 40)


def test_calibration_times_the_handoff_on_the_real_file(target, monkeypatch):
    """calibrate_llamacpp.measure with the model's config: a torch prefill with random weights of the real shapes,
    handed over to the GGUF's own llama.cpp model (the handoff must work, or the rate would be llama.cpp's own)."""
    monkeypatch.setattr(calibrate_llamacpp, "estimated_prefill_s", lambda config, tokens: 0.0)  # passes the screen
    timed = []
    real_timing = calibrate_llamacpp.time_torch_prefill
    monkeypatch.setattr(calibrate_llamacpp, "time_torch_prefill",
                        lambda *a, **k: timed.append(1) or real_timing(*a, **k))
    model, torch_model = target
    row = calibrate_llamacpp.measure("target", model.path, widths=(1, 2), context_tokens=64, prefill_tokens=96,
                                     reps=1, torch_config=torch_model.config)
    assert row.prefill_torch_tok_s > 0 and row.prefill_tok_s > 0 and timed == [1]


@pytest.mark.parametrize("llama_s,written_by_torch", [(1e9, True), (0.0, False)])
def test_the_passes_context_is_written_by_the_faster_prefill(target, llama_s, written_by_torch):
    """Where torch's prefill beat llama.cpp's, it also writes the 1,024-token context the passes are timed after (the
    keys and values it hands over are random; a pass costs the same): seconds of llama.cpp prefill saved."""
    from engine.weights.llamacpp import LlamaCppCache

    model, torch_model = target
    cache = LlamaCppCache(model)
    tokens = list(range(100, 260))
    calibrate_llamacpp.time_torch_prefill(model, cache, torch_model.config, tokens, (16, 32), context_tokens=80,
                                          faster_than={16: llama_s, 32: llama_s})
    assert len(cache.ids) == (80 if written_by_torch else 32)
    assert model.torch_prefill is None  # the random-weight prefill never stays behind


def test_the_passes_context_continues_from_the_prefills_tokens(target, monkeypatch):
    """The prefill timed last leaves its tokens in the cache, the start of the passes' context: the context is
    written on from them, not again from position 0 (seconds of the 1.5B's calibration otherwise)."""
    decoded = []  # (first position, tokens) of every llama.cpp decode call
    real_decode = LlamaCppModel.decode
    monkeypatch.setattr(LlamaCppModel, "decode", lambda self, seq, start, tokens, *a, **k: decoded.append(
        (start, len(tokens))) or real_decode(self, seq, start, tokens, *a, **k))
    model, _ = target
    calibrate_llamacpp.measure("target", model.path, widths=(1,), context_tokens=160, prefill_tokens=96, reps=1)
    context_write = next(i for i, (start, _) in enumerate(decoded) if start >= 96)
    assert decoded[context_write - 1][0] < 96  # the last prefill's pieces came just before
    after = decoded[context_write:]
    assert all(start >= 96 for start, _ in after)
    assert sum(n for start, n in after if start < 160) == 64


def test_a_torch_prefill_far_slower_here_is_screened_not_timed(target, monkeypatch):
    """On a CPU without fast int8 dot products (an AVX2-only Zen 3: `torch._int_mm` far slower than fp32) timing the
    whole torch prefill would take minutes: the screen's estimate is recorded instead, and never chosen."""
    monkeypatch.setattr(calibrate_llamacpp, "estimated_prefill_s", lambda config, tokens: 1000.0)
    monkeypatch.setattr(calibrate_llamacpp, "time_torch_prefill", lambda *a: pytest.fail("timed a screened-out one"))
    model, torch_model = target
    row = calibrate_llamacpp.measure("target", model.path, widths=(1,), context_tokens=64, prefill_tokens=96,
                                     reps=1, torch_config=torch_model.config)
    assert row.prefill_torch_from == 0 and 0 < row.prefill_torch_tok_s < 1 and not row.prefill_torch


@pytest.mark.parametrize("estimate_s,timed", [(0.75, False), (0.6, True)])
def test_the_handover_is_timed_only_where_the_estimate_promises_a_gain(target, monkeypatch, estimate_s, timed):
    """llama.cpp's own prefill of the 96 tokens takes 1 s here: an estimate of 0.75 s (optimistic, and within 1.4x)
    is recorded without timing (under the AVX2 emulation that timing took long to find no gain); 0.6 s is timed."""
    monkeypatch.setattr(calibrate_llamacpp, "best_prefill_s", lambda cache, tokens, **k: len(tokens) / 96)
    monkeypatch.setattr(calibrate_llamacpp, "estimated_prefill_s", lambda config, tokens: estimate_s * tokens / 96)
    calls = []
    monkeypatch.setattr(calibrate_llamacpp, "time_torch_prefill",
                        lambda model, cache, config, tokens, sizes, **k: calls.append(sizes) or {n: 0.5 * n / 96
                                                                                                for n in sizes})
    model, torch_model = target
    row = calibrate_llamacpp.measure("target", model.path, widths=(1,), context_tokens=64, prefill_tokens=96,
                                     reps=1, torch_config=torch_model.config)
    assert bool(calls) == timed
    if timed:
        assert calls == [(48, 96)] and row.prefill_torch_tok_s == pytest.approx(192.0)
    else:
        assert row.prefill_torch_tok_s == pytest.approx(96 / 0.75, abs=0.01) and row.prefill_torch_from == 0
        assert not row.prefill_torch


def test_the_screen_scales_one_matmul_to_every_linear_weight(target, monkeypatch):
    """estimated_prefill_s times the fused gate/up matmul once and scales it by the model's linear weights."""
    ticks = iter(range(100))
    monkeypatch.setattr(calibrate_llamacpp.time, "perf_counter", lambda: float(next(ticks)))  # one call = 1 s
    config = target[1].config
    hidden, inter, heads, kv_heads = (config.hidden_size, config.intermediate_size, config.num_attention_heads,
                                      config.num_key_value_heads)
    head_dim = hidden // heads
    per_layer = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden + 3 * hidden * inter
    expected = config.num_hidden_layers * per_layer / (2 * inter * hidden)
    assert calibrate_llamacpp.estimated_prefill_s(config, 16) == pytest.approx(expected)


@pytest.mark.parametrize("setting,calibrated,expected", [("auto", True, True), ("auto", False, False),
                                                         ("off", True, False), ("on", False, True)])
def test_the_setting_can_force_it(setting, calibrated, expected):
    assert torch_prefill.wanted(calibrated, setting) is expected


def test_attach_quantizes_once_then_reads_the_cache(target, tmp_path):
    """A checkpoint directory as `codecue-models fetch` leaves it: the first attach quantizes and writes the cache,
    the second reads it back and computes the same keys and values."""
    import copy

    model, torch_model = target
    model_dir = tmp_path / "model"
    copy.deepcopy(torch_model).to(torch.bfloat16).save_pretrained(model_dir)  # as `codecue-models fetch` converts
    cache_file = tmp_path / "formats" / "prefill-w8a8.safetensors"
    ids = random_prompt(11, length=70)
    outputs = []
    try:
        for _ in range(2):
            assert torch_prefill.attach(model, model_dir, cache_file)
            assert cache_file.is_file()
            outputs.append(next_logits(model.new_cache(), ids))
            model.torch_prefill = None
    finally:
        model.torch_prefill = None
    assert torch.equal(outputs[0], outputs[1])
    assert not torch_prefill.attach(model, tmp_path / "gguf-only", cache_file) and model.torch_prefill is None


@pytest.mark.parametrize("change", [{"model_type": "llama"}, {"use_sliding_window": True},
                                    {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                         "original_max_position_embeddings": 4096}}])
def test_architectures_it_cannot_hand_over_are_refused(target, tmp_path, change):
    """A llama-family GGUF stores q/k permuted for llama.cpp's RoPE, YaRN and sliding windows change the keys: the
    loader must leave such a model to llama.cpp (attach says False) rather than hand over wrong keys."""
    import json

    model, torch_model = target
    model_dir = tmp_path / "model"
    torch_model.save_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text()) | change
    if change.get("model_type") == "llama":
        config["architectures"] = ["LlamaForCausalLM"]
    (model_dir / "config.json").write_text(json.dumps(config))
    from transformers import AutoConfig

    loaded = AutoConfig.from_pretrained(model_dir)
    assert not torch_prefill.supports(loaded) or "model_type" not in change
    with pytest.raises(ValueError):
        Qwen2Shape.from_config(loaded)
    model.torch_prefill = None
    try:
        assert not torch_prefill.attach(model, model_dir, tmp_path / "prefill.safetensors")
        assert model.torch_prefill is None
    finally:
        model.torch_prefill = None


@pytest.mark.parametrize("v_trans", [False, True])
def test_encode_and_parse_agree_in_both_value_layouts(v_trans):
    """llama.cpp stores values transposed when flash attention is off: both layouts write and read back the same
    numbers (float32 in, the cells' float16 out), in the stream the sequence lives in."""
    layout = kv_handoff.Layout(n_stream=3, stream=1, v_trans=v_trans, n_layer=2, k_type=1, v_type=1, k_row=8, v_row=6)
    rng = np.random.default_rng(0)
    keys = [rng.standard_normal((5, 8)).astype(np.float32) for _ in range(2)]
    values = [torch.from_numpy(rng.standard_normal((5, 6)).astype(np.float32)) for _ in range(2)]
    kv = kv_handoff.parse_state(kv_handoff.encode_state(layout, 4, keys, values))
    assert kv.layout == layout and list(kv.positions) == [0, 1, 2, 3, 4]
    for ours, theirs in zip(keys + [v.numpy() for v in values], kv.keys + kv.values):
        assert np.array_equal(ours.astype(np.float16), theirs)
