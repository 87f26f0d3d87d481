/* samebits worker pool (sbpool.c). */
#ifndef SAMEBITS_SBPOOL_H
#define SAMEBITS_SBPOOL_H

typedef void (*sb_task)(void *ctx, long begin, long end);

/* fn(ctx, begin, end) over [0, total) on up to `threads` threads, in chunks whose cuts are
 * multiples of align (4 chunks per thread, claimed one at a time). */
void sb_parallel(sb_task fn, void *ctx, long total, long align, long threads);

/* sb_parallel in `chunks` chunks (at most one per align unit; 0: the default). */
void sb_parallel_chunks(sb_task fn, void *ctx, long total, long align, long threads,
                        long chunks);

#endif
