/* samebits invariant GEMM: y[m, n] = sum over k = 0..K-1, in that order, of x[m, k] * w[n, k],
 * one fused multiply-add per step, for every (m, n). Each output element is one SIMD lane
 * running the same sequence of FMAs whatever the number of rows, the row's position in the
 * batch, the vector width (AVX-512 or AVX2), the code path (below) or the split of columns
 * between threads: the reduction order is a function of k only.
 *
 * Weights are stored in strips of QN = 32 output columns (N padded with zero columns to a
 * multiple of 32), one strip after the other, each strip in one of these formats:
 *   SB_F32:  float32 w[k][32] for k = 0..K-1.
 *   SB_Q4_1: per block of QK = 32 k: IEEE half d[32], half m[32] (GGUF's own scales), then
 *            for each k 16 bytes whose byte j holds column j in its low nibble and column
 *            j + 16 in its high one; w = float(d) * q + float(m) (GGUF Q4_1's dequantization,
 *            a multiply then an add).
 *   SB_Q8_0: per block of 32 k: half d[32], then for each k 32 int8; w = q * float(d).
 *   SB_BF16, SB_F16: 16-bit w[k][32]; widened to float32 exactly (bfloat16: the bits shifted
 *            left by 16; IEEE half: the hardware conversion or its exact scalar form).
 * A quantized strip expands to exactly the float32 values the GGUF loader produces: the half
 * scales widen exactly, and d * q is exact in float32 (d has 11 significant bits, q at most 8,
 * so the product has at most 19 < 24 and never leaves the normal range), so the Q4_1 value
 * fma(d, q, m) = round(d * q + m) equals the loader's round(round(d * q) + m). The kernel's
 * expansion of every strip is compared with the loader's weight at every build (sb_expand).
 *
 * Two code paths compute the same FMA sequence per output (which one runs follows M only):
 *   - fused (M <= fused_max_rows, AVX-512): each k-row of a tile of up to 4 strips is
 *     expanded in registers and multiplied into the accumulators of up to 16 rows at once (no
 *     scratch memory; one row alone keeps 8 independent FMA chains in flight over 4 strips;
 *     16 rows of half a strip spend 1 expansion FMA per 16 multiply-adds, 8 rows of a strip
 *     2, 4 rows of two strips 4); tiles of 8 or more rows fetch the next strip's weights
 *     while they compute;
 *   - scratch (more rows, or AVX2): each strip is expanded once into float32 scratch, then
 *     tiles of up to 8 rows x 32 columns run over it.
 *
 * Split plan (DESIGN.md 2b): with `splits` S > 1 (sb_gemm_split), K is cut into S ranges of
 * K / S (S divides K), each range a fresh chain of FMAs in k order (c_s), and the output is
 * ((c_0 + c_1) + c_2) + ... in range order, plain float32 adds; or (`parts`) the S partials
 * c_s are written one after the other, for a tensor-parallel rank that owns some ranges
 * (samebits.parallel sums every rank's partials in the same order). Each tile runs its ranges
 * one after the other into a small buffer and adds them into its output, so the order of the
 * ranges never depends on M, the code path or the threads. */
#include <stdlib.h>

#include <immintrin.h>

#include "sbpool.h"
#include "sbprefetch.h"

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

#define SCALE_BYTES (QN * 2) /* one half per column */
#define Q4_1_BYTES (2 * SCALE_BYTES + QK * QN / 2)
#define Q8_0_BYTES (SCALE_BYTES + QK * QN)

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

/* The 32 half scales at p as float32, exactly. */
static inline void load_scales(const unsigned char *p, float *out) {
    const unsigned short *h = (const unsigned short *)p;
#if defined(__AVX512F__)
    _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)));
    _mm512_storeu_ps(out + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + 16))));
#elif defined(__F16C__)
    for (int j = 0; j < QN; j += 8)
        _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + j))));
#else
    for (int j = 0; j < QN; j++) out[j] = half_to_float(h[j]);
#endif
}

/* One k of a Q4_1 strip: 16 bytes q -> w[0..31] = d * nibble + m (d * nibble is exact, so
 * the fused form equals the multiply-then-add). */
