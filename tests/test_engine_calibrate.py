"""Calibration: formats are timed on this machine, cached per machine, and chosen from the measurements."""
from __future__ import annotations

import json

import pytest
import torch
from engine_helpers import kernel_marches

from engine import machine
from engine.calibration import measurements as cal_mod
from engine.calibration import run as cal_run
from engine.calibration import torch_timing as timing
from engine.calibration.measurements import (
    DRAFT_FORMATS,
    TARGET_FORMATS,
    WIDTHS,
    Calibration,
    Measurement,
    choose,
    expected_speedup,
    formats_here,
    load_cached,
    machine_key,
)
from engine.calibration.report import format_table
from engine.calibration.run import calibration_for
from engine.calibration.torch_timing import full_depth
from engine.testing import tiny_config


def passes(one: float, growth: float = 0.0) -> dict[int, float]:
    """A pass over n tokens costs one x (1 + growth x (n - 1))."""
    return {w: one * (1 + growth * (w - 1)) for w in WIDTHS}


def m(role, weights, act, one, prefill=200.0, growth=0.0) -> Measurement:
    return Measurement(role, weights, act, passes(one, growth), prefill)


class SimulatedClock:
    """torch_timing's clock in a test: time passes only where the test says (advance), so the figures it checks do
    not depend on how fast or busy the machine is."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def table(*measurements) -> Calibration:
    return Calibration(key={"processor": "test", "cpu_capability": "x", "threads": 2, "torch": "t"},
                       measurements=list(measurements))


# (what was measured, expected target, expected draft, draft model on?)
CHOICES = [
    ("int4 is fastest but lossy: the target takes the fastest format that keeps the file's precision",
     [m("target", "int4", "bfloat16", 20), m("target", "gguf", "bfloat16", 40), m("target", "dense", "bfloat16", 120),
      m("draft", "int4", "bfloat16", 8), m("draft", "dense", "bfloat16", 40)],
     ("gguf", "bfloat16"), ("int4", "bfloat16"), True),
    ("fp32 activations win where the quantized kernels are slow with them... only when measured so",
     [m("target", "gguf", "bfloat16", 300), m("target", "dense", "float32", 200),
      m("draft", "int8", "float32", 60)],
     ("dense", "float32"), ("int8", "float32"), True),
    ("a draft that costs as much as the target never pays",
     [m("target", "gguf", "bfloat16", 40, growth=0.5), m("draft", "int8", "float32", 44)],
     ("gguf", "bfloat16"), ("int8", "float32"), False),
    ("prefill counts: a fast one-token step with a slow prefill loses a single-line completion",
     [m("target", "gguf", "bfloat16", 40, prefill=20), m("target", "dense", "bfloat16", 60, prefill=400),
      m("draft", "int4", "bfloat16", 10)],
     ("dense", "bfloat16"), ("int4", "bfloat16"), True),
    ("cheap verify passes count where the draft model pays: a dearer one-token pass can make the cheaper completion",
     [m("target", "llamacpp", "ggml", 30, growth=0.5), m("target", "vnni", "float32", 45, growth=0.05),
      m("draft", "vnni4", "float32", 6, prefill=2000)],
     ("vnni", "float32"), ("vnni4", "float32"), True),
    ("... not where drafting cannot pay: then the cheaper one-token pass wins (lookup drafts cannot close 30 vs 45)",
     [m("target", "llamacpp", "ggml", 30, growth=0.5), m("target", "vnni", "float32", 45, growth=0.05),
      m("draft", "vnni4", "float32", 36, prefill=2000)],
     ("llamacpp", "ggml"), ("vnni4", "float32"), False),
    ("... nor where the draft model's own prefill of the prompt costs more than its drafts save",
     [m("target", "llamacpp", "ggml", 30, growth=0.5), m("target", "vnni", "float32", 45, growth=0.05),
      m("draft", "vnni4", "float32", 6, prefill=200)],
     ("llamacpp", "ggml"), ("vnni4", "float32"), True),
    ("the draft's first pass of a cycle feeds it the committed tokens too: a dear 2-token pass loses to cheap ones",
     [m("target", "gguf", "bfloat16", 40), m("draft", "llamacpp", "ggml", 9, growth=1.5),
      m("draft", "vnni4", "float32", 10, growth=0.05)],
     ("gguf", "bfloat16"), ("vnni4", "float32"), True),
    ("a screened-out combination is never chosen over a measured one",
     [Measurement("target", "gguf", "float32", {1: 5.0}, 0.0), m("target", "gguf", "bfloat16", 40),
      m("draft", "int4", "bfloat16", 10)],
     ("gguf", "bfloat16"), ("int4", "bfloat16"), True),
]


@pytest.mark.parametrize("why,measured,target,draft,draft_on", CHOICES, ids=[c[0][:40] for c in CHOICES])
def test_choice_follows_the_measurements(why, measured, target, draft, draft_on):
    choice = choose(table(*measured), TARGET_FORMATS + ("vnni", "llamacpp"), DRAFT_FORMATS + ("vnni4", "llamacpp"))
    assert (choice.target_weights, choice.target_activations) == target, why
    assert (choice.draft_weights, choice.draft_activations) == draft, why
    assert choice.draft_model is draft_on, why


def test_an_explicit_format_is_honoured_even_when_screened_out():
    cal = table(Measurement("target", "int8", "float32", {1: 900.0}, 0.0), m("target", "gguf", "bfloat16", 40))
    choice = choose(cal, target_formats=("int8",), activations=("float32",))
    assert (choice.target_weights, choice.target_activations) == ("int8", "float32")


def test_a_pinned_format_screened_two_ways_takes_the_measured_pass_over_a_probe():
    """Among screened rows only, a one-layer probe's figure is not a pass: a row with a real one-token pass wins."""
    cal = table(Measurement("target", "int8", "bfloat16", {1: 20.0}, 0.0, probe_only=True),
                Measurement("target", "int8", "float32", {1: 900.0}, 0.0))
    choice = choose(cal, target_formats=("int8",))
    assert (choice.target_weights, choice.target_activations) == ("int8", "float32")


