/* samebits paged attention: for query token n and head h, attend over positions 0..t
 * (t = positions[n]) of its own request, reading K/V through its block table, in key tiles
 * aligned to absolute positions (0, T, 2T, ...) with an online softmax in tile order.
 * Per (token, head) the sequence of float operations depends only on t, T and the values:
 *   score_j = tree(lanes of q * k_j) * scale   (lane i sums elements d = i mod 16 in d order;
 *             tree: halving, lanes i and i+8, then i+4, i+2, i+1)
 *   per tile: m' = max(m, max_j score_j); a = e(m - m'); l *= a; acc *= a;
 *             for j ascending: p = e(score_j - m'); l += p; acc += p * v_j (fma per element)
 * where e is sb_exp (sbexp.h): a fixed sequence of IEEE operations (round, fma, bit shifts), the
 * same in its SIMD and scalar forms, so its value never depends on which form computed it.
 *   out = acc / l
 * never on the batch, the chunk, page placement, vector width or how items are split between
 * threads (one item = one token and the query heads that share one KV head). */
#include <math.h>
#include <immintrin.h>

#include "sbpool.h"

#define LANES 16
#define MAX_DIM 256
#define MAX_GROUP 16
#define MAX_TILE 256

#include "sbexp.h"

/* out[j] = sb_exp(x[j] - shift) for j < n; x must have room for n rounded up to EW. */
static inline void exp_shifted(float *x, long n, float shift, float *out) {
    for (long j = n; j % EW; j++) x[j] = -INFINITY;
    for (long j = 0; j < n; j += EW) {
        ESTORE(out + j, sb_exp_vec(ESUB(ELOAD(x + j), ESET1(shift))));
    }
}


/* The halving tree over 8 lanes held in a 256-bit register: lanes i and i+4, then i and i+2,
 * then 0 and 1 — after the first halving (lanes i and i+8) of the 16 lanes. */
static inline float halve8(__m256 a) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

/* Dot product of q and k (dim a multiple of 16) with 16 fixed lanes (lane i sums the
 * elements d = i mod 16 in d order) and the fixed halving tree. */
static inline float dot16(const float *q, const float *k, long dim) {
#if defined(__AVX512F__)
    __m512 s = _mm512_setzero_ps();
    for (long d = 0; d < dim; d += LANES)
        s = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), s);
    __m256 lo = _mm512_castps512_ps256(s);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
#else
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (long d = 0; d < dim; d += LANES) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), hi);
    }
#endif
    return halve8(_mm256_add_ps(lo, hi));
}

/* Slot rows of keys start..end-1 through the block table, walking pages without divisions. */
static inline void tile_rows(const float *cache, const long *table, long start, long end,
                             long block_size, long n_kv, long kvh, long dim, const float **rows) {
    long blk = start / block_size, off = start % block_size;
    for (long j = start; j < end; j++) {
        rows[j - start] = cache + ((table[blk] * block_size + off) * n_kv + kvh) * dim;
        if (++off == block_size) {
            off = 0;
            blk++;
        }
    }
}

/* One query head with dim = NV * EW, its accumulator held in registers: per head, exactly
 * the operations of attend_group below, in the same order (so the same bits). */
#define DEFINE_HEAD(NV)                                                                      \
    static void attend_head_##NV(const float *q, const float *k_cache, const float *v_cache, \
                                 long n_kv, long kvh, const long *table, long t,             \
                                 long block_size, long key_tile, float scale, float *out) {  \
        const long dim = NV * EW;                                                            \
        evec acc[NV];                                                                        \
        for (int c = 0; c < NV; c++) acc[c] = ESET1(0.0f);                                   \
        float m = -INFINITY, l = 0.0f, scores[MAX_TILE], probs[MAX_TILE];                    \
        const float *krows[MAX_TILE], *vrows[MAX_TILE];                                      \
        for (long start = 0; start <= t; start += key_tile) {                                \
            long end = start + key_tile < t + 1 ? start + key_tile : t + 1, n = end - start; \
            tile_rows(k_cache, table, start, end, block_size, n_kv, kvh, dim, krows);        \
            tile_rows(v_cache, table, start, end, block_size, n_kv, kvh, dim, vrows);        \
            for (long j = 0; j < n; j++) scores[j] = dot16(q, krows[j], dim) * scale;        \
            float mt = m;                                                                    \
            for (long j = 0; j < n; j++) mt = scores[j] > mt ? scores[j] : mt;               \
            float alpha = sb_exp(m - mt);                                                    \
            l = l * alpha;                                                                   \
            for (int c = 0; c < NV; c++) acc[c] = EMUL(acc[c], ESET1(alpha));                \
            m = mt;                                                                          \
            exp_shifted(scores, n, mt, probs);                                               \
            for (long j = 0; j < n; j++) {                                                   \
                evec p = ESET1(probs[j]);                                                    \
                l = l + probs[j];                                                            \
                for (int c = 0; c < NV; c++)                                                 \
                    acc[c] = EFMA(p, ELOAD(vrows[j] + c * EW), acc[c]);                      \
            }                                                                                \
        }                                                                                    \
        for (int c = 0; c < NV; c++) ESTORE(out + c * EW, EDIV(acc[c], ESET1(l)));           \
    }

