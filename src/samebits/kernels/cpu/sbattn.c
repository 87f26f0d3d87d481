/* samebits paged attention: for query token n and head h, attend over positions 0..t
 * (t = positions[n]) of its own request, reading K/V through its block table. The definition
 * (S = span, T = key tile, S a multiple of T; e = sb_exp of sbexp.h, a fixed sequence of IEEE
 * operations, the same in its SIMD and scalar forms; max(x, y) = y > x ? y : x):
 *   score_j = tree(lanes of q * k_j) * scale   (lane i sums elements d = i mod 16 in d order;
 *             tree: halving, lanes i and i+8, then i+4, i+2, i+1)
 *   the keys are cut into spans [sS, min((s+1)S, t+1)) at absolute positions; span s is an
 *   online softmax from a fresh state (m = -inf, l = 0, acc = 0) over its key tiles
 *   [sS + iT, ...) in order:
 *     per tile: m' = max(m, max_j score_j); a = e(m - m'); l *= a; acc *= a;
 *               for j ascending: p = e(score_j - m'); l += p; acc += p * v_j (fma per element)
 *   giving (m_s, l_s, acc_s); the spans are merged in span order s = 0, 1, ... from the empty
 *   state (M, L, ACC) = (-inf, 0, 0) by one formula, every product and sum rounded on its own
 *   (no fma; the build has -ffp-contract=off), also when there is one span:
 *     M' = max(M, m_s); a = e(M - M'); b = e(m_s - M'); L = L*a + l_s*b; ACC = ACC*a + acc_s*b
 *   out = ACC / L
 * A sliding window W > 0 (sb_attention_window; W = 0 is full attention, the definition above)
 * keeps keys lo..t, lo = max(0, t - W + 1), all at absolute positions: span s runs over keys
 * [max(sS, lo), min((s+1)S, t+1)) (its key tiles start at its first key), the spans wholly
 * below lo (s < floor(lo / S)) are no part of the merge, and nothing else changes. With W = 0
 * (or t < W) lo = 0 and every operation is the full definition's.
 * Two launches compute it: the sequential one (one thread per (token, KV head) item runs its
 * spans in order, merging each into a running state) and the split one ((token, KV head, span)
 * units on all threads write their span states to scratch, then one thread per item merges
 * them in span order). Same states, same merge, same order: the same bits, never depending on
 * the batch, the chunk, page placement, vector width, the launch or how work is split between
 * threads (one item = one token and the query heads that share one KV head). */
#include <math.h>
#include <stdlib.h>
#include <immintrin.h>

#include "sbpool.h"

#define LANES 16
#define MAX_DIM 256
#define MAX_GROUP 16
#define MAX_TILE 256
#define PAD LANES /* a head's state: acc[0..dim), m, l, then padding to a multiple of 16 */
#define MAX_STATE (MAX_GROUP * (MAX_DIM + PAD))

#include "sbexp.h"

static inline long state_stride(long dim) { return dim + PAD; }

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

/* One query head with dim = NV * EW over keys [begin, end) from a fresh state, its
 * accumulator held in registers; writes the head's span state (acc, m, l) to st. Exactly the
 * operations of span_any below, in the same order (so the same bits). */