static inline void expand_q4_1_row(const unsigned char *q, const float *d, const float *m,
                                   float *w) {
#if defined(__AVX512F__)
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
    _mm512_storeu_ps(w, _mm512_fmadd_ps(_mm512_loadu_ps(d), lo, _mm512_loadu_ps(m)));
    _mm512_storeu_ps(w + 16, _mm512_fmadd_ps(_mm512_loadu_ps(d + 16), hi, _mm512_loadu_ps(m + 16)));
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
    float d[QN], m[QN];
    for (long b = 0; b < K / QK; b++, p += Q4_1_BYTES) {
        load_scales(p, d);
        load_scales(p + SCALE_BYTES, m);
        const unsigned char *q = p + 2 * SCALE_BYTES;
        for (int k = 0; k < QK; k++) expand_q4_1_row(q + k * QN / 2, d, m, w + k * QN);
        w += QK * QN;
    }
}

static void expand_q8_0(const unsigned char *p, long K, float *w) {
    float d[QN];
    for (long b = 0; b < K / QK; b++, p += Q8_0_BYTES) {
        load_scales(p, d);
        const signed char *q = (const signed char *)(p + SCALE_BYTES);
        for (int k = 0; k < QK; k++) expand_q8_0_row(q + k * QN, d, w + k * QN);
        w += QK * QN;
    }
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


/* A buffer of at least n floats that the calling thread keeps between calls (buf, cap: that
 * thread's own variables); 0 if it cannot be allocated. */
static float *thread_buffer(float **buf, long *cap, long n) {
    if (*cap < n) {
        free(*buf);
        *buf = malloc(n * sizeof(float));
        *cap = *buf ? n : 0;
    }
    return *buf;
}

struct gemm_args {
    const float *x;
    long M, K;
    const unsigned char *w;
    long format, Np;
    float *y;
    const struct sb_prefetch *pf;
    const float *xt; /* pack_sixteen's rows, or 0 */
    long splits;     /* K ranges (1: one chain) */
    long parts;      /* 1: range s's partial to y + s * M * Np; 0: their ordered sum to y */
};

/* Bytes from a strip's start to its k-row k0 (k0 a multiple of QK for quantized formats). */
static long strip_offset(long format, long k0) {
    if (format == SB_Q4_1) return k0 / QK * Q4_1_BYTES;
    if (format == SB_Q8_0) return k0 / QK * Q8_0_BYTES;
    return k0 * QN * (format == SB_F32 ? 4 : 2);
}

/* y[i, j] += t[i, j] for rows i < rows, columns j < cols (float32 adds, in place). */
static void add_tile(float *y, long ldy, const float *t, long ldt, long rows, long cols) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) y[i * ldy + j] = y[i * ldy + j] + t[i * ldt + j];
}

/* Where range s of a tile at y (row stride Np) goes: y itself (range 0 of a sum), the tile
 * buffer t (a later range of a sum, row stride *ld = cols), or partial s (`parts`). */
static float *range_out(const struct gemm_args *a, long s, float *y, float *t, long cols,
                        long *ld) {
    *ld = a->Np;
    if (a->parts) return y + s * a->M * a->Np;
    if (s == 0) return y;
    *ld = cols;
    return t;
}

/* ---- prefetch hints (sbprefetch.h): never change a bit ------------------------------------
 * Each chunk of columns fetches its share of the hint's lines (in proportion to its columns),
 * a few lines per k-block of each tile, so the misses overlap the FMAs instead of stalling
 * the kernel that reads the lines later; what is left at the chunk's end is fetched then. */
struct pf_cursor {
    const struct sb_prefetch *pf;
    long range, line, left, per_step;
};
static __thread struct pf_cursor cursor;

/* The calling thread's cursor at line `at` of the hint, `count` lines, `per_step` at a time. */
static void cursor_start(const struct sb_prefetch *pf, long at, long count, long per_step) {
    long r = 0;
    while (pf && r < pf->n_ranges && at >= pf->lines[r]) at -= pf->lines[r++];
    cursor = (struct pf_cursor){pf, r, at, pf && count > 0 ? count : 0, per_step};
}

/* Up to `count` more lines of the cursor into the cache (a T0 hint measured best on Zen 4:
 * benchmarks/RESULTS.md, CPU vs llama.cpp). */
