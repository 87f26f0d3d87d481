/* samebits MMA emulator: the exact bits of an H200 (sm_90) bf16 tensor-core chain with fp32
 * accumulation, acc = mma_k16(x[:, k0:k0+16], w[:, k0:k0+16], acc) for k0 = 0, 16, ...
 *
 * One k16 step (the definition; the numpy reference is mma_model.py):
 *   products exact (8x8-bit significands), nominal exponent ea + eb (not renormalized);
 *   Emax = max nominal exponent over the nonzero products and the accumulator;
 *   every term on the grid 2^(Emax - 25), truncated toward zero; exact integer sum;
 *   the sum to fp32 rounding toward zero; subnormals kept (flags may say otherwise).
 * Specials: a NaN input, inf * 0 or +inf with -inf gives 0x7FFFFFFF; an inf gives that inf;
 * a zero result is +0.
 *
 * Each output is computed by one thread from its row of x, its row of w and its accumulator:
 * threading (sbpool.c) never changes a bit. A step is computed one of two ways, the same bits:
 * - the vector step (`fast_step`, 16 outputs at once) for a block whose inputs pass the guard
 *   (`fast_block`: no inf/NaN/subnormal input, every nonzero product's nominal exponent in
 *   [FAST_EMIN, 126]) and an accumulator that is zero or normal with exponent >= FAST_EMIN:
 *   each product x * w is exact in fp32 (8 x 8-bit significands, normal), the grid scale
 *   2^(GRID - Emax) is a normal power of two, so (x * w) * 2^(GRID - Emax) is the term's exact
 *   grid value (or below 1: it truncates to 0 either way) and the float -> int32 conversion
 *   truncates toward zero, as the definition does;
 * - else the scalar step (`scalar_step`, integer arithmetic on the raw bits: any input).
 * A term's grid value is < 2^27, so 16 of them fit an int32. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbpool.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* 16 int32 lanes fill one 512-bit register: let the vectorizer use them where the CPU has
 * them (measured 1.2x on AVX-512; no effect elsewhere, never an effect on the bits). */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#pragma GCC target("prefer-vector-width=512")
#endif

#define STEP 16
#define GRID 25
#define NONE (-(1 << 20)) /* exponent of a zero term: never the maximum, always shifted out */
#define CANONICAL_NAN 0x7FFFFFFFu

enum {
    MMA_SUBNORMAL_IN_FTZ = 1,
    MMA_ACC_IN_FTZ = 2,
    MMA_SUBNORMAL_OUT_FTZ = 4,
    MMA_OVERFLOW_TO_MAX = 8,
    MMA_SIGNED_ZEROS = 16,
    MMA_SUBNORMAL_IN_NORMALIZED = 32,
    MMA_ACC_IN_NORMALIZED = 64,
};

/* A subnormal's significand shifted up to the hidden bit `top`: the shift (0 if s is 0). */
static inline int32_t normalize_shift(int32_t s, int top) {
    return s ? top - (31 - __builtin_clz((unsigned)s)) : 0;
}

#define LANES 16 /* outputs of one row of x computed together: 16 rows of w */
/* The grid is never finer than 2^(EMAX_FLOOR - GRID): a step whose largest nominal exponent is
 * below EMAX_FLOOR (all its terms tiny: a zero accumulator and products below 2^-126) aligns to
 * EMAX_FLOOR, as the H200 does (docs/mma_emulator.md, "The exponent floor") */
#define EMAX_FLOOR (-133)
#define FAST_EMIN (-102) /* 2^(GRID - Emax) is a normal fp32 for Emax >= FAST_EMIN */
#define FAST_EMAX 126    /* a product of nominal exponent <= 126 is < 2^128 */
#define EMPTY_LO 1000    /* range of a block without a nonzero value: lo > hi */
#define EMPTY_HI (-1000)

/* A block of 16 k (of a row of x, or of a tile of w): whether it holds an inf/NaN (1) or a
 * subnormal (2), and the range of its nonzero values' exponents. */
struct block {
    uint8_t special;
    int16_t lo, hi;
};

/* x decoded: fp32 values (bf16 widened, exact; 0 for inf/NaN/subnormal: those blocks take
 * the scalar step) and nominal exponents (NONE when zero), row-major [M, K]; blocks [M, K/16]. */
struct rows {
    float *val;
    int32_t *exp;
    struct block *blk;
};

