/* samebits invariant GEMM: y[m, n] = sum over k = 0..K-1, in that order, of x[m, k] * w[n, k],
 * one fused multiply-add per step, for every (m, n). Each output element is one SIMD lane
 * running the same sequence of FMAs whatever the number of rows, the row's position in the
 * batch, the vector width (AVX-512 or AVX2) or the split of columns between threads: the
 * reduction order is a function of k only.
 *
 * Weights are stored in strips of QN = 32 output columns (N padded with zero columns to a
 * multiple of 32), one strip after the other, each strip in one of three formats:
 *   SB_F32:  float32 w[k][32] for k = 0..K-1.
 *   SB_Q4_1: per block of QK = 32 k: float32 d[32], float32 m[32], then for each k 16 bytes
 *            whose byte j holds column j in its low nibble and column j + 16 in its high one;
 *            w = d * q + m (a multiply then an add, two roundings: GGUF Q4_1's dequantization).
 *   SB_Q8_0: per block of 32 k: float32 d[32], then for each k 32 int8; w = q * d (GGUF Q8_0).
 *   SB_BF16, SB_F16: 16-bit w[k][32]; widened to float32 exactly (bfloat16: the bits shifted
 *            left by 16; IEEE half: the hardware conversion or its exact scalar form).
 * A quantized strip is expanded to float32 w[k][32] (the exact values the GGUF loader
 * produces) before the multiply-adds, so its outputs are bitwise those of the SB_F32 strip
 * holding the loader's weights; only the bytes read from memory shrink. */
#include <stdlib.h>

#include <immintrin.h>

#include "sbpool.h"

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vec;
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VZERO _mm512_setzero_ps
#else
#define VW 8
typedef __m256 vec;
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VZERO _mm256_setzero_ps
#endif
#define NR (2 * VW)
#define QN 32
#define QK 32

enum { SB_F32 = 0, SB_Q4_1 = 1, SB_Q8_0 = 2, SB_BF16 = 3, SB_F16 = 4 };

#define Q4_1_BYTES (2 * QN * 4 + QK * QN / 2)
#define Q8_0_BYTES (QN * 4 + QK * QN)

#define DEFINE_TILE(MR)                                                                      \
    static void tile_##MR(const float *x, long ldx, const float *w, long ldw, long K,        \
                          float *y, long ldy) {                                              \
        vec c0[MR], c1[MR];                                                                  \
        for (int i = 0; i < MR; i++) {                                                       \
            c0[i] = VZERO();                                                                 \
            c1[i] = VZERO();                                                                 \
        }                                                                                    \
        for (long k = 0; k < K; k++) {                                                       \
            vec w0 = VLOAD(w + k * ldw), w1 = VLOAD(w + k * ldw + VW);                       \
            for (int i = 0; i < MR; i++) {                                                   \
                vec a = VSET1(x[i * ldx + k]);                                               \
                c0[i] = VFMA(a, w0, c0[i]);                                                  \
                c1[i] = VFMA(a, w1, c1[i]);                                                  \
            }                                                                                \
        }                                                                                    \
        for (int i = 0; i < MR; i++) {                                                       \
            VSTORE(y + i * ldy, c0[i]);                                                      \
            VSTORE(y + i * ldy + VW, c1[i]);                                                 \
        }                                                                                    \
    }

DEFINE_TILE(1)
DEFINE_TILE(2)
DEFINE_TILE(3)
DEFINE_TILE(4)
DEFINE_TILE(5)
DEFINE_TILE(6)
DEFINE_TILE(7)
DEFINE_TILE(8)

#define MR_MAX 8

typedef void (*tile_fn)(const float *, long, const float *, long, long, float *, long);
static const tile_fn TILES[MR_MAX + 1] = {0,      tile_1, tile_2, tile_3, tile_4,
                                          tile_5, tile_6, tile_7, tile_8};

/* Bytes of one strip of K rows in `format` (0 if the format or K is not supported). */
static long strip_bytes_of(long format, long K) {
    if (format == SB_F32) return K * QN * (long)sizeof(float);
    if (format == SB_BF16 || format == SB_F16) return K * QN * 2;
    if (K % QK) return 0;
    if (format == SB_Q4_1) return K / QK * Q4_1_BYTES;
    if (format == SB_Q8_0) return K / QK * Q8_0_BYTES;
    return 0;
}

/* One k of a Q4_1 strip: 16 bytes q -> w[0..31] = d * nibble + m (mul, then add). */
static inline void expand_q4_1_row(const unsigned char *q, const float *d, const float *m,
                                   float *w) {
#if defined(__AVX512F__)
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
    _mm512_storeu_ps(w, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(d), lo), _mm512_loadu_ps(m)));
    _mm512_storeu_ps(w + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(d + 16), hi),
                                           _mm512_loadu_ps(m + 16)));
#else
    for (int j = 0; j < QN / 2; j++) {
        float lo = d[j] * (float)(q[j] & 15), hi = d[j + QN / 2] * (float)(q[j] >> 4);
        w[j] = lo + m[j];
        w[j + QN / 2] = hi + m[j + QN / 2];
    }
#endif
}