def test_formats_far_behind_in_their_probe_are_never_built(monkeypatch):
    """One-layer probes rank the formats first; a combination over twice the best probe is recorded from its probe
    (probe_only) and its format is not built at all when no dtype of it is in reach; the others are built once and
    timed as before."""
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    config = tiny_config(384, 2, hidden=64)
    probes = {("gguf", "bfloat16"): 10.0, ("gguf", "float32"): 12.0, ("int8", "bfloat16"): 19.0,
              ("int8", "float32"): 21.0, ("dense", "bfloat16"): 50.0, ("dense", "float32"): 45.0}
    monkeypatch.setattr(timing, "probe_formats", lambda *a: probes)
    built = []
    real_formatted = timing.formatted
    monkeypatch.setattr(timing, "formatted", lambda base, weights: built.append(weights) or real_formatted(base, weights))
    rows = timing.measure_role("target", config, ("gguf", "int8", "dense"), ("bfloat16", "float32"))
    assert built == ["gguf", "int8"]  # once each, whatever the dtypes; dense never
    by_key = {(r.weights, r.activations): r for r in rows}
    assert len(rows) == 6
    assert {k for k, r in by_key.items() if r.probe_only} == {("int8", "float32"), ("dense", "bfloat16"),
                                                                ("dense", "float32")}
    assert by_key[("dense", "float32")].pass_ms == {1: 45.0} and not by_key[("dense", "float32")].complete
    assert all(not by_key[k].probe_only and by_key[k].pass_ms[1] != probes[k] for k in (("gguf", "bfloat16"),
                                                                                        ("int8", "bfloat16")))
    text = format_table(table(*rows))
    assert text.count("one-layer probe") == 3


