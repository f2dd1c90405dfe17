// Weight-only 4-/8-bit linear layer with int8 activations for AVX-512 VNNI or AVX2 (engine/weights/vnni.py builds and calls
// it).
//
// Why: on 2 cores the quantized kernels of torch and llama.cpp are compute-bound past one or two tokens a pass
// (a 9-token verify costs 3-4x a one-token pass), so checking drafts costs almost what decoding them would. Here
// the weights of 16 output channels are unpacked once and multiplied into every token of the pass
// (`vpdpbusd`, u8 weights x s8 activations, 4 products per lane), so a pass of up to 9 tokens (8 with AVX2) reads
// and unpacks the weights once, and a token's result never depends on what else is in the pass (same integer sums,
// same order of float operations): a verify pass computes each row exactly as a one-token pass would.
//
// Layout of `packed` (uint8), per block of 16 output channels:
//   4-bit: [K/8][64], byte 4c+j holds w[c][8o+j] in its low nibble and w[c][8o+4+j] in its high nibble (o: octet);
//   8-bit: [K/4][64], byte 4c+j holds w[c][4o+j] as an unsigned byte.
// A weight is d*q - m, with q the unsigned stored number; d and m are fp16 [N/16][K/G][16] (one per group of G
// input columns) or [N/16][16] (per channel), passed as int16 tensors holding the halves' bits, so that a
// `model.to(dtype)` leaves them alone (fp32 scales would add half as many bytes again as the 4-bit weights).
// Activations are quantized per row and per group of G columns to int8 (scale = max|x|/127), so sum(w*x) over a
// group = s*(d*dot(q, a) - m*sum(a)).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// One of four paths, as the compiler targets this CPU (-march=native, or $CODECUE_KERNEL_MARCH): AVX-512 VNNI
// (`vpdpbusd`), AVX2 (`vpmaddubsw` + `vpmaddwd`: the CPUs without AVX-512, where llama.cpp's own kernels verify
// 9 tokens at ~8x one token's cost), AVX2 with AVX-VNNI (the AVX2 path's integer sums by 256-bit `vpdpbusd`: Intel's
// client CPUs since Alder Lake, which have it but not AVX-512), or lane by lane. All compute the same integer sums
// and then the same float operations in the same order: their results are bitwise equal (tests/test_engine_vnni.py).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define CODECUE_VNNI 1
#define CODECUE_AVX2 0
#define CODECUE_AVX_VNNI 0
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define CODECUE_VNNI 0
#define CODECUE_AVX2 1
// CODECUE_EMULATE_AVX_VNNI: the same path through the instruction's AVX-512 (EVEX) form, so that a CPU with
// AVX-512 VNNI but without AVX-VNNI (this project's Zen 4) can run and test it (engine/weights/vnni.py: EMULATED_MARCHES).
#if defined(__AVXVNNI__) || (defined(CODECUE_EMULATE_AVX_VNNI) && defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define CODECUE_AVX_VNNI 1
#else
#define CODECUE_AVX_VNNI 0
#endif
#else
#define CODECUE_VNNI 0
#define CODECUE_AVX2 0
#define CODECUE_AVX_VNNI 0
#endif

