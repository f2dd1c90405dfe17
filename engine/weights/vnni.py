"""The "vnni" weight format: the GGUF's 4-bit (and 8-bit) weights through CodeCue's own AVX-512 VNNI (or AVX2)
kernel.

torch's and llama.cpp's quantized kernels are compute-bound past one or two tokens a pass on 2 cores, so a verify
pass of K+1 tokens costs nearly K+1 one-token passes and speculation cannot pay. engine/weights/kernels/vnni_linear.cpp
unpacks each block of 16 output channels once and multiplies it into every token of the pass with `vpdpbusd`,
activations quantized to int8 per group of input columns (like llama.cpp's Q8_K). A row's result does not depend
on the other rows of the pass: a verify pass computes each token exactly as a one-token pass does.

The kernel is compiled for this CPU (`-march=native`, torch's C++ extension build, 40-55 s on 2 cores) at set-up by
`codecue-models fetch` (models_cli.build_kernel), or else on first use, and cached under $CODECUE_HOME/extensions
(or $CODECUE_EXTENSIONS). Without AVX-512 VNNI it runs the same sums
through AVX2 (`vpmaddubsw`), or through AVX-VNNI's 256-bit `vpdpbusd` where the CPU has it (Intel's client CPUs
since Alder Lake), bitwise the same results; where the compiler targets none of them the formats are not offered
(`available()`); the same arithmetic runs lane by lane (`use_simd=False`) for tests.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
from functools import lru_cache
from pathlib import Path

import torch

from engine import options
from engine.weights.quantized import (
    QuantizedLinear,
    quantize_groups_int4,
    quantize_rows_int8,
)

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "kernels" / "vnni_linear.cpp"
# One extension: the others are engine/weights/lean_step.py's.
SOURCES = (SOURCE, SOURCE.parent / "lean_ops.cpp", SOURCE.parent / "lean_layer.cpp")
BLOCK = 16  # output channels per block (one 512-bit register of int32 sums)
INT8_GROUP = 128  # activation group of the 8-bit layers (their weights have one scale per channel)
# Builds that run another CPU's path on this one, for tests and emulated benchmarks (any other name is gcc's -march):
# the AVX-VNNI path (Intel's client CPUs) on a CPU that has the instruction as well as AVX-512; and that path through
# the instruction's AVX-512 form, on a CPU with AVX-512 VNNI but without AVX-VNNI, kept to the 16 vector registers
# such a CPU has.
EMULATED_MARCHES = {
    "avx-vnni": ["-march=x86-64-v3", "-mavxvnni"],
    "avx-vnni-on-avx512": ["-march=x86-64-v3", "-mavx512vnni", "-mavx512vl", "-DCODECUE_EMULATE_AVX_VNNI",
                           *(f"-ffixed-xmm{register}" for register in range(16, 32))],
}
# What gcc's -march=x86-64-v3 (the AVX2 build) needs, as /proc/cpuinfo names it (abm: LZCNT).
X86_64_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})


class KernelUnavailable(RuntimeError):
    pass


def runnable_marches(flags) -> list[str]:
    """The kernel builds a CPU with these /proc/cpuinfo flags runs, one per vector path (for tests: every path a CPU
    can run is tested on it): its own ("native"); where that is AVX-512 or AVX-VNNI, the plain AVX2 one
    (x86-64-v3); where it is AVX-512, the AVX-VNNI one, natively or, without AVX-VNNI, through AVX-512's form."""
    flags = set(flags)
    avx512 = {"avx512f", "avx512bw", "avx512_vnni"} <= flags
    if not X86_64_V3_FLAGS <= flags or not (avx512 or "avx_vnni" in flags):
        return ["native"]  # no vector path, or the AVX2 one alone
    marches = ["native", "x86-64-v3"]
    if avx512 and "avx_vnni" in flags:
        marches.append("avx-vnni")
    elif avx512 and "avx512vl" in flags:
        marches.append("avx-vnni-on-avx512")
    return marches