static inline void prefetch_lines(long count) {
    for (; count > 0 && cursor.left > 0 && cursor.range < cursor.pf->n_ranges;
         count--, cursor.left--) {
        _mm_prefetch(cursor.pf->start[cursor.range] + cursor.line * SB_LINE, _MM_HINT_T0);
        if (++cursor.line == cursor.pf->lines[cursor.range]) {
            cursor.range++;
            cursor.line = 0;
        }
    }
}

/* ---- the fused path (AVX-512): strips expanded k-row by k-row in registers --------------- */
#if defined(__AVX512F__)
#define FUSED_MAX_MR 8 /* rows of one fused tile, at most */
#define FUSED_S 4      /* strips of one fused tile, at most */
#define INLINE static inline __attribute__((always_inline))

/* A strip's state for the k-rows of one block of QK rows: its float32 scales (quantized
 * formats) and where the block's rows start. */
struct rows_at {
    __m512 d0, d1, m0, m1;
    const unsigned char *p;
};

/* Setup for rows k0 .. k0 + QK - 1 of the strip at `strip` (k0 a multiple of QK). */
INLINE void block_at(long format, const unsigned char *strip, long k0, struct rows_at *r) {
    r->d0 = r->d1 = r->m0 = r->m1 = _mm512_setzero_ps();
    if (format == SB_Q4_1 || format == SB_Q8_0) {
        const unsigned char *p = strip + k0 / QK * (format == SB_Q4_1 ? Q4_1_BYTES : Q8_0_BYTES);
        const __m256i *h = (const __m256i *)p;
        r->d0 = _mm512_cvtph_ps(_mm256_loadu_si256(h));
        r->d1 = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
        if (format == SB_Q4_1) {
            r->m0 = _mm512_cvtph_ps(_mm256_loadu_si256(h + 2));
            r->m1 = _mm512_cvtph_ps(_mm256_loadu_si256(h + 3));
        }
        r->p = p + (format == SB_Q4_1 ? 2 : 1) * SCALE_BYTES;
    } else {
        r->p = strip + k0 * QN * (format == SB_F32 ? 4 : 2);
    }
}

/* Row j of the block as float32 columns 0..15 (w0) and 16..31 (w1): the same operations as
 * the scratch expansion (expand_*_row, expand_f16, expand_bf16), so the same values. */
INLINE void row_of(long format, const struct rows_at *r, long j, __m512 *w0, __m512 *w1) {
    if (format == SB_Q4_1) {
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(r->p + j * QN / 2)));
        __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
        *w0 = _mm512_fmadd_ps(r->d0, lo, r->m0);
        *w1 = _mm512_fmadd_ps(r->d1, hi, r->m1);
    } else if (format == SB_Q8_0) {
        const __m128i *q = (const __m128i *)(r->p + j * QN);
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), r->d0);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))),
                            r->d1);
    } else if (format == SB_F32) {
        const float *f = (const float *)r->p + j * QN;
        *w0 = _mm512_loadu_ps(f);
        *w1 = _mm512_loadu_ps(f + 16);
    } else if (format == SB_F16) {
        const __m256i *h = (const __m256i *)(r->p + j * QN * 2);
        *w0 = _mm512_cvtph_ps(_mm256_loadu_si256(h));
        *w1 = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
    } else { /* SB_BF16 */
        const __m256i *h = (const __m256i *)(r->p + j * QN * 2);
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h)), 16));
        *w1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h + 1)), 16));
    }
}

/* Fetches the k-block at k0 (QK k-rows) of the strip at `strip` into the cache: the tiles
 * fetch the block of the strip they read next while they compute on theirs, so the weights'
 * DRAM latency overlaps their FMAs (past the last strip it fetches unrelated lines or none:
 * a prefetch never faults and never changes a value). */