namespace {

constexpr int kBlock = 16;   // output channels per block
// Tokens multiplied per unpacked block: with AVX-512 a verify of 8 drafted tokens in one tile (9 rows as 5 + 4 cost
// 8-10 % more); the AVX2 path goes 4 rows at a time anyway and 9 would leave a single row (4 + 4 + 1).
constexpr int kMaxRows = CODECUE_VNNI ? 9 : 8;
constexpr int64_t kBlocksPerTake = 4;  // the fewest blocks a thread takes at a time
// Weights are streamed once per pass. Asking for them 4 KB ahead made a layer's pass 18-31 % faster on a Zen 5
// (1 / 4 / 9 tokens), where the hardware prefetcher alone left a single stream per core at ~13 GB/s. Asked for as
// non-temporal (prefetchnta; the scales too, prefetch_scales): read once a pass, they no longer push out of the
// caches what the pass reads again -- the KV cache, the activations, the draft model's trimmed head. Measured faster
// for draft steps and one-token passes on short contexts, level on long ones (docs/performance.md).
constexpr int kPrefetchBytes = 4096;

inline void prefetch(const uint8_t* p) { __builtin_prefetch(p + kPrefetchBytes, 0, 0); }

struct Weights {
  const uint8_t* packed;
  const uint16_t* d;  // fp16 bits
  const uint16_t* m;
  int64_t K, G, bits;
  bool per_channel;
  int64_t groups;  // K / G, computed once (d_at and m_at ran a 64-bit division per group)
  int64_t block_bytes() const { return K * kBlock * bits / 8; }
  const uint16_t* d_at(int64_t b, int64_t g) const { return per_channel ? d + b * kBlock : d + (b * groups + g) * kBlock; }
  const uint16_t* m_at(int64_t b, int64_t g) const { return per_channel ? m + b * kBlock : m + (b * groups + g) * kBlock; }
};

// The group scales (d, m) of block b four groups past g (128 bytes, within the block or into the next one), as
// prefetch() asks for the weights. Per-channel scales are 32 bytes a block: left to the hardware prefetcher.
inline void prefetch_scales(const Weights& w, int64_t b, int64_t g) {
  if (w.per_channel) return;
  __builtin_prefetch(w.d_at(b, g) + 4 * kBlock, 0, 0);
  __builtin_prefetch(w.m_at(b, g) + 4 * kBlock, 0, 0);
}

struct Acts {
  const int8_t* q;   // [M][K]
  const float* s1;   // [M][K/G]: the group's scale
  const float* s2;   // [M][K/G]: scale * sum of the group's quantized activations
  const int32_t* sums;  // [M][K/G]: the sum itself, for the AVX2 path's 8-bit weights (q - 128) without AVX-VNNI
  int64_t K, groups;
};

// fp16 -> fp32, exact (the same value the vector path's vcvtph2ps gives).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while (!(mantissa & 0x400)) { mantissa <<= 1; --exponent; }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#if CODECUE_VNNI
template <int R, int BITS, int GC>
void block_rows(const Weights& w, const Acts& a, int64_t b, int64_t r0, float* out, int64_t ldo) {
  const int64_t G = GC ? GC : w.G;
  __m512 accf[R];
  for (int r = 0; r < R; ++r) accf[r] = _mm512_setzero_ps();
  const uint8_t* wp = w.packed + b * w.block_bytes();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t g = 0; g < a.groups; ++g) {
    // Below 3 rows, two integer sums per row (even and odd steps) keep enough independent `vpdpbusd` chains in
    // flight; from 3 rows one per row does, and leaves the registers to the rows.
    constexpr bool two = R < 3;
    __m512i acc0[R], acc1[two ? R : 1];
    for (int r = 0; r < R; ++r) acc0[r] = _mm512_setzero_si512();
    if (two) for (int r = 0; r < R; ++r) acc1[r] = _mm512_setzero_si512();
    const int64_t k0 = g * G, k1 = k0 + G;
    prefetch_scales(w, b, g);
    if (BITS == 4) {
      for (int64_t k = k0; k < k1; k += 8) {
        prefetch(wp + (k / 8) * 64);
        const __m512i chunk = _mm512_loadu_si512(wp + (k / 8) * 64);
        const __m512i lo = _mm512_and_si512(chunk, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), low4);
        for (int r = 0; r < R; ++r) {
          const int8_t* ar = a.q + (r0 + r) * a.K + k;
          acc0[r] = _mm512_dpbusd_epi32(acc0[r], lo, _mm512_set1_epi32(load4(ar)));
          __m512i& odd = two ? acc1[r] : acc0[r];
          odd = _mm512_dpbusd_epi32(odd, hi, _mm512_set1_epi32(load4(ar + 4)));
        }
      }
    } else {
      for (int64_t k = k0; k < k1; k += 8) {
        prefetch(wp + (k / 4) * 64);
        prefetch(wp + (k / 4 + 1) * 64);
        const __m512i w0 = _mm512_loadu_si512(wp + (k / 4) * 64);
        const __m512i w1 = _mm512_loadu_si512(wp + (k / 4 + 1) * 64);
        for (int r = 0; r < R; ++r) {
          const int8_t* ar = a.q + (r0 + r) * a.K + k;
          acc0[r] = _mm512_dpbusd_epi32(acc0[r], w0, _mm512_set1_epi32(load4(ar)));
          __m512i& odd = two ? acc1[r] : acc0[r];
          odd = _mm512_dpbusd_epi32(odd, w1, _mm512_set1_epi32(load4(ar + 4)));
        }
      }
    }
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.d_at(b, g))));
    const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.m_at(b, g))));
    for (int r = 0; r < R; ++r) {
      const int64_t i = (r0 + r) * a.groups + g;
      const __m512i sum = two ? _mm512_add_epi32(acc0[r], acc1[r]) : acc0[r];
      accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dv, _mm512_set1_ps(a.s1[i])), accf[r]);
      accf[r] = _mm512_fnmadd_ps(mv, _mm512_set1_ps(a.s2[i]), accf[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + (r0 + r) * ldo + b * kBlock, accf[r]);
}

