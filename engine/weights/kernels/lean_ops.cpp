// The ops of a short pass (decoding, verification: a few tokens) around the weight kernels, for
// engine/weights/lean_step.py; built into the same extension as vnni_linear.cpp.
//
// decode_attention: torch's matmul hands a [6 x 128] x [128 x 1,024] product to MKL's sgemm, which first packs the
// keys into panels. Read cold (the weights streamed since the last layer evict them) that took 160-270 us a layer for
// the 1.5B at 1,024 tokens of context on a Zen 4, where streaming the same 1 MB takes ~40 us. Here every key and value
// row is read once, straight from the cache buffer, and multiplied into all query rows of its KV head (grouped-query
// attention: the query heads that share a KV head share the read), with the softmax between them over each row's
// visible keys. Scores go 16 keys at a time (AVX2: 8; score_head_blocks: one block of keys in L1 for all rows, one
// lane-sum tree per block instead of a horizontal sum per key): measured faster than a key at a time for verify
// passes and one-token passes alike.
// rms_norm, add_rms_norm, rope_into_cache, silu_mul: what transformers runs as 2-10 small ATen ops each (~5-60 us
// apiece on 2 cores, 28 layers a pass), in one call.
//
// A row's numbers never depend on the other rows of the pass (each dot product and each accumulation runs in the
// same order whatever n is), so a verify pass computes each token as a one-token pass would.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// CODECUE_EMULATE_AVX_VNNI: a build that runs, on an AVX-512 CPU, what a CPU with AVX-VNNI but without AVX-512
// runs (engine/weights/vnni.py: EMULATED_MARCHES): these ops take their AVX2 loops there too.
#if defined(__AVX512F__) && !defined(CODECUE_EMULATE_AVX_VNNI)
#include <immintrin.h>
#define CODECUE_LEAN_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CODECUE_LEAN_AVX2 1  // the CPUs without AVX-512: the same loops with 8-float registers
#endif

namespace {

// Cephes' expf polynomial of the remainder (exp16, exp8), highest degree first.
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr int kRowsPerBlock = 4;  // query rows per sweep over the keys (4 independent dot-product chains)
// Cache rows asked for this many rows ahead (4 KB for 128-float rows): as for the vnni kernel's weights, the hardware
// prefetcher alone leaves a single stream per core well below the memory's bandwidth.
constexpr int kAheadRows = 8;

inline void prefetch_row(const float* row, int64_t D) {
  for (int64_t c = 0; c < D; c += 16) __builtin_prefetch(row + c, 0, 3);
}

#if defined(CODECUE_LEAN_AVX2)
// The 8 lanes' sum, always in the same order (halves, then quarters, then pairs).
inline float sum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

inline float max8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, 1)));
}
#endif

#if defined(CODECUE_LEAN_AVX512) || defined(CODECUE_LEAN_AVX2)
// exp16's arithmetic on 8 floats; 2^n built in the exponent bits (n is within -126 .. 127 after the clamp). The
// AVX-512 build has it too, for silu_mul.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int c = 1; c < 6; ++c) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[c]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}
#endif

// scores[r][j] = scale * dot(q_r, k_j) for `rows` rows of one KV head, keys 0..L-1 (only a row's visible keys are
// read afterwards: softmax_prefix, weigh_values). ROWS is the row count known at compile time (its accumulators stay
// in registers), 0 where it is not.
template <int ROWS>
void score_rows(const float* const* q, int rows, const float* k0, int64_t L, int64_t D, float scale,
                float* const* scores) {
  if (ROWS) rows = ROWS;
  for (int64_t j = 0; j < L; ++j) {
    const float* k = k0 + j * D;
    if (j + kAheadRows < L) prefetch_row(k + kAheadRows * D, D);
#if defined(CODECUE_LEAN_AVX512)
    if (D % 16 == 0) {
      __m512 acc[kRowsPerBlock];
      for (int r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t c = 0; c < D; c += 16) {
        const __m512 kc = _mm512_loadu_ps(k + c);
        for (int r = 0; r < rows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + c), kc, acc[r]);
      }
      for (int r = 0; r < rows; ++r) scores[r][j] = scale * _mm512_reduce_add_ps(acc[r]);
      continue;
    }
#elif defined(CODECUE_LEAN_AVX2)
    if (D % 8 == 0) {
      __m256 acc[kRowsPerBlock];
      for (int r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t c = 0; c < D; c += 8) {
        const __m256 kc = _mm256_loadu_ps(k + c);
        for (int r = 0; r < rows; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + c), kc, acc[r]);
      }
      for (int r = 0; r < rows; ++r) scores[r][j] = scale * sum8(acc[r]);
      continue;
    }
