/* samebits MMA emulator: the exact bits of an H200 (sm_90) bf16 tensor-core chain with fp32
 * accumulation, acc = mma_k16(x[:, k0:k0+16], w[:, k0:k0+16], acc) for k0 = 0, 16, ...
 *
 * One k16 step (the definition; the numpy reference is mma_model.py):
 *   products exact (8x8-bit significands), nominal exponent ea + eb (not renormalized);
 *   Emax = max nominal exponent over the nonzero products and the accumulator;
 *   every term on the grid 2^(Emax - 25), truncated toward zero; exact integer sum;
 *   the sum to fp32 rounding toward zero; subnormals kept (flags may say otherwise).
 * Specials: a NaN input, inf * 0 or +inf with -inf gives 0x7FFFFFFF; an inf gives that inf.
 *
 * Each output is computed by one thread from its row of x, its row of w and its accumulator:
 * threading (sbpool.c) never changes a bit. Integer arithmetic only: no rounding anywhere but
 * the explicit truncations. A product's grid value is < 2^27, so 16 of them fit an int32. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbpool.h"

#define STEP 16
#define GRID 25
#define NONE (-(1 << 20)) /* exponent of a zero term: never the maximum, always shifted out */
#define CANONICAL_NAN 0x7FFFFFFFu

enum {
    MMA_SUBNORMAL_IN_FTZ = 1,
    MMA_ACC_IN_FTZ = 2,
    MMA_SUBNORMAL_OUT_FTZ = 4,
    MMA_OVERFLOW_TO_MAX = 8,
    MMA_ZERO_PLUS = 16,
};

/* A bf16 operand decoded: signed significand and nominal exponent (NONE when zero); one
 * byte per k16 block saying whether the block holds an inf/NaN. */
struct operand {
    int32_t *sig, *exp;
    uint8_t *special;
    const uint16_t *bits;
};

struct chain {
    struct operand x, w;
    long n, k;
    const uint32_t *acc;
    uint32_t *out;
    long flags;
};

static void decode_value(uint16_t b, long flags, int32_t *sig, int32_t *exp) {
    int32_t field = (b >> 7) & 0xFF, mant = b & 0x7F;
    int32_t s = field == 0 ? ((flags & MMA_SUBNORMAL_IN_FTZ) ? 0 : mant) : (mant | 0x80);
    if (field == 0xFF) s = 0;
    *sig = (b & 0x8000) ? -s : s;
    *exp = s ? (field ? field : 1) - 127 : NONE;
}

static int decode(const uint16_t *bits, long rows, long k, long flags, struct operand *op) {
    long count = rows * k;
    op->bits = bits;
    op->sig = malloc(sizeof(int32_t) * (size_t)count);
    op->exp = malloc(sizeof(int32_t) * (size_t)count);
    op->special = calloc((size_t)(count / STEP + 1), 1);
    if (!op->sig || !op->exp || !op->special) return -1;
    for (long i = 0; i < count; i++) {
        decode_value(bits[i], flags, &op->sig[i], &op->exp[i]);
        if ((bits[i] & 0x7F80) == 0x7F80) op->special[i / STEP] = 1;
    }
    return 0;
}

static void release(struct operand *op) {
    free(op->sig);
    free(op->exp);
    free(op->special);
}

/* fp32 bits of (-1)^neg * mag * 2^lsb rounded toward zero. */
static uint32_t to_fp32(int neg, uint64_t mag, int32_t lsb, long flags) {
    uint32_t sign = neg ? 0x80000000u : 0;
    if (mag == 0) return sign;
    int32_t msb = 63 - __builtin_clzll(mag), e = lsb + msb;
    if (e > 127) return sign | ((flags & MMA_OVERFLOW_TO_MAX) ? 0x7F7FFFFFu : 0x7F800000u);
    if (e >= -126) {
        uint64_t sig = msb >= 23 ? mag >> (msb - 23) : mag << (23 - msb);
        return sign | ((uint32_t)(e + 127) << 23) | ((uint32_t)sig & 0x7FFFFFu);
    }
    if (flags & MMA_SUBNORMAL_OUT_FTZ) return sign;
    int32_t sh = -149 - lsb; /* onto the subnormal grid 2^-149 */
    uint64_t sig = sh >= 0 ? (sh > 63 ? 0 : mag >> sh) : mag << -sh;
    return sign | (uint32_t)sig;
}

