/* samebits invariant GEMM: y[m, n] = sum over k = 0..K-1, in that order, of x[m, k] * wt[k, n],
 * one fused multiply-add per step, for every (m, n). Each output element is one SIMD lane
 * running the same sequence of FMAs whatever the number of rows, the row's position in the
 * batch, the vector width (AVX-512 or AVX2) or the split of columns between threads: the
 * reduction order is a function of k only. wt is [K, Np] row-major with Np a multiple of
 * 2 * VW (zero-padded columns), y is [M, Np]. */
#include <immintrin.h>

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

int sb_vector_width(void) { return VW; }

int sb_column_tile(void) { return NR; }

/* Columns [n_begin, n_end) (multiples of NR) of y = x @ wt for all M rows. */
void sb_gemm(const float *x, long M, long K, const float *wt, long Np, float *y, long n_begin,
             long n_end) {
    for (long n = n_begin; n < n_end; n += NR) {
        for (long m = 0; m < M; m += MR_MAX) {
            long mr = M - m < MR_MAX ? M - m : MR_MAX;
            const float *xm = x + m * K;
            float *ym = y + m * Np + n;
            switch (mr) {
            case 8: tile_8(xm, K, wt + n, Np, K, ym, Np); break;
            case 7: tile_7(xm, K, wt + n, Np, K, ym, Np); break;
            case 6: tile_6(xm, K, wt + n, Np, K, ym, Np); break;
            case 5: tile_5(xm, K, wt + n, Np, K, ym, Np); break;
            case 4: tile_4(xm, K, wt + n, Np, K, ym, Np); break;
            case 3: tile_3(xm, K, wt + n, Np, K, ym, Np); break;
            case 2: tile_2(xm, K, wt + n, Np, K, ym, Np); break;
            default: tile_1(xm, K, wt + n, Np, K, ym, Np); break;
            }
        }
    }
}