#endif
    for (int r = 0; r < rows; ++r) {
      float acc = 0.f;
      for (int64_t c = 0; c < D; ++c) acc += q[r][c] * k[c];
      scores[r][j] = scale * acc;
    }
  }
}

#if defined(CODECUE_LEAN_AVX512)
constexpr int64_t kKeyBlock = 16;  // keys a block of scores (score_head_blocks): the vector's lanes

// Lane j of the result: the sum of the 16 lanes of v[j]. A tree of unpacks and shuffles (45 instructions) in place of
// 16 horizontal sums (~8 each).
inline __m512 sum_lanes16(const __m512* v) {
  __m512 quads[4];
  for (int g = 0; g < 4; ++g) {
    const __m512* a = v + 4 * g;
    const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
    const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
    // per 128-bit lane: that lane's sums of a[0], a[1], a[2], a[3]
    quads[g] = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// scores[0 .. 15] of one query row (its D floats held in registers) against 16 keys: each key's products summed in
// one register, the 16 registers summed lane-wise by one tree. A key's score is computed the same way whatever the
// pass's other rows are.
template <int D>
void score_key_block(const float* q, const float* k, float scale, float* scores) {
  constexpr int CHUNKS = D / 16;
  __m512 qc[CHUNKS], acc[16];
  for (int c = 0; c < CHUNKS; ++c) qc[c] = _mm512_loadu_ps(q + 16 * c);
  for (int j = 0; j < 16; ++j) {
    const float* kj = k + j * 16 * CHUNKS;
    acc[j] = _mm512_mul_ps(qc[0], _mm512_loadu_ps(kj));
    for (int c = 1; c < CHUNKS; ++c) acc[j] = _mm512_fmadd_ps(qc[c], _mm512_loadu_ps(kj + 16 * c), acc[j]);
  }
  _mm512_storeu_ps(scores, _mm512_mul_ps(_mm512_set1_ps(scale), sum_lanes16(acc)));
}
#endif

#if defined(CODECUE_LEAN_AVX2)
// The AVX2 form of the AVX-512 scores: 8 keys a block (score_head_blocks), a query row's products for each key in
// one register (8 independent FMA chains where a sweep of 4 rows over one key had 4, then a horizontal sum per key),
// the 8 registers summed lane-wise by one tree. A layer's attention ran 1.11-1.22x faster on a Zen 3 (the 1.5B's and
// the 0.5B's heads, 1-9 tokens, 300-1,033 keys). (Weighing the values with the keys outer in blocks was level.)
constexpr int64_t kKeyBlock = 8;

// Lane j of the result: the sum of the 8 lanes of v[j].
inline __m256 sum_lanes8(const __m256* v) {
  const __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
  // per 128-bit half: that half's sums of v[0 .. 3] (s0123) and of v[4 .. 7] (s4567)
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// scores[0 .. 7] of one query row against 8 keys of D floats.
template <int D>
void score_key_block(const float* q, const float* k, float scale, float* scores) {
  constexpr int CHUNKS = D / 8;
  __m256 acc[8];
  const __m256 q0 = _mm256_loadu_ps(q);
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_mul_ps(q0, _mm256_loadu_ps(k + j * 8 * CHUNKS));
  for (int c = 1; c < CHUNKS; ++c) {
    const __m256 qc = _mm256_loadu_ps(q + 8 * c);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + j * 8 * CHUNKS + 8 * c), acc[j]);
  }
  _mm256_storeu_ps(scores, _mm256_mul_ps(_mm256_set1_ps(scale), sum_lanes8(acc)));
}
#endif

#if defined(CODECUE_LEAN_AVX512) || defined(CODECUE_LEAN_AVX2)

// Every row of one KV head against keys 0 .. L - 1, kKeyBlock at a time (score_key_block): the keys outer, so each
// block of keys (8 KB at d = 128 with AVX-512) is read from memory once and stays in L1 for all the rows. The last,
// partial block goes through the same arithmetic from a zero-padded copy: a key's score depends on its place in its
// block (j mod kKeyBlock, fixed by its index), never on how many keys the pass sees, so a verify pass and one-token
// passes give each key the same bits.
template <int D>
void score_head_blocks(const float* const* q, int64_t rows, const float* k0, int64_t L, float scale,
                       float* const* scores) {
  const int64_t whole = L / kKeyBlock * kKeyBlock;
  for (int64_t j0 = 0; j0 < whole; j0 += kKeyBlock) {
    const float* k = k0 + j0 * D;
    if (j0 + kKeyBlock < whole) {
      for (int64_t b = 0; b < kKeyBlock * D; b += 16) __builtin_prefetch(k + kKeyBlock * D + b, 0, 3);
    }
    for (int64_t r = 0; r < rows; ++r) score_key_block<D>(q[r], k, scale, scores[r] + j0);
  }
  if (whole == L) return;
  alignas(64) float padded[kKeyBlock * D] = {};
  std::memcpy(padded, k0 + whole * D, (L - whole) * D * sizeof(float));
  alignas(64) float block[kKeyBlock];
  for (int64_t r = 0; r < rows; ++r) {
    score_key_block<D>(q[r], padded, scale, block);
    std::memcpy(scores[r] + whole, block, (L - whole) * sizeof(float));
  }
}
#endif

#if defined(CODECUE_LEAN_AVX512)
// exp of 16 floats (Cephes' expf: 2^n times a degree-7 polynomial of the remainder, ~1 ulp), for the softmax.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int c = 1; c < 6; ++c) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[c]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}
#endif

// row[0 .. count - 1] = softmax of themselves, in place (the rest of the row is left as it is: never read). Every
// step runs in 16-element chunks from element 0, so the result depends on the count, not on the row's length.
void softmax_prefix(float* row, int64_t count) {
  int64_t j = 0;
  float top = -std::numeric_limits<float>::infinity(), sum = 0.f;
#if defined(CODECUE_LEAN_AVX512)
  __m512 top16 = _mm512_set1_ps(top);
  for (; j + 16 <= count; j += 16) top16 = _mm512_max_ps(top16, _mm512_loadu_ps(row + j));
  top = _mm512_reduce_max_ps(top16);
#elif defined(CODECUE_LEAN_AVX2)
  if (count >= 8) {
    __m256 top8 = _mm256_set1_ps(top);
    for (; j + 8 <= count; j += 8) top8 = _mm256_max_ps(top8, _mm256_loadu_ps(row + j));
    top = max8(top8);
  }
#endif
  for (int64_t t = j; t < count; ++t) top = std::max(top, row[t]);
  j = 0;
#if defined(CODECUE_LEAN_AVX512)
  const __m512 shift = _mm512_set1_ps(top);
  __m512 sum16 = _mm512_setzero_ps();
  for (; j + 16 <= count; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), shift));
    _mm512_storeu_ps(row + j, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  if (j < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - j)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + j), shift));
    _mm512_mask_storeu_ps(row + j, tail, e);
    sum16 = _mm512_add_ps(sum16, _mm512_maskz_mov_ps(tail, e));
    j = count;
  }
  sum = _mm512_reduce_add_ps(sum16);
