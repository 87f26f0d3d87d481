/* samebits worker pool (sbpool.c). */
#ifndef SAMEBITS_SBPOOL_H
#define SAMEBITS_SBPOOL_H

typedef void (*sb_task)(void *ctx, long begin, long end);

/* fn(ctx, begin, end) over [0, total) in `threads` ranges whose cuts are multiples of align. */
void sb_parallel(sb_task fn, void *ctx, long total, long align, long threads);

#endif
