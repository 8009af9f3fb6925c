/* Many threads calling dgemm_ at once, as PySCF does when it splits one GEMM into
 * per-thread calls: the trace must hold every call, none lost, no line torn.
 *
 * Thread t (0-based) makes `calls` calls with m = t + 1, n = 1 + i % 5, k = 1 + i % 3
 * (i = 0, 1, ...), so ozaki-cli/tests/clients.rs can check each thread's records in order.
 * Prints one hash per thread over all its results (identical with and without the shim).
 *
 * Usage: threads [THREADS [CALLS]]   (default 8 x 10000)
 */
#include <pthread.h>

#include "common.h"

static int calls = 10000;

struct job {
    int t;
    uint64_t hash;
};

static void *worker(void *arg) {
    struct job *job = arg;
    int m = job->t + 1;
    double a[8 * 3], b[3 * 5], c[8 * 5];
    for (int i = 0; i < 8 * 3; i++) a[i] = 1.0 / (i + job->t + 1);
    for (int i = 0; i < 3 * 5; i++) b[i] = 1.0 - 1.0 / (i + 2);
    memset(c, 0, sizeof c);
    uint64_t h = 0;
    double alpha = 1.0, beta = 0.5;
    for (int i = 0; i < calls; i++) {
        int n = 1 + i % 5, k = 1 + i % 3, lda = m, ldb = k, ldc = m;
        dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
        h = h * 31 + hash_bits(c, (size_t)m * n);
    }
    job->hash = h;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 2) calls = atoi(argv[2]);
    pthread_t tid[64];
    struct job jobs[64];
    if (threads < 1 || threads > 64) return 2;
    for (int t = 0; t < threads; t++) {
        jobs[t].t = t;
        pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    for (int t = 0; t < threads; t++) printf("thread %d hash %016llx\n", t, (unsigned long long)jobs[t].hash);
    printf("threads %d calls %d\n", threads, calls);
    return 0;
}