def test_the_best_probe_is_timed_first_so_a_pass_the_probe_misjudged_is_screened(monkeypatch):
    """Probes within 2x of each other, real passes 3x apart (seen under the AVX2 emulation: vnni4 in bf16): timing
    the best-probed combination first lets the other's one-token pass screen it before its whole row is timed."""
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr(timing, "probe_formats", lambda *a: {("gguf", "bfloat16"): 12.0, ("gguf", "float32"): 10.0})
    one_token = {torch.bfloat16: 30.0, torch.float32: 10.0}
    monkeypatch.setattr(timing, "context_one_token_ms", lambda model, vocab: one_token[model.dtype])
    timed = []
    real_time_passes = timing.time_passes
    monkeypatch.setattr(timing, "time_passes",
                        lambda model, *a, **k: timed.append(model.dtype) or real_time_passes(model, *a, **k))
    rows = timing.measure_role("target", tiny_config(384, 2, hidden=64), ("gguf",), ("bfloat16", "float32"))
    by_act = {r.activations: r for r in rows}
    assert timed[0] == torch.float32 and torch.bfloat16 not in timed
    assert by_act["float32"].complete and by_act["bfloat16"].pass_ms == {1: 30.0}
    assert not by_act["bfloat16"].complete and not by_act["bfloat16"].probe_only


@pytest.mark.parametrize("bf16_ms,timed_in_full", [(16.0, False), (14.0, True)])
def test_the_same_weights_in_another_dtype_are_screened_at_one_and_a_half(monkeypatch, bf16_ms, timed_in_full):
    """fp32 timed first (10 ms one token): bf16 of the same weights at 16 ms (1.6x) is recorded from its one-token
    pass alone, at 14 ms (1.4x) timed in full. A format of other weights is still screened at 2x the best."""
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr(timing, "probe_formats", lambda *a: {("gguf", "float32"): 10.0, ("gguf", "bfloat16"): 11.0,
                                                            ("int8", "float32"): 12.0, ("int8", "bfloat16"): 13.0})
    one_token = {("gguf", torch.float32): 10.0, ("gguf", torch.bfloat16): bf16_ms, ("int8", torch.float32): 18.0,
                 ("int8", torch.bfloat16): 19.0}
    monkeypatch.setattr(timing, "context_one_token_ms", lambda model, vocab: one_token[(model.codecue_weights,
                                                                                         model.dtype)])
    real_formatted = timing.formatted

    def formatted(base, weights):
        model = real_formatted(base, weights)
        model.codecue_weights = weights
        return model
    monkeypatch.setattr(timing, "formatted", formatted)
    rows = timing.measure_role("target", tiny_config(384, 2, hidden=64), ("gguf", "int8"), ("bfloat16", "float32"))
    by_key = {(r.weights, r.activations): r for r in rows}
    assert by_key[("gguf", "float32")].complete
    assert by_key[("gguf", "bfloat16")].complete == timed_in_full
    if not timed_in_full:
        assert by_key[("gguf", "bfloat16")].pass_ms == {1: bf16_ms}
    # int8: 1.8x the best one-token pass, its own first dtype: timed in full; its bf16 at 19 ms is within 1.5x of it.
    assert by_key[("int8", "float32")].complete and by_key[("int8", "bfloat16")].complete


def test_the_screen_times_one_token_after_the_context(monkeypatch):
    """bf16 as fast as fp32 after a one-token context but slow after the calibration's context (seen under the AVX2
    emulation: vnni in bf16, close to fp32 after one token, twice its cost after 1,024): the one-token
    pass that screens a combination runs after the context, so bf16 is recorded from it alone."""
    from engine.decode.kvcache import TrackedCache

    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr(timing, "probe_formats", lambda *a: {("dense", "float32"): 10.0, ("dense", "bfloat16"): 11.0})
    clock = SimulatedClock()
    monkeypatch.setattr(timing, "clock", clock)
    real_forward = TrackedCache.forward

    def forward(self, new_ids, *args, **kwargs):
        slow = self.model.dtype == torch.bfloat16 and len(self.ids) >= 32  # its attention over a long context
        clock.advance(0.05 if slow else 0.001)
        return real_forward(self, new_ids, *args, **kwargs)
    monkeypatch.setattr(TrackedCache, "forward", forward)
    rows = timing.measure_role("target", tiny_config(384, 2, hidden=64), ("dense",), ("bfloat16", "float32"))
    by_act = {r.activations: r for r in rows}
    assert by_act["float32"].complete and by_act["float32"].pass_ms[1] == pytest.approx(1.0)
    assert not by_act["bfloat16"].complete and by_act["bfloat16"].pass_ms == {1: pytest.approx(50.0)}