/* One k of a Q8_0 strip: 32 int8 q -> w[0..31] = q * d. */
static inline void expand_q8_0_row(const signed char *q, const float *d, float *w) {
#if defined(__AVX512F__)
    for (int h = 0; h < QN; h += 16) {
        __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + h)));
        _mm512_storeu_ps(w + h, _mm512_mul_ps(_mm512_cvtepi32_ps(b), _mm512_loadu_ps(d + h)));
    }
#else
    for (int j = 0; j < QN; j++) w[j] = (float)q[j] * d[j];
#endif
}

static void expand_q4_1(const unsigned char *p, long K, float *w) {
    for (long b = 0; b < K / QK; b++, p += Q4_1_BYTES) {
        const float *d = (const float *)p, *m = d + QN;
        const unsigned char *q = p + 2 * QN * sizeof(float);
        for (int k = 0; k < QK; k++) expand_q4_1_row(q + k * QN / 2, d, m, w + k * QN);
        w += QK * QN;
    }
}

static void expand_q8_0(const unsigned char *p, long K, float *w) {
    for (long b = 0; b < K / QK; b++, p += Q8_0_BYTES) {
        const float *d = (const float *)p;
        const signed char *q = (const signed char *)(p + QN * sizeof(float));
        for (int k = 0; k < QK; k++) expand_q8_0_row(q + k * QN, d, w + k * QN);
        w += QK * QN;
    }
}

/* IEEE half -> float32, exactly (subnormal halves become normal floats; NaN payloads kept). */
static inline float half_to_float(unsigned short h) {
    unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    union { unsigned u; float f; } v;
    if (exp == 0x1fu) v.u = sign | 0x7f800000u | (man << 13);
    else if (exp) v.u = sign | ((exp + 112u) << 23) | (man << 13);
    else {
        v.f = (float)man * 5.9604644775390625e-08f; /* man * 2^-24, exact */
        v.u |= sign;
    }
    return v.f;
}

static void expand_bf16(const unsigned char *p, long K, float *w) {
    const unsigned short *q = (const unsigned short *)p;
    for (long i = 0; i < K * QN; i++) {
        union { unsigned u; float f; } v = {.u = (unsigned)q[i] << 16};
        w[i] = v.f;
    }
}

static void expand_f16(const unsigned char *p, long K, float *w) {
    const unsigned short *q = (const unsigned short *)p;
    long i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= K * QN; i += 16)
        _mm512_storeu_ps(w + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + i))));
#elif defined(__F16C__)
    for (; i + 8 <= K * QN; i += 8)
        _mm256_storeu_ps(w + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + i))));
#endif
    for (; i < K * QN; i++) w[i] = half_to_float(q[i]);
}

/* Float32 w[k][32] of one strip: the strip itself (SB_F32) or its expansion into scratch. */
static const float *strip_weights(const unsigned char *strip, long format, long K, float *scratch) {
    if (format == SB_Q4_1) expand_q4_1(strip, K, scratch);
    else if (format == SB_Q8_0) expand_q8_0(strip, K, scratch);
    else if (format == SB_BF16) expand_bf16(strip, K, scratch);
    else if (format == SB_F16) expand_f16(strip, K, scratch);
    else return (const float *)strip;
    return scratch;
}

struct gemm_args {
    const float *x;
    long M, K;
    const unsigned char *w;
    long format, Np;
    float *y;
};

static void gemm_columns(void *ctx, long n_begin, long n_end) {
    const struct gemm_args *a = ctx;
    long strip_bytes = strip_bytes_of(a->format, a->K);
    float *scratch = a->format == SB_F32 ? 0 : malloc(a->K * QN * sizeof(float));
    for (long n = n_begin; n < n_end; n += QN) {
        const float *w = strip_weights(a->w + n / QN * strip_bytes, a->format, a->K, scratch);
        for (long m = 0; m < a->M; m += MR_MAX) {
            long mr = a->M - m < MR_MAX ? a->M - m : MR_MAX;
            for (long h = 0; h < QN; h += NR)
                TILES[mr](a->x + m * a->K, a->K, w + h, QN, a->K, a->y + m * a->Np + n + h, a->Np);
        }
    }
    free(scratch);
}

/* y[M, Np] = x[M, K] @ w^T for strips of weights w in `format` (Np a multiple of 32), with
 * the columns split between `threads` threads (never changing a bit). */
void sb_gemm(const float *x, long M, long K, const unsigned char *w, long format, long Np,
             float *y, long threads) {
    struct gemm_args args = {x, M, K, w, format, Np, y};
    sb_parallel(gemm_columns, &args, Np, QN, threads);
}

/* The float32 strips (SB_F32 layout) that the strips w in `format` stand for. */
void sb_expand(const unsigned char *w, long format, long K, long Np, float *out) {
    long strip_bytes = strip_bytes_of(format, K);
    for (long n = 0; n < Np; n += QN) {
        float *dst = out + n * K;
        const float *src = strip_weights(w + n / QN * strip_bytes, format, K, dst);
        for (long i = 0; src != dst && i < K * QN; i++) dst[i] = src[i];
    }
}
