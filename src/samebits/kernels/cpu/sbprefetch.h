/* samebits prefetch hints: byte ranges a later kernel will read, fetched into the cache while
 * an FMA-bound kernel (sbgemm) runs. A hint only moves data between memory and caches, so it
 * never changes a bit of any result; a missing or partial hint only costs time. */
#ifndef SAMEBITS_SBPREFETCH_H
#define SAMEBITS_SBPREFETCH_H

#define SB_LINE 64 /* cache line bytes */

/* Ranges i < n_ranges: lines[i] cache lines from start[i]. A GEMM given this hint fetches the
 * lines [first, last) of the ranges laid end to end, spread over its columns. */
struct sb_prefetch {
    const char *const *start;
    const long *lines;
    long n_ranges;
    long first, last;
};

#endif
