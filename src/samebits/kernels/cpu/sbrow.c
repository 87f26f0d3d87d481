/* samebits row kernels: SiLU * mul and RMSNorm (with the fused residual add), one row at a
 * time, each row computed entirely by one thread of the pool (sbpool.c).
 *
 * Per element / per row the sequence of float operations depends only on the inputs and on
 * the row length, never on the number of rows, the row's position, the vector width or the
 * thread split:
 *   silu_mul: e = sb_exp(-|g|) (sbexp.h; same bits in SIMD and scalar form);
 *             s = (g >= 0 ? g : g * e) / (1 + e);  out = s * u
 *             (g / (1 + exp(-g)) rewritten so exp never overflows; for g < -87.3, e = 0 and
 *             out = -0 * u, where the true |silu(g)| < 1e-35 — torch gives -0 there too)
 *   gelu_mul (GELU, tanh form, as gelu_pytorch_tanh): 0.5 g (1 + tanh(c (g + 0.044715 g^3)))
 *             = g * sigmoid(z), z = g * (K1 + K2 * g * g), K1 = 2 sqrt(2 / pi), K2 = 0.044715 K1;
 *             e = sb_exp(-|z|); s = (z >= 0 ? g : g * e) / (1 + e);  out = s * u
 *             (z has the sign of g; exp never overflows; for z < -87.3, e = 0 and out = -0 * u)
 *   rms_norm: ss = tree(16 float64 lanes; lane i sums x[j]^2 for j = i mod 16 in j order,
 *             vector body and scalar tail alike; tree: lanes i and i+8, then i+4, i+2, i+1)
 *             inv = 1 / sqrt(ss / dim + eps) (float64);  out[j] = (float)(x[j] * inv) * w[j]
 *   add_rms_norm: residual[j] = residual[j] + x[j] (float32, in place), then rms_norm of
 *             the new residual row into out.
 * Squares of float32 values are exact in float64, so the sum is float64-accurate; the
 * normalisation is the numba kernel's (rowwise.py) up to the float64 summation order. */
#include <math.h>
#include <immintrin.h>

#include "sbpool.h"
#include "sbexp.h"

#define LANES 16

#if defined(__AVX512F__)
#define RABS(v) _mm512_abs_ps(v)
#define RNEG(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), \
    _mm512_set1_epi32((int)0x80000000u)))
#define RPICK_GE0(g, if_ge, if_lt) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, ESET1(0.0f), _CMP_GE_OQ), if_lt, if_ge)
#else
#define RABS(v) _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)))
#define RNEG(v) _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)))
#define RPICK_GE0(g, if_ge, if_lt) \
    _mm256_blendv_ps(if_lt, if_ge, _mm256_cmp_ps(g, ESET1(0.0f), _CMP_GE_OQ))
#endif

/* silu(g) * u for one element: the scalar twin of silu_mul_vec, operation for operation. */
static inline float silu_mul1(float g, float u) {
    float e = sb_exp(-fabsf(g));
    float num = g >= 0.0f ? g : g * e;
    return num / (1.0f + e) * u;
}

static inline evec silu_mul_vec(evec g, evec u) {
    evec e = sb_exp_vec(RNEG(RABS(g)));
    evec num = RPICK_GE0(g, g, EMUL(g, e));
    return EMUL(EDIV(num, EADD(ESET1(1.0f), e)), u);
}

#define GELU_K1 1.5957691216057308f /* 2 sqrt(2 / pi) */
#define GELU_K2 0.0713548162726009f /* 0.044715 * GELU_K1 */

/* gelu_tanh(g) * u for one element: the scalar twin of gelu_mul_vec. */
static inline float gelu_mul1(float g, float u) {
    float z = g * (GELU_K1 + GELU_K2 * (g * g));
    float e = sb_exp(-fabsf(z));
    float num = z >= 0.0f ? g : g * e;
    return num / (1.0f + e) * u;
}

static inline evec gelu_mul_vec(evec g, evec u) {
    evec z = EMUL(g, EADD(ESET1(GELU_K1), EMUL(ESET1(GELU_K2), EMUL(g, g))));
    evec e = sb_exp_vec(RNEG(RABS(z)));
    evec num = RPICK_GE0(z, g, EMUL(g, e));
    return EMUL(EDIV(num, EADD(ESET1(1.0f), e)), u);
}

static void gelu_mul_row(const float *g, const float *u, long n, float *out) {
    long i = 0;
    for (; i + EW <= n; i += EW) ESTORE(out + i, gelu_mul_vec(ELOAD(g + i), ELOAD(u + i)));
    for (; i < n; i++) out[i] = gelu_mul1(g[i], u[i]);
}

static void silu_mul_row(const float *g, const float *u, long n, float *out) {
    long i = 0;
    for (; i + EW <= n; i += EW) ESTORE(out + i, silu_mul_vec(ELOAD(g + i), ELOAD(u + i)));
    for (; i < n; i++) out[i] = silu_mul1(g[i], u[i]);
}

/* lanes[i] += x[j]^2 (float64) for j = i mod 16, j < n, in j order. */
static void square_lanes(const float *x, long n, double lanes[LANES]) {
    long body = n - n % LANES;
#if defined(__AVX512F__)
    __m512d lo = _mm512_loadu_pd(lanes), hi = _mm512_loadu_pd(lanes + 8);
    for (long j = 0; j < body; j += LANES) {
        __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + j));
        __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + j + 8));
        lo = _mm512_fmadd_pd(a, a, lo);
        hi = _mm512_fmadd_pd(b, b, hi);
    }
    _mm512_storeu_pd(lanes, lo);
    _mm512_storeu_pd(lanes + 8, hi);