@pytest.mark.parametrize("limit_s,calls", [(1.0, 2), (0.3, 1)])
def test_a_slow_prefill_is_timed_twice_as_llama_cpps_is(monkeypatch, limit_s, calls):
    """The first prefill at a new width pays first-call costs (oneDNN's and the vnni kernel's alike); a prefill
    over the passes' small budget still gets its second call, as llama.cpp's rows get a warm-up, or torch rows lose
    prefill speed llama.cpp's keep. Only a first call over PREFILL_SECOND_CALL_S (seconds: the default is 6) goes
    without."""
    monkeypatch.setattr(timing, "PREFILL_SECOND_CALL_S", limit_s)
    clock = SimulatedClock()
    monkeypatch.setattr(timing, "clock", clock)

    from engine.decode.kvcache import TrackedCache

    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    prefills = []
    real_forward = TrackedCache.forward

    def forward(self, new_ids, *args, **kwargs):
        if len(new_ids) == 16 and not self.ids:
            prefills.append(1)
            clock.advance(0.5 if len(prefills) == 1 else 0.05)  # a cold first call, then a warm one
        return real_forward(self, new_ids, *args, **kwargs)
    monkeypatch.setattr(TrackedCache, "forward", forward)
    model = timing.full_depth(timing.formatted(timing.slice_model(tiny_config(384, 2, hidden=64), 2), "dense"), 2)
    _, prefill_ms = timing.time_passes(model.float(), 384, widths=(1,))
    assert len(prefills) == calls and prefill_ms == pytest.approx(50.0 if calls == 2 else 500.0)


@pytest.mark.parametrize("screen_s,timed", [(60.0, False), (0.0, True)])
def test_a_w8a8_prefill_copy_is_screened_before_it_is_timed(monkeypatch, screen_s, timed):
    """On a CPU without a fast int8 matmul (an AVX2-only Zen 3: `torch._int_mm` far slower than fp32) timing the
    vnni formats' W8A8 copy would take minutes: a one-matmul estimate over twice the format's own prefill is
    recorded instead; otherwise the copy is timed."""
    from engine.calibration import llamacpp_timing as calibrate_llamacpp

    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr(calibrate_llamacpp, "estimated_prefill_s", lambda config, tokens: screen_s)
    copies = []
    real_set = timing.set_prefill_weights
    monkeypatch.setattr(timing, "set_prefill_weights",
                        lambda model, dense: copies.append(dense is not None) or real_set(model, dense))
    config = tiny_config(384, 2, hidden=64)
    model = timing.full_depth(timing.formatted(timing.slice_model(config, 2), "vnni"), 2).float()
    assert model.calibration_dense
    got = timing.copy_prefill_tok_s(model, "vnni", config, own_prefill_ms=100.0)
    if timed:
        assert copies == [True, False] and got > 0
    else:
        assert copies == [] and got == pytest.approx(16 / 60.0)
    assert not any(getattr(mod, "prefill_weight", None) is not None for mod in model.modules())  # copy dropped