#endif

#if CODECUE_AVX_VNNI
inline __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#else
  return _mm256_dpbusd_epi32(acc, u8, s8);
#endif
}
#endif

#if CODECUE_AVX2
// The AVX-512 path's sums with 256-bit registers: each 64-byte chunk of a block is two halves of 8 channels.
// `vpmaddubsw` (u8 x s8, pairs summed into int16) saturates, so the sums are kept below 2^15: 4-bit weights add up
// 16-bit sums over at most 32 columns (4 x 4 x 15 x 127 = 30,480) before `vpmaddwd` widens them; 8-bit weights
// (0..255) are taken as q - 128 in s8, multiplied with the sign trick (|w| x a*sign(w), pairs <= 2 x 128 x 127), and
// 128 x the group's activation sum is added back: dot(q, a) = dot(q - 128, a) + 128 sum(a), the same integer.
// 16 registers hold the sums of 4 rows x 16 channels with the unpacked weights: rows go 4 at a time over each
// group's weights (256 bytes for a 4-bit group of 32: still in L1 for the next 4 rows).

// One 64-byte chunk of 4-bit weights (8 columns of 16 channels) as unsigned bytes: w[h] channels 8h .. 8h + 7 of
// the chunk's first 4 columns (low nibbles), w[2 + h] of its last 4 (high nibbles).
inline void unpack4(const uint8_t* chunk, __m256i (&w)[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * h));
    w[h] = _mm256_and_si256(c, low4);
    w[2 + h] = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
  }
}

#if !CODECUE_AVX_VNNI
// N rows' 16-bit sums over one 64-byte chunk of 4-bit weights (8 columns of 16 channels), in assembly: written with
// intrinsics, gcc reassociated the adds of a group's unrolled steps (integer adds associate) and kept products
// until the end, or spilled the sums to the stack at every step, and how much changed with the code around (a
// 4-row tile ran 0.75-1.4x as fast from one build to the next). Here the unpacking is unpack4's (c0, c1: the low
// nibbles, columns 0-3, of channels 0-7 and 8-15; h0, h1: the high nibbles, columns 4-7), each product is added
// to its row's sums at once, and 4 rows' sums, the weights and 2 temporaries fit the 16 registers. ("memory": the
// asm reads the weights and activations through its pointers; more exact operands would pass gcc's limit of 30.)
#define CODECUE_UNPACK4                                                                              \
  "vmovdqu (%[w]), %[c0]\n\t" "vmovdqu 32(%[w]), %[c1]\n\t"                                         \
  "vpsrlw $4, %[c0], %[h0]\n\t" "vpsrlw $4, %[c1], %[h1]\n\t"                                        \
  "vpand %[low4], %[c0], %[c0]\n\t" "vpand %[low4], %[c1], %[c1]\n\t"                                \
  "vpand %[low4], %[h0], %[h0]\n\t" "vpand %[low4], %[h1], %[h1]\n\t"