/* w decoded the same way in tiles of LANES rows, lane-minor: [N / LANES][K][LANES] (rows past
 * N: zeros); blk[tile * blocks + b] describes the tile's block b (its 16 x LANES values). */
struct tiles {
    float *val;
    int32_t *exp;
    struct block *blk;
};

struct chain {
    const uint16_t *x, *w;
    struct rows xd;
    struct tiles wd;
    long m, n, k;
    const uint32_t *acc;
    uint32_t *out;
    long flags;
};

static void decode_value(uint16_t b, long flags, int32_t *sig, int32_t *exp) {
    int32_t field = (b >> 7) & 0xFF, mant = b & 0x7F;
    int32_t s = field == 0 ? ((flags & MMA_SUBNORMAL_IN_FTZ) ? 0 : mant) : (mant | 0x80);
    if (field == 0xFF) s = 0;
    int32_t up = field == 0 && (flags & MMA_SUBNORMAL_IN_NORMALIZED) ? normalize_shift(s, 7) : 0;
    s <<= up;
    *sig = (b & 0x8000) ? -s : s;
    *exp = s ? (field ? field : 1) - 127 - up : NONE;
}

static const struct block EMPTY_BLOCK = {0, EMPTY_LO, EMPTY_HI};

/* One bf16 value into the vector step's form (value, nominal exponent) and its block. */
static void decode_fast(uint16_t b, float *val, int32_t *exp, struct block *blk) {
    int32_t field = (b >> 7) & 0xFF;
    uint32_t wide = (uint32_t)b << 16;
    *exp = NONE;
    *val = 0.0f;
    if (field == 0xFF) {
        blk->special |= 1;
    } else if (field == 0 && (b & 0x7F)) {
        blk->special |= 2;
    } else if (field) {
        memcpy(val, &wide, sizeof *val);
        *exp = field - 127;
        blk->lo = (int16_t)(*exp < blk->lo ? *exp : blk->lo);
        blk->hi = (int16_t)(*exp > blk->hi ? *exp : blk->hi);
    }
}

static int decode_rows(const uint16_t *bits, long m, long k, struct rows *d) {
    d->val = malloc(sizeof(float) * (size_t)(m * k));
    d->exp = malloc(sizeof(int32_t) * (size_t)(m * k));
    d->blk = malloc(sizeof(struct block) * (size_t)(m * k / STEP + 1));
    if (!d->val || !d->exp || !d->blk) return -1;
    for (long b = 0; b < m * k / STEP; b++) {
        d->blk[b] = EMPTY_BLOCK;
        for (long i = b * STEP; i < (b + 1) * STEP; i++)
            decode_fast(bits[i], &d->val[i], &d->exp[i], &d->blk[b]);
    }
    return 0;
}

static int alloc_tiles(long n, long k, struct tiles *d) {
    long tiles = (n + LANES - 1) / LANES, size = tiles * k * LANES;
    d->val = malloc(sizeof(float) * (size_t)size);
    d->exp = malloc(sizeof(int32_t) * (size_t)size);
    d->blk = malloc(sizeof(struct block) * (size_t)(tiles * (k / STEP) + 1));
    return d->val && d->exp && d->blk ? 0 : -1;
}

/* Decode tile t of w (rows t * LANES ...; rows past N read as zeros). */
static void decode_tile(const uint16_t *bits, long n, long k, struct tiles *d, long t) {
    for (long b = 0; b < k / STEP; b++) {
        struct block *blk = &d->blk[t * (k / STEP) + b];
        *blk = EMPTY_BLOCK;
        for (long i = b * STEP; i < (b + 1) * STEP; i++)
            for (long l = 0; l < LANES; l++) {
                long j = t * LANES + l, at = (t * k + i) * LANES + l;
                decode_fast(j < n ? bits[j * k + i] : 0, &d->val[at], &d->exp[at], blk);
            }
    }
}

static void free_rows(struct rows *d) {
    free(d->val);
    free(d->exp);
    free(d->blk);
}

static void free_tiles(struct tiles *d) {
    free(d->val);
    free(d->exp);
    free(d->blk);
}

static void release(struct chain *c) {
    free_rows(&c->xd);
    free_tiles(&c->wd);
}