def test_the_slice_has_random_weights_as_transformers_initialises_them(monkeypatch):
    """Built without torch's and transformers' initialisations (8-10 s for the 1.5B's slice on 2 cores), filled from
    one repeated block of N(0, 0.02) values: tied head, norms at 1, no two neighbouring rows alike, the same for a
    seed, and a forward pass gives finite logits."""
    monkeypatch.setattr(timing, "RANDOM_BLOCK", 4_099)  # a prime below one matrix, so it repeats within it
    config = tiny_config(384, 2, hidden=64)
    model = timing.slice_model(config, 2, seed=3)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(bool((p == 1).all()) for n, p in model.named_parameters() if n.endswith("norm.weight"))
    gate = model.model.layers[0].mlp.gate_proj.weight.detach()
    assert gate.numel() > 4_099 and 0.015 < gate.std() < 0.025 and abs(float(gate.mean())) < 0.005
    assert not torch.equal(gate[0], gate[1]) and not any(torch.equal(gate[i], gate[i + 64]) for i in range(8))
    again = timing.slice_model(config, 2, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    other = timing.slice_model(config, 2, seed=4)
    assert not torch.equal(other.model.layers[0].mlp.gate_proj.weight, gate)
    with torch.inference_mode():
        assert model(torch.tensor([[5, 6, 7]])).logits.isfinite().all()


def test_a_probe_builds_one_layer_with_a_small_head(monkeypatch):
    config = tiny_config(384, 3, hidden=64)
    heads = []
    real_formatted = timing.formatted
    monkeypatch.setattr(timing, "formatted", lambda base, weights: heads.append(
        (len(base.model.layers), base.lm_head.out_features)) or real_formatted(base, weights))
    monkeypatch.setattr(timing, "PROBE_VOCAB", 128)
    probes = timing.probe_formats(config, ("int8", "dense"), ("bfloat16", "float32"))
    assert set(probes) == {(w, a) for w in ("int8", "dense") for a in ("bfloat16", "float32")}
    assert all(ms > 0 for ms in probes.values())
    assert heads == [(1, 128), (1, 128)]


def test_vnni_formats_are_timed_where_their_kernel_is_offered_and_key_the_table(monkeypatch):
    from engine.weights import vnni

    target = tiny_config(384, 1, hidden=64)
    monkeypatch.setattr(vnni, "offered", lambda: False)
    assert formats_here("cpu") == {"target": TARGET_FORMATS, "draft": DRAFT_FORMATS}
    without = machine_key("cpu", target, None)
    monkeypatch.setattr(vnni, "offered", lambda: True)
    assert formats_here("cpu") == {"target": TARGET_FORMATS + ("vnni",), "draft": DRAFT_FORMATS + ("vnni4",)}
    assert formats_here("cuda:0")["target"] == TARGET_FORMATS
    # A kernel that builds only now (a compiler installed since) is another table: its formats get timed.
    with_kernel = machine_key("cpu", target, None)
    assert cal_mod.key_string(with_kernel) != cal_mod.key_string(without)
    assert without["vnni_kernel"] is None and with_kernel["vnni_kernel"] == vnni.kernel().simd()


def test_an_edited_kernel_is_timed_again(monkeypatch, tmp_path):
    """The table's times are the kernel's: another kernel source (a faster build of the same numbers) is another
    table, measured afresh; without the vnni formats the source does not matter."""
    from engine.weights import vnni

    target = tiny_config(384, 1, hidden=64)
    monkeypatch.setattr(vnni, "offered", lambda: True)
    before = machine_key("cpu", target, None)  # loads the kernel: the edited source below is hashed, never built
    assert before["kernel_source"] == vnni.source_digest()
    edited = tmp_path / "vnni_linear.cpp"
    edited.write_bytes(vnni.SOURCES[0].read_bytes() + b"// edited\n")
    monkeypatch.setattr(vnni, "SOURCES", [edited, *vnni.SOURCES[1:]])
    after = machine_key("cpu", target, None)
    assert after["kernel_source"] != before["kernel_source"]
    assert cal_mod.key_string(after) != cal_mod.key_string(before)
    monkeypatch.setattr(vnni, "offered", lambda: False)
    assert machine_key("cpu", target, None)["kernel_source"] is None


@pytest.mark.parametrize("march", kernel_marches())
def test_the_kernels_vector_path_keys_the_table_and_is_printed(monkeypatch, engine_options, march):
    """The AVX2 build of the kernel (a CPU without AVX-512, or $CODECUE_KERNEL_MARCH=x86-64-v3 on one with it) times
    differently from the AVX-512 one: another table, and the report says which path its vnni rows ran."""
    from engine.weights import vnni

    target = tiny_config(384, 1, hidden=64)
    monkeypatch.setattr(vnni, "offered", lambda: True)
    engine_options(kernel_march=march)
    key = machine_key("cpu", target, None)
    assert key["vnni_kernel"] == vnni.kernel(march).simd() != "none"
    engine_options(kernel_march="native")
    assert (key == machine_key("cpu", target, None)) == (march == "native")
    cal = cal_mod.Calibration(key=key, measurements=[], seconds=1.0)
    assert f"vnni kernel {key['vnni_kernel']}" in format_table(cal).splitlines()[0]


@pytest.mark.parametrize("kernel, text", [
    ("avx2", "AMD EPYC (family 25 model 1) (AVX2, vnni kernel avx2, 2 threads, torch 2.13.0+cpu)"),
    (None, "AMD EPYC (family 25 model 1) (AVX2, 2 threads, torch 2.13.0+cpu)"),
])
def test_a_machine_is_described_by_processor_vector_path_threads_and_torch(kernel, text):
    key = {"processor": "AMD EPYC (family 25 model 1)", "cpu_capability": "AVX2", "vnni_kernel": kernel,
           "threads": 2, "torch": "2.13.0+cpu"}
    assert cal_mod.describe_machine(key) == text
    assert cal_mod.describe_machine(key, "; measured in 9 s").endswith("torch 2.13.0+cpu; measured in 9 s)")


def test_machine_here_holds_what_the_calibration_keys_the_machine_by():
    target = tiny_config(384, 1, hidden=64)
    here, key = cal_mod.machine_here("cpu"), machine_key("cpu", target, None)
    assert here == {name: key[name] for name in here}


def test_expected_speedup_formula():
    flat = passes(100.0)
    # Free drafts and flat verification: E[tokens per pass] = (1 - a^(K+1)) / (1 - a) at the best K (8).
    assert expected_speedup(flat, 0.0, alpha=0.8) == pytest.approx((1 - 0.8 ** 9) / 0.2)
    # A draft step as dear as the target: never better than target alone.
    assert expected_speedup(flat, 100.0, alpha=0.8) == 1.0
    # Verification cost that grows with width caps the gain below the flat case.
    assert 1.0 < expected_speedup(passes(100.0, growth=0.3), 0.0, alpha=0.8) < (1 - 0.8 ** 9) / 0.2


@pytest.mark.parametrize("growth,hit,alpha,want", [
    (0.0, 1.0, 0.5, (1 - 0.5 ** 9) / 0.5),  # flat verify, a draft every pass: E at K = 8
    (0.0, 0.35, 0.5, 1 + 0.35 * ((1 - 0.5 ** 9) / 0.5 - 1)),  # a draft on 35 % of passes
    (1.0, 0.35, 0.5, 1.0),  # K + 1 tokens cost K + 1 passes (llama.cpp here): free drafts gain nothing
    (0.0, 0.0, 0.5, 1.0),  # nothing found
])
def test_lookup_speedup_table(growth, hit, alpha, want):
    assert cal_mod.lookup_speedup(passes(40.0, growth), hit, alpha) == pytest.approx(want)


def test_a_near_tie_goes_to_the_target_whose_cheap_verify_lets_the_lookup_pay():
    """A calibration measured under the AVX2 emulation: the vnni target 40.0 ms a token, llama.cpp's 42.6, prefill
    70 vs 74 tok/s. Without the lookup's drafts llama.cpp's short completion is a little cheaper, yet the engine bench
    ran the vnni target ahead of llama.cpp end to end (lookup drafts on a verify pass of 4 tokens at 1.45x one,
    llama.cpp's 2.7x)."""
    vnni = Measurement("target", "vnni", "float32", {1: 40.0, 2: 41.2, 4: 57.8, 8: 134.9, 16: 249.3}, 70.0)
    llama = Measurement("target", "llamacpp", "ggml", {1: 42.6, 2: 71.3, 4: 114.2, 8: 321.9, 16: 424.4}, 74.0)
    plain = {row.weights: 1000 * 100 / row.prefill_tok_s + 16 * row.pass_ms[1] for row in (vnni, llama)}
    assert plain["llamacpp"] < plain["vnni"]
    assert llama.single_line_ms() == pytest.approx(plain["llamacpp"])  # its lookup drafts would not pay
    assert vnni.single_line_ms() < llama.single_line_ms() < plain["vnni"]
    choice = choose(table(vnni, llama), ("vnni", "llamacpp"), (), ("float32",))
    assert choice.target_weights == "vnni"


def test_full_depth_cycles_distinct_layers_with_their_own_cache_slots():
    from transformers import Qwen2ForCausalLM

    config = tiny_config(64, 2)
    model = full_depth(Qwen2ForCausalLM(config).eval(), 5)
    assert len(model.model.layers) == 5 and model.config.num_hidden_layers == 5
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1, 2, 3, 4]
    assert model.model.layers[2].mlp is model.model.layers[0].mlp  # shared weights
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert len(out.past_key_values.layers) == 5