#define CODECUE_ROW4(R)                                                                              \
  "vpbroadcastd (%[a" #R "]), %[b]\n\t"                                                              \
  "vpmaddubsw %[b], %[c0], %[t]\n\t" "vpaddw %[t], %[s" #R "0], %[s" #R "0]\n\t"                    \
  "vpmaddubsw %[b], %[c1], %[t]\n\t" "vpaddw %[t], %[s" #R "1], %[s" #R "1]\n\t"                    \
  "vpbroadcastd 4(%[a" #R "]), %[b]\n\t"                                                             \
  "vpmaddubsw %[b], %[h0], %[t]\n\t" "vpaddw %[t], %[s" #R "0], %[s" #R "0]\n\t"                    \
  "vpmaddubsw %[b], %[h1], %[t]\n\t" "vpaddw %[t], %[s" #R "1], %[s" #R "1]\n\t"
#define CODECUE_SUMS(R) [s##R##0] "+x"(s[R][0]), [s##R##1] "+x"(s[R][1])
#define CODECUE_ROW_IN(R) [a##R] "r"(ar[R])

template <int N>
inline void chunk_sums4(__m256i (&s)[4][2], const uint8_t* chunk, const int8_t* const (&ar)[4], __m256i low4) {
  __m256i c0, c1, h0, h1, b, t;
#define CODECUE_TEMPS [c0] "=&x"(c0), [c1] "=&x"(c1), [h0] "=&x"(h0), [h1] "=&x"(h1), [b] "=&x"(b), [t] "=&x"(t)
#define CODECUE_WEIGHTS [w] "r"(chunk), [low4] "x"(low4)
  if constexpr (N == 1) {
    asm(CODECUE_UNPACK4 CODECUE_ROW4(0)
        : CODECUE_SUMS(0), CODECUE_TEMPS : CODECUE_WEIGHTS, CODECUE_ROW_IN(0) : "memory");
  } else if constexpr (N == 2) {
    asm(CODECUE_UNPACK4 CODECUE_ROW4(0) CODECUE_ROW4(1)
        : CODECUE_SUMS(0), CODECUE_SUMS(1), CODECUE_TEMPS
        : CODECUE_WEIGHTS, CODECUE_ROW_IN(0), CODECUE_ROW_IN(1) : "memory");
  } else if constexpr (N == 3) {
    asm(CODECUE_UNPACK4 CODECUE_ROW4(0) CODECUE_ROW4(1) CODECUE_ROW4(2)
        : CODECUE_SUMS(0), CODECUE_SUMS(1), CODECUE_SUMS(2), CODECUE_TEMPS
        : CODECUE_WEIGHTS, CODECUE_ROW_IN(0), CODECUE_ROW_IN(1), CODECUE_ROW_IN(2) : "memory");
  } else {
    asm(CODECUE_UNPACK4 CODECUE_ROW4(0) CODECUE_ROW4(1) CODECUE_ROW4(2) CODECUE_ROW4(3)
        : CODECUE_SUMS(0), CODECUE_SUMS(1), CODECUE_SUMS(2), CODECUE_SUMS(3), CODECUE_TEMPS
        : CODECUE_WEIGHTS, CODECUE_ROW_IN(0), CODECUE_ROW_IN(1), CODECUE_ROW_IN(2), CODECUE_ROW_IN(3)
        : "memory");
  }
#undef CODECUE_TEMPS
#undef CODECUE_WEIGHTS
}
#undef CODECUE_UNPACK4
#undef CODECUE_ROW4
#undef CODECUE_SUMS
#undef CODECUE_ROW_IN
#endif

