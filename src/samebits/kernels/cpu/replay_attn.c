/* samebits replay attention: the GPU plan's paged attention on the CPU, bit for bit.
 *
 * The definition is kernels/replay/attention.py's module docstring (the numpy reference
 * there computes the same bits; tests/kernels/test_replay_attention_native.py compares
 * them). Per query row at position pos with window W (0: full), keys lo..pos in spans of
 * SPAN keys at absolute positions, each span a fresh online softmax over key tiles of
 * BLOCK_N, spans folded in span order; exp2 is ex2q (replay/ex2q.py: a table); every
 * product chain is the MMA emulator's (mma_emu.c, sb_mma_chain on one thread); every other
 * operation is one IEEE fp32 operation (no contraction: -ffp-contract=off; fmaf where the
 * definition fuses) whose NaN result is the GPU's canonical 0x7FFFFFFF.
 *
 * Work: one unit per (query row, KV head) computing the `group` query heads that read that
 * KV head; units are independent (threading never changes a bit). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbpool.h"

int sb_mma_chain(const uint16_t *x, long m, const uint16_t *w, long n, long k,
                 const uint32_t *acc, uint32_t *out, long flags, long threads);

#define CANONICAL_NAN 0x7FFFFFFFu
#define BF16_ONE 0x3F80u
#define MAX_GROUP 64

static inline float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float canon(float x) { return isnan(x) ? from_bits(CANONICAL_NAN) : x; }
static inline float add32(float a, float b) { return canon(a + b); }
static inline float mul32(float a, float b) { return canon(a * b); }
static inline float fma32(float a, float b, float c) { return canon(fmaf(a, b, c)); }

/* numpy's maximum / minimum of two fp32 values: a NaN operand gives NaN. */
static inline float np_max(float a, float b) { return (isnan(a) || a >= b) ? a : b; }

