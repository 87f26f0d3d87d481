/* One decoder layer of the invariant plan in one call: the same kernels, in the same order,
 * on the same values as the op-by-op forward in model/llama.py (qkv linear, q / k / v split,
 * RoPE, KV store, paged attention, o linear, residual add + RMSNorm, gate_up linear, SiLU-mul,
 * down linear, residual add + the next layer's RMSNorm), so every output bit is the same; only
 * the ~12 Python calls per layer and their allocations are gone. Layers with a qkv bias or
 * q / k norms, and linears whose width is padded (except qkv), keep the op-by-op path
 * (`kernels/cpu/sblayer.py` decides). Thread counts follow the Python wrappers' thresholds
 * (passed in the io record); they never change a bit (each kernel's split is invariant). */
#include "sbpool.h"
#include "sbprefetch.h"

void sb_gemm_split(const float *x, long M, long K, const unsigned char *w, long format, long Np,
                   float *y, long threads, const struct sb_prefetch *pf, long splits,
                   long parts);
void sb_attention(const float *q, long n_heads, long dim, const float *k_cache,
                  const float *v_cache, long n_kv, const long *positions, const long *query_req,
                  const long *block_tables, long width, long block_size, long key_tile,
                  long span, float scale, float *out, long n_tokens, long threads);
void sb_silu_mul(const float *gate_up, long rows, long inter, float *out, long threads);
void sb_add_rms_norm(const float *x, float *residual, long rows, long dim, const float *w,
                     double eps, float *out, long threads);

/* A linear: strips in `format`, K inputs, Np (padded) outputs, K in `splits` ranges. */
struct sb_lin {
    const unsigned char *w;
    long format, k, np, splits;
};

/* What does not change between forwards: one layer's weights and KV cache. */
struct sb_layer_weights {
    struct sb_lin qkv, o, gate_up, down;
    const float *ln2, *next_ln; /* next_ln: the next layer's input norm; 0 for the last */
    float *k_cache, *v_cache;   /* [slots, n_kv, dim] */
    const float *next_k_cache, *next_v_cache; /* the next layer's (prefetched); 0 for the last */
};

/* One forward's shapes, batch metadata and buffers (all float32 / int64, contiguous). */
struct sb_layer_io {
    long n, hidden, n_heads, n_kv, dim, inter, threads;
    double eps;
    float scale;
    const long *positions, *query_req, *block_tables, *slot_mapping;
    long width, block_size, key_tile, span, attn_pairs; /* attn_pairs: sum(positions) + n */
    const float *cos, *sin;                       /* [max_positions, dim / 2] */
    float *x, *residual; /* x: this layer's normed input; then the next layer's */
    float *qkv, *q, *k, *attn, *o, *gate_up, *act, *down;
    long gemm_min_macs, row_min_elements, attn_min_pairs; /* the wrappers' PARALLEL_MIN_* */
};

static long use_threads(long work, long min_work, long threads) {
    return work >= min_work && threads > 1 ? threads : 1;
}

/* y = x @ w^T, fetching the lines of the hint `pf` (or none) into the cache meanwhile. */
static void linear(const struct sb_lin *l, const float *x, long rows, float *y,
                   const struct sb_layer_io *io, const struct sb_prefetch *pf) {
    sb_gemm_split(x, rows, l->k, l->w, l->format, l->np, y,
                  use_threads(rows * l->k * l->np, io->gemm_min_macs, io->threads), pf,
                  l->splits, 0);
}

/* The most K / V bytes of the next layer fetched ahead: about what stays in L2 + L3 until
 * its attention runs (a longer context's later blocks are read from DRAM as before). */
#define PREFETCH_MAX_BYTES (8L << 20)
#define PREFETCH_MAX_RANGES 4096

struct kv_ranges {
    const char *start[PREFETCH_MAX_RANGES];
    long lines[PREFETCH_MAX_RANGES];
    long n, total;
};

/* Adds `bytes` from k and from v (one block's span of the K and V caches), unless that goes
 * over the limits (then 0). */
static int add_kv_range(struct kv_ranges *r, const float *k, const float *v, long bytes) {
    long lines = (bytes + SB_LINE - 1) / SB_LINE;
    if (r->n + 2 > PREFETCH_MAX_RANGES || (r->total + 2 * lines) * SB_LINE > PREFETCH_MAX_BYTES)
        return 0;
    r->start[r->n] = (const char *)k, r->lines[r->n++] = lines;
    r->start[r->n] = (const char *)v, r->lines[r->n++] = lines;
    r->total += 2 * lines;
    return 1;
}

/* The K / V blocks the next layer's attention reads: for each request of the batch, its
 * blocks up to its last token's position, in block-table order (a hint only). */