#elif defined(CODECUE_LEAN_AVX2)
  const __m256 shift = _mm256_set1_ps(top);
  __m256 sum8v = _mm256_setzero_ps();
  for (; j + 8 <= count; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), shift));
    _mm256_storeu_ps(row + j, e);
    sum8v = _mm256_add_ps(sum8v, e);
  }
  sum = sum8(sum8v);
#endif
  for (int64_t t = j; t < count; ++t) {
    row[t] = std::exp(row[t] - top);
    sum += row[t];
  }
  const float inv = 1.f / sum;
  for (int64_t t = 0; t < count; ++t) row[t] *= inv;
}

// out_r = sum_j p[r][j] * v_j for rows of one KV head, over each row's visible keys.
template <int ROWS>
void weigh_values(const float* const* p, int rows, const float* v0, int64_t D, const int64_t* visible,
                  float* const* out) {
  if (ROWS) rows = ROWS;
  int64_t last = 0;
  for (int r = 0; r < rows; ++r) last = std::max(last, visible[r]);
  for (int64_t c0 = 0; c0 < D; c0 += 64) {  // 64 columns x 4 rows: 16 accumulators in registers
    const int64_t width = std::min<int64_t>(64, D - c0);
#if defined(CODECUE_LEAN_AVX512)
    if (width == 64) {
      __m512 acc[kRowsPerBlock][4];
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
      for (int64_t j = 0; j < last; ++j) {
        const float* v = v0 + j * D + c0;
        if (j + kAheadRows < last) prefetch_row(v + kAheadRows * D, width);
        const __m512 v0c = _mm512_loadu_ps(v), v1c = _mm512_loadu_ps(v + 16), v2c = _mm512_loadu_ps(v + 32),
                     v3c = _mm512_loadu_ps(v + 48);
        for (int r = 0; r < rows; ++r) {
          if (j >= visible[r]) continue;
          const __m512 pr = _mm512_set1_ps(p[r][j]);
          acc[r][0] = _mm512_fmadd_ps(pr, v0c, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(pr, v1c, acc[r][1]);
          acc[r][2] = _mm512_fmadd_ps(pr, v2c, acc[r][2]);
          acc[r][3] = _mm512_fmadd_ps(pr, v3c, acc[r][3]);
        }
      }
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out[r] + c0 + 16 * c, acc[r][c]);
      continue;
    }
#elif defined(CODECUE_LEAN_AVX2)
    if (width == 64) {
      for (int64_t c1 = c0; c1 < c0 + 64; c1 += 16) {  // 16 columns x 4 rows: 8 accumulators in registers
        __m256 acc[kRowsPerBlock][2];
        for (int r = 0; r < rows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int64_t j = 0; j < last; ++j) {
          const float* v = v0 + j * D + c1;
          if (c1 == c0 && j + kAheadRows < last) prefetch_row(v + kAheadRows * D, width);
          const __m256 va = _mm256_loadu_ps(v), vb = _mm256_loadu_ps(v + 8);
          for (int r = 0; r < rows; ++r) {
            if (j >= visible[r]) continue;
            const __m256 pr = _mm256_set1_ps(p[r][j]);
            acc[r][0] = _mm256_fmadd_ps(pr, va, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(pr, vb, acc[r][1]);
          }
        }
        for (int r = 0; r < rows; ++r) {
          _mm256_storeu_ps(out[r] + c1, acc[r][0]);
          _mm256_storeu_ps(out[r] + c1 + 8, acc[r][1]);
        }
      }
      continue;
    }
#endif
    for (int r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) out[r][c0 + c] = 0.f;
      for (int64_t j = 0; j < visible[r]; ++j)
        for (int64_t c = 0; c < width; ++c) out[r][c0 + c] += p[r][j] * v0[j * D + c0 + c];
    }
  }
}

}  // namespace