/* fp32 -> bf16 bits, round to nearest even; NaN -> 0x7FFF (linear.py fp32_to_bf16_bits). */
static inline uint16_t bf16_bits(float f) {
    uint64_t u = to_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* replay/ex2q.py ex2q: x rounded to a multiple of 2^-12 (fma(x, 4096, S) - S, times 2^-12),
 * then table[j] * 2^n for q = n + j / 4096 (n = floor(q)), flushed to +0 below 2^-126 (the
 * GPU's ex2.approx.ftz on that grid); NaN -> the canonical NaN. The ldexp is exact in double. */
static float ex2q(const float *table, float x) {
    if (isnan(x)) return from_bits(CANONICAL_NAN);
    const float shift = (float)12582912.0;
    float q = mul32(add32(fma32(x, (float)4096.0, shift), -shift), (float)(1.0 / 4096));
    if (!(q >= (float)-127.0)) return 0.0f;
    long k = (long)((double)q * 4096.0), n = k >= 0 ? k / 4096 : -((-k + 4095) / 4096);
    double y = ldexp((double)table[k - n * 4096], (int)n);
    return y < (double)FLT_MIN ? 0.0f : (float)y;
}

struct attn {
    const uint16_t *q;  /* [T, H, D] */
    const uint16_t *k;  /* [HKV, L, D]: keys at absolute positions 0..L-1 */
    const uint16_t *vt; /* [HKV, D, L]: values transposed */
    const int64_t *positions;
    long t, h, hkv, d, l, group, block_n, span, window, flags;
    float qk_scale;
    const float *ex2_table; /* replay/ex2q.py TABLE: 4,096 fp32 */
    uint32_t *out; /* [T, H, D] fp32 bits */
    int failed;
};

/* The online-softmax state of the group's rows: m[g], l[g], acc[g * D + j]. */
struct state {
    float m[MAX_GROUP], l[MAX_GROUP];
    float *acc;
};

struct unit {
    const struct attn *a;
    long row, hk, pos, lo;
    const uint16_t *qg; /* [group, D] */
    float *s;           /* [group, pos + 1]: the scores before the scale */
    uint16_t *p, *vtile, *ones;
    uint32_t *acc_in, *acc_out;
};

static void fresh(struct state *st, long group, long d) {
    for (long g = 0; g < group; g++) {
        st->m[g] = -INFINITY;
        st->l[g] = 0.0f;
    }
    memset(st->acc, 0, sizeof(float) * (size_t)(group * d));
}

/* The tile of keys key0.. : values transposed [D, BLOCK_N], keys past pos read as +0. */
static void load_vtile(const struct unit *u, long key0) {
    const struct attn *a = u->a;
    long have = u->pos + 1 - key0 < a->block_n ? u->pos + 1 - key0 : a->block_n;
    const uint16_t *src = a->vt + u->hk * a->d * a->l + key0;
    for (long j = 0; j < a->d; j++) {
        memcpy(u->vtile + j * a->block_n, src + j * a->l, sizeof(uint16_t) * (size_t)have);
        memset(u->vtile + j * a->block_n + have, 0,
               sizeof(uint16_t) * (size_t)(a->block_n - have));
    }
}

/* One active key tile's update of every row of the group (attention.py `_tile`). */
static int tile(struct unit *u, long key0, struct state *st) {
    const struct attn *a = u->a;
    long bn = a->block_n, g, j, group = a->group, d = a->d;
    float alpha[MAX_GROUP];
    for (g = 0; g < group; g++) {
        float smax = -INFINITY, sj[bn];
        for (j = 0; j < bn; j++) {
            long key = key0 + j;
            int inside = key <= u->pos && key >= u->lo;
            sj[j] = inside ? mul32(u->s[g * (u->pos + 1) + key], a->qk_scale) : -INFINITY;
            smax = (isnan(smax) || isnan(sj[j])) ? from_bits(CANONICAL_NAN) : np_max(smax, sj[j]);
        }
        float m_new = np_max(st->m[g], smax);
        alpha[g] = ex2q(a->ex2_table, add32(st->m[g], -m_new));
        for (j = 0; j < bn; j++) u->p[g * bn + j] = bf16_bits(ex2q(a->ex2_table, add32(sj[j], -m_new)));
        st->m[g] = m_new;
        for (j = 0; j < d; j++) u->acc_in[g * d + j] = to_bits(mul32(st->acc[g * d + j], alpha[g]));
    }
    uint32_t row_sum[MAX_GROUP];
    if (sb_mma_chain(u->p, group, u->ones, 1, bn, NULL, row_sum, a->flags, 1)) return -1;
    load_vtile(u, key0);
    if (sb_mma_chain(u->p, group, u->vtile, d, bn, u->acc_in, u->acc_out, a->flags, 1))
        return -1;
    for (g = 0; g < group; g++) {
        st->l[g] = fma32(st->l[g], alpha[g], from_bits(row_sum[g]));
        for (j = 0; j < d; j++) st->acc[g * d + j] = from_bits(u->acc_out[g * d + j]);
    }
    return 0;
}

/* Fold a span's state into the row's, in span order (attention.py `_merge`). */
static void merge(struct state *st, const struct state *sp, long group, long d,
                  const float *ex2_table) {
    for (long g = 0; g < group; g++) {
        float m_new = np_max(st->m[g], sp->m[g]);
        float a = ex2q(ex2_table, add32(st->m[g], -m_new)),
              b = ex2q(ex2_table, add32(sp->m[g], -m_new));
        st->m[g] = m_new;
        st->l[g] = fma32(st->l[g], a, mul32(sp->l[g], b));
        for (long j = 0; j < d; j++) {
            float *x = &st->acc[g * d + j];
            *x = fma32(*x, a, mul32(sp->acc[g * d + j], b));
        }
    }
}

/* The spans of one unit (attention.py `attend_row`), then out = div_rn(acc, l). */
static int run_unit(struct unit *u, struct state *st, struct state *sp) {
    const struct attn *a = u->a;
    long group = a->group, d = a->d;
    fresh(st, group, d);
    for (long span0 = 0; span0 <= u->pos; span0 += a->span) {
        if (span0 + a->span <= u->lo) continue;
        fresh(sp, group, d);
        long end = span0 + a->span < u->pos + 1 ? span0 + a->span : u->pos + 1;
        for (long key0 = span0; key0 < end; key0 += a->block_n)
            if (key0 + a->block_n > u->lo && tile(u, key0, sp)) return -1;
        merge(st, sp, group, d, a->ex2_table);
    }
    for (long g = 0; g < group; g++)
        for (long j = 0; j < d; j++) {
            uint32_t *o = a->out + (u->row * a->h + u->hk * group + g) * d + j;
            *o = to_bits(canon(st->acc[g * d + j] / st->l[g]));
        }
    return 0;
}

static int unit_buffers(struct unit *u, long n_keys, void **blocks) {
    const struct attn *a = u->a;
    long gd = a->group * a->d, bn = a->block_n;
    size_t sizes[7] = {sizeof(float) * (size_t)(a->group * n_keys),
                       sizeof(uint16_t) * (size_t)(a->group * bn),
                       sizeof(uint16_t) * (size_t)(a->d * bn), sizeof(uint16_t) * (size_t)bn,
                       sizeof(uint32_t) * (size_t)gd, sizeof(uint32_t) * (size_t)gd,
                       sizeof(float) * (size_t)(2 * gd)};
    for (int i = 0; i < 7; i++)
        if (!(blocks[i] = malloc(sizes[i]))) return -1;
    u->s = blocks[0];
    u->p = blocks[1];
    u->vtile = blocks[2];
    u->ones = blocks[3];
    u->acc_in = blocks[4];
    u->acc_out = blocks[5];
    for (long j = 0; j < bn; j++) u->ones[j] = BF16_ONE;
    return 0;
}

/* One (row, KV head): its scores q . k over D for keys 0..pos, then the spans. */
static int attend_unit(const struct attn *a, long row, long hk) {
    long pos = (long)a->positions[row], n_keys = pos + 1;
    struct unit u = {.a = a, .row = row, .hk = hk, .pos = pos};
    u.lo = a->window && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    u.qg = a->q + (row * a->h + hk * a->group) * a->d;
    void *blocks[7] = {0};
    int rc = unit_buffers(&u, n_keys, blocks);
    if (rc == 0) {
        uint32_t *s_bits = (uint32_t *)u.s;
        rc = sb_mma_chain(u.qg, a->group, a->k + hk * a->l * a->d, n_keys, a->d, NULL, s_bits,
                          a->flags, 1);
    }
    if (rc == 0) {
        float *acc = blocks[6];
        struct state st = {.acc = acc}, sp = {.acc = acc + a->group * a->d};
        rc = run_unit(&u, &st, &sp);
    }
    for (int i = 0; i < 7; i++) free(blocks[i]);
    return rc;
}

static void attn_task(void *ctx, long begin, long end) {
    struct attn *a = ctx;
    for (long i = begin; i < end; i++)
        if (attend_unit(a, i / a->hkv, i % a->hkv)) a->failed = 1;
}

/* out [T, H, D] (fp32 bits) of q [T, H, D] over k [HKV, L, D] and vt [HKV, D, L] (bf16
 * bits; L > max position), row i at positions[i]; head h reads KV head h / group.
 * D and BLOCK_N multiples of 16, SPAN a multiple of BLOCK_N. Returns 0, -1 if memory ran
 * out, -2 for bad arguments. */
int sb_replay_attention(const uint16_t *q, long t, long h, long d, const uint16_t *k,
                        const uint16_t *vt, long hkv, long l, const int64_t *positions,
                        long block_n, long span, uint32_t qk_scale_bits,
                        const float *ex2_table, long window,
                        long flags, uint32_t *out, long threads) {
    if (hkv < 1 || h % hkv || h / hkv > MAX_GROUP || d % 16 || block_n % 16 || block_n < 16 ||
        span % block_n)
        return -2;
    for (long i = 0; i < t; i++)
        if (positions[i] < 0 || positions[i] >= l) return -2;
    struct attn a = {.q = q, .k = k, .vt = vt, .positions = positions, .t = t, .h = h,
                     .hkv = hkv, .d = d, .l = l, .group = h / hkv, .block_n = block_n,
                     .span = span, .window = window, .flags = flags,
                     .qk_scale = from_bits(qk_scale_bits), .ex2_table = ex2_table,
                     .out = out};
    sb_parallel(attn_task, &a, t * hkv, 1, threads);
    return a.failed ? -1 : 0;
}