/* Whether the vector step is exact for every product of these two blocks (module comment). */
static int fast_block(const struct block *x, const struct block *w) {
    if (x->special | w->special) return 0;
    if (x->lo > x->hi || w->lo > w->hi) return 1; /* no nonzero product */
    return x->lo + w->lo >= FAST_EMIN && x->hi + w->hi <= FAST_EMAX;
}

/* fp32 bits of (-1)^neg * mag * 2^lsb rounded toward zero (a zero result: +0 unless
 * MMA_SIGNED_ZEROS). */
static uint32_t to_fp32(int neg, uint64_t mag, int32_t lsb, long flags) {
    uint32_t body = 0;
    if (mag) {
        int32_t msb = 63 - __builtin_clzll(mag), e = lsb + msb, sh = -149 - lsb;
        if (e > 127) {
            body = (flags & MMA_OVERFLOW_TO_MAX) ? 0x7F7FFFFFu : 0x7F800000u;
        } else if (e >= -126) {
            uint64_t sig = msb >= 23 ? mag >> (msb - 23) : mag << (23 - msb);
            body = ((uint32_t)(e + 127) << 23) | ((uint32_t)sig & 0x7FFFFFu);
        } else if (!(flags & MMA_SUBNORMAL_OUT_FTZ)) { /* onto the subnormal grid 2^-149 */
            body = (uint32_t)(sh >= 0 ? (sh > 63 ? 0 : mag >> sh) : mag << -sh);
        }
    }
    return (neg && (body || (flags & MMA_SIGNED_ZEROS))) ? 0x80000000u | body : body;
}

/* to_fp32 of a signed total < 2^33 in magnitude, written branch-free so that a loop over
 * lanes vectorizes (the leading bit from the exact int -> double conversion). */
static inline uint32_t lane_fp32(int64_t total, int32_t lsb, long flags) {
    uint64_t mag = (uint64_t)(total < 0 ? -total : total), u;
    double dm = (double)(int64_t)mag;
    memcpy(&u, &dm, sizeof u);
    int64_t msb = (int64_t)(u >> 52) - 1023, e = lsb + msb, r = msb - 23;
    uint64_t sig = r >= 0 ? mag >> (r & 63) : mag << (-r & 63);
    uint64_t normal = ((uint64_t)(e + 127) << 23) | (sig & 0x7FFFFF);
    int64_t sh = -149 - (int64_t)lsb;
    uint64_t sub = sh >= 0 ? (sh < 64 ? mag >> sh : 0) : mag << (-sh & 63);
    if (flags & MMA_SUBNORMAL_OUT_FTZ) sub = 0;
    uint64_t big = (flags & MMA_OVERFLOW_TO_MAX) ? 0x7F7FFFFFu : 0x7F800000u;
    uint64_t body = e > 127 ? big : (e < -126 ? sub : normal);
    body = mag == 0 ? 0 : body;
    uint32_t minus = (uint32_t)(total < 0) & ((body != 0) | ((flags & MMA_SIGNED_ZEROS) != 0));
    return (uint32_t)body | (minus << 31); /* bitwise, not &&: the lane loop stays vectorized */
}

/* A step whose products and accumulator are all zeros: +0 (with MMA_SIGNED_ZEROS: -0 if
 * every term is -0). */
static uint32_t zero_step(const uint16_t *xb, const uint16_t *wb, uint32_t acc, long flags) {
    if (!(flags & MMA_SIGNED_ZEROS)) return 0;
    uint32_t neg = acc >> 31;
    for (int i = 0; i < STEP; i++) neg &= (uint32_t)((xb[i] ^ wb[i]) >> 15);
    return neg << 31;
}

/* A step with an inf/NaN among its inputs (the result is always NaN or an inf). */
static uint32_t special_step(const uint16_t *xb, const uint16_t *wb, uint32_t acc) {
    int nan = (acc & 0x7F800000u) == 0x7F800000u && (acc & 0x7FFFFFu);
    int pos = acc == 0x7F800000u, neg = acc == 0xFF800000u;
    for (int i = 0; i < STEP; i++) {
        int xa = xb[i] & 0x7FFF, wa = wb[i] & 0x7FFF, minus = ((xb[i] ^ wb[i]) >> 15) & 1;
        int x_inf = xa == 0x7F80, w_inf = wa == 0x7F80;
        nan |= xa > 0x7F80 || wa > 0x7F80 || (x_inf && wa == 0) || (w_inf && xa == 0);
        if (x_inf || w_inf) {
            if (minus) neg = 1;
            else pos = 1;
        }
    }
    if (nan || (pos && neg)) return CANONICAL_NAN;
    return pos ? 0x7F800000u : 0xFF800000u;
}

