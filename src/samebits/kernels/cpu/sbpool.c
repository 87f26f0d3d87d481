/* samebits worker pool: runs fn(ctx, begin, end) over [0, total) cut into `parts` ranges
 * (multiples of `align`), part 0 on the caller, the others on persistent worker threads.
 *
 * Only the split of work changes with the thread count; every kernel using the pool computes
 * each output entirely inside one range, so no bit depends on it. Workers spin briefly after
 * a job (the next kernel of a forward pass follows within microseconds), then sleep on a
 * condition variable. Calls from several threads are serialised by a mutex. A forked child
 * starts with no workers. */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>

#include "sbpool.h"

#define MAX_WORKERS 255
#define SPIN_LIMIT 20000

struct job {
    sb_task fn;
    void *ctx;
    long total, align, parts;
};

static pthread_mutex_t dispatch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static atomic_ulong generation;
static atomic_long pending, sleepers;
static long num_workers;
static struct job current;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;

static long cut(const struct job *j, long part) {
    long units = j->total / j->align;
    return part >= j->parts ? j->total : j->align * (units * part / j->parts);
}

static void run_part(const struct job *j, long part) {
    if (part >= j->parts) return;
    long begin = cut(j, part), end = cut(j, part + 1);
    if (begin < end) j->fn(j->ctx, begin, end);
}

static unsigned long wait_for_job(unsigned long seen) {
    unsigned long g;
    for (long spins = 0; (g = atomic_load(&generation)) == seen; spins++) {
        if (spins < SPIN_LIMIT) {
            _mm_pause();
            continue;
        }
        pthread_mutex_lock(&sleep_mu);
        atomic_fetch_add(&sleepers, 1);
        while (atomic_load(&generation) == seen) pthread_cond_wait(&wake_cv, &sleep_mu);
        atomic_fetch_sub(&sleepers, 1);
        pthread_mutex_unlock(&sleep_mu);
    }
    return g;
}

struct worker_arg {
    long id;
    unsigned long seen;
};

static void *worker(void *arg) {
    long id = ((struct worker_arg *)arg)->id;
    unsigned long seen = ((struct worker_arg *)arg)->seen;
    __atomic_store_n(&((struct worker_arg *)arg)->id, -1, __ATOMIC_RELEASE);
    for (;;) {
        seen = wait_for_job(seen);
        run_part(&current, id);
        atomic_fetch_sub(&pending, 1);
    }
    return 0;
}

static void forget_workers(void) {
    num_workers = 0;
    atomic_store(&pending, 0);
    atomic_store(&sleepers, 0);
    pthread_mutex_init(&dispatch_mu, 0);
    pthread_mutex_init(&sleep_mu, 0);
    pthread_cond_init(&wake_cv, 0);
}

static void install_fork_hook(void) { pthread_atfork(0, 0, forget_workers); }

/* Start workers 1..want-1 that do not exist yet (caller holds dispatch_mu). */
static long ensure_workers(long want) {
    pthread_once(&fork_hook_once, install_fork_hook);
    while (num_workers < want - 1 && num_workers < MAX_WORKERS) {
        struct worker_arg arg = {num_workers + 1, atomic_load(&generation)};
        pthread_t thread;
        if (pthread_create(&thread, 0, worker, &arg) != 0) break;
        pthread_detach(thread);
        while (__atomic_load_n(&arg.id, __ATOMIC_ACQUIRE) != -1) _mm_pause();
        num_workers++;
    }
    return num_workers + 1;
}

void sb_parallel(sb_task fn, void *ctx, long total, long align, long threads) {
    if (align < 1) align = 1;
    if (threads <= 1 || total <= align) {
        if (total > 0) fn(ctx, 0, total);
        return;
    }
    pthread_mutex_lock(&dispatch_mu);
    long parts = ensure_workers(threads);
    if (parts > threads) parts = threads;
    current = (struct job){fn, ctx, total, align, parts};
    atomic_store(&pending, num_workers);
    atomic_fetch_add(&generation, 1);
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_mu);
        pthread_cond_broadcast(&wake_cv);
        pthread_mutex_unlock(&sleep_mu);
    }
    run_part(&current, 0);
    while (atomic_load(&pending) > 0) _mm_pause();
    pthread_mutex_unlock(&dispatch_mu);
}