// q: [n, heads, d] float32; keys, values: [1, kv_heads, L, d] float32 with contiguous rows (any head stride: views
// of a cache buffer with room to spare). Query token t sits at position L - n + t and sees keys 0 .. L - n + t.
// Returns [n, heads * d] float32.
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, double scaling) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 4 && values.dim() == 4, "q [n, heads, d], keys/values [1, kv, L, d]");
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && keys.scalar_type() == torch::kFloat32 &&
              values.scalar_type() == torch::kFloat32, "float32 only");
  const int64_t n = q.size(0), H = q.size(1), D = q.size(2), KV = keys.size(1), L = keys.size(2);
  TORCH_CHECK(keys.size(0) == 1 && values.sizes() == keys.sizes() && keys.size(3) == D, "shapes do not match");
  TORCH_CHECK(H % KV == 0 && L >= n, "heads must be a multiple of the KV heads, the cache must hold the pass");
  TORCH_CHECK(keys.stride(3) == 1 && keys.stride(2) == D && values.stride(3) == 1 && values.stride(2) == D,
              "key and value rows must be contiguous");
  const int64_t G = H / KV, R = G * n;  // rows per KV head: r = g * n + t for query head kv * G + g, token t
  auto qc = q.contiguous();
  auto scores = torch::empty({KV, R, L}, torch::kFloat32);
  const float* qp = qc.data_ptr<float>();
  const float* kp = keys.data_ptr<float>();
  const float* vp = values.data_ptr<float>();
  float* sp = scores.data_ptr<float>();
  const int64_t k_head = keys.stride(1), v_head = values.stride(1);
  const float scale = static_cast<float>(scaling);
  auto query_row = [&](int64_t kv, int64_t r) { return qp + ((r % n) * H + kv * G + r / n) * D; };
  auto visible = [&](int64_t r) { return L - n + r % n + 1; };  // keys 0 .. visible - 1

  auto out = torch::empty({n, H * D}, torch::kFloat32);
  float* op = out.data_ptr<float>();
  // Scores, softmax and weighted values of a KV head's rows in one task (with 2 threads: one head each): one
  // parallel region a layer instead of three (a fork and join costs ~1.3 us on 2 cores). The rows go
  // kRowsPerBlock at a time; a row's arithmetic is the same in any task. Keys in blocks (score_head_blocks: 16 with
  // AVX-512, 8 with AVX2) where the head's width allows, else one at a time (score_rows).
  bool blocked = false;
