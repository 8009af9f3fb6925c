/* Per-call cost of a tiny dgemm_ (8x8x8 by default), for scripts/bench-overhead.
 *
 * Makes BATCHES x PER_BATCH calls and times each batch with CLOCK_MONOTONIC; a batch's time
 * divided by PER_BATCH is one sample, and the median sample is reported (a median over
 * batches ignores the odd interrupt or page fault that a mean would smear over everything).
 * The same binary is run directly and under the shim, so the difference is the shim's cost.
 *
 * Usage: bench_overhead [N [BATCHES [PER_BATCH [ENTRY]]]]   (default 8 1000 1000 fortran, i.e.
 * 10^6 calls of dgemm_); ENTRY `cblas` calls row-major cblas_dgemm instead.
 * Prints: median_ns=... p10_ns=... p90_ns=... cpu_ns=... proc_cpu_ns=... calls=... checksum=...
 * where cpu_ns is the calling thread's CPU time per timed call (CLOCK_THREAD_CPUTIME_ID: time
 * the thread was preempted on a loaded machine does not count) and proc_cpu_ns the whole
 * process's (CLOCK_PROCESS_CPUTIME_ID: threads of the library under test included).
 */
#include <time.h>

#include "common.h"

/* One call through the entry point asked for. */
static void call(int cblas, int n, const double *a, const double *b, double *c) {
    double alpha = 1.0, beta = 0.0;
    if (cblas)
        cblas_dgemm(101, 111, 111, n, n, n, alpha, a, n, b, n, beta, c, n);
    else
        dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8;
    int batches = argc > 2 ? atoi(argv[2]) : 1000;
    int per = argc > 3 ? atoi(argv[3]) : 1000;
    int cblas = argc > 4 && strcmp(argv[4], "cblas") == 0;
    if (n < 1 || batches < 1 || per < 1) return 2;
    double *a = malloc(sizeof(double) * n * n), *b = malloc(sizeof(double) * n * n),
           *c = malloc(sizeof(double) * n * n), *t = malloc(sizeof(double) * batches);
    fill(a, (size_t)n * n);
    fill(b, (size_t)n * n);
    memset(c, 0, sizeof(double) * n * n);
    /* Warm up: resolve symbols, open the trace, fault in the pages. */
    for (int i = 0; i < 1000; i++) call(cblas, n, a, b, c);
    struct timespec c0, c1, p0, p1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p0);
    for (int j = 0; j < batches; j++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < per; i++) call(cblas, n, a, b, c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        t[j] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / per;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
    double calls = (double)batches * per;
    double cpu = ((c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec)) / calls;
    double proc = ((p1.tv_sec - p0.tv_sec) * 1e9 + (p1.tv_nsec - p0.tv_nsec)) / calls;
    qsort(t, batches, sizeof(double), cmp);
    printf("median_ns=%.1f p10_ns=%.1f p90_ns=%.1f cpu_ns=%.1f proc_cpu_ns=%.1f calls=%lld checksum=%016llx\n",
           t[batches / 2], t[batches / 10], t[batches - 1 - batches / 10], cpu, proc, (long long)batches * per,
           (unsigned long long)hash_bits(c, (size_t)n * n));
    return 0;
}