def kernel(march: str | None = None):
    """The compiled extension for `march` (gcc's -march; default $CODECUE_KERNEL_MARCH, else "native": this CPU),
    built once per machine, torch version and march, then loaded from the cache. Another march (x86-64-v3: AVX2,
    no AVX-512; EMULATED_MARCHES) runs the kernels another CPU would run, on this one: for tests and emulated
    benchmarks."""
    return _kernel(march or options.current().kernel_march)


@lru_cache(maxsize=None)
def _kernel(march: str):
    from torch.utils import cpp_extension

    tag = march_tag(march)
    build = build_folder(march)
    build.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive_build(build):
            return cpp_extension.load(
                name="codecue_vnni_linear" + tag.replace("-", "_"), sources=[str(source) for source in SOURCES],
                build_directory=str(build), extra_cflags=["-O3", *march_flags(march), "-fopenmp"],
                extra_ldflags=["-fopenmp"], verbose=options.current().verbose_build)
    except Exception as exc:  # no compiler, no ninja, a compile error
        raise KernelUnavailable(f"the vnni kernel could not be built ({exc})") from exc


def march_flags(march: str) -> list[str]:
    return EMULATED_MARCHES.get(march, [f"-march={march}"])


def march_tag(march: str) -> str:
    return "" if march == "native" else "-" + "".join(c if c.isalnum() else "_" for c in march)


def build_folder(march: str) -> Path:
    # The source's hash in the folder's name: an edited kernel (or another checkout's) never loads a stale build.
    builds = options.current().extensions_dir  # $CODECUE_EXTENSIONS, else $CODECUE_HOME/extensions
    return builds / f"vnni-{torch.__version__}-{source_digest()}{march_tag(march)}".replace("+", "_")


def source_digest() -> str:
    """The kernel sources' hash: names its builds, and keys the calibration (an edited kernel times differently)."""
    return hashlib.sha256(b"".join(source.read_bytes() for source in SOURCES)).hexdigest()[:12]


