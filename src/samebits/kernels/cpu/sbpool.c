/* samebits worker pool: runs fn(ctx, begin, end) over [0, total) cut into chunks (multiples
 * of `align`), which the calling thread and up to threads - 1 persistent workers claim one at
 * a time. Every kernel using the pool computes each output entirely inside one chunk, so
 * neither the chunking nor which thread ran a chunk changes a bit.
 *
 * Claiming (rather than a fixed split) keeps the pool fast when another process holds a core:
 * a worker that is not running claims nothing, and the threads that run take the chunks.
 * One atomic word, the ticket, holds the job's generation, its thread limit, its chunk count
 * and the next unclaimed chunk; a thread reads the job's parameters only after a successful
 * claim, and a new job is published only after every chunk of the previous one is done.
 * Workers spin briefly between jobs (a forward pass calls kernels microseconds apart), yielding
 * the CPU now and then, then sleep on a condition variable. Callers from several threads are
 * serialised by a mutex. A forked child starts with no workers. */
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "sbpool.h"

#define MAX_WORKERS 255
#define MAX_CHUNKS 4095
#define CHUNKS_PER_THREAD 4
#define SPIN_LIMIT 20000
#define SPINS_PER_YIELD 64

/* ticket bits: generation 63..32, thread limit 31..24, chunk count 23..12, next chunk 11..0 */
#define GEN(t) ((unsigned)((t) >> 32))
#define LIMIT(t) ((long)(((t) >> 24) & 0xff))
#define COUNT(t) ((long)(((t) >> 12) & 0xfff))
#define NEXT(t) ((long)((t)&0xfff))

struct job {
    sb_task fn;
    void *ctx;
    long total, align, chunks;
};

static pthread_mutex_t dispatch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static _Atomic unsigned long long ticket;
static atomic_long done, sleepers;
static long num_workers;
static struct job current;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;

static void pause_or_yield(long spins) {
    if (spins % SPINS_PER_YIELD == SPINS_PER_YIELD - 1) sched_yield();
    else _mm_pause();
}

static long cut(const struct job *j, long chunk) {
    long units = j->total / j->align;
    return chunk >= j->chunks ? j->total : j->align * (units * chunk / j->chunks);
}

/* Claim and run chunks of the job whose ticket generation is `gen` until none is left. */
static void participate(unsigned gen) {
    unsigned long long t = atomic_load(&ticket);
    while (GEN(t) == gen && NEXT(t) < COUNT(t)) {
        if (!atomic_compare_exchange_weak(&ticket, &t, t + 1)) continue;
        long chunk = NEXT(t), begin = cut(&current, chunk), end = cut(&current, chunk + 1);
        if (begin < end) current.fn(current.ctx, begin, end);
        atomic_fetch_add(&done, 1);
        t = atomic_load(&ticket);
    }
}

static unsigned long long wait_for_job(unsigned seen) {
    unsigned long long t;
    for (long spins = 0; GEN(t = atomic_load(&ticket)) == seen; spins++) {
        if (spins < SPIN_LIMIT) {
            pause_or_yield(spins);
            continue;
        }
        pthread_mutex_lock(&sleep_mu);
        atomic_fetch_add(&sleepers, 1);
        while (GEN(atomic_load(&ticket)) == seen) pthread_cond_wait(&wake_cv, &sleep_mu);
        atomic_fetch_sub(&sleepers, 1);
        pthread_mutex_unlock(&sleep_mu);
    }
    return t;
}

struct worker_arg {
    long id;
    unsigned seen;
};

static void *worker(void *arg) {
    long id = ((struct worker_arg *)arg)->id;
    unsigned seen = ((struct worker_arg *)arg)->seen;
    __atomic_store_n(&((struct worker_arg *)arg)->id, -1, __ATOMIC_RELEASE);
    for (;;) {
        unsigned long long t = wait_for_job(seen);
        seen = GEN(t);
        if (id < LIMIT(t)) participate(seen);
    }
    return 0;
}

static void forget_workers(void) {
    num_workers = 0;
    atomic_store(&sleepers, 0);
    pthread_mutex_init(&dispatch_mu, 0);
    pthread_mutex_init(&sleep_mu, 0);
    pthread_cond_init(&wake_cv, 0);
}

static void install_fork_hook(void) { pthread_atfork(0, 0, forget_workers); }

/* Start workers 1..want-1 that do not exist yet (caller holds dispatch_mu). */
static void ensure_workers(long want) {
    pthread_once(&fork_hook_once, install_fork_hook);
    while (num_workers < want - 1 && num_workers < MAX_WORKERS) {
        struct worker_arg arg = {num_workers + 1, GEN(atomic_load(&ticket))};
        pthread_t thread;
        if (pthread_create(&thread, 0, worker, &arg) != 0) break;
        pthread_detach(thread);
        while (__atomic_load_n(&arg.id, __ATOMIC_ACQUIRE) != -1) _mm_pause();
        num_workers++;
    }
}

static void publish(const struct job *job, long threads) {
    current = *job;
    atomic_store(&done, 0);
    unsigned gen = GEN(atomic_load(&ticket)) + 1;
    atomic_store(&ticket, (unsigned long long)gen << 32 | (unsigned long long)threads << 24 |
                              (unsigned long long)job->chunks << 12);
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_mu);
        pthread_cond_broadcast(&wake_cv);
        pthread_mutex_unlock(&sleep_mu);
    }
}

void sb_parallel(sb_task fn, void *ctx, long total, long align, long threads) {
    sb_parallel_chunks(fn, ctx, total, align, threads, 0);
}

void sb_parallel_chunks(sb_task fn, void *ctx, long total, long align, long threads,
                        long chunks) {
    if (align < 1) align = 1;
    long units = total / align;
    if (threads <= 1 || units <= 1) {
        if (total > 0) fn(ctx, 0, total);
        return;
    }
    if (threads > MAX_WORKERS) threads = MAX_WORKERS;
    if (chunks < 1) chunks = threads * CHUNKS_PER_THREAD;
    if (chunks > units) chunks = units;
    if (chunks > MAX_CHUNKS) chunks = MAX_CHUNKS;
    pthread_mutex_lock(&dispatch_mu);
    ensure_workers(threads);
    struct job job = {fn, ctx, total, align, chunks};
    publish(&job, threads);
    participate(GEN(atomic_load(&ticket)));
    for (long spins = 0; atomic_load(&done) < chunks; spins++) pause_or_yield(spins);
    pthread_mutex_unlock(&dispatch_mu);
}