DEFINE_HEAD(4)
DEFINE_HEAD(8)
DEFINE_HEAD(16)

typedef void (*head_fn)(const float *, const float *, const float *, long, long, const long *,
                        long, long, long, float, float *);

/* All G query heads of one KV head with dim = NV * EW, their accumulators in registers: each
 * key and value row is read once for the G heads. Per head, exactly the operations of
 * attend_head_NV in the same order (the scores, the tile's max, alpha, the exp, then for j
 * ascending l += p and acc += p * v), so the same bits; only the heads are interleaved. */
#define DEFINE_GROUP(NV, G)                                                                  \
    static void attend_group_##NV##_##G(const float *q, const float *k_cache,                \
                                        const float *v_cache, long n_kv, long kvh,           \
                                        const long *table, long t, long block_size,          \
                                        long key_tile, float scale, float *out) {            \
        const long dim = NV * EW;                                                            \
        evec acc[G][NV];                                                                     \
        float m[G], l[G], scores[G][MAX_TILE], probs[G][MAX_TILE];                           \
        const float *krows[MAX_TILE], *vrows[MAX_TILE];                                      \
        for (int g = 0; g < G; g++) {                                                        \
            m[g] = -INFINITY;                                                                \
            l[g] = 0.0f;                                                                     \
            for (int c = 0; c < NV; c++) acc[g][c] = ESET1(0.0f);                            \
        }                                                                                    \
        for (long start = 0; start <= t; start += key_tile) {                                \
            long end = start + key_tile < t + 1 ? start + key_tile : t + 1, n = end - start; \
            tile_rows(k_cache, table, start, end, block_size, n_kv, kvh, dim, krows);        \
            tile_rows(v_cache, table, start, end, block_size, n_kv, kvh, dim, vrows);        \
            for (long j = 0; j < n; j++)                                                     \
                for (int g = 0; g < G; g++)                                                  \
                    scores[g][j] = dot16(q + g * dim, krows[j], dim) * scale;                \
            for (int g = 0; g < G; g++) {                                                    \
                float mt = m[g];                                                             \
                for (long j = 0; j < n; j++) mt = scores[g][j] > mt ? scores[g][j] : mt;     \
                float alpha = sb_exp(m[g] - mt);                                             \
                l[g] = l[g] * alpha;                                                         \
                for (int c = 0; c < NV; c++) acc[g][c] = EMUL(acc[g][c], ESET1(alpha));      \
                m[g] = mt;                                                                   \
                exp_shifted(scores[g], n, mt, probs[g]);                                     \
            }                                                                                \
            for (long j = 0; j < n; j++) {                                                   \
                evec v[NV];                                                                  \
                for (int c = 0; c < NV; c++) v[c] = ELOAD(vrows[j] + c * EW);                \
                for (int g = 0; g < G; g++) {                                                \
                    evec p = ESET1(probs[g][j]);                                             \
                    l[g] = l[g] + probs[g][j];                                               \
                    for (int c = 0; c < NV; c++) acc[g][c] = EFMA(p, v[c], acc[g][c]);       \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (int g = 0; g < G; g++)                                                          \
            for (int c = 0; c < NV; c++)                                                     \
                ESTORE(out + g * dim + c * EW, EDIV(acc[g][c], ESET1(l[g])));                \
    }

DEFINE_GROUP(4, 2)
DEFINE_GROUP(4, 3)
DEFINE_GROUP(4, 4)
DEFINE_GROUP(8, 2)

typedef void (*group_fn)(const float *, const float *, const float *, long, long,
                         const long *, long, long, long, float, float *);

static int grouped_heads = 1; /* 0: one query head at a time (tests compare the two) */

/* Tests only (never changes a bit): whether attend_items may take the grouped kernels. */
void sb_attention_set_grouped(long on) { grouped_heads = on != 0; }

/* The register-resident kernel for all `group` heads of a KV head at this dim, or 0. */
static group_fn group_kernel(long dim, long group) {
    if (!grouped_heads) return 0;
    if (dim == 4 * EW && group == 2) return attend_group_4_2;
    if (dim == 4 * EW && group == 3) return attend_group_4_3;
    if (dim == 4 * EW && group == 4) return attend_group_4_4;
    if (dim == 8 * EW && group == 2) return attend_group_8_2;
    return 0;
}

/* The register-resident per-head kernel for this dim, or 0 (then attend_group runs). */
static head_fn head_kernel(long dim) {
    if (dim == 4 * EW) return attend_head_4;
    if (dim == 8 * EW) return attend_head_8;
    if (dim == 16 * EW) return attend_head_16;
    return 0;
}

static void attend_group(const float *q, long group, long dim, const float *k_cache,
                         const float *v_cache, long n_kv, long kvh, const long *table, long t,
                         long block_size, long key_tile, float scale, float *out) {
    float acc[MAX_GROUP][MAX_DIM], scores[MAX_GROUP][MAX_TILE], probs[MAX_GROUP][MAX_TILE];
    float m[MAX_GROUP], l[MAX_GROUP];
    for (long g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (long c = 0; c < dim; c++) acc[g][c] = 0.0f;
    }
    for (long start = 0; start <= t; start += key_tile) {
        long end = start + key_tile < t + 1 ? start + key_tile : t + 1;
        const float *krows[MAX_TILE], *vrows[MAX_TILE];
        tile_rows(k_cache, table, start, end, block_size, n_kv, kvh, dim, krows);
        tile_rows(v_cache, table, start, end, block_size, n_kv, kvh, dim, vrows);
        for (long j = start; j < end; j++)
            for (long g = 0; g < group; g++)
                scores[g][j - start] = dot16(q + g * dim, krows[j - start], dim) * scale;
        float m_new[MAX_GROUP];
        for (long g = 0; g < group; g++) {
            float mt = m[g];
            for (long j = 0; j < end - start; j++) mt = scores[g][j] > mt ? scores[g][j] : mt;
            m_new[g] = mt;
            float alpha = sb_exp(m[g] - mt);
            l[g] = l[g] * alpha;
            for (long c = 0; c < dim; c++) acc[g][c] = acc[g][c] * alpha;
            m[g] = mt;
            exp_shifted(scores[g], end - start, mt, probs[g]);
        }
        for (long j = start; j < end; j++) {
            const float *v = vrows[j - start];
            for (long g = 0; g < group; g++) {
                float p = probs[g][j - start];
                l[g] = l[g] + p;
                for (long c = 0; c < dim; c++) acc[g][c] = fmaf(p, v[c], acc[g][c]);
            }
        }
    }
    for (long g = 0; g < group; g++)
        for (long c = 0; c < dim; c++) out[g * dim + c] = acc[g][c] / l[g];
}

int sb_attention_limits(long dim, long group, long key_tile) {
    return dim % LANES == 0 && dim <= MAX_DIM && group <= MAX_GROUP && key_tile <= MAX_TILE &&
           key_tile % LANES == 0;
}

struct attn_args {
    const float *q, *k_cache, *v_cache;
    long n_heads, dim, n_kv;
    const long *positions, *query_req, *block_tables;
    long width, block_size, key_tile;
    float scale;
    float *out;
    long n_items, stride;
};

/* Items i with i % stride in [lane_begin, lane_end): a strided split balances requests of
 * different lengths between threads. */
static void attend_items(void *ctx, long lane_begin, long lane_end) {
    const struct attn_args *a = ctx;
    long group = a->n_heads / a->n_kv;
    head_fn head = head_kernel(a->dim);
    group_fn grouped = group_kernel(a->dim, group);
    for (long lane = lane_begin; lane < lane_end; lane++) {
        for (long item = lane; item < a->n_items; item += a->stride) {
            long n = item / a->n_kv, kvh = item % a->n_kv;
            long off = (n * a->n_heads + kvh * group) * a->dim;
            const long *table = a->block_tables + a->query_req[n] * a->width;
            if (grouped) {
                grouped(a->q + off, a->k_cache, a->v_cache, a->n_kv, kvh, table, a->positions[n],
                        a->block_size, a->key_tile, a->scale, a->out + off);
                continue;
            }
            if (!head) {
                attend_group(a->q + off, group, a->dim, a->k_cache, a->v_cache, a->n_kv, kvh,
                             table, a->positions[n], a->block_size, a->key_tile, a->scale,
                             a->out + off);
                continue;
            }
            for (long g = 0; g < group; g++)
                head(a->q + off + g * a->dim, a->k_cache, a->v_cache, a->n_kv, kvh, table,
                     a->positions[n], a->block_size, a->key_tile, a->scale,
                     a->out + off + g * a->dim);
        }
    }
}

/* All n_tokens * n_kv (token, KV head) items, on `threads` threads (each item entirely on
 * one). q, out: [N, H, D]; caches: [slots, n_kv, D]; block_tables: [R, width]. */
void sb_attention(const float *q, long n_heads, long dim, const float *k_cache,
                  const float *v_cache, long n_kv, const long *positions, const long *query_req,
                  const long *block_tables, long width, long block_size, long key_tile,
                  float scale, float *out, long n_tokens, long threads) {
    long stride = threads <= 1 ? 1 : 4 * threads; /* lanes: items dealt round-robin */
    struct attn_args args = {q,     k_cache,   v_cache,      n_heads,    dim,      n_kv,
                             positions, query_req, block_tables, width, block_size, key_tile,
                             scale, out,       n_tokens * n_kv, stride};
    sb_parallel(attend_items, &args, stride, 1, threads);
}