#else
    __m256d s[4];
    for (int q = 0; q < 4; q++) s[q] = _mm256_loadu_pd(lanes + 4 * q);
    for (long j = 0; j < body; j += LANES) {
        for (int q = 0; q < 4; q++) {
            __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4 * q));
            s[q] = _mm256_fmadd_pd(a, a, s[q]);
        }
    }
    for (int q = 0; q < 4; q++) _mm256_storeu_pd(lanes + 4 * q, s[q]);
#endif
    for (long j = body; j < n; j++) {
        double v = x[j];
        lanes[j % LANES] = fma(v, v, lanes[j % LANES]);
    }
}

/* The fixed halving tree over the 16 lanes. */
static double tree16(double lanes[LANES]) {
    for (int half = LANES / 2; half >= 1; half /= 2)
        for (int i = 0; i < half; i++) lanes[i] = lanes[i] + lanes[i + half];
    return lanes[0];
}

/* out[j] = (float)(x[j] * inv) * w[j]: element-wise, so the vector width cannot matter. */
static void scale_row(const float *x, long n, double inv, const float *w, float *out) {
    long j = 0;
#if defined(__AVX512F__)
    __m512d vinv = _mm512_set1_pd(inv);
    for (; j + 8 <= n; j += 8) {
        __m256 y = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), vinv));
        _mm256_storeu_ps(out + j, _mm256_mul_ps(y, _mm256_loadu_ps(w + j)));
    }
#else
    __m256d vinv = _mm256_set1_pd(inv);
    for (; j + 4 <= n; j += 4) {
        __m128 y = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j)), vinv));
        _mm_storeu_ps(out + j, _mm_mul_ps(y, _mm_loadu_ps(w + j)));
    }
#endif
    for (; j < n; j++) out[j] = (float)((double)x[j] * inv) * w[j];
}

static void rms_row(const float *x, long n, const float *w, double eps, float *out) {
    double lanes[LANES] = {0};
    square_lanes(x, n, lanes);
    double inv = 1.0 / sqrt(tree16(lanes) / (double)n + eps);
    scale_row(x, n, inv, w, out);
}

/* residual[j] = residual[j] + x[j] (float32), element-wise. */
static void add_row(const float *x, float *residual, long n) {
    long j = 0;
    for (; j + EW <= n; j += EW) ESTORE(residual + j, EADD(ELOAD(residual + j), ELOAD(x + j)));
    for (; j < n; j++) residual[j] = residual[j] + x[j];
}

struct row_args {
    const float *x, *w;
    float *residual, *out;
    long dim, in_stride;
    double eps;
};

static void silu_rows(void *ctx, long begin, long end) {
    const struct row_args *a = ctx;
    for (long r = begin; r < end; r++) {
        const float *g = a->x + r * a->in_stride;
        silu_mul_row(g, g + a->dim, a->dim, a->out + r * a->dim);
    }
}

static void gelu_rows(void *ctx, long begin, long end) {
    const struct row_args *a = ctx;
    for (long r = begin; r < end; r++) {
        const float *g = a->x + r * a->in_stride;
        gelu_mul_row(g, g + a->dim, a->dim, a->out + r * a->dim);
    }
}

static void rms_rows(void *ctx, long begin, long end) {
    const struct row_args *a = ctx;
    for (long r = begin; r < end; r++)
        rms_row(a->x + r * a->dim, a->dim, a->w, a->eps, a->out + r * a->dim);
}

static void add_rms_rows(void *ctx, long begin, long end) {
    const struct row_args *a = ctx;
    for (long r = begin; r < end; r++) {
        float *res = a->residual + r * a->dim;
        add_row(a->x + r * a->dim, res, a->dim);
        rms_row(res, a->dim, a->w, a->eps, a->out + r * a->dim);
    }
}

/* out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up [rows, 2 inter],
 * out [rows, inter], both contiguous. */
void sb_silu_mul(const float *gate_up, long rows, long inter, float *out, long threads) {
    struct row_args args = {gate_up, 0, 0, out, inter, 2 * inter, 0.0};
    sb_parallel(silu_rows, &args, rows, 1, threads);
}

/* out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i] (shapes as sb_silu_mul). */
void sb_gelu_mul(const float *gate_up, long rows, long inter, float *out, long threads) {
    struct row_args args = {gate_up, 0, 0, out, inter, 2 * inter, 0.0};
    sb_parallel(gelu_rows, &args, rows, 1, threads);
}

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; x, out [rows, dim]; w [dim]. */
void sb_rms_norm(const float *x, long rows, long dim, const float *w, double eps, float *out,
                 long threads) {
    struct row_args args = {x, w, 0, out, dim, dim, eps};
    sb_parallel(rms_rows, &args, rows, 1, threads);
}

/* residual[r] += x[r] (in place), then out[r] = rms_norm(residual[r]); all [rows, dim]. */
void sb_add_rms_norm(const float *x, float *residual, long rows, long dim, const float *w,
                     double eps, float *out, long threads) {
    struct row_args args = {x, w, residual, out, dim, dim, eps};
    sb_parallel(add_rms_rows, &args, rows, 1, threads);
}
