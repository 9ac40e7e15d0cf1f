/* y = x · Wᵀ with W kept in the blocks a GGUF quantizer wrote (minispark/target/block_quant.py builds and calls this).

   W (N × K) is cut into blocks of 32 weights along each row. 4-bit blocks: w = scale · q + offset, q a nibble
   (16 bytes a block: byte j holds weight j in its low nibble and weight j + 16 in its high one, as GGUF's Q4_1).
   8-bit blocks: w = scale · q, q a signed byte. scale and offset are one float each per block. A block is
   expanded to fp32 in registers, each weight with one rounding (scale · q is exact: scale has at most 17
   significant bits, q 8), the value the dequantizer wrote, then multiplied in fp32: the products of the fp32
   target, summed in another order. x (M × K) and y (M × N) are row-major fp32; K is a multiple of 32. */
#include <stdint.h>
#include <immintrin.h>

#ifndef __AVX512F__
#error "block kernels need AVX-512 (x86-64 with avx512f)"
#endif

#define BLOCK 32
#define INLINE static inline __attribute__((always_inline))

INLINE void q4_block(const uint8_t *p, float s, float o, __m512 *lo, __m512 *hi) {
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512 vs = _mm512_set1_ps(s), vo = _mm512_set1_ps(o);
    *lo = _mm512_fmadd_ps(vs, _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(15))), vo);
    *hi = _mm512_fmadd_ps(vs, _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), vo);
}

INLINE void q8_block(const uint8_t *p, float s, __m512 *lo, __m512 *hi) {
    __m512 vs = _mm512_set1_ps(s);
    *lo = _mm512_mul_ps(vs, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))));
    *hi = _mm512_mul_ps(vs, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)))));
}

/* NR weight rows × MT input rows, every accumulator in a register; each block is expanded once for MT rows. */
INLINE void micro(int bits, const float *x, int K, const uint8_t *q, const float *scale, const float *offset,
                  float *y, int N, int n, int i0, const int NR, const int MT) {
    const int blocks = K / BLOCK;
    const size_t row_bytes = bits == 4 ? (size_t)K / 2 : (size_t)K;
    __m512 acc[8][8];
    _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)
        _Pragma("GCC unroll 8") for (int i = 0; i < MT; i++) acc[r][i] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {
            size_t row = (size_t)(n + r);
            __m512 lo, hi;
            if (bits == 4)
                q4_block(q + row * row_bytes + (size_t)b * 16, scale[row * blocks + b], offset[row * blocks + b], &lo, &hi);
            else
                q8_block(q + row * row_bytes + (size_t)b * BLOCK, scale[row * blocks + b], &lo, &hi);
            _Pragma("GCC unroll 8") for (int i = 0; i < MT; i++) {
                const float *xb = x + (size_t)(i0 + i) * K + (size_t)b * BLOCK;
                acc[r][i] = _mm512_fmadd_ps(_mm512_loadu_ps(xb), lo, acc[r][i]);
                acc[r][i] = _mm512_fmadd_ps(_mm512_loadu_ps(xb + 16), hi, acc[r][i]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)
        _Pragma("GCC unroll 8") for (int i = 0; i < MT; i++) y[(size_t)(i0 + i) * N + n + r] = _mm512_reduce_add_ps(acc[r][i]);
}

/* Weight rows n0..n1 for every input row: tiles of 8 weight rows, input rows 8, 4, 2 or 1 at a time. */
INLINE void rows(int bits, const float *x, int M, int K, const uint8_t *q, const float *scale, const float *offset,
                 float *y, int N, int n0, int n1) {
    int n = n0;
    for (; n + 8 <= n1; n += 8) {
        int i = 0;
        for (; i + 8 <= M; i += 8)
            for (int r = 0; r < 8; r += 2) micro(bits, x, K, q, scale, offset, y, N, n + r, i, 2, 8);
        for (; i + 4 <= M; i += 4)
            for (int r = 0; r < 8; r += 4) micro(bits, x, K, q, scale, offset, y, N, n + r, i, 4, 4);
        for (; i + 2 <= M; i += 2)
            for (int r = 0; r < 8; r += 4) micro(bits, x, K, q, scale, offset, y, N, n + r, i, 4, 2);
        for (; i < M; i++) micro(bits, x, K, q, scale, offset, y, N, n, i, 8, 1);
    }
    for (; n < n1; n++)
        for (int i = 0; i < M; i++) micro(bits, x, K, q, scale, offset, y, N, n, i, 1, 1);
}

static void rows4(const float *x, int M, int K, const uint8_t *q, const float *scale, const float *offset,
                  float *y, int N, int n0, int n1) { rows(4, x, M, K, q, scale, offset, y, N, n0, n1); }
static void rows8(const float *x, int M, int K, const uint8_t *q, const float *scale, const float *offset,
                  float *y, int N, int n0, int n1) { rows(8, x, M, K, q, scale, offset, y, N, n0, n1); }

typedef void (*rows_fn)(const float *, int, int, const uint8_t *, const float *, const float *, float *, int, int, int);

/* Threads split the weight rows in chunks of 64 (each thread streams its own part of W). */
static void run(rows_fn f, const float *x, int M, int K, const uint8_t *q, const float *scale, const float *offset,
                int N, float *y, int threads) {
    if (threads <= 1) {
        f(x, M, K, q, scale, offset, y, N, 0, N);
        return;
    }
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int c = 0; c < N; c += 64) f(x, M, K, q, scale, offset, y, N, c, c + 64 < N ? c + 64 : N);
}

void q4_matmul(const float *x, int M, int K, const uint8_t *q, const float *scale, const float *offset,
               int N, float *y, int threads) {
    run(rows4, x, M, K, q, scale, offset, N, y, threads);
}

void q8_matmul(const float *x, int M, int K, const uint8_t *q, const float *scale, int N, float *y, int threads) {
    run(rows8, x, M, K, q, scale, scale, N, y, threads);
}