#if defined(CODECUE_LEAN_AVX512) || defined(CODECUE_LEAN_AVX2)
  blocked = D == 16 || D == 32 || D == 64 || D == 128;
#endif
  at::parallel_for(0, KV, 1, [&](int64_t begin, int64_t end) {
    std::vector<const float*> q_rows(R);
    std::vector<float*> s_rows(R);
    for (int64_t kv = begin; kv < end; ++kv) {
      for (int64_t r = 0; r < R; ++r) {
        q_rows[r] = query_row(kv, r);
        s_rows[r] = sp + (kv * R + r) * L;
      }
      const float* k = kp + kv * k_head;
      if (blocked) {
#if defined(CODECUE_LEAN_AVX512) || defined(CODECUE_LEAN_AVX2)
        switch (D) {
          case 128: score_head_blocks<128>(q_rows.data(), R, k, L, scale, s_rows.data()); break;
          case 64: score_head_blocks<64>(q_rows.data(), R, k, L, scale, s_rows.data()); break;
          case 32: score_head_blocks<32>(q_rows.data(), R, k, L, scale, s_rows.data()); break;
          default: score_head_blocks<16>(q_rows.data(), R, k, L, scale, s_rows.data()); break;
        }
#endif
      } else {
        for (int64_t r = 0; r < R; r += kRowsPerBlock) {
          const int rows = static_cast<int>(std::min<int64_t>(kRowsPerBlock, R - r));
          switch (rows) {  // full blocks, and the last one of 1-3 rows, with their accumulators in registers
            case 4: score_rows<4>(q_rows.data() + r, rows, k, L, D, scale, s_rows.data() + r); break;
            case 3: score_rows<3>(q_rows.data() + r, rows, k, L, D, scale, s_rows.data() + r); break;
            case 2: score_rows<2>(q_rows.data() + r, rows, k, L, D, scale, s_rows.data() + r); break;
            default: score_rows<1>(q_rows.data() + r, rows, k, L, D, scale, s_rows.data() + r); break;
          }
        }
      }
      // Softmax of each row over its visible keys only (ATen's over the whole row sums a row in an order that
      // depends on the row's full length: a verify pass and a one-token pass at the same position would differ in
      // the last bit).
      for (int64_t r = 0; r < R; ++r) softmax_prefix(s_rows[r], visible(r));
      for (int64_t r = 0; r < R; r += kRowsPerBlock) {
        const int rows = static_cast<int>(std::min<int64_t>(kRowsPerBlock, R - r));
        const float* p_rows[kRowsPerBlock];
        float* o_rows[kRowsPerBlock];
        int64_t seen[kRowsPerBlock];
        for (int i = 0; i < rows; ++i) {
          const int64_t row = r + i;
          p_rows[i] = s_rows[row];
          o_rows[i] = op + ((row % n) * H + kv * G + row / n) * D;
          seen[i] = visible(row);
        }
        switch (rows) {
          case 4: weigh_values<4>(p_rows, rows, vp + kv * v_head, D, seen, o_rows); break;
          case 3: weigh_values<3>(p_rows, rows, vp + kv * v_head, D, seen, o_rows); break;
          case 2: weigh_values<2>(p_rows, rows, vp + kv * v_head, D, seen, o_rows); break;
          default: weigh_values<1>(p_rows, rows, vp + kv * v_head, D, seen, o_rows); break;
        }
      }
    }
  });
  return out;
}