static void next_layer_ranges(const struct sb_layer_weights *w, const struct sb_layer_io *io,
                              struct kv_ranges *r) {
    long row = io->n_kv * io->dim, bs = io->block_size;
    r->n = r->total = 0;
    if (!w->next_k_cache) return;
    for (long t = 0; t < io->n; t++) {
        if (t + 1 < io->n && io->query_req[t + 1] == io->query_req[t]) continue; /* its last */
        const long *table = io->block_tables + io->query_req[t] * io->width;
        long pos = io->positions[t];
        for (long b = 0; b <= pos / bs; b++) {
            long slots = b < pos / bs ? bs : pos % bs + 1, at = table[b] * bs * row;
            if (!add_kv_range(r, w->next_k_cache + at, w->next_v_cache + at,
                              slots * row * (long)sizeof(float)))
                return;
        }
    }
}

/* In place rotate-half RoPE of rows [count, dim] of token t (rowwise.rope's arithmetic: each
 * product rounded, then the difference / sum rounded; -ffp-contract=off). */
static void rope_rows(float *x, long count, long dim, const float *cos, const float *sin,
                      long pos) {
    long half = dim / 2;
    const float *c = cos + pos * half, *s = sin + pos * half;
    for (long r = 0; r < count; r++) {
        float *row = x + r * dim;
        for (long i = 0; i < half; i++) {
            float a = row[i], b = row[i + half];
            row[i] = a * c[i] - b * s[i];
            row[i + half] = b * c[i] + a * s[i];
        }
    }
}

/* q, k out of the qkv rows (rotated), k and v into the cache at each token's slot. */
static void split_rope_store(const struct sb_layer_weights *w, const struct sb_layer_io *io) {
    long hd = io->n_heads * io->dim, kvd = io->n_kv * io->dim;
    for (long t = 0; t < io->n; t++) {
        const float *row = io->qkv + t * w->qkv.np;
        float *q = io->q + t * hd, *k = io->k + t * kvd;
        for (long i = 0; i < hd; i++) q[i] = row[i];
        for (long i = 0; i < kvd; i++) k[i] = row[hd + i];
        rope_rows(q, io->n_heads, io->dim, io->cos, io->sin, io->positions[t]);
        rope_rows(k, io->n_kv, io->dim, io->cos, io->sin, io->positions[t]);
        float *kc = w->k_cache + io->slot_mapping[t] * kvd;
        float *vc = w->v_cache + io->slot_mapping[t] * kvd;
        for (long i = 0; i < kvd; i++) kc[i] = k[i];
        for (long i = 0; i < kvd; i++) vc[i] = row[hd + kvd + i];
    }
}

static int prefetch_on = 1;

/* Benchmarks and tests only (never changes a bit): whether layers prefetch the next one's K / V. */
void sb_layer_set_prefetch(long on) { prefetch_on = on != 0; }

/* The hint's lines split between this layer's o, gate_up and down linears in proportion to
 * their multiply-adds (hint[0..2]). */
static void split_hint(const struct kv_ranges *r, const struct sb_layer_weights *w,
                       struct sb_prefetch hint[3]) {
    const struct sb_lin *lins[3] = {&w->o, &w->gate_up, &w->down};
    long macs[3], total = 0, at = 0, done = 0;
    for (int i = 0; i < 3; i++) total += macs[i] = lins[i]->k * lins[i]->np;
    for (int i = 0; i < 3; i++) {
        done += macs[i];
        long end = prefetch_on ? r->total * done / total : 0;
        hint[i] = (struct sb_prefetch){r->start, r->lines, r->n, at, end};
        at = end;
    }
}

void sb_decoder_layer(const struct sb_layer_weights *w, const struct sb_layer_io *io) {
    long n = io->n, th = io->threads, rows = n * io->hidden;
    /* the next layer's K / V come into the cache while this layer's o, gate_up and down
     * linears run (FMA-bound), so its attention does not wait on DRAM */
    static __thread struct kv_ranges next;
    struct sb_prefetch hint[3];
    next_layer_ranges(w, io, &next);
    split_hint(&next, w, hint);
    linear(&w->qkv, io->x, n, io->qkv, io, 0);
    split_rope_store(w, io);
    sb_attention(io->q, io->n_heads, io->dim, w->k_cache, w->v_cache, io->n_kv, io->positions,
                 io->query_req, io->block_tables, io->width, io->block_size, io->key_tile,
                 io->span, io->scale, io->attn, n,
                 use_threads(io->attn_pairs * io->n_heads, io->attn_min_pairs, th));
    linear(&w->o, io->attn, n, io->o, io, &hint[0]);
    long row_th = use_threads(rows, io->row_min_elements, th);
    sb_add_rms_norm(io->o, io->residual, n, io->hidden, w->ln2, io->eps, io->x, row_th);
    linear(&w->gate_up, io->x, n, io->gate_up, io, &hint[1]);
    sb_silu_mul(io->gate_up, n, io->inter, io->act,
                use_threads(n * io->inter, io->row_min_elements, th));
    linear(&w->down, io->act, n, io->down, io, &hint[2]);
    if (w->next_ln)
        sb_add_rms_norm(io->down, io->residual, n, io->hidden, w->next_ln, io->eps, io->x,
                        row_th);
}