/* The accumulator decoded: signed significand and nominal exponent (NONE when zero). */
static void decode_acc(uint32_t acc, long flags, int32_t *sig, int32_t *exp) {
    int32_t field = (acc >> 23) & 0xFF, mant = acc & 0x7FFFFF;
    int32_t s = field ? (mant | 0x800000) : ((flags & MMA_ACC_IN_FTZ) ? 0 : mant);
    int32_t up = field == 0 && (flags & MMA_ACC_IN_NORMALIZED) ? normalize_shift(s, 23) : 0;
    s <<= up;
    *sig = (acc >> 31) ? -s : s;
    *exp = s ? (field ? field : 1) - 127 - up : NONE;
}

/* s * 2^sh truncated toward zero (sh <= 11: no overflow). */
static inline int64_t on_grid(int32_t s, int32_t sh) {
    int64_t a = s < 0 ? -(int64_t)s : s;
    a = sh >= 0 ? a << sh : a >> (-sh < 62 ? -sh : 62);
    return s < 0 ? -a : a;
}

/* One k16 step of one output from the raw bits (scalar; any inputs). */
static uint32_t scalar_step(const uint16_t *xb, const uint16_t *wb, uint32_t acc, long flags) {
    int special = (acc & 0x7F800000u) == 0x7F800000u;
    for (int i = 0; i < STEP; i++)
        special |= (xb[i] & 0x7F80) == 0x7F80 || (wb[i] & 0x7F80) == 0x7F80;
    if (special) return special_step(xb, wb, acc);
    int32_t csig, cexp, emax, xs, xe, ws, we, e[STEP], p[STEP];
    int64_t total = 0;
    decode_acc(acc, flags, &csig, &cexp);
    emax = cexp;
    for (int i = 0; i < STEP; i++) {
        decode_value(xb[i], flags, &xs, &xe);
        decode_value(wb[i], flags, &ws, &we);
        e[i] = xe + we;
        p[i] = xs * ws;
        emax = e[i] > emax ? e[i] : emax;
    }
    if (emax < NONE / 2) return zero_step(xb, wb, acc, flags);
    emax = emax < EMAX_FLOOR ? EMAX_FLOOR : emax;
    for (int i = 0; i < STEP; i++) total += on_grid(p[i], e[i] - emax + (GRID - 14));
    total += on_grid(csig, cexp - emax + (GRID - 23));
    return to_fp32(total < 0, (uint64_t)(total < 0 ? -total : total), emax - GRID, flags);
}

static inline float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One k16 step of LANES outputs in fp32 (module comment; the caller checked `fast_block`):
 * xv/xe the 16 x values and exponents, wv/we [16][LANES] the tile's, acc[LANES] the
 * accumulators (bits, updated). Lanes left to the scalar step are not written; their bit in
 * the returned mask is set: every term zero, or an accumulator that is subnormal or of an
 * exponent below FAST_EMIN (inf/NaN accumulators never reach here). */
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int32_t vi __attribute__((vector_size(4 * LANES)));