namespace {

void check_rows(const torch::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              name, " must be a contiguous float32 [rows, width] tensor");
}

// out = x * rsqrt(mean(x^2) + eps) * weight, row by row (transformers' Qwen2RMSNorm in float32).
void norm_rows(const float* x, const float* weight, int64_t rows, int64_t width, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < width; ++c) sum += xr[c] * xr[c];
    const float inv = 1.f / std::sqrt(sum / static_cast<float>(width) + eps);
    float* o = out + r * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) o[c] = weight[c] * (xr[c] * inv);
  }
}

// out = rms_norm(x + delta) row by row, x updated in place where delta is given. A row per thread in a verify pass
// (one token: no fork); a row's arithmetic is the same on any thread.
torch::Tensor norm_rows_apart(torch::Tensor x, const float* delta, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(weight.scalar_type() == torch::kFloat32 && weight.is_contiguous() && weight.numel() == x.size(1),
              "weight must be float32 [width]");
  auto out = torch::empty_like(x);
  const int64_t width = x.size(1);
  float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, x.size(0), 1, [&](int64_t begin, int64_t end) {
    if (delta != nullptr) {
      for (int64_t r = begin; r < end; ++r) {
        float* xr = xp + r * width;
        const float* dr = delta + r * width;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) xr[c] += dr[c];
      }
    }
    norm_rows(xp + begin * width, weight.data_ptr<float>(), end - begin, width, static_cast<float>(eps),
              op + begin * width);
  });
  return out;
}

}  // namespace

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  check_rows(x, "x");
  return norm_rows_apart(x, nullptr, weight, eps);
}

// x += delta (the residual stream, in place), then returns rms_norm(x).
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor delta, torch::Tensor weight, double eps) {
  check_rows(x, "x");
  check_rows(delta, "delta");
  TORCH_CHECK(delta.sizes() == x.sizes(), "delta must match x");
  return norm_rows_apart(x, delta.data_ptr<float>(), weight, eps);
}

namespace {

// out = silu(gate) * up over one row, silu(x) = x / (1 + exp(-x)) with exp8 (~1 ulp). Every column goes
// through the same vector arithmetic (the last, partial chunk from a zero-padded copy), so a column's result never
// depends on the row's width or on the other rows.
void silu_mul_row(const float* gate, const float* up, int64_t width, float* out) {
#if defined(CODECUE_LEAN_AVX512) || defined(CODECUE_LEAN_AVX2)
  constexpr int64_t kLanes = 8;  // on AVX-512 too: ~1 us a layer either way
  auto chunk = [](const float* g, const float* u, float* o) {
    const __m256 x = _mm256_loadu_ps(g);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e)), _mm256_loadu_ps(u)));
  };
  int64_t c = 0;
  for (; c + kLanes <= width; c += kLanes) chunk(gate + c, up + c, out + c);
  if (c < width) {
    alignas(64) float g[kLanes] = {}, u[kLanes] = {}, o[kLanes];
    std::memcpy(g, gate + c, (width - c) * sizeof(float));
    std::memcpy(u, up + c, (width - c) * sizeof(float));
    chunk(g, u, o);
    std::memcpy(out + c, o, (width - c) * sizeof(float));
  }