INLINE void prefetch_block(long format, const unsigned char *strip, long k0) {
    long bytes = format == SB_Q4_1 ? Q4_1_BYTES : format == SB_Q8_0 ? Q8_0_BYTES
               : QK * QN * (format == SB_F32 ? 4 : 2);
    const unsigned char *p = strip + k0 / QK * bytes;
    for (long o = 0; o < bytes; o += SB_LINE) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* y[i, 32 s + c] for rows i < MR and strips s < S: the FMA chain over k in order, the
 * weights of each k-row expanded once in registers for all MR rows. */
INLINE void fused_tile(long format, int MR, int S, const float *x, long ldx,
                       const unsigned char *w, long strip_bytes, long K, float *y, long ldy) {
    __m512 acc[FUSED_MAX_MR][FUSED_S][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int s = 0; s < S; s++) acc[i][s][0] = acc[i][s][1] = _mm512_setzero_ps();
    for (long k0 = 0; k0 < K; k0 += QK) {
        long n = K - k0 < QK ? K - k0 : QK;
        prefetch_lines(cursor.per_step);
        struct rows_at r[FUSED_S];
#pragma GCC unroll 8
        for (int s = 0; s < S; s++) {
            block_at(format, w + s * strip_bytes, k0, &r[s]);
            if (MR >= 8) prefetch_block(format, w + (S + s) * strip_bytes, k0);
        }
        for (long j = 0; j < n; j++) {
            __m512 xv[FUSED_MAX_MR];
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) xv[i] = _mm512_set1_ps(x[i * ldx + k0 + j]);
#pragma GCC unroll 8
            for (int s = 0; s < S; s++) {
                __m512 w0, w1;
                row_of(format, &r[s], j, &w0, &w1);
#pragma GCC unroll 8
                for (int i = 0; i < MR; i++) {
                    acc[i][s][0] = _mm512_fmadd_ps(xv[i], w0, acc[i][s][0]);
                    acc[i][s][1] = _mm512_fmadd_ps(xv[i], w1, acc[i][s][1]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int s = 0; s < S; s++) {
            _mm512_storeu_ps(y + i * ldy + s * QN, acc[i][s][0]);
            _mm512_storeu_ps(y + i * ldy + s * QN + 16, acc[i][s][1]);
        }
}

/* y[i, 16 h + c] for 16 rows i and one half h of one strip (columns 16 h .. 16 h + 15): the
 * FMA chains of fused_tile, with the half's weights of each k-row expanded once for all 16
 * rows (one expansion FMA per 16; row_of's other half is dead code). xt: the 16 rows packed
 * k-major (xt[16 k + i] = x[i, k]), so each k's 16 values share one cache line. */
INLINE void fused_half_tile(long format, int h, const float *xt, const unsigned char *w,
                            long strip_bytes, long K, float *y, long ldy) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (long k0 = 0; k0 < K; k0 += QK) {
        long n = K - k0 < QK ? K - k0 : QK;
        prefetch_lines(cursor.per_step);
        struct rows_at r;
        block_at(format, w, k0, &r);
        if (!h) prefetch_block(format, w + strip_bytes, k0);
        for (long j = 0; j < n; j++) {
            __m512 w0, w1;
            row_of(format, &r, j, &w0, &w1);
            __m512 wh = h ? w1 : w0;
            const float *xk = xt + (k0 + j) * 16;
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xk[i]), wh, acc[i]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(y + i * ldy + 16 * h, acc[i]);
}

/* 16 rows x 1 strip from packed rows (fused_half_tile): its two halves. */
typedef void (*sixteen_fn)(const float *, const unsigned char *, long, long, float *, long);
#define SIXTEEN(F)                                                                           \
    static void sixteen_##F(const float *xt, const unsigned char *w, long sb, long K,        \
                            float *y, long ldy) {                                            \
        fused_half_tile(F, 0, xt, w, sb, K, y, ldy);                                         \
        fused_half_tile(F, 1, xt, w, sb, K, y, ldy);                                         \
    }
SIXTEEN(SB_F32)
SIXTEEN(SB_Q4_1)
SIXTEEN(SB_Q8_0)
SIXTEEN(SB_BF16)
SIXTEEN(SB_F16)
static const sixteen_fn SIXTEEN_ROWS[5] = {sixteen_SB_F32, sixteen_SB_Q4_1, sixteen_SB_Q8_0,
                                           sixteen_SB_BF16, sixteen_SB_F16};

typedef void (*fused_fn)(const float *, long, const unsigned char *, long, long, float *, long);

#define FUSED_ONE(F, MR, S)                                                                  \
    static void fused_##F##_##MR##_##S(const float *x, long ldx, const unsigned char *w,     \
                                        long sb, long K, float *y, long ldy) {               \
        fused_tile(F, MR, S, x, ldx, w, sb, K, y, ldy);                                      \
    }
/* Tile shapes (rows x strips) that fit the 32 vector registers: 2 * MR * S accumulators. */
#define FUSED_FORMAT(F)                                                                      \
    FUSED_ONE(F, 1, 1) FUSED_ONE(F, 1, 2) FUSED_ONE(F, 1, 3) FUSED_ONE(F, 1, 4)              \
    FUSED_ONE(F, 2, 1) FUSED_ONE(F, 2, 2) FUSED_ONE(F, 2, 3) FUSED_ONE(F, 2, 4)              \
    FUSED_ONE(F, 4, 1) FUSED_ONE(F, 4, 2) FUSED_ONE(F, 8, 1)
#define FUSED_TABLE(F)                                                                       \
    {{fused_##F##_1_1, fused_##F##_1_2, fused_##F##_1_3, fused_##F##_1_4},                   \
     {fused_##F##_2_1, fused_##F##_2_2, fused_##F##_2_3, fused_##F##_2_4},                   \
     {fused_##F##_4_1, fused_##F##_4_2, 0, 0},                                               \
     {fused_##F##_8_1, 0, 0, 0}}

FUSED_FORMAT(SB_F32)
FUSED_FORMAT(SB_Q4_1)
FUSED_FORMAT(SB_Q8_0)
FUSED_FORMAT(SB_BF16)
FUSED_FORMAT(SB_F16)

/* [format][log2(rows)][strips - 1] */
static const fused_fn FUSED[5][4][FUSED_S] = {
    FUSED_TABLE(SB_F32), FUSED_TABLE(SB_Q4_1), FUSED_TABLE(SB_Q8_0), FUSED_TABLE(SB_BF16),
    FUSED_TABLE(SB_F16),
};
static const int FUSED_STRIPS[4] = {4, 4, 2, 1}; /* strips per tile, by log2(rows) */

/* Rows at or below this many take the fused path; more take the scratch path. */
static long fused_max_rows = 16;

/* Whether a call of M rows takes the fused path. */
static int takes_fused(long M, long format, long strip_bytes) {
    return M <= fused_max_rows && format >= 0 && format <= SB_F16 && strip_bytes;
}

/* log2 of the rows of the next unpacked tile when `left` rows remain (8, 4, 2 or 1). */
static int row_tile_log2(long left) { return left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0; }

/* Tile calls per k-block of the fused path over `strips` strips of M rows (a 16-row tile
 * counts its two halves); 0 when the call does not take the fused path. */
static long fused_tiles(long M, long K, long format, long strips) {
    if (!takes_fused(M, format, strip_bytes_of(format, K))) return 0;
    long tiles = M / 16 * 2 * strips;
    for (long m = M / 16 * 16; m < M;) {
        int lg = row_tile_log2(M - m);
        tiles += (strips + FUSED_STRIPS[lg] - 1) / FUSED_STRIPS[lg];
        m += 1L << lg;
    }
    return tiles;
}

/* Columns [n_begin, n_end) of a call on the fused path; 0 if it does not take it. Rows go in
 * tiles of 16 (from xt: x's groups of 16 rows packed k-major), then 8, 4, 2, 1; each tile
 * covers up to FUSED_STRIPS strips at a time, and runs the K ranges in order (range_out). */
static int fused_columns(const struct gemm_args *a, long strip_bytes, long n_begin, long n_end) {
    long M = a->M, K = a->K, Np = a->Np, format = a->format, kr = K / a->splits;
    if (!takes_fused(M, format, strip_bytes)) return 0;
    long packed = a->xt ? M / 16 * 16 : 0;
    float t[16 * FUSED_S * QN];
    for (long n0 = n_begin; n0 < n_end; n0 += FUSED_S * QN) {
        long n1 = n0 + FUSED_S * QN < n_end ? n0 + FUSED_S * QN : n_end;
        for (long m = 0; m < packed; m += 16)
            for (long n = n0; n < n1; n += QN)
                for (long s = 0, ld; s < a->splits; s++) {
                    float *y = a->y + m * Np + n, *dst = range_out(a, s, y, t, QN, &ld);
                    SIXTEEN_ROWS[format](a->xt + m * K + s * kr * 16,
                                         a->w + n / QN * strip_bytes + strip_offset(format, s * kr),
                                         strip_bytes, kr, dst, ld);
                    if (dst == t) add_tile(y, Np, t, QN, 16, QN);
                }
        for (long m = packed; m < M;) {
            int lg = row_tile_log2(M - m);
            long mr = 1L << lg;
            for (long n = n0; n < n1;) {
                long st = (n1 - n) / QN < FUSED_STRIPS[lg] ? (n1 - n) / QN : FUSED_STRIPS[lg];
                for (long s = 0, ld; s < a->splits; s++) {
                    float *y = a->y + m * Np + n, *dst = range_out(a, s, y, t, st * QN, &ld);
                    FUSED[format][lg][st - 1](a->x + m * K + s * kr, K,
                                              a->w + n / QN * strip_bytes +
                                                  strip_offset(format, s * kr),
                                              strip_bytes, kr, dst, ld);
                    if (dst == t) add_tile(y, Np, t, st * QN, mr, st * QN);
                }
                n += st * QN;
            }
            m += mr;
        }
    }
    return 1;
}

/* x's groups of 16 rows packed k-major for fused_half_tile, in the calling thread's buffer
 * (valid until its next call; 0 when no 16-row tile runs: fewer rows, or the scratch path). */
static float *pack_sixteen(const float *x, long M, long K, long format, long strip_bytes) {
    static __thread float *packed;
    static __thread long capacity;
    if (M < 16 || !takes_fused(M, format, strip_bytes)) return 0;
    long groups = M / 16;
    float *xt = thread_buffer(&packed, &capacity, groups * K * 16);
    if (!xt) return 0; /* then the 8-row tiles run: the same bits */
    for (long g = 0; g < groups; g++)
        for (long k = 0; k < K; k++)
            for (long i = 0; i < 16; i++) xt[(g * K + k) * 16 + i] = x[(g * 16 + i) * K + k];
    return xt;
}

/* Tuning (benchmarks only; never changes a bit): the most rows that take the fused path. */
void sb_gemm_set_fused_max_rows(long rows) { fused_max_rows = rows; }

/* Every k-row of every strip as row_of expands it, in the SB_F32 layout; 1 when done. */
static int fused_expand(const unsigned char *w, long format, long K, long Np, float *out) {
    long strip_bytes = strip_bytes_of(format, K);
    if (format < 0 || format > SB_F16 || !strip_bytes) return 0;
    for (long n = 0; n < Np; n += QN) {
        const unsigned char *strip = w + n / QN * strip_bytes;
        for (long k0 = 0; k0 < K; k0 += QK) {
            struct rows_at r;
            block_at(format, strip, k0, &r);
            for (long j = 0; j < QK && k0 + j < K; j++) {
                __m512 w0, w1;
                row_of(format, &r, j, &w0, &w1);
                _mm512_storeu_ps(out + n * K + (k0 + j) * QN, w0);
                _mm512_storeu_ps(out + n * K + (k0 + j) * QN + 16, w1);
            }
        }
    }
    return 1;
}
#else
void sb_gemm_set_fused_max_rows(long rows) { (void)rows; }
static int fused_columns(const struct gemm_args *a, long strip_bytes, long n_begin, long n_end) {
    (void)a, (void)strip_bytes, (void)n_begin, (void)n_end;
    return 0;
}
static float *pack_sixteen(const float *x, long M, long K, long format, long strip_bytes) {
    (void)x, (void)M, (void)K, (void)format, (void)strip_bytes;
    return 0;
}
static long fused_tiles(long M, long K, long format, long strips) {
    (void)M, (void)K, (void)format, (void)strips;
    return 0;
}
static int fused_expand(const unsigned char *w, long format, long K, long Np, float *out) {
    (void)w, (void)format, (void)K, (void)Np, (void)out;
    return 0;
}
#endif



/* About how many times a chunk of `strips` strips calls prefetch_lines: once per k-block of
 * each tile on the fused path, once per strip on the scratch path. */
static long prefetch_steps(const struct gemm_args *a, long strips) {
    long tiles = fused_tiles(a->M, a->K, a->format, strips);
    return tiles ? tiles * ((a->K + QK - 1) / QK) : strips;
}

/* This chunk's share of the hint's lines, in proportion to its columns. */
static void start_prefetch(const struct gemm_args *a, long n_begin, long n_end) {
    const struct sb_prefetch *pf = a->pf;
    long span = pf ? pf->last - pf->first : 0;
    long at = pf ? pf->first + span * n_begin / a->Np : 0;
    long count = pf ? pf->first + span * n_end / a->Np - at : 0;
    long steps = prefetch_steps(a, (n_end - n_begin) / QN);
    cursor_start(pf, at, count, (count + steps - 1) / (steps > 0 ? steps : 1));
}

/* The calling thread's scratch for one expanded strip of K rows (kept between calls). */
static float *strip_scratch(long K) {
    static __thread float *scratch;
    static __thread long capacity;
    return thread_buffer(&scratch, &capacity, K * QN);
}

static void gemm_columns(void *ctx, long n_begin, long n_end) {
    const struct gemm_args *a = ctx;
    long strip_bytes = strip_bytes_of(a->format, a->K);
    start_prefetch(a, n_begin, n_end);
    if (!fused_columns(a, strip_bytes, n_begin, n_end)) {
        float *scratch = a->format == SB_F32 ? 0 : strip_scratch(a->K);
        long kr = a->K / a->splits;
        float t[MR_MAX * NR];
        for (long n = n_begin; n < n_end; n += QN) {
            prefetch_lines(cursor.per_step);
            const float *w = strip_weights(a->w + n / QN * strip_bytes, a->format, a->K, scratch);
            for (long m = 0; m < a->M; m += MR_MAX) {
                long mr = a->M - m < MR_MAX ? a->M - m : MR_MAX;
                for (long h = 0; h < QN; h += NR)
                    for (long s = 0, ld; s < a->splits; s++) {
                        float *y = a->y + m * a->Np + n + h, *dst = range_out(a, s, y, t, NR, &ld);
                        TILES[mr](a->x + m * a->K + s * kr, a->K, w + s * kr * QN + h, QN, kr,
                                  dst, ld);
                        if (dst == t) add_tile(y, a->Np, t, NR, mr, NR);
                    }
            }
        }
    }
    prefetch_lines(cursor.left);
    cursor.pf = 0;
}

void sb_gemm_split(const float *x, long M, long K, const unsigned char *w, long format, long Np,
                   float *y, long threads, const struct sb_prefetch *pf, long splits,
                   long parts);

/* y[M, Np] = x[M, K] @ w^T for strips of weights w in `format` (Np a multiple of 32), with
 * the columns split between `threads` threads (never changing a bit), fetching the lines of
 * the hint `pf` (or none) into the cache meanwhile (sbprefetch.h). */
void sb_gemm_prefetching(const float *x, long M, long K, const unsigned char *w, long format,
                         long Np, float *y, long threads, const struct sb_prefetch *pf) {
    sb_gemm_split(x, M, K, w, format, Np, y, threads, pf, 1, 0);
}

/* sb_gemm_prefetching over the split plan of `splits` K ranges (see the header; `splits`
 * divides K, and K / splits is a multiple of 32 for the quantized formats; the caller
 * checks): y [M, Np] = the ordered sum of the ranges' chains, or with `parts` y [splits, M,
 * Np] = each range's chain. */
void sb_gemm_split(const float *x, long M, long K, const unsigned char *w, long format, long Np,
                   float *y, long threads, const struct sb_prefetch *pf, long splits,
                   long parts) {
    float *xt = pack_sixteen(x, M, K, format, strip_bytes_of(format, K));
    struct gemm_args args = {x, M, K, w, format, Np, y, pf, xt, splits, parts};
    /* a chunk per strip for tiles of one strip (8 rows or more: the threads end within a
     * strip of each other); fewer rows keep the default chunks, whose tiles span 2-4 strips */
    sb_parallel_chunks(gemm_columns, &args, Np, QN, threads, M >= 8 ? Np / QN : 0);
}

/* y[M, Np] = x[M, K] @ w^T: sb_gemm_prefetching without a hint. */
void sb_gemm(const float *x, long M, long K, const unsigned char *w, long format, long Np,
             float *y, long threads) {
    sb_gemm_prefetching(x, M, K, w, format, Np, y, threads, 0);
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

/* The float32 strips as the few-row path sees them: each k-row of each strip, as the fused
 * kernel expands it in registers (0 where that path does not exist for `format`). */
int sb_expand_fused(const unsigned char *w, long format, long K, long Np, float *out) {
    return fused_expand(w, format, K, Np, out);
}