// Integer sums of group g for rows r0 .. r0 + N - 1: acc[r][h] for channels 8h .. 8h + 7.
template <int N, int BITS, int GC>
inline void group_sums(const Weights& w, const Acts& a, const uint8_t* wp, int64_t g, int64_t r0, bool first,
                       __m256i (&acc)[4][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t G = GC ? GC : w.G;
  const int64_t k0 = g * G, k1 = k0 + G;
  for (int r = 0; r < N; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#if CODECUE_AVX_VNNI
  // `vpdpbusd` adds u8 x s8 products into int32 lanes directly: no 16-bit sums to keep from saturating, no sign
  // trick. Below 3 rows a second set of sums (the odd steps) keeps enough independent `vpdpbusd` chains in flight.
  constexpr bool two = N < 3;
  __m256i odd[two ? N : 1][2];
  for (int r = 0; r < (two ? N : 0); ++r) odd[r][0] = odd[r][1] = _mm256_setzero_si256();
  for (int64_t k = k0; k < k1; k += 8) {
    // the weights of 8 columns as unpack4 lays them out: channels 8h .. 8h + 7 of columns k .. k + 3 in w[h], of
    // k + 4 .. k + 7 in w[2 + h] (8-bit weights are stored that way: 64 bytes per 4 columns)
    __m256i w[4];
    if (BITS == 4) {
      const uint8_t* chunk = wp + (k / 8) * 64;
      if (first) prefetch(chunk);
      unpack4(chunk, w);
    } else {
      const uint8_t* chunk = wp + (k / 4) * 64;
      if (first) {
        prefetch(chunk);
        prefetch(chunk + 64);
      }
      for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * i));
    }
    for (int r = 0; r < N; ++r) {
      const int8_t* ar = a.q + (r0 + r) * a.K + k;
      const __m256i b0 = _mm256_set1_epi32(load4(ar)), b1 = _mm256_set1_epi32(load4(ar + 4));
      __m256i (&high)[2] = two ? odd[r] : acc[r];
      acc[r][0] = dpbusd(acc[r][0], w[0], b0);
      acc[r][1] = dpbusd(acc[r][1], w[1], b0);
      high[0] = dpbusd(high[0], w[2], b1);
      high[1] = dpbusd(high[1], w[3], b1);
    }
  }
  for (int r = 0; r < (two ? N : 0); ++r) {
    acc[r][0] = _mm256_add_epi32(acc[r][0], odd[r][0]);
    acc[r][1] = _mm256_add_epi32(acc[r][1], odd[r][1]);
  }
#else
  if (BITS == 4) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t k = k0; k < k1; k += 32) {
      __m256i sums16[4][2];
      for (int r = 0; r < N; ++r) sums16[r][0] = sums16[r][1] = _mm256_setzero_si256();
      for (int64_t kk = k; kk < std::min(k + 32, k1); kk += 8) {
        const uint8_t* chunk = wp + (kk / 8) * 64;
        if (first) prefetch(chunk);
        const int8_t* ar[4];
        for (int r = 0; r < N; ++r) ar[r] = a.q + (r0 + r) * a.K + kk;
        chunk_sums4<N>(sums16, chunk, ar, low4);
      }
      for (int r = 0; r < N; ++r)
        for (int h = 0; h < 2; ++h) acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(sums16[r][h], ones));
    }
  } else {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int64_t k = k0; k < k1; k += 4) {
      const uint8_t* chunk = wp + (k / 4) * 64;
      if (first) prefetch(chunk);
      const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk)), flip);
      const __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32)), flip);
      // |q - 128|: -128 stays 0x80, which is 128 as the unsigned operand
      const __m256i m0 = _mm256_sign_epi8(w0, w0), m1 = _mm256_sign_epi8(w1, w1);
      for (int r = 0; r < N; ++r) {
        const __m256i av = _mm256_set1_epi32(load4(a.q + (r0 + r) * a.K + k));
        const __m256i p0 = _mm256_maddubs_epi16(m0, _mm256_sign_epi8(av, w0));
        const __m256i p1 = _mm256_maddubs_epi16(m1, _mm256_sign_epi8(av, w1));
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(p0, ones));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(p1, ones));
      }
    }
    for (int r = 0; r < N; ++r) {
      const __m256i back = _mm256_set1_epi32(128 * a.sums[(r0 + r) * a.groups + g]);
      acc[r][0] = _mm256_add_epi32(acc[r][0], back);
      acc[r][1] = _mm256_add_epi32(acc[r][1], back);
    }
  }
#endif
}

// always_inline: gcc left block_rows<4>'s group_rows<4> a function call per group (a 4-row pass 1.3x slower)
template <int N, int BITS, int GC>
__attribute__((always_inline)) inline void group_rows(const Weights& w, const Acts& a, const uint8_t* wp, int64_t b,
                                                      int64_t g, int64_t r0, bool first, __m256 (*accf)[2]) {
  __m256i acc[4][2];
  group_sums<N, BITS, GC>(w, a, wp, g, r0, first, acc);
  for (int h = 0; h < 2; ++h) {
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d_at(b, g) + 8 * h)));
    const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.m_at(b, g) + 8 * h)));
    for (int r = 0; r < N; ++r) {
      const int64_t i = (r0 + r) * a.groups + g;
      const __m256 scale = _mm256_mul_ps(dv, _mm256_set1_ps(a.s1[i]));
      const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), scale, accf[r][h]);
      accf[r][h] = _mm256_fnmadd_ps(mv, _mm256_set1_ps(a.s2[i]), f);
    }
  }
}