#else
  for (int64_t c = 0; c < width; ++c) out[c] = gate[c] / (1.f + std::exp(-gate[c])) * up[c];
#endif
}

}  // namespace

// gate_up: [n, 2 I], a fused gate/up projection's output (the gate's columns first). Returns silu(gate) * up, [n, I]:
// Qwen2MLP's act_fn(gate_proj(x)) * up_proj(x) in one pass over each row, where ATen ran SiLU and the product as two
// ops through a temporary.
torch::Tensor silu_mul(torch::Tensor gate_up) {
  check_rows(gate_up, "gate_up");
  const int64_t n = gate_up.size(0), width = gate_up.size(1) / 2;
  TORCH_CHECK(gate_up.size(1) == 2 * width, "gate_up must hold the gate's and the up projection's columns");
  auto out = torch::empty({n, width}, torch::kFloat32);
  const float* src = gate_up.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {  // a row per thread in a verify pass (~6 us a row)
    for (int64_t r = begin; r < end; ++r) {
      const float* row = src + r * 2 * width;
      silu_mul_row(row, row + width, width, dst + r * width);
    }
  });
  return out;
}

// qkv: [n, (H + 2 KV) * D], the fused projection's output (q heads, then k heads, then v heads); cos, sin: [n, D]
// (transformers' rotary embedding, its two halves equal). Rotates q and k (NeoX halves, as apply_rotary_pos_emb),
// writes k and v into rows start .. start + n - 1 of the cache buffers k_buf, v_buf ([1, KV, capacity, D], rows
// contiguous), and returns the rotated q as [n, H, D].
torch::Tensor rope_into_cache(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_buf,
                              torch::Tensor v_buf, int64_t start, int64_t H, int64_t KV) {
  check_rows(qkv, "qkv");
  check_rows(cos, "cos");
  check_rows(sin, "sin");
  const int64_t n = qkv.size(0), D = cos.size(1), half = D / 2;
  TORCH_CHECK(qkv.size(1) == (H + 2 * KV) * D && cos.size(0) == n && sin.sizes() == cos.sizes() && D % 2 == 0,
              "qkv must be [n, (heads + 2 kv_heads) * head_dim], cos and sin [n, head_dim]");
  TORCH_CHECK(k_buf.dim() == 4 && k_buf.scalar_type() == torch::kFloat32 && v_buf.sizes() == k_buf.sizes() &&
              v_buf.scalar_type() == torch::kFloat32 && k_buf.size(1) == KV && k_buf.size(3) == D &&
              k_buf.stride(3) == 1 && k_buf.stride(2) == D && v_buf.stride(3) == 1 && v_buf.stride(2) == D &&
              start >= 0 && start + n <= k_buf.size(2), "cache buffers must be float32 [1, kv, capacity, d] with room");
  auto q = torch::empty({n, H, D}, torch::kFloat32);
  const float* src = qkv.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  float* kp = k_buf.data_ptr<float>();
  float* vp = v_buf.data_ptr<float>();
  auto rotate = [&](const float* x, const float* ct, const float* st, float* out) {
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      out[i] = x[i] * ct[i] + (-x[i + half]) * st[i];
      out[i + half] = x[i + half] * ct[i + half] + x[i] * st[i + half];
    }
  };
  for (int64_t t = 0; t < n; ++t) {
    const float* row = src + t * (H + 2 * KV) * D;
    const float* ct = c + t * D;
    const float* st = s + t * D;
    for (int64_t h = 0; h < H; ++h) rotate(row + h * D, ct, st, qp + (t * H + h) * D);
    for (int64_t h = 0; h < KV; ++h) {
      rotate(row + (H + h) * D, ct, st, kp + h * k_buf.stride(1) + (start + t) * D);
      std::memcpy(vp + h * v_buf.stride(1) + (start + t) * D, row + (H + KV + h) * D, D * sizeof(float));
    }
  }
  return q;
}

