/* Attention of a few query rows per sequence over its KV cache (minispark/target/attention.py builds and calls this).

   A decoding step, a batched round and a short verify attend a few queries per kv head (query heads per kv head ×
   new tokens; at most SMALL_ATTENTION_QUERIES) to a cache of L keys; there each (sequence, kv head) is a few dozen
   FLOPs per key and the cost is reading K and V. Each of the G·Q queries
   that share a kv head (G query heads per kv head, Q rows) is scored against every key as the keys stream past,
   softmaxed in fp32 (exp below: Cephes' polynomial, ~1 ulp) and summed over V. A query's result depends on its
   own row alone, never on the other queries of the forward or on masked columns (exact zeros after the softmax),
   so one token computes the same whether it is verified alone, in a block or beside other sequences. */
#include <math.h>
#include <stdint.h>
#include <immintrin.h>

#ifndef __AVX512F__
#error "attention kernels need AVX-512 (x86-64 with avx512f)"
#endif

#define INLINE static inline __attribute__((always_inline))

/* e^x for x ≤ 0 (scores minus their maximum): 2^n · p(r), |r| ≤ ln 2 / 2; exactly 0 below −87.3 (a masked
   column), where e^x is no normal float. */
INLINE __m512 exp_nonpositive(__m512 x) {
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

/* One (sequence, kv head). q: M = G·Q query rows of D (row i: query head i / Q, row i % Q); k, v: L rows of D;
   mask: Q rows of L additive (NULL: none); out: M rows of D; p: scratch of M × L. */
static void kv_head(const float *q, int G, int Q, const float *k, const float *v, int L, int D, const float *mask,
                    float scale, float *out, float *p) {
    const int M = G * Q;
    for (int j = 0; j < L; j++) {
        const float *kj = k + (long)j * D;
        for (int i = 0; i < M; i++) {
            const float *qi = q + (long)i * D;
            __m512 dot = _mm512_setzero_ps();
            for (int d = 0; d < D; d += 16)
                dot = _mm512_fmadd_ps(_mm512_loadu_ps(qi + d), _mm512_loadu_ps(kj + d), dot);
            p[(long)i * L + j] = _mm512_reduce_add_ps(dot) * scale + (mask ? mask[(long)(i % Q) * L + j] : 0.0f);
        }
    }
    for (int i = 0; i < M; i++) {
        float *row = p + (long)i * L, top = -INFINITY;
        for (int j = 0; j < L; j++)
            top = row[j] > top ? row[j] : top;
        __m512 vtop = _mm512_set1_ps(top), sum = _mm512_setzero_ps();
        for (int j = 0; j < L; j += 16) {  /* lane j % 16 of the sum, whatever L is */
            __mmask16 live = L - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (L - j)) - 1);
            __m512 e = _mm512_maskz_mov_ps(live, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, row + j), vtop)));
            _mm512_mask_storeu_ps(row + j, live, e);
            sum = _mm512_add_ps(sum, e);
        }
        const float inverse = 1.0f / _mm512_reduce_add_ps(sum);
        for (int j = 0; j < L; j++)
            row[j] *= inverse;
    }
    for (int i = 0; i < M; i++)
        for (int d = 0; d < D; d += 16)
            _mm512_storeu_ps(out + (long)i * D + d, _mm512_setzero_ps());
    for (int j = 0; j < L; j++) {
        const float *vj = v + (long)j * D;
        for (int i = 0; i < M; i++) {
            const __m512 weight = _mm512_set1_ps(p[(long)i * L + j]);
            float *o = out + (long)i * D;
            for (int d = 0; d < D; d += 16)
                _mm512_storeu_ps(o + d, _mm512_fmadd_ps(weight, _mm512_loadu_ps(vj + d), _mm512_loadu_ps(o + d)));
        }
    }
}

/* q, out: (B, H, Q, D) contiguous; k, v: (B, Hkv, ≥L, D) with batch and head strides kb, kh (floats), each row of
   D contiguous; mask: (B, 1, Q, L) contiguous additive, or NULL; scratch: B·H·Q·L floats. Head h reads kv head
   h / (H / Hkv). D is a multiple of 16. Threads split the (sequence, kv head) pairs. */
void small_attention(const float *q, int B, int H, int Q, int D, const float *k, const float *v, long kb, long kh,
                     int Hkv, int L, const float *mask, float scale, float *out, float *scratch, int threads) {
    const int G = H / Hkv;
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2) if (threads > 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Hkv; g++) {
            const long first = ((long)b * H + (long)g * G) * Q;  /* the kv head's first query row */
            kv_head(q + first * D, G, Q, k + b * kb + g * kh, v + b * kb + g * kh, L, D,
                    mask ? mask + (long)b * Q * L : 0, scale, out + first * D, scratch + first * L);
        }
}
