/* samebits exp for x <= 0, in a scalar and a SIMD form that give the same bits: one fixed
 * sequence of IEEE operations (round, fma, bit shifts). Used by sbattn.c (softmax) and
 * sbrow.c (SiLU). Include after <immintrin.h> and <math.h>. */
#ifndef SAMEBITS_SBEXP_H
#define SAMEBITS_SBEXP_H

/* exp(x) for x <= 0 (inputs below -87.3, including -inf, give 0): Cephes-style range
 * reduction x = n ln2 + r and a degree-7 polynomial in r, all with fused multiply-adds. */
#define EXP_LO -87.3f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

static inline float sb_exp(float x) {
    if (!(x >= EXP_LO)) return 0.0f;
    float n = nearbyintf(x * LOG2E);
    float r = fmaf(-n, LN2_HI, x);
    r = fmaf(-n, LN2_LO, r);
    float p = fmaf(fmaf(fmaf(fmaf(fmaf(P0, r, P1), r, P2), r, P3), r, P4), r, P5);
    p = fmaf(p, r * r, r) + 1.0f;
    union { float f; int i; } scale = {.i = ((int)n + 127) << 23};
    return p * scale.f;
}

#if defined(__AVX512F__)
#define EW 16
typedef __m512 evec;
#define ESET1 _mm512_set1_ps
#define ELOAD _mm512_loadu_ps
#define ESTORE _mm512_storeu_ps
#define EADD _mm512_add_ps
#define ESUB _mm512_sub_ps
#define EMUL _mm512_mul_ps
#define EDIV _mm512_div_ps
#define EMAX _mm512_max_ps
#define EFMA _mm512_fmadd_ps
#define EROUND(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EPOW2(n) _mm512_castsi512_ps(_mm512_slli_epi32( \
    _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
/* lanes of v where x >= EXP_LO (ordered), zero elsewhere */
#define EKEEP_GE_LO(v, x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, ESET1(EXP_LO), _CMP_GE_OQ), v)
#else
#define EW 8
typedef __m256 evec;
#define ESET1 _mm256_set1_ps
#define ELOAD _mm256_loadu_ps
#define ESTORE _mm256_storeu_ps
#define EADD _mm256_add_ps
#define ESUB _mm256_sub_ps
#define EMUL _mm256_mul_ps
#define EDIV _mm256_div_ps
#define EMAX _mm256_max_ps
#define EFMA _mm256_fmadd_ps
#define EROUND(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EPOW2(n) _mm256_castsi256_ps(_mm256_slli_epi32( \
    _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define EKEEP_GE_LO(v, x) _mm256_and_ps(v, _mm256_cmp_ps(x, ESET1(EXP_LO), _CMP_GE_OQ))
#endif

/* sb_exp on EW lanes: the same operations, in the same order, as the scalar form above. */
static inline evec sb_exp_vec(evec x) {
    evec xc = EMAX(x, ESET1(EXP_LO));
    evec n = EROUND(EMUL(xc, ESET1(LOG2E)));
    evec neg_n = ESUB(ESET1(0.0f), n);
    evec r = EFMA(neg_n, ESET1(LN2_LO), EFMA(neg_n, ESET1(LN2_HI), xc));
    evec p = EFMA(ESET1(P0), r, ESET1(P1));
    p = EFMA(p, r, ESET1(P2));
    p = EFMA(p, r, ESET1(P3));
    p = EFMA(p, r, ESET1(P4));
    p = EFMA(p, r, ESET1(P5));
    p = EADD(EFMA(p, EMUL(r, r), r), ESET1(1.0f));
    return EKEEP_GE_LO(EMUL(p, EPOW2(n)), x);
}

#endif