static inline vf load_vf(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline vi load_vi(const int32_t *p) {
    vi v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Lane-wise maximum (vpmaxsd where AVX-512 is compiled for; the compare-select elsewhere). */
static inline vi max_vi(vi a, vi b) {
#if defined(__AVX512F__)
    return (vi)_mm512_max_epi32((__m512i)a, (__m512i)b);
#else
    vi more = a > b;
    return (a & more) | (b & ~more);
#endif
}

static unsigned fast_step(const float *restrict xv, const int32_t *restrict xe,
                          const float *restrict wv, const int32_t *restrict we,
                          uint32_t *restrict acc, long flags) {
    vi a, mag, field, emax, sum = {0}, left;
    memcpy(&a, acc, sizeof a);
    mag = a & 0x7FFFFFFF;
    field = (a >> 23) & 0xFF; /* a's lanes hold uint32 bits: the shift of the int32 view, masked */
    left = (mag != 0) & ((field == 0) | (field - 127 < FAST_EMIN));
    emax = ((field - 127) & (mag != 0)) | (NONE & (mag == 0));
    for (int i = 0; i < STEP; i++) {
        emax = max_vi(emax, xe[i] + load_vi(we + i * LANES));
    }
    vi bits = GRID - emax + 127; /* 2^(GRID - Emax); lanes below FAST_EMIN are left */
    bits = (bits & (bits >= 1)) | (1 & (bits < 1));
    bits = (bits & (bits <= 254)) | (254 & (bits > 254));
    vf scale;
    bits <<= 23;
    memcpy(&scale, &bits, sizeof scale);
    for (int i = 0; i < STEP; i++) /* a zero x gives zero terms (w is finite here) */
        sum += __builtin_convertvector((xv[i] * load_vf(wv + i * LANES)) * scale, vi);
    vf accf;
    memcpy(&accf, &a, sizeof accf);
    vi acc_term = __builtin_convertvector(accf * scale, vi);
    left |= emax < FAST_EMIN;
    int32_t s_[LANES], t_[LANES], e_[LANES], k_[LANES];
    memcpy(s_, &sum, sizeof s_);
    memcpy(t_, &acc_term, sizeof t_);
    memcpy(e_, &emax, sizeof e_);
    memcpy(k_, &left, sizeof k_);
    for (int l = 0; l < LANES; l++) {
        uint32_t r = lane_fp32((int64_t)s_[l] + t_[l], e_[l] - GRID, flags);
        acc[l] = k_[l] ? acc[l] : r;
    }
    unsigned mask = 0;
    for (int l = 0; l < LANES; l++) mask |= (unsigned)(k_[l] != 0) << l;
    return mask;
}

/* Row m of x against tile t of w over the whole chain; writes the tile's outputs. */
static void chain_tile(const struct chain *c, long m, long t) {
    long blocks = c->k / STEP, lanes = c->n - t * LANES < LANES ? c->n - t * LANES : LANES;
    uint32_t acc[LANES] = {0};
    for (long l = 0; l < lanes; l++) acc[l] = c->acc ? c->acc[m * c->n + t * LANES + l] : 0;
    for (long b = 0; b < blocks; b++) {
        const uint16_t *xb = c->x + m * c->k + b * STEP;
        int fast = fast_block(&c->xd.blk[m * blocks + b], &c->wd.blk[t * blocks + b]);
        for (int l = 0; l < LANES; l++) fast &= (acc[l] & 0x7F800000u) != 0x7F800000u;
        unsigned left = ~0u;
        if (fast) {
            long xo = m * c->k + b * STEP, wo = (t * c->k + b * STEP) * LANES;
            left = fast_step(c->xd.val + xo, c->xd.exp + xo, c->wd.val + wo, c->wd.exp + wo,
                             acc, c->flags);
        }
        for (long l = 0; left && l < lanes; l++)
            if (left >> l & 1) {
                const uint16_t *wb = c->w + (t * LANES + l) * c->k + b * STEP;
                acc[l] = scalar_step(xb, wb, acc[l], c->flags);
            }
    }
    for (long l = 0; l < lanes; l++) c->out[m * c->n + t * LANES + l] = acc[l];
}

#define ROWS_PER_UNIT 64      /* rows of x in a work unit */
#define TILE_BYTES_PER_UNIT (1 << 18) /* decoded w in a work unit (about half an L2) */

static void decode_tiles_task(void *ctx, long begin, long end) {
    struct chain *c = ctx;
    for (long t = begin; t < end; t++) decode_tile(c->w, c->n, c->k, &c->wd, t);
}

/* Tiles of w in one work unit: as many as fit TILE_BYTES_PER_UNIT (at least one). */
static long tiles_per_unit(long k) {
    long per_tile = k * LANES * 2 * (long)sizeof(int32_t);
    return per_tile >= TILE_BYTES_PER_UNIT ? 1 : TILE_BYTES_PER_UNIT / per_tile;
}

/* A unit is (block of tiles of w, block of rows of x), numbered block-of-tiles-major, so a
 * thread's consecutive units reuse the same decoded w (in cache); inside a unit each row
 * runs over the unit's tiles (consecutive outputs). */
static void chain_units_task(void *ctx, long begin, long end) {
    const struct chain *c = ctx;
    long rblocks = (c->m + ROWS_PER_UNIT - 1) / ROWS_PER_UNIT, tb = tiles_per_unit(c->k);
    long tiles = (c->n + LANES - 1) / LANES;
    for (long u = begin; u < end; u++) {
        long t0 = u / rblocks * tb, m0 = u % rblocks * ROWS_PER_UNIT;
        long t1 = t0 + tb < tiles ? t0 + tb : tiles;
        long m1 = m0 + ROWS_PER_UNIT < c->m ? m0 + ROWS_PER_UNIT : c->m;
        for (long m = m0; m < m1; m++)
            for (long t = t0; t < t1; t++) chain_tile(c, m, t);
    }
}

/* out[m, j] (fp32 bits) = the chain over k of row m of x [M, K] and row j of w [N, K] (bf16
 * bits), starting from acc[m, j] (fp32 bits; NULL: +0). K a multiple of 16. Returns 0, or -1
 * if memory ran out. Work units: (tiles of w that fit half an L2, block of 64 rows of x), so a
 * single row of x still spreads over the threads at large K; w is decoded on the threads. */
int sb_mma_chain(const uint16_t *x, long m, const uint16_t *w, long n, long k,
                 const uint32_t *acc, uint32_t *out, long flags, long threads) {
    struct chain c = {.x = x, .w = w, .m = m, .n = n, .k = k, .acc = acc, .out = out,
                      .flags = flags};
    long tiles = (n + LANES - 1) / LANES, tb = tiles_per_unit(k);
    long units = (tiles + tb - 1) / tb * ((m + ROWS_PER_UNIT - 1) / ROWS_PER_UNIT);
    int rc = decode_rows(x, m, k, &c.xd) | alloc_tiles(n, k, &c.wd);
    if (rc == 0) {
        sb_parallel(decode_tiles_task, &c, tiles, 1, threads);
        sb_parallel(chain_units_task, &c, units, 1, threads);
    }
    release(&c);
    return rc ? -1 : 0;
}

/* A weight decoded once for many chains (replay: M = 1 is dominated by decoding w). It keeps
 * a pointer to the caller's bits (scalar steps read them): they must outlive the handle. */
struct decoded_weight {
    const uint16_t *w;
    long n, k, flags;
    struct tiles wd;
};

static void release_weight(struct decoded_weight *d) {
    free_tiles(&d->wd);
    free(d);
}

/* Decode w [N, K] (bf16 bits, K a multiple of 16) under `flags`; NULL if memory ran out. */
void *sb_mma_decode_weight(const uint16_t *w, long n, long k, long flags, long threads) {
    struct decoded_weight *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    *d = (struct decoded_weight){.w = w, .n = n, .k = k, .flags = flags};
    if (alloc_tiles(n, k, &d->wd)) {
        release_weight(d);
        return NULL;
    }
    struct chain c = {.w = w, .n = n, .k = k, .flags = flags, .wd = d->wd};
    sb_parallel(decode_tiles_task, &c, (n + LANES - 1) / LANES, 1, threads);
    return d;
}

void sb_mma_free_weight(void *handle) {
    if (handle) release_weight(handle);
}

/* sb_mma_chain with a weight from sb_mma_decode_weight (its flags): the same bits. */
int sb_mma_chain_decoded(const uint16_t *x, long m, const void *handle, const uint32_t *acc,
                         uint32_t *out, long threads) {
    const struct decoded_weight *d = handle;
    struct chain c = {.x = x, .w = d->w, .m = m, .n = d->n, .k = d->k, .acc = acc, .out = out,
                      .flags = d->flags, .wd = d->wd};
    long tiles = (d->n + LANES - 1) / LANES, tb = tiles_per_unit(d->k);
    long units = (tiles + tb - 1) / tb * ((m + ROWS_PER_UNIT - 1) / ROWS_PER_UNIT);
    int rc = decode_rows(x, m, d->k, &c.xd);
    if (rc == 0) sb_parallel(chain_units_task, &c, units, 1, threads);
    free_rows(&c.xd);
    return rc ? -1 : 0;
}

/* One step from the raw bits, for tests: out[m, j] = mma_k16(x[m], w[j], acc[m, j]). */
void sb_mma_step_scalar(const uint16_t *x, long m, const uint16_t *w, long n,
                        const uint32_t *acc, uint32_t *out, long flags) {
    for (long i = 0; i < m; i++)
        for (long j = 0; j < n; j++)
            out[i * n + j] = scalar_step(x + i * STEP, w + j * STEP, acc[i * n + j], flags);
}