#define DEFINE_HEAD(NV)                                                                      \
    static void span_head_##NV(const float *q, const float *k_cache, const float *v_cache,   \
                               long n_kv, long kvh, const long *table, long begin, long end, \
                               long block_size, long key_tile, float scale, float *st) {     \
        const long dim = NV * EW;                                                            \
        evec acc[NV];                                                                        \
        for (int c = 0; c < NV; c++) acc[c] = ESET1(0.0f);                                   \
        float m = -INFINITY, l = 0.0f, scores[MAX_TILE], probs[MAX_TILE];                    \
        const float *krows[MAX_TILE], *vrows[MAX_TILE];                                      \
        for (long start = begin; start < end; start += key_tile) {                           \
            long stop = start + key_tile < end ? start + key_tile : end, n = stop - start;   \
            tile_rows(k_cache, table, start, stop, block_size, n_kv, kvh, dim, krows);       \
            tile_rows(v_cache, table, start, stop, block_size, n_kv, kvh, dim, vrows);       \
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
        for (int c = 0; c < NV; c++) ESTORE(st + c * EW, acc[c]);                            \
        st[dim] = m;                                                                         \
        st[dim + 1] = l;                                                                     \
    }

DEFINE_HEAD(4)
DEFINE_HEAD(8)
DEFINE_HEAD(16)

/* A span kernel: the span states of one head (head kernels) or of all G heads of a KV head
 * (group kernels, states at st + g * state_stride(dim)) over keys [begin, end). */
typedef void (*span_fn)(const float *, const float *, const float *, long, long, const long *,
                        long, long, long, long, float, float *);

/* All G query heads of one KV head with dim = NV * EW, their accumulators in registers: each
 * key and value row is read once for the G heads. Per head, exactly the operations of
 * span_head_NV in the same order (the scores, the tile's max, alpha, the exp, then for j
 * ascending l += p and acc += p * v), so the same bits; only the heads are interleaved. */
#define DEFINE_GROUP(NV, G)                                                                  \
    static void span_group_##NV##_##G(const float *q, const float *k_cache,                  \
                                      const float *v_cache, long n_kv, long kvh,             \
                                      const long *table, long begin, long end,               \
                                      long block_size, long key_tile, float scale,           \
                                      float *st) {                                           \
        const long dim = NV * EW;                                                            \
        evec acc[G][NV];                                                                     \
        float m[G], l[G], scores[G][MAX_TILE], probs[G][MAX_TILE];                           \
        const float *krows[MAX_TILE], *vrows[MAX_TILE];                                      \
        for (int g = 0; g < G; g++) {                                                        \
            m[g] = -INFINITY;                                                                \
            l[g] = 0.0f;                                                                     \
            for (int c = 0; c < NV; c++) acc[g][c] = ESET1(0.0f);                            \
        }                                                                                    \
        for (long start = begin; start < end; start += key_tile) {                           \
            long stop = start + key_tile < end ? start + key_tile : end, n = stop - start;   \
            tile_rows(k_cache, table, start, stop, block_size, n_kv, kvh, dim, krows);       \
            tile_rows(v_cache, table, start, stop, block_size, n_kv, kvh, dim, vrows);       \
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
        for (int g = 0; g < G; g++) {                                                        \
            float *sg = st + g * (dim + PAD);                                                \
            for (int c = 0; c < NV; c++) ESTORE(sg + c * EW, acc[g][c]);                     \
            sg[dim] = m[g];                                                                  \
            sg[dim + 1] = l[g];                                                              \
        }                                                                                    \
    }

DEFINE_GROUP(4, 2)
DEFINE_GROUP(4, 3)
DEFINE_GROUP(4, 4)
DEFINE_GROUP(8, 2)

static int grouped_heads = 1; /* 0: one query head at a time (tests compare the two) */

/* Tests only (never changes a bit): whether the grouped kernels may run. */
void sb_attention_set_grouped(long on) { grouped_heads = on != 0; }

/* The register-resident kernel for all `group` heads of a KV head at this dim, or 0. */
static span_fn group_kernel(long dim, long group) {
    if (!grouped_heads) return 0;
    if (dim == 4 * EW && group == 2) return span_group_4_2;
    if (dim == 4 * EW && group == 3) return span_group_4_3;
    if (dim == 4 * EW && group == 4) return span_group_4_4;
    if (dim == 8 * EW && group == 2) return span_group_8_2;
    return 0;
}

/* The register-resident per-head kernel for this dim, or 0 (then span_any runs). */
static span_fn head_kernel(long dim) {
    if (dim == 4 * EW) return span_head_4;
    if (dim == 8 * EW) return span_head_8;
    if (dim == 16 * EW) return span_head_16;
    return 0;
}

/* The span states of `group` heads (any dim a multiple of 16) over keys [begin, end). */
static void span_any(const float *q, long group, long dim, const float *k_cache,
                     const float *v_cache, long n_kv, long kvh, const long *table, long begin,
                     long end, long block_size, long key_tile, float scale, float *st) {
    float acc[MAX_GROUP][MAX_DIM], scores[MAX_GROUP][MAX_TILE], probs[MAX_GROUP][MAX_TILE];
    float m[MAX_GROUP], l[MAX_GROUP];
    for (long g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (long c = 0; c < dim; c++) acc[g][c] = 0.0f;
    }
    for (long start = begin; start < end; start += key_tile) {
        long stop = start + key_tile < end ? start + key_tile : end, n = stop - start;
        const float *krows[MAX_TILE], *vrows[MAX_TILE];
        tile_rows(k_cache, table, start, stop, block_size, n_kv, kvh, dim, krows);
        tile_rows(v_cache, table, start, stop, block_size, n_kv, kvh, dim, vrows);
        for (long j = 0; j < n; j++)
            for (long g = 0; g < group; g++)
                scores[g][j] = dot16(q + g * dim, krows[j], dim) * scale;
        for (long g = 0; g < group; g++) {
            float mt = m[g];
            for (long j = 0; j < n; j++) mt = scores[g][j] > mt ? scores[g][j] : mt;
            float alpha = sb_exp(m[g] - mt);
            l[g] = l[g] * alpha;
            for (long c = 0; c < dim; c++) acc[g][c] = acc[g][c] * alpha;
            m[g] = mt;
            exp_shifted(scores[g], n, mt, probs[g]);
        }
        for (long j = 0; j < n; j++) {
            const float *v = vrows[j];
            for (long g = 0; g < group; g++) {
                float p = probs[g][j];
                l[g] = l[g] + p;
                for (long c = 0; c < dim; c++) acc[g][c] = fmaf(p, v[c], acc[g][c]);
            }
        }
    }
    for (long g = 0; g < group; g++) {
        float *sg = st + g * state_stride(dim);
        for (long c = 0; c < dim; c++) sg[c] = acc[g][c];
        sg[dim] = m[g];
        sg[dim + 1] = l[g];
    }
}

/* The empty state of `group` heads: m = -inf, l = 0, acc = 0. */
static void empty_state(float *run, long group, long dim) {
    for (long g = 0; g < group; g++, run += state_stride(dim)) {
        for (long c = 0; c < dim; c++) run[c] = 0.0f;
        run[dim] = -INFINITY;
        run[dim + 1] = 0.0f;
    }
}

/* The span merge of the definition, for `group` heads: run <- merge(run, span). The one
 * formula every launch uses; each product and sum rounded on its own (-ffp-contract=off). */
static void merge_span(float *run, const float *span, long group, long dim) {
    for (long g = 0; g < group; g++, run += state_stride(dim), span += state_stride(dim)) {
        float m = run[dim], ms = span[dim], mn = ms > m ? ms : m;
        float a = sb_exp(m - mn), b = sb_exp(ms - mn);
        run[dim + 1] = run[dim + 1] * a + span[dim + 1] * b;
        evec va = ESET1(a), vb = ESET1(b);
        for (long c = 0; c < dim; c += EW)
            ESTORE(run + c, EADD(EMUL(ELOAD(run + c), va), EMUL(ELOAD(span + c), vb)));
        run[dim] = mn;
    }
}

/* out[g * dim + c] = ACC / L of each head's merged state. */
static void finish_state(const float *run, long group, long dim, float *out) {
    for (long g = 0; g < group; g++, run += state_stride(dim), out += dim) {
        evec l = ESET1(run[dim + 1]);
        for (long c = 0; c < dim; c += EW) ESTORE(out + c, EDIV(ELOAD(run + c), l));
    }
}

int sb_attention_limits(long dim, long group, long key_tile, long span) {
    return dim % LANES == 0 && dim <= MAX_DIM && group >= 1 && group <= MAX_GROUP &&
           key_tile >= 1 && key_tile <= MAX_TILE && key_tile % LANES == 0 && span >= key_tile &&
           span % key_tile == 0;
}

/* Tests only: out[j] = e(x[j]), the scalar exp of the definition (the merge's). */
void sb_attention_exp(const float *x, long n, float *out) {
    for (long j = 0; j < n; j++) out[j] = sb_exp(x[j]);
}

struct attn_args {
    const float *q, *k_cache, *v_cache;
    long n_heads, dim, n_kv, group;
    const long *positions, *query_req, *block_tables;
    long width, block_size, key_tile, span, window; /* window 0: full attention */
    float scale;
    float *out;
    span_fn head, grouped; /* the register-resident kernels for this shape, or 0 */
    long n_items, stride;  /* (token, KV head) items; lanes of the sequential launch */
    /* split launch: (token, span) pairs in token then span order, pairs of token n at
     * first_pair[n] .. first_pair[n + 1] - 1; unit (pair p, KV head kvh) has its group's span
     * states at states + (p * n_kv + kvh) * unit */
    long *pair_token, *pair_begin, *first_pair;
    float *states;
    long unit, n_pairs;
};

/* The span states of item (token n, KV head kvh) over keys [begin, end) into st. */
static void span_state(const struct attn_args *a, long n, long kvh, long begin, long end,
                       float *st) {
    long off = (n * a->n_heads + kvh * a->group) * a->dim;
    const long *table = a->block_tables + a->query_req[n] * a->width;
    const float *q = a->q + off;
    if (a->grouped) {
        a->grouped(q, a->k_cache, a->v_cache, a->n_kv, kvh, table, begin, end, a->block_size,
                   a->key_tile, a->scale, st);
    } else if (a->head) {
        for (long g = 0; g < a->group; g++)
            a->head(q + g * a->dim, a->k_cache, a->v_cache, a->n_kv, kvh, table, begin, end,
                    a->block_size, a->key_tile, a->scale, st + g * state_stride(a->dim));
    } else {
        span_any(q, a->group, a->dim, a->k_cache, a->v_cache, a->n_kv, kvh, table, begin, end,
                 a->block_size, a->key_tile, a->scale, st);
    }
}

/* The first key of token n: lo = max(0, t - W + 1) with a window W, else 0. */
static inline long first_key(const struct attn_args *a, long n) {
    long lo = a->positions[n] - a->window + 1;
    return a->window > 0 && lo > 0 ? lo : 0;
}

/* The absolute start sS of token n's first span (the one holding its first key). */
static inline long first_span(const struct attn_args *a, long n) {
    return first_key(a, n) / a->span * a->span;
}

/* Span [begin, ...)'s first key: begin, or the window's first key inside it. */
static inline long span_first(const struct attn_args *a, long n, long begin) {
    long lo = first_key(a, n);
    return lo > begin ? lo : begin;
}

static inline long span_end(const struct attn_args *a, long n, long begin) {
    long t = a->positions[n];
    return begin + a->span < t + 1 ? begin + a->span : t + 1;
}

static inline float *item_out(const struct attn_args *a, long n, long kvh) {
    return a->out + (n * a->n_heads + kvh * a->group) * a->dim;
}

/* Sequential launch, items i with i % stride in [lane_begin, lane_end) (a strided split
 * balances requests of different lengths between threads): each item's spans in order, each
 * merged into the running state as soon as it is done. */
static void attend_items(void *ctx, long lane_begin, long lane_end) {
    const struct attn_args *a = ctx;
    _Alignas(64) float run[MAX_STATE], part[MAX_STATE];
    for (long lane = lane_begin; lane < lane_end; lane++) {
        for (long item = lane; item < a->n_items; item += a->stride) {
            long n = item / a->n_kv, kvh = item % a->n_kv;
            empty_state(run, a->group, a->dim);
            for (long begin = first_span(a, n); begin <= a->positions[n]; begin += a->span) {
                span_state(a, n, kvh, span_first(a, n, begin), span_end(a, n, begin), part);
                merge_span(run, part, a->group, a->dim);
            }
            finish_state(run, a->group, a->dim, item_out(a, n, kvh));
        }
    }
}

/* Split launch, phase 1: units [begin, end), each one span of one item, to the scratch. */
static void span_units(void *ctx, long begin, long end) {
    const struct attn_args *a = ctx;
    for (long u = begin; u < end; u++) {
        long p = u / a->n_kv, kvh = u % a->n_kv, n = a->pair_token[p], b = a->pair_begin[p];
        span_state(a, n, kvh, span_first(a, n, b), span_end(a, n, b), a->states + u * a->unit);
    }
}

/* Split launch, phase 2: items [begin, end), their span states merged in span order. */
static void merge_items(void *ctx, long begin, long end) {
    const struct attn_args *a = ctx;
    _Alignas(64) float run[MAX_STATE];
    for (long item = begin; item < end; item++) {
        long n = item / a->n_kv, kvh = item % a->n_kv;
        empty_state(run, a->group, a->dim);
        for (long p = a->first_pair[n]; p < a->first_pair[n + 1]; p++)
            merge_span(run, a->states + (p * a->n_kv + kvh) * a->unit, a->group, a->dim);
        finish_state(run, a->group, a->dim, item_out(a, n, kvh));
    }
}

static long split_mode = 1; /* 0: never split spans, 1: when it pays, 2: always */

/* Tests and benchmarks only (never changes a bit): when the split launch runs. */
void sb_attention_set_split(long mode) { split_mode = mode; }

#define SPLIT_MAX_BYTES (64L << 20) /* scratch above this: the sequential launch */
#define SPLIT_CHUNKS_PER_THREAD 8
#define SPLIT_ITEMS_PER_THREAD 8 /* fewer items than this per thread: too coarse to balance */

/* Whether the split launch pays: some query has several spans, and there are too few items
 * to balance between the threads (a thread another process holds up keeps a whole item) or
 * one item would hold its thread past a fair share of the call. */
static int want_split(const struct attn_args *a, long n_tokens, long threads, long bytes) {
    if (split_mode != 1) return split_mode == 2;
    if (threads <= 1 || a->n_pairs == n_tokens || bytes > SPLIT_MAX_BYTES) return 0;
    long keys = 0, most = 0;
    for (long n = 0; n < n_tokens; n++) {
        keys += a->positions[n] + 1;
        most = a->positions[n] + 1 > most ? a->positions[n] + 1 : most;
    }
    return a->n_items < SPLIT_ITEMS_PER_THREAD * threads || most * threads > keys * a->n_kv;
}

/* The calling thread's scratch for the split launch, grown as needed (0 if out of memory). */
static void *scratch(long bytes) {
    static __thread void *mem;
    static __thread long size;
    if (bytes <= size) return mem;
    free(mem);
    size = (bytes + 63) / 64 * 64;
    mem = aligned_alloc(64, size);
    if (!mem) size = 0;
    return mem;
}

/* Fills the pair tables (in `tables`: first_pair, pair_token, pair_begin) and a->states. */
static void lay_out_pairs(struct attn_args *a, long n_tokens, long *tables, float *states) {
    a->first_pair = tables;
    a->pair_token = tables + n_tokens + 1;
    a->pair_begin = a->pair_token + a->n_pairs;
    a->states = states;
    long p = 0;
    for (long n = 0; n < n_tokens; n++) {
        a->first_pair[n] = p;
        for (long begin = first_span(a, n); begin <= a->positions[n]; begin += a->span, p++) {
            a->pair_token[p] = n;
            a->pair_begin[p] = begin;
        }
    }
    a->first_pair[n_tokens] = p;
}

static long count_pairs(const struct attn_args *a, long n_tokens) {
    long pairs = 0;
    for (long n = 0; n < n_tokens; n++) pairs += (a->positions[n] - first_span(a, n)) / a->span + 1;
    return pairs;
}

static void run_units(struct attn_args *a, long threads) {
    long units = a->n_pairs * a->n_kv;
    sb_parallel_chunks(span_units, a, units, 1, threads, SPLIT_CHUNKS_PER_THREAD * threads);
}

/* The split launch if it pays and the scratch is there; 0 if the sequential one must run. */
static int split_launch(struct attn_args *a, long n_tokens, long threads) {
    long table_bytes = (n_tokens + 1 + 2 * a->n_pairs) * (long)sizeof(long);
    table_bytes = (table_bytes + 63) / 64 * 64;
    long bytes = table_bytes + a->n_pairs * a->n_kv * a->unit * (long)sizeof(float);
    if (!want_split(a, n_tokens, threads, bytes)) return 0;
    char *mem = scratch(bytes);
    if (!mem) return 0;
    lay_out_pairs(a, n_tokens, (long *)mem, (float *)(mem + table_bytes));
    run_units(a, threads);
    sb_parallel(merge_items, a, a->n_items, 1, threads);
    return 1;
}

static struct attn_args make_args(const float *q, long n_heads, long dim, const float *k_cache,
                                  const float *v_cache, long n_kv, const long *positions,
                                  const long *query_req, const long *block_tables, long width,
                                  long block_size, long key_tile, long span, long window,
                                  float scale, float *out, long n_tokens) {
    long group = n_heads / n_kv;
    struct attn_args a = {
        .q = q, .k_cache = k_cache, .v_cache = v_cache, .n_heads = n_heads, .dim = dim,
        .n_kv = n_kv, .group = group, .positions = positions, .query_req = query_req,
        .block_tables = block_tables, .width = width, .block_size = block_size,
        .key_tile = key_tile, .span = span, .window = window, .scale = scale, .out = out,
        .head = head_kernel(dim), .grouped = group_kernel(dim, group),
        .n_items = n_tokens * n_kv, .unit = group * state_stride(dim)};
    a.n_pairs = count_pairs(&a, n_tokens);
    return a;
}

/* Attention of n_tokens queries on `threads` threads, by the sequential or the split launch
 * (same bits), over the keys of a sliding window of `window` keys (0: all keys 0..t).
 * q, out: [N, H, D]; caches: [slots, n_kv, D]; block_tables: [R, width]. */
void sb_attention_window(const float *q, long n_heads, long dim, const float *k_cache,
                         const float *v_cache, long n_kv, const long *positions,
                         const long *query_req, const long *block_tables, long width,
                         long block_size, long key_tile, long span, float scale, float *out,
                         long n_tokens, long threads, long window) {
    struct attn_args a = make_args(q, n_heads, dim, k_cache, v_cache, n_kv, positions,
                                   query_req, block_tables, width, block_size, key_tile, span,
                                   window, scale, out, n_tokens);
    if (split_launch(&a, n_tokens, threads)) return;
    a.stride = threads <= 1 ? 1 : 4 * threads; /* lanes: items dealt round-robin */
    sb_parallel(attend_items, &a, a.stride, 1, threads);
}

/* Full attention (window 0): what sblayer.c calls. */
void sb_attention(const float *q, long n_heads, long dim, const float *k_cache,
                  const float *v_cache, long n_kv, const long *positions, const long *query_req,
                  const long *block_tables, long width, long block_size, long key_tile,
                  long span, float scale, float *out, long n_tokens, long threads) {
    sb_attention_window(q, n_heads, dim, k_cache, v_cache, n_kv, positions, query_req,
                        block_tables, width, block_size, key_tile, span, scale, out, n_tokens,
                        threads, 0);
}

/* Tests only: every span state, as the split launch's phase 1 writes them, into `states`:
 * pairs (token n, span s) in token then span order, then KV heads, then the group's heads,
 * each head's state acc[0..D), m, l in D + 16 floats. Returns the number of pairs. */
long sb_attention_states(const float *q, long n_heads, long dim, const float *k_cache,
                         const float *v_cache, long n_kv, const long *positions,
                         const long *query_req, const long *block_tables, long width,
                         long block_size, long key_tile, long span, float scale,
                         float *states, long n_tokens, long max_pairs) {
    struct attn_args a = make_args(q, n_heads, dim, k_cache, v_cache, n_kv, positions,
                                   query_req, block_tables, width, block_size, key_tile, span,
                                   0, scale, 0, n_tokens);
    if (a.n_pairs > max_pairs) return a.n_pairs;
    long *tables = malloc((n_tokens + 1 + 2 * a.n_pairs) * sizeof(long));
    if (!tables) return -1;
    lay_out_pairs(&a, n_tokens, tables, states);
    run_units(&a, 1);
    free(tables);
    return a.n_pairs;
}
