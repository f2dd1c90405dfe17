"""The vnni weight format: CodeCue's own 4/8-bit kernel. Its numbers are the GGUF's and a token's result does not
depend on the other tokens of its pass (exact speculation and the format cache: tests/test_engine_gguf.py)."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from engine_helpers import kernel_marches, random_prompt, tiny_pair
from test_engine_gguf import HIDDEN, tiny_qwen, write_gguf

from engine.weights import vnni
from engine.weights.formats import apply_weight_format
from engine.weights.gguf import linear_from_gguf
from engine.weights.quantized import quantize_groups_int4, quantize_rows_int8


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory):
    """A tiny Qwen2 GGUF with Q4_K and Q8_0 tensors, and its weights as gguf-py dequantizes them."""
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4k.gguf"
    return path, write_gguf(path, tiny_qwen(), np.random.default_rng(0))


def int4_layer(n: int, k: int, seed: int = 0, group: int = 32):
    """A random int4 layer (group 32: a Q4_K sub-block) and its float weights w = scale·q − min."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), generator=g)
    scale = torch.rand(n, k // group, generator=g) * 0.02 + 0.001
    minimum = torch.rand(n, k // group, generator=g) * 0.1
    weight = (q.float().reshape(n, k // group, group) * scale[..., None] - minimum[..., None]).reshape(n, k)
    return vnni.VnniLinear.from_int4(q, scale, minimum, group, None, torch.float32), weight


def int4_group64_layer(n: int, k: int, seed: int = 0):
    """Groups of two 32-column chunks: the AVX2 path adds the chunks' sums before scaling them."""
    return int4_layer(n, k, seed, group=64)


def int4_group16_layer(n: int, k: int, seed: int = 0):
    """Groups of half a chunk."""
    return int4_layer(n, k, seed, group=16)


def int8_layer(n: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, scales = quantize_rows_int8(torch.randn(n, k, generator=g))
    return vnni.VnniLinear.from_int8(q, scales, None, torch.float32), q.float() * scales[:, None]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("make", [int4_layer, int8_layer])
@pytest.mark.parametrize("n,k", [(48, 256), (40, 128), (16, 512)])  # 40: output channels padded to 16
def test_layer_computes_with_its_weights_within_int8_activation_rounding(make, n, k):
    layer, weight = make(n, k)
    x = torch.randn(5, k)
    with torch.no_grad():
        got = layer(x)
    want = x @ weight.t()
    assert got.shape == (5, n)
    # Activations are rounded to int8 per group (max |x| / 127): well under 2 % of the output's size.
    assert 0 < relative_error(got, want) < 0.02


@pytest.mark.parametrize("make", [int4_layer, int8_layer])
def test_a_token_gets_the_same_numbers_whatever_else_is_in_its_pass(make):
    """The property that makes verify passes exact: rows of a batched pass equal one-token passes, bit for bit,
    for every pass width (one tile of rows up to 9 with AVX-512, 8 with AVX2; 13 and 16 are two)."""
    layer, _ = make(64, 256, seed=3)
    x = torch.randn(16, 256)
    with torch.no_grad():
        alone = torch.cat([layer(x[i:i + 1]) for i in range(16)])
        for width in (2, 3, 5, 8, 9, 13, 16):
            assert torch.equal(layer(x[:width]), alone[:width]), width


@pytest.mark.parametrize("make", [int4_layer, int8_layer])
def test_vector_and_lane_by_lane_paths_give_identical_numbers(make):
    """Where the kernel was compiled for AVX-512 VNNI, its vector path and the lane-by-lane path do the same
    integer sums and the same float operations in the same order; elsewhere both calls take the lane-by-lane path."""
    layer, _ = make(80, 256, seed=5)
    x = torch.randn(9, 256)
    with torch.no_grad():
        layer.use_simd = True
        vector = layer(x)
        layer.use_simd = False
        lanes = layer(x)
    assert torch.equal(vector, lanes)
    assert vnni.available() == (vnni.kernel().simd() != "none")


# The vector path each named build runs ("native": this CPU's own); engine/weights/vnni.py: EMULATED_MARCHES.
BUILD_PATHS = {"x86-64-v3": "avx2", "avx-vnni": "avx-vnni", "avx-vnni-on-avx512": "avx-vnni"}
V3 = vnni.X86_64_V3_FLAGS
AVX512 = V3 | {"avx512f", "avx512bw", "avx512_vnni", "avx512vl"}
CPUS = [  # (which CPU, its /proc/cpuinfo flags, the builds its tests run)
    ("no AVX2: lane by lane", {"sse4_2"}, ["native"]),
    ("AVX2 alone (Zen 3)", V3, ["native"]),
    ("AVX-VNNI without AVX-512 (Alder Lake)", V3 | {"avx_vnni"}, ["native", "x86-64-v3"]),
    ("AVX-512 VNNI without AVX-VNNI (Zen 4)", AVX512, ["native", "x86-64-v3", "avx-vnni-on-avx512"]),
    ("both (Sapphire Rapids)", AVX512 | {"avx_vnni", "amx_int8"}, ["native", "x86-64-v3", "avx-vnni"]),
]


@pytest.mark.parametrize("cpu,flags,builds", CPUS, ids=[c[0] for c in CPUS])
def test_a_cpus_tests_run_every_vector_path_it_has(cpu, flags, builds):
    """Not only the native one: an AVX-VNNI CPU without AVX-512 runs the plain AVX2 path too, an AVX-512 one both
    others."""
    assert vnni.runnable_marches(flags) == builds
    paths = [BUILD_PATHS.get(b) for b in builds[1:]]
    assert len(set(paths)) == len(paths) and None not in paths  # each build another path than native's


@pytest.mark.parametrize("march", kernel_marches())
@pytest.mark.parametrize("make", [int4_layer, int4_group64_layer, int4_group16_layer, int8_layer])
def test_every_build_gives_the_lane_by_lane_numbers_for_every_pass_width(make, march):
    """The AVX-512, AVX2 and AVX-VNNI paths (each one this CPU runs: kernel_marches) sum the same integers and
    run the same float operations: bitwise the lane-by-lane numbers, rows of any pass width equal to one-token
    passes. Groups larger than 32 columns (the int8 layers' 128, a 4-bit group of 64) cross the AVX2 path's widening
    of its 16-bit sums, groups of 16 end mid-chunk; 9 is one AVX-512 tile (one integer sum per row from 3 rows),
    wider passes cross the tiles of rows (17, 33, 40: prefill chunks)."""
    layer, _ = make(48, 512, seed=7)
    x = torch.randn(40, 512, generator=torch.Generator().manual_seed(2)) * 3
    build = vnni.kernel(march)
    assert build.simd() == BUILD_PATHS.get(march, vnni.kernel("native").simd())
    args = (layer.packed, layer.d, layer.m, layer.out_features, layer.group, layer.bits, layer.per_channel)
    lanes = vnni.kernel().linear(x, *args, False)
    alone = torch.cat([build.linear(x[i:i + 1], *args, True) for i in range(40)])
    assert torch.equal(alone, lanes)
    for width in (2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 40):
        assert torch.equal(build.linear(x[:width], *args, True), lanes[:width]), width


@pytest.mark.parametrize("march", kernel_marches())
def test_the_largest_products_do_not_saturate_sixteen_bit_sums(march):
    """AVX2 multiplies u8 x s8 pairs into saturating int16 sums: every weight at its largest (15; 8-bit 0 and 255,
    i.e. -128 and 127 after the shift) against activations of +-127 must still give the exact integer sums."""
    k = 256
    x = torch.full((3, k), 2.0)
    x[1] = -2.0
    x[2, ::2] = -2.0  # +-127 alternating
    top4 = vnni.VnniLinear.from_int4(torch.full((32, k), 15), torch.full((32, k // 32), 0.01),
                                     torch.zeros(32, k // 32), 32, None, torch.float32)
    q8 = torch.cat([torch.full((16, k), -128), torch.full((16, k), 127)]).to(torch.int8)
    ends8 = vnni.VnniLinear.from_int8(q8, torch.full((32,), 0.01), None, torch.float32)
    for layer, weight in ((top4, torch.full((32, k), 0.15)), (ends8, q8.float() * 0.01)):
        args = (layer.packed, layer.d, layer.m, 32, layer.group, layer.bits, layer.per_channel, True)
        got = vnni.kernel(march).linear(x, *args)
        assert torch.equal(got, vnni.kernel().linear(x, *args[:-1], False))
        torch.testing.assert_close(got, x @ weight.t(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("march", kernel_marches())
def test_activations_round_half_to_even_and_zero_groups_alike_on_every_path(march):
    """The vector paths quantize activations 8 columns at a time: ties (x·127/max|x| at k + 0.5) go to the even
    integer as nearbyint does, and a group of zeros gets scale 0, as lane by lane."""
    k = 64
    x = torch.zeros(3, k)
    x[0, :32] = torch.tensor([127.0, 2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5] * 4)  # max 127: x·inv = x
    x[1, 32:] = torch.linspace(-1.0, 1.0, 32)  # group 0 all zeros
    x[2] = torch.randn(k, generator=torch.Generator().manual_seed(4))
    layer, _ = int4_layer(32, k, seed=9)
    args = (layer.packed, layer.d, layer.m, 32, layer.group, layer.bits, layer.per_channel)
    lanes = vnni.kernel().linear(x, *args, False)
    assert torch.equal(vnni.kernel(march).linear(x, *args, True), lanes)
    # The ties' integers, through a layer that reads column j alone: q = 1 at column j, 0 elsewhere, no minimum.
    picks = torch.zeros(32, k, dtype=torch.long)
    picks[torch.arange(8), torch.arange(8)] = 1
    pick = vnni.VnniLinear.from_int4(picks, torch.ones(32, k // 32), torch.zeros(32, k // 32), 32, None,
                                     torch.float32)
    pick_args = (pick.packed, pick.d, pick.m, 32, 32, 4, False)
    want = torch.tensor([127.0, 2.0, -4.0, 0.0, -0.0, 2.0, 126.0, -126.0])
    for simd in (False, True):
        got = vnni.kernel(march).linear(x[:1], *pick_args, simd)[0, :8]
        assert torch.equal(got, want), (simd, got)


@pytest.mark.parametrize("march", kernel_marches())
def test_a_layers_numbers_do_not_depend_on_the_thread_count(engine_options, march):
    """Threads take runs of blocks as they come free (the split is not fixed up front): every block is computed,
    whole, by one thread, so 1 and 2 threads give the same bits, the lane-by-lane path's."""
    engine_options(kernel_march=march)  # the layer runs that build's path
    layer, _ = int8_layer(1024, 256, seed=11)
    x = torch.randn(9, 256, generator=torch.Generator().manual_seed(5))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.no_grad():
            one = layer(x)
        torch.set_num_threads(2)
        with torch.no_grad():
            two = [layer(x) for _ in range(5)]
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(one, t) for t in two)
    layer.use_simd = False
    with torch.no_grad():
        assert torch.equal(layer(x), one)


def test_shapes_the_kernel_cannot_take_are_a_clear_error():
    layer, _ = int4_layer(16, 64)
    with pytest.raises(RuntimeError, match="multiple of the group"):
        vnni.kernel().linear(torch.randn(1, 60), layer.packed, layer.d, layer.m, 16, 32, 4, False, True)
    with pytest.raises(RuntimeError, match="do not match"):
        vnni.kernel().linear(torch.randn(1, 96), layer.packed, layer.d, layer.m, 16, 32, 4, False, True)


def test_q4k_tensor_becomes_a_vnni_layer_with_the_files_numbers(gguf_model):
    import gguf

    path, reference = gguf_model
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.1.attn_q.weight")
    layer = linear_from_gguf(tensor, None, None, "vnni", torch.float32)
    assert isinstance(layer, vnni.VnniLinear) and layer.bits == 4
    x = torch.randn(4, HIDDEN)
    want = x @ torch.from_numpy(reference["model.layers.1.self_attn.q_proj"]).t()
    with torch.no_grad():
        assert relative_error(layer(x), want) < 0.02


def test_whole_model_in_vnni_format(gguf_model):
    path, reference = gguf_model
    model, dense = tiny_qwen(), tiny_qwen()
    with torch.no_grad():
        for name, weight in reference.items():
            dense.get_submodule(name).weight.copy_(torch.from_numpy(weight.copy()))
    apply_weight_format(model, "vnni", "cpu", path)
    layers = model.model.layers
    assert isinstance(layers[0].self_attn.q_proj, vnni.VnniLinear) and layers[0].self_attn.q_proj.bits == 4
    assert isinstance(layers[1].mlp.down_proj, vnni.VnniLinear) and layers[1].mlp.down_proj.bits == 8  # Q8_0
    ids = torch.tensor([random_prompt(1, 32)])
    with torch.inference_mode():
        want, got = dense(input_ids=ids).logits, model(input_ids=ids).logits
    assert (want.argmax(-1) == got.argmax(-1)).float().mean() > 0.9


def test_vnni4_keeps_q4k_exact_and_stores_every_other_tensor_in_4_bits(gguf_model):
    """The draft's mix: what is not Q4_K in the file (Q8_0 here, Q5_0 in the 0.5B's) goes to int4 group 32, half
    the bytes of vnni's int8, on the int4 format's grid."""
    from engine.weights.quantized import Int4Linear

    path, reference = gguf_model
    model, four = tiny_qwen(), tiny_qwen()
    apply_weight_format(model, "vnni4", "cpu", path)
    apply_weight_format(four, "int4", "cpu", path)
    layers = model.model.layers
    assert isinstance(layers[1].mlp.down_proj, vnni.VnniLinear) and layers[1].mlp.down_proj.bits == 4  # Q8_0
    assert layers[0].self_attn.q_proj.bits == 4
    assert isinstance(four.model.layers[1].mlp.down_proj, Int4Linear)
    with torch.no_grad():
        ours, theirs = layers[1].mlp.down_proj, four.model.layers[1].mlp.down_proj
        x = torch.randn(3, ours.in_features)
        assert relative_error(ours(x), theirs(x)) < 0.02
    ids = torch.tensor([random_prompt(1, 32)])
    with torch.inference_mode():
        assert (model(input_ids=ids).logits.argmax(-1) == four(input_ids=ids).logits.argmax(-1)).float().mean() > 0.85


def test_dense_model_in_vnni_format_computes_what_torchs_kernels_compute_on_the_same_grid():
    """From dense weights: the "gguf" mix (int4 group 32, int8 output head). Against torch's kernels on the same
    grids, the only difference is the int8 rounding of activations (a random tiny model is too sensitive to the
    4-bit grid itself to compare with its float weights)."""
    ids = torch.tensor([random_prompt(2, 32)])
    with torch.inference_mode():
        theirs = apply_weight_format(tiny_qwen(2), "gguf", "cpu")(input_ids=ids).logits
        model = apply_weight_format(tiny_qwen(2), "vnni", "cpu")
        ours = model(input_ids=ids).logits
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert model.lm_head.bits == 8  # the output head keeps 8 bits, as a Q4_K_M file's Q6_K head
    assert (theirs.argmax(-1) == ours.argmax(-1)).float().mean() > 0.85
    assert relative_error(ours, theirs) < 0.1


def test_int4_grid_from_dense_weights_matches_torchs_int4_layer():
    """quantize_vnni and the int4 format share one grid: the same weights, two kernels."""
    from engine.weights.quantized import Int4Linear

    weight = torch.randn(32, 128)
    q, scale, zero = quantize_groups_int4(weight, 32)
    ours = vnni.VnniLinear.from_int4(q, scale, 8 * scale - zero, 32, None, torch.float32)
    theirs = Int4Linear(q, scale, zero, 32, None, torch.float32)
    x = torch.randn(3, 128)
    with torch.no_grad():
        assert relative_error(ours(x), theirs(x)) < 0.02
    assert np.isfinite(ours(x).numpy()).all()


def test_model_to_bfloat16_keeps_the_scales_exact():
    """The scales are float bits in int32 buffers: `model.to(torch.bfloat16)` (the calibration does it) must not
    round them; the layer then computes in float32 inside and returns bf16."""
    layer, _ = int4_layer(32, 128, seed=9)
    x = torch.randn(3, 128).bfloat16()
    with torch.no_grad():
        before = layer(x.float())
        layer.to(torch.bfloat16)
        after = layer(x)
    assert layer.d.dtype == torch.int16 and after.dtype == torch.bfloat16
    assert torch.equal(after, before.bfloat16())


def test_vnni_is_asked_for_by_name_and_refused_where_it_does_not_run(monkeypatch, tmp_path):
    from engine.loading.choice import resolve_formats
    from engine.store.config import ModelsError

    spec = tiny_pair("random").spec
    monkeypatch.setattr(vnni, "offered", lambda: True)
    choice, cal = resolve_formats(spec, torch.device("cpu"), tmp_path, "vnni", "vnni4", "bfloat16")
    assert (choice.target_weights, choice.target_activations, choice.draft_weights) == ("vnni", "bfloat16", "vnni4")
    monkeypatch.setattr(vnni, "offered", lambda: False)
    for target, draft in (("vnni", "int4"), ("int4", "vnni4")):
        with pytest.raises(ModelsError, match="AVX-512 VNNI"):
            resolve_formats(spec, torch.device("cpu"), tmp_path, target, draft, "bfloat16")


def test_scales_from_earlier_format_caches_load_as_the_kernel_takes_them():
    """fp16 bits in int16 now; format caches written before held fp32, or fp32 bits in int32."""
    scales = torch.tensor([[0.0123, 1.5, 3e-4]])
    want = scales.half().view(torch.int16)
    for stored in (scales, scales.view(torch.int32), want):
        got = vnni.scale_bits(stored)
        assert got.dtype == torch.int16 and torch.equal(got, want)
    assert torch.allclose(got.view(torch.float16).float(), scales, rtol=1e-3)


def test_prefill_chunks_of_a_vnni_layer_go_through_its_int8_copy_and_steps_through_the_kernel():
    """vnni layers prefill in W8A8 (`torch._int_mm`) from an int8 copy of the dense weights; steps (and verify
    passes) keep the kernel's bits; the copy is never written to the format cache."""
    from engine.weights.quantized import PREFILL_ROWS, set_prefill_weights

    model = apply_weight_format(tiny_qwen(2), "vnni", "cpu")
    plain = apply_weight_format(tiny_qwen(2), "vnni", "cpu")
    dense = {name: layer.weight.detach().clone() for name, layer in tiny_qwen(2).named_modules()
             if isinstance(layer, torch.nn.Linear) and name != "lm_head"}
    assert set_prefill_weights(model, dense) == len(dense) > 0
    layer, plain_layer = model.model.layers[0].mlp.up_proj, plain.model.layers[0].mlp.up_proj
    assert layer.prefill_weight.dtype == torch.int8
    short, long_ = torch.randn(PREFILL_ROWS - 1, HIDDEN), torch.randn(PREFILL_ROWS, HIDDEN)
    with torch.no_grad():
        assert torch.equal(layer(short), plain_layer(short))
        want = long_ @ dense["model.layers.0.mlp.up_proj"].t()
        assert relative_error(layer(long_), want) < 0.02  # the dense weights, int8 per channel
        assert relative_error(plain_layer(long_), want) > relative_error(layer(long_), want)  # not the 4-bit grid
    assert not any("prefill" in k for k in model.state_dict())
    assert set_prefill_weights(model, None) == 0 and "prefill_scale" not in dict(layer.named_buffers())


def test_a_lock_left_by_a_killed_build_does_not_stop_the_next_start():
    """torch's build lock is a file that a killed build leaves behind; a start then waited on it forever."""
    vnni.kernel()  # built (or loaded) here first, so the child only loads
    stale = vnni.build_folder("native") / "lock"
    stale.touch()
    child = subprocess.run([sys.executable, "-c", "from engine.weights import vnni; print(vnni.kernel().simd())"],
                           capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == vnni.kernel().simd()
    assert not stale.exists()


def test_one_process_at_a_time_builds_in_a_folder(tmp_path):
    (tmp_path / "lock").touch()
    with vnni.exclusive_build(tmp_path):
        assert not (tmp_path / "lock").exists()
        with open(tmp_path / "codecue.flock") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / "codecue.flock") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the build
