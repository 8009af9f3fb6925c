/* Mid-sized products from several threads at once, then an immediate exit: the calls that
 * make the shim's `auto` route start the GPU in the background (shim/src/route/start.rs),
 * and a process that ends while that start is under way. shim/tests/gpu_start.rs runs it
 * against fake CUDA libraries (tests/c/fake_cuda.c) to check that nothing changes for the
 * program: same results, exit status 0, no hang.
 *
 * Usage: gpu_start [THREADS [CALLS [N]]]   (default 4 x 2 calls of N = 384); with
 * GPU_START_LINGER_MS set, main waits that long before it returns.
 * Prints one hash per thread over all its results (identical with and without the shim).
 */
#include <pthread.h>

#include "common.h"

static int calls = 2, n = 384;

struct job {
    int t;
    uint64_t hash;
};

static void *worker(void *arg) {
    struct job *job = arg;
    size_t nn = (size_t)n * n;
    double *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    for (size_t i = 0; i < nn; i++) {
        a[i] = 1.0 / (double)(i % 97 + job->t + 1);
        b[i] = 1.0 - 1.0 / (double)(i % 89 + 2);
    }
    double alpha = 1.0, beta = 0.0;
    uint64_t h = 0;
    for (int i = 0; i < calls; i++) {
        dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
        h = h * 31 + hash_bits(c, nn);
    }
    job->hash = h;
    free(a);
    free(b);
    free(c);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) calls = atoi(argv[2]);
    if (argc > 3) n = atoi(argv[3]);
    pthread_t tid[64];
    struct job jobs[64];
    if (threads < 1 || threads > 64 || n < 1) return 2;
    for (int t = 0; t < threads; t++) {
        jobs[t].t = t;
        pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    for (int t = 0; t < threads; t++) printf("thread %d hash %016llx\n", t, (unsigned long long)jobs[t].hash);
    /* GPU_START_LINGER_MS: stay that long before returning, so the shim's start thread has
     * reached the step a test wants the exit to find under way. */
    const char *linger = getenv("GPU_START_LINGER_MS");
    if (linger) {
        long ms = atol(linger);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (ms > 0 && nanosleep(&ts, &ts) != 0) {
        }
    }
    return 0;
}
