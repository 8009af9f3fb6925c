/* A long run of small calls from many threads, dgemm_ and dsyrk_ alternating over a few
 * shapes, for the soak test: the trace must hold every call and the process's memory must
 * stay flat. Prints the resident set size (VmRSS, KiB) after the first tenth of the calls and
 * at the end, and one hash per thread (identical with and without the shim on the vendor
 * route).
 *
 * Usage: soak THREADS CALLS   (calls per thread)
 */
#include <pthread.h>

#include "common.h"

static int calls;
static pthread_barrier_t tenth;
static long rss_tenth;

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

static void *worker(void *arg) {
    uint64_t *hash = arg, h = 0;
    double a[16 * 16], b[16 * 16], c[16 * 16], alpha = 0.5, beta = 0.25;
    for (int i = 0; i < 16 * 16; i++) a[i] = 1.0 / (i + 1), b[i] = 1.0 - 1.0 / (i + 2), c[i] = 0.0;
    for (int i = 0; i < calls; i++) {
        if (i == calls / 10) {
            int last = pthread_barrier_wait(&tenth);
            if (last == PTHREAD_BARRIER_SERIAL_THREAD) rss_tenth = rss_kib();
            pthread_barrier_wait(&tenth);
        }
        int m = 1 + i % 16, n = 1 + (i / 3) % 16, k = 1 + (i / 7) % 16, ld = 16;
        if (i % 4 == 3)
            dsyrk_("U", "N", &n, &k, &alpha, a, &ld, &beta, c, &ld, 1, 1);
        else
            dgemm_("N", i % 2 ? "T" : "N", &m, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld, 1, 1);
        h = h * 31 + hash_bits(c, 16 * 16);
    }
    *hash = h;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    calls = argc > 2 ? atoi(argv[2]) : 10000;
    pthread_t tid[64];
    uint64_t hash[64];
    if (threads < 1 || threads > 64 || calls < 10) return 2;
    pthread_barrier_init(&tenth, NULL, threads);
    for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, &hash[t]);
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    for (int t = 0; t < threads; t++) printf("thread %d hash %016llx\n", t, (unsigned long long)hash[t]);
    fprintf(stderr, "rss_kib tenth %ld end %ld\n", rss_tenth, rss_kib());
    return 0;
}