def test_a_pass_is_timed_after_a_context_written_straight_into_the_cache():
    from transformers import Qwen2ForCausalLM

    from engine.calibration.torch_timing import fill_context
    from engine.decode.kvcache import TrackedCache

    model = Qwen2ForCausalLM(tiny_config(384, 2, hidden=64)).eval().to(torch.bfloat16)
    cache = TrackedCache(model)
    ids = list(range(100, 140))
    with torch.inference_mode():
        fill_context(cache, ids)
        assert cache.ids == ids
        assert all(layer.keys.shape[-2] == 40 and layer.keys.dtype == torch.bfloat16 for layer in cache.cache.layers)
        assert cache.forward([7, 8], logits="all").shape[0] == 2
        assert len(cache.ids) == 42 and all(layer.keys.shape[-2] == 42 for layer in cache.cache.layers)
        cache.truncate(40)
        assert all(layer.keys.shape[-2] == 40 for layer in cache.cache.layers)


def test_calibration_measures_caches_and_rekeys(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    target, draft = tiny_config(384, 3, hidden=64), tiny_config(384, 1, hidden=64)
    first = calibration_for(tmp_path, target, draft, progress=False, in_process=True)
    expected = {(role, w, a) for role, formats in formats_here("cpu").items() for w in formats for a in cal_mod.ACTIVATIONS}
    assert {(x.role, x.weights, x.activations) for x in first.measurements} == expected
    complete = [x for x in first.measurements if x.complete]
    assert complete and all(v > 0 for x in complete for v in x.pass_ms.values())
    assert all(x.prefill_tok_s > 0 for x in complete)
    # Cached: the second call measures nothing.
    monkeypatch.setattr(cal_run, "calibrate", lambda *a, **k: pytest.fail("measured again"))
    again = calibration_for(tmp_path, target, draft, progress=False)
    assert [x.pass_ms for x in again.measurements] == [x.pass_ms for x in first.measurements]
    # Another processor or torch version is another machine: not in the cache.
    key = machine_key("cpu", target, draft)
    assert load_cached(tmp_path, key) is not None
    assert load_cached(tmp_path, {**key, "torch": "0.0"}) is None
    assert load_cached(tmp_path, {**key, "processor": "another CPU"}) is None
    text = format_table(again, choose(again))
    assert "chosen: target" in text and key["processor"] in text
    assert json.loads((tmp_path / "calibration.json").read_text())


def test_rows_measured_first_shortlist_the_torch_formats_of_their_role(monkeypatch):
    """llama.cpp's rows come first; a torch format over twice their one-token pass is only screened, not timed."""
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    target, draft = tiny_config(384, 2, hidden=64), tiny_config(384, 1, hidden=64)
    far_faster = cal_mod.Measurement("target", "llamacpp", "ggml", {w: 1e-6 for w in cal_mod.WIDTHS}, 1e9)
    cal = timing.calibrate(target, draft, progress=False, measured_first=[far_faster])
    assert cal.measurements[0] is far_faster
    torch_targets = [m for m in cal.measurements if m.role == "target" and m.weights != "llamacpp"]
    assert len(torch_targets) == len(formats_here("cpu")["target"]) * len(cal_mod.ACTIVATIONS)
    assert not any(m.complete for m in torch_targets) and all(m.pass_ms[1] > 0 for m in torch_targets)
    assert any(m.complete for m in cal.measurements if m.role == "draft")  # no draft row first: timed as before
    assert choose(cal, cal_mod.TARGET_FORMATS + ("llamacpp",)).target_weights == "llamacpp"


def test_load_pair_auto_calibrates_once_and_loads_the_choice(tmp_path, monkeypatch, engine_options):
    from engine.loading.pair import load_pair
    from engine.testing import build_tiny_pair

    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    home, toml = build_tiny_pair(tmp_path)
    toml.write_text(toml.read_text().replace('target_weights = "dense"', 'target_weights = "auto"')
                    .replace('draft_weights = "dense"', 'draft_weights = "auto"')
                    .replace('activations = "float32"', 'activations = "auto"'))
    engine_options(models_toml=toml, home=home)
    # The load measures in a child process (no torch op on the loading thread leaves an OpenMP pool behind):
    # measuring in this process fails the test.
    monkeypatch.setattr(cal_run, "calibrate", lambda *a, **k: pytest.fail("measured in the loading process"))
    pair = load_pair("tiny", device="cpu", with_draft=True)
    assert (home / "calibration.json").is_file()
    choice = pair.choice
    assert pair.target_weights == choice.target_weights in cal_mod.formats_here("cpu")["target"]  # vnni where offered
    assert str(pair.dtype) == f"torch.{choice.target_activations}"
    assert pair.draft is not None and pair.draft_weights == choice.draft_weights
    # The chosen formats are what was loaded: int formats swap out every nn.Linear.
    linears = [x for x in pair.target.modules() if isinstance(x, torch.nn.Linear)]
    assert (len(linears) == 0) == (choice.target_weights != "dense")
    # An explicit format skips nothing: the cached table still answers, nothing is measured again.
    monkeypatch.setattr(cal_run, "measured_in_child", lambda *a, **k: pytest.fail("measured again"))
    pinned = load_pair("tiny", device="cpu", target_weights="int8", dtype="auto", with_draft=False)
    assert pinned.target_weights == "int8" and pinned.draft is None


def test_a_child_that_fails_leaves_the_measuring_to_the_caller(tmp_path, caplog):
    """measured_in_child returns None (and says why) when the child cannot save a table: the caller measures."""
    not_a_dir = tmp_path / "home"
    not_a_dir.write_text("a file where the home should be")
    target = tiny_config(384, 1, hidden=64)
    with caplog.at_level("WARNING"):
        assert cal_run.measured_in_child(not_a_dir, target, None, "cpu", False, False, None) is None
    assert "child process failed" in caplog.text


def test_a_child_that_crashes_is_not_measured_again_in_the_server(tmp_path, monkeypatch, engine_options):
    """A child killed by a signal (a kernel that crashes on this machine) is not retried in the loading process,
    which would die the same way: the load fails with a message that names how to choose the formats instead."""
    from engine.loading.pair import load_pair
    from engine.store.config import ModelsError
    from engine.testing import build_tiny_pair

    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    home, toml = build_tiny_pair(tmp_path)
    toml.write_text(toml.read_text().replace('target_weights = "dense"', 'target_weights = "auto"'))
    engine_options(models_toml=toml, home=home)
    monkeypatch.setenv("PYTHONPATH", str(crash))  # the child's interpreter dies as it starts
    monkeypatch.setattr(cal_run, "calibrate", lambda *a, **k: pytest.fail("measured in the loading process"))
    with pytest.raises(ModelsError, match=r"crashed .*signal 11.*CODECUE_TARGET_WEIGHTS=") as caught:
        load_pair("tiny", device="cpu", with_draft=False)
    assert isinstance(caught.value.__cause__, cal_run.CalibrationCrashed)
    assert not (home / "calibration.json").exists()


@pytest.mark.parametrize("cpuinfo,expected", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\n"
     "processor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: other\n", "AMD EPYC (family 25 model 1)"),
    ("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n", "AMD EPYC (family 25 model 17)"),
    ("processor\t: 0\nmodel name\t: Some ARM core\n", "Some ARM core"),
    ("processor\t: 0\nBogoMIPS\t: 48.00\n", None),
])
def test_the_processor_name_tells_cpu_generations_apart(cpuinfo, expected):
    """Cloud CPUs that say only "AMD EPYC" differ by family and model (Zen 3: AVX2 only; Zen 4: AVX-512)."""
    assert machine.cpu_name(cpuinfo) == expected


@pytest.mark.parametrize("growth,note", [
    (0.05, "its steps checking 3 lookup guesses at first"),  # a bandwidth-bound draft pass: wider steps cost little
    (0.2, "its steps checking 1 lookup guess at first"),
    (1.0, "its steps checking no lookup guesses at first"),  # a pass over n tokens costs n passes: never worth it
])
def test_the_chosen_line_says_how_many_lookup_guesses_the_draft_models_steps_check(growth, note):
    cal = table(m("target", "vnni", "float32", 45, growth=0.05), m("draft", "vnni4", "float32", 6, growth=growth,
                                                                   prefill=2000))
    choice = choose(cal, TARGET_FORMATS + ("vnni",), DRAFT_FORMATS + ("vnni4",))
    assert choice.draft_model and note in format_table(cal, choice).splitlines()[-1]