template <int R, int BITS, int GC>
void block_rows(const Weights& w, const Acts& a, int64_t b, int64_t r0, float* out, int64_t ldo) {
  __m256 accf[R][2];
  for (int r = 0; r < R; ++r) accf[r][0] = accf[r][1] = _mm256_setzero_ps();
  const uint8_t* wp = w.packed + b * w.block_bytes();
  for (int64_t g = 0; g < a.groups; ++g) {
    prefetch_scales(w, b, g);
    int q = 0;
    for (; q + 4 <= R; q += 4) group_rows<4, BITS, GC>(w, a, wp, b, g, r0 + q, q == 0, accf + q);
    if (R % 4 == 3) group_rows<3, BITS, GC>(w, a, wp, b, g, r0 + q, q == 0, accf + q);
    if (R % 4 == 2) group_rows<2, BITS, GC>(w, a, wp, b, g, r0 + q, q == 0, accf + q);
    if (R % 4 == 1) group_rows<1, BITS, GC>(w, a, wp, b, g, r0 + q, q == 0, accf + q);
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + (r0 + r) * ldo + b * kBlock + 8 * h, accf[r][h]);
}
#endif

#if CODECUE_VNNI || CODECUE_AVX2
template <int BITS, int GC>
void block_tile_group(const Weights& w, const Acts& a, int64_t b, int64_t r0, int rows, float* out, int64_t ldo) {
  switch (rows) {
    case 1: block_rows<1, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 2: block_rows<2, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 3: block_rows<3, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 4: block_rows<4, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 5: block_rows<5, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 6: block_rows<6, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 7: block_rows<7, BITS, GC>(w, a, b, r0, out, ldo); break;
    case 8: block_rows<8, BITS, GC>(w, a, b, r0, out, ldo); break;
    default: block_rows<9, BITS, GC>(w, a, b, r0, out, ldo); break;
  }
}

// The layers' usual groups (4-bit 32 columns, 8-bit 128) as constants: their steps unroll, no bounds are kept.
template <int BITS>
void block_tile(const Weights& w, const Acts& a, int64_t b, int64_t r0, int rows, float* out, int64_t ldo) {
  if (BITS == 4 && w.G == 32) block_tile_group<BITS, 32>(w, a, b, r0, rows, out, ldo);
  else if (BITS == 8 && w.G == 128) block_tile_group<BITS, 128>(w, a, b, r0, rows, out, ldo);
  else block_tile_group<BITS, 0>(w, a, b, r0, rows, out, ldo);
}
#endif

// The same arithmetic one lane at a time, for CPUs without AVX2 (tests; the calibration never picks it).
void block_tile_scalar(const Weights& w, const Acts& a, int64_t b, int64_t r0, int rows, float* out, int64_t ldo) {
  const uint8_t* wp = w.packed + b * w.block_bytes();
  for (int r = 0; r < rows; ++r) {
    const int8_t* ar = a.q + (r0 + r) * a.K;
    for (int c = 0; c < kBlock; ++c) {
      float acc = 0.0f;
      for (int64_t g = 0; g < a.groups; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * w.G; k < (g + 1) * w.G; ++k) {
          int32_t q;
          if (w.bits == 4) {
            const uint8_t byte = wp[(k / 8) * 64 + 4 * c + (k % 4)];
            q = (k % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
          } else {
            q = wp[(k / 4) * 64 + 4 * c + (k % 4)];
          }
          dot += q * static_cast<int32_t>(ar[k]);
        }
        const int64_t i = (r0 + r) * a.groups + g;
        acc = std::fma(static_cast<float>(dot), half_to_float(w.d_at(b, g)[c]) * a.s1[i], acc);
        acc = std::fma(-half_to_float(w.m_at(b, g)[c]), a.s2[i], acc);
      }
      out[(r0 + r) * ldo + b * kBlock + c] = acc;
    }
  }
}