/* A step whose products and accumulator are all zeros: -0 only if every term is -0. */
static uint32_t zero_step(const uint16_t *xb, const uint16_t *wb, uint32_t acc, long flags) {
    if (flags & MMA_ZERO_PLUS) return 0;
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
    *sig = (acc >> 31) ? -s : s;
    *exp = s ? (field ? field : 1) - 127 : NONE;
}

/* One finite k16 step: xs/xe, ws/we the 16 decoded operands, acc the accumulator bits; the
 * result in *res. Returns 0 (nothing written) when every term is zero. */
static int finite_step(const int32_t *restrict xs, const int32_t *restrict xe,
                       const int32_t *restrict ws, const int32_t *restrict we, uint32_t acc,
                       long flags, uint32_t *res) {
    int32_t e[STEP], p[STEP], csig, cexp, emax = NONE, sum = 0;
    for (int i = 0; i < STEP; i++) {
        e[i] = xe[i] + we[i];
        p[i] = xs[i] * ws[i];
    }
    for (int i = 0; i < STEP; i++) emax = e[i] > emax ? e[i] : emax;
    decode_acc(acc, flags, &csig, &cexp);
    emax = cexp > emax ? cexp : emax;
    if (emax < NONE / 2) return 0;
    for (int i = 0; i < STEP; i++) {
        int32_t sh = e[i] - emax + (GRID - 14), a = p[i] < 0 ? -p[i] : p[i];
        int32_t l = sh > 0 ? sh : 0, r = sh < 0 ? (-sh < 31 ? -sh : 31) : 0;
        int32_t t = (a << l) >> r;
        sum += p[i] < 0 ? -t : t;
    }
    int32_t csh = cexp - emax + (GRID - 23), ca = csig < 0 ? -csig : csig;
    int32_t ct = csh >= 0 ? ca << csh : (-csh < 31 ? ca >> -csh : 0);
    int64_t total = (int64_t)sum + (csig < 0 ? -ct : ct);
    *res = to_fp32(total < 0, (uint64_t)(total < 0 ? -total : total), emax - GRID, flags);
    return 1;
}

static uint32_t dot_chain(const struct chain *c, long m, long j) {
    uint32_t acc = c->acc ? c->acc[m * c->n + j] : 0;
    long blocks = c->k / STEP;
    for (long b = 0; b < blocks; b++) {
        long xo = m * c->k + b * STEP, wo = j * c->k + b * STEP;
        const uint16_t *xb = c->x.bits + xo, *wb = c->w.bits + wo;
        if (c->x.special[xo / STEP] | c->w.special[wo / STEP] |
            ((acc & 0x7F800000u) == 0x7F800000u)) {
            acc = special_step(xb, wb, acc);
            continue;
        }
        uint32_t r;
        if (finite_step(c->x.sig + xo, c->x.exp + xo, c->w.sig + wo, c->w.exp + wo, acc,
                        c->flags, &r))
            acc = r;
        else
            acc = zero_step(xb, wb, acc, c->flags);
    }
    return acc;
}

static void chain_rows(void *ctx, long begin, long end) {
    const struct chain *c = ctx;
    for (long m = begin; m < end; m++)
        for (long j = 0; j < c->n; j++) c->out[m * c->n + j] = dot_chain(c, m, j);
}

/* out[m, j] (fp32 bits) = the chain over k of row m of x [M, K] and row j of w [N, K] (bf16
 * bits), starting from acc[m, j] (fp32 bits; NULL: +0). K a multiple of 16. Returns 0, or -1
 * if memory ran out. */
int sb_mma_chain(const uint16_t *x, long m, const uint16_t *w, long n, long k,
                 const uint32_t *acc, uint32_t *out, long flags, long threads) {
    struct chain c = {.n = n, .k = k, .acc = acc, .out = out, .flags = flags};
    int rc = decode(x, m, k, flags, &c.x) | decode(w, n, k, flags, &c.w);
    if (rc == 0) sb_parallel(chain_rows, &c, m, 1, threads);
    release(&c.x);
    release(&c.w);
    return rc ? -1 : 0;
}