@contextlib.contextmanager
def exclusive_build(build: Path):
    """Hold an OS lock on the build folder while torch builds or loads the extension, and clear a `lock` file left
    behind. torch's own lock is a file created with O_EXCL and deleted when the build ends; a build killed midway
    (Ctrl-C at first start, an editor stopping the server) leaves it, and every later start waited on it forever,
    silently. An flock dies with its process, so while it is held no other CodeCue process is building here and a
    `lock` file is stale."""
    with open(build / "codecue.flock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process building here: wait for it, then load its build
        stale = build / "lock"
        if stale.exists():
            log.warning("removing %s, left by a kernel build that did not finish", stale)
            stale.unlink(missing_ok=True)
        yield


def available() -> bool:
    """The kernel builds here with a vector path (AVX-512 VNNI, AVX-VNNI or AVX2)."""
    try:
        return kernel().simd() != "none"
    except KernelUnavailable as exc:
        log.info("%s", exc)
        return False


def offered() -> bool:
    """CPU flags shortlist (no compile where the CPU has neither AVX-512 VNNI nor AVX2); the calibration decides."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    wide = "avx512_vnni" in flags and "avx512bw" in flags
    return (wide or {"avx2", "fma", "f16c"} <= set(flags)) and available()


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q: [N, K] integers in 0..15 -> uint8 [N/16 blocks, K/8, 64] in the kernel's layout (N padded with zeros)."""
    n, k = q.shape
    q = _pad_rows(q.to(torch.uint8), BLOCK)
    blocks = q.reshape(-1, BLOCK, k // 8, 2, 4).permute(0, 2, 1, 4, 3)  # [b, octet, channel, j, low/high half]
    return (blocks[..., 0] | (blocks[..., 1] << 4)).reshape(-1, k // 8, 64).contiguous()


def pack_uint8(q: torch.Tensor) -> torch.Tensor:
    """q: [N, K] integers in 0..255 -> uint8 [N/16 blocks, K/4, 64]."""
    n, k = q.shape
    q = _pad_rows(q.to(torch.uint8), BLOCK)
    return q.reshape(-1, BLOCK, k // 4, 4).permute(0, 2, 1, 3).reshape(-1, k // 4, 64).contiguous()


def block_params(values: torch.Tensor) -> torch.Tensor:
    """Per channel [N] or per group [N, K/G] -> [N/16, 16] or [N/16, K/G, 16] in fp16, as int16 bits: an integer
    buffer keeps its values through `model.to(torch.bfloat16)`. fp16 keeps 11 significant bits of a Q4_K
    sub-block's d·sc (torch's int4 path rounds it to the activation dtype, bf16's 8)."""
    values = _pad_rows(values.float(), BLOCK)
    if values.dim() == 1:
        return scale_bits(values.reshape(-1, BLOCK))
    return scale_bits(values.reshape(-1, BLOCK, values.shape[1]).transpose(1, 2))


def scale_bits(t: torch.Tensor) -> torch.Tensor:
    """Scales as the kernel takes them (fp16 bits in int16), from fp16 bits or floats (format caches of earlier
    versions held fp32, or fp32 bits in int32)."""
    if t.dtype == torch.int16:
        return t.contiguous()
    if t.dtype == torch.int32:
        t = t.view(torch.float32)
    return t.to(torch.float16).contiguous().view(torch.int16)


def _pad_rows(t: torch.Tensor, multiple: int) -> torch.Tensor:
    extra = -t.shape[0] % multiple
    return torch.cat([t, t.new_zeros((extra, *t.shape[1:]))]) if extra else t


class VnniLinear(QuantizedLinear):
    """w = d·q − m with q unsigned (4-bit per group of 32, or 8-bit per channel), through the vnni kernel.
    Long prefill chunks can go through an int8 copy instead (QuantizedLinear): the kernel's unpacking of 4-bit
    groups makes it compute-bound from about 8 rows on, where oneDNN's W8A8 GEMM runs about twice as fast (Zen 5)."""
    PREFILL_W8A8 = True

    def __init__(self, packed, d, m, bits: int, group: int, out_features: int, in_features: int, bias, dtype):
        super().__init__()
        self.out_features, self.in_features, self.bits, self.group = out_features, in_features, bits, group
        self.per_channel = d.dim() == 2
        self.use_simd = True
        self.register_buffer("packed", packed)
        self.register_buffer("d", d)
        self.register_buffer("m", m)
        self.register_buffer("bias", bias.detach().to(dtype) if bias is not None else None)

    @classmethod
    def from_int4(cls, q, scale, minimum, group: int, bias, dtype) -> "VnniLinear":
        """q [N, K] in 0..15, scale and min [N, K/group]: w = scale·q − min (a Q4_K sub-block exactly)."""
        n, k = q.shape
        return cls(pack_int4(q), block_params(scale), block_params(minimum), 4, group, n, k, bias, dtype)

    @classmethod
    def from_int8(cls, weight_int8, scales, bias, dtype) -> "VnniLinear":
        """Symmetric int8 per channel (w = s·q): stored as q + 128, so m = 128·s."""
        n, k = weight_int8.shape
        group = INT8_GROUP if k % INT8_GROUP == 0 else 32
        q = (weight_int8.to(torch.int16) + 128)
        s = scales.float()
        return cls(pack_uint8(q), block_params(s), block_params(128 * s), 8, group, n, k, bias, dtype)

    @classmethod
    def from_dense_int8(cls, weight: torch.Tensor, bias, dtype) -> "VnniLinear":
        """Dense weights quantized to int8 per channel (the fallback of tensors that are not Q4_K)."""

        return cls.from_int8(*quantize_rows_int8(weight.detach()), bias, dtype)

    @classmethod
    def from_dense_int4(cls, weight: torch.Tensor, bias, dtype, group: int = 32) -> "VnniLinear":
        """Dense weights quantized to 4 bits per group of `group` columns (torch's int4 grid, engine/weights/formats.py)."""

        q, scale, zero = quantize_groups_int4(weight.detach(), group)
        return cls.from_int4(q, scale, 8 * scale - zero, group, bias, dtype)

    def quantized_mm(self, flat: torch.Tensor) -> torch.Tensor:
        out = kernel().linear(flat, self.packed, self.d, self.m, self.out_features, self.group, self.bits,
                              self.per_channel, self.use_simd)
        return out.to(flat.dtype)