// One row's activations to int8 per group of G columns (scale = max|x| / 127), with the groups' scales, scale x sum
// and (where asked) the sums.
void quantize_row(const float* x, int64_t K, int64_t G, int8_t* q, float* s1, float* s2, int32_t* sums) {
  for (int64_t g = 0; g < K / G; ++g) {
    const float* xg = x + g * G;
    int8_t* qg = q + g * G;
    float amax = 0.0f;
    for (int64_t k = 0; k < G; ++k) amax = std::fmax(amax, std::fabs(xg[k]));
    const float scale = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < G; ++k) {
      const int32_t v = static_cast<int32_t>(std::nearbyint(xg[k] * inv));
      qg[k] = static_cast<int8_t>(v);
      sum += v;
    }
    s1[g] = scale;
    s2[g] = scale * static_cast<float>(sum);
    if (sums != nullptr) sums[g] = sum;
  }
}

#if CODECUE_VNNI || CODECUE_AVX2
// quantize_row's numbers, 8 columns at a time: max |x| is the same in any order (NaNs skipped as fmax
// skips them), x·inv and the rounding to nearest even are the same operation per element, and the sums are
// integers. Serial and lane by lane it was 3-4 % of a prefill's samples under the AVX2 build, with the other
// thread waiting for it.
void quantize_row_simd(const float* x, int64_t K, int64_t G, int8_t* q, float* s1, float* s2, int32_t* sums) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t g = 0; g < K / G; ++g) {
    const float* xg = x + g * G;
    int8_t* qg = q + g * G;
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t k = 0; k < G; k += 8)  // (a, b) gives b where either is NaN: a NaN column leaves the max alone
      vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xg + k), abs_mask), vmax);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float amax = 0.0f;
    for (float v : lanes) amax = std::max(amax, v);
    const float scale = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i vsum = _mm256_setzero_si256();
    for (int64_t k = 0; k < G; k += 8) {
      const __m256i v = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xg + k), inv),
                                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      vsum = _mm256_add_epi32(vsum, v);
      const __m128i v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(qg + k), _mm_packs_epi16(v16, v16));
    }
    alignas(32) int32_t parts[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(parts), vsum);
    int32_t sum = 0;
    for (int32_t v : parts) sum += v;
    s1[g] = scale;
    s2[g] = scale * static_cast<float>(sum);
    if (sums != nullptr) sums[g] = sum;
  }
}
#endif

}  // namespace

// The vector path this build runs ("avx512-vnni", "avx-vnni", "avx2"; "none": lane by lane only).
std::string simd() {
  return CODECUE_VNNI ? "avx512-vnni" : CODECUE_AVX_VNNI ? "avx-vnni" : CODECUE_AVX2 ? "avx2" : "none";
}

// x: [M, K] (any float dtype); returns [M, N] float32.
torch::Tensor linear(torch::Tensor x, torch::Tensor packed, torch::Tensor d, torch::Tensor m, int64_t N,
                     int64_t G, int64_t bits, bool per_channel, bool use_simd) {
  TORCH_CHECK(x.dim() == 2, "x must be [tokens, in_features]");
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(K % G == 0 && G % 8 == 0, "in_features must be a multiple of the group, the group of 8");
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  TORCH_CHECK(packed.numel() == blocks * K * kBlock * bits / 8, "packed weights do not match the shape");
  const int64_t groups = K / G;
  auto xf = x.to(torch::kFloat32).contiguous();
  // The quantized activations live in this thread's scratch, reused from call to call: four tensor allocations a
  // call were ~1.4 us of a short pass's ~100 calls each.
  thread_local std::vector<int8_t> q_scratch;
  thread_local std::vector<float> s1_scratch, s2_scratch;
  thread_local std::vector<int32_t> sums_scratch;
  q_scratch.resize(M * K);
  s1_scratch.resize(M * groups);
  s2_scratch.resize(M * groups);
  const bool with_sums = CODECUE_AVX2 && !CODECUE_AVX_VNNI && bits == 8;  // only the AVX2 path's 8-bit layers read them
  if (with_sums) sums_scratch.resize(M * groups);
  int32_t* sums_p = with_sums ? sums_scratch.data() : nullptr;
  const bool vector = use_simd && (CODECUE_VNNI || CODECUE_AVX2);
  auto quantize = quantize_row;
#if CODECUE_VNNI || CODECUE_AVX2
  if (vector) quantize = quantize_row_simd;
#endif
  const float* xp = xf.data_ptr<float>();
  int8_t* qp = q_scratch.data();
  float *s1p = s1_scratch.data(), *s2p = s2_scratch.data();
  at::parallel_for(0, M, std::max<int64_t>(1, 16384 / K), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      quantize(xp + r * K, K, G, qp + r * K, s1p + r * groups, s2p + r * groups,
               sums_p != nullptr ? sums_p + r * groups : nullptr);
  });
  const int64_t ldo = blocks * kBlock;
  auto out = torch::empty({M, ldo}, torch::kFloat32);
  TORCH_CHECK(d.scalar_type() == torch::kInt16 && m.scalar_type() == torch::kInt16, "d and m must be fp16 bits in int16");
  const Weights w{packed.data_ptr<uint8_t>(), reinterpret_cast<const uint16_t*>(d.data_ptr<int16_t>()),
                  reinterpret_cast<const uint16_t*>(m.data_ptr<int16_t>()), K, G, bits, per_channel, groups};
  const Acts a{qp, s1p, s2p, sums_p, K, groups};
  float* o = out.data_ptr<float>();
  const int64_t tiles = (M + kMaxRows - 1) / kMaxRows;
  const int64_t per_tile = (M + tiles - 1) / tiles;  // 9 rows: 5 + 4, not 8 + 1
  // Blocks go out in shrinking runs to whichever thread asks next, not in halves fixed up front: on a busy machine
  // one thread falls behind and the other waited for it at the end of every layer (10-13 % of a pass's samples in
  // libgomp on 2 vCPUs).
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), (blocks + kBlocksPerTake - 1) / kBlocksPerTake);
  auto block_rows_all = [&](int64_t b) {
    for (int64_t r0 = 0; r0 < M; r0 += per_tile) {
      const int rows = static_cast<int>(std::min<int64_t>(per_tile, M - r0));
#if CODECUE_VNNI || CODECUE_AVX2
      if (vector) {
        if (bits == 4) block_tile<4>(w, a, b, r0, rows, o, ldo);
        else block_tile<8>(w, a, b, r0, rows, o, ldo);
        continue;
      }
#endif
      block_tile_scalar(w, a, b, r0, rows, o, ldo);
    }
  };
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t b0 = next.load(); b0 < blocks;) {
      // Half of a fair share of what is left: long runs of blocks first (the prefetchers follow one stream), 4 at
      // the end.
      const int64_t take = std::max<int64_t>(kBlocksPerTake, (blocks - b0) / (2 * workers));
      if (!next.compare_exchange_weak(b0, b0 + take)) continue;  // b0 now holds the newer value
      for (int64_t b = b0; b < std::min(b0 + take, blocks); ++b) block_rows_all(b);
      b0 = next.load();
    }
  });
  return ldo == N ? out : out.narrow(1, 0, N).contiguous();
}

// lean_ops.cpp
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, double scaling);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor delta, torch::Tensor weight, double eps);
torch::Tensor rope_into_cache(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_buf,
                              torch::Tensor v_buf, int64_t start, int64_t H, int64_t KV);
torch::Tensor silu_mul(torch::Tensor gate_up);
// lean_layer.cpp
void bind_lean_layer(pybind11::module& mod);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("simd", &simd, "the vector path compiled in: avx512-vnni, avx2 or none");
  mod.def("linear", &linear, "weight-only 4/8-bit linear with int8 activations");
  mod.def("decode_attention", &decode_attention, "attention of a few query tokens over the KV cache (lean_ops.cpp)");
  mod.def("rms_norm", &rms_norm, "RMSNorm of float32 rows");
  mod.def("add_rms_norm", &add_rms_norm, "x += delta in place, then RMSNorm of x");
  mod.def("rope_into_cache", &rope_into_cache, "rotate q and k, write k and v into the cache buffers, return q");
  mod.def("silu_mul", &silu_mul, "silu(gate) * up of a fused gate/up projection's output (lean_ops.cpp)");
  bind_lean_layer(mod);
}
