/* A long run of small calls from many threads, for the soak test: the trace must hold every
 * call and the process's memory must stay flat. Each thread makes its calls through one
 * family of names, by its index modulo 4, so one process mixes the shim's paths:
 *   0: dgemm_ / dsyrk_ (the LP64 Fortran names: the vendor BLAS under `auto`);
 *   1: dgemm_64_ / dsyrk_64_ (ILP64 names, which no Debian library exports: under the shim
 *      the built-in kernel computes them; without it, Debian's ILP64 reference BLAS, loaded
 *      privately, gives the same bits);
 *   2: cblas_dgemm / cblas_dsyrk (reference CBLAS calls dgemm_ inside: a nested call);
 *   3: dgemm_ as family 0, with every 8th call a quick return (m = 0) and every 16th an
 *      illegal one (transa 'X'), whose report this program's xerbla_ counts and returns from.
 * Prints one hash per thread (identical with and without the shim on the vendor and
 * built-in routes), the number of calls of each kind, and on stderr the resident set size
 * (VmRSS, KiB) after the first tenth of the calls and at the end.
 *
 * Usage: soak THREADS CALLS   (calls per thread). Exits 3 without the ILP64 BLAS.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"

#include "ilp64_types.h"
static gemm64_t gemm64;
static syrk64_t syrk64;

static int calls;
static pthread_barrier_t tenth;
static long rss_tenth;
static atomic_long reports, n_lp64, n_ilp64, n_cblas, n_quick, n_illegal;

void xerbla_(const char *srname, const int *info, size_t len) {
    (void)srname;
    (void)info;
    (void)len;
    atomic_fetch_add(&reports, 1);
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

struct job {
    int family;
    uint64_t hash;
};

static void *worker(void *arg) {
    struct job *job = arg;
    uint64_t h = 0;
    double a[16 * 16], b[16 * 16], c[16 * 16], alpha = 0.5, beta = 0.25;
    for (int i = 0; i < 16 * 16; i++) a[i] = 1.0 / (i + 1), b[i] = 1.0 - 1.0 / (i + 2), c[i] = 0.0;
    for (int i = 0; i < calls; i++) {
        if (i == calls / 10) {
            int last = pthread_barrier_wait(&tenth);
            if (last == PTHREAD_BARRIER_SERIAL_THREAD) rss_tenth = rss_kib();
            pthread_barrier_wait(&tenth);
        }
        int m = 1 + i % 16, n = 1 + (i / 3) % 16, k = 1 + (i / 7) % 16, ld = 16;
        int syrk = i % 4 == 3;
        const char *tb = i % 2 ? "T" : "N";
        switch (job->family) {
        case 1: {
            I M = m, N = n, K = k, LD = ld;
            if (syrk)
                syrk64("U", "N", &N, &K, &alpha, a, &LD, &beta, c, &LD, 1, 1);
            else
                gemm64("N", tb, &M, &N, &K, &alpha, a, &LD, b, &LD, &beta, c, &LD, 1, 1);
            atomic_fetch_add_explicit(&n_ilp64, 1, memory_order_relaxed);
            break;
        }
        case 2:
            if (syrk)
                cblas_dsyrk(ColMajor, Upper, NoTrans, n, k, alpha, a, ld, beta, c, ld);
            else
                cblas_dgemm(ColMajor, NoTrans, i % 2 ? Trans : NoTrans, m, n, k, alpha, a, ld, b, ld, beta, c, ld);
            atomic_fetch_add_explicit(&n_cblas, 1, memory_order_relaxed);
            break;
        case 3:
            if (i % 16 == 5) {
                dgemm_("X", tb, &m, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld, 1, 1);
                atomic_fetch_add_explicit(&n_illegal, 1, memory_order_relaxed);
                break;
            }
            if (i % 8 == 1) {
                int zero = 0;
                dgemm_("N", tb, &zero, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld, 1, 1);
                atomic_fetch_add_explicit(&n_quick, 1, memory_order_relaxed);
                break;
            }
            /* fall through: an ordinary call */
        default:
            if (syrk)
                dsyrk_("U", "N", &n, &k, &alpha, a, &ld, &beta, c, &ld, 1, 1);
            else
                dgemm_("N", tb, &m, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld, 1, 1);
            atomic_fetch_add_explicit(&n_lp64, 1, memory_order_relaxed);
        }
        h = h * 31 + hash_bits(c, 16 * 16);
    }
    job->hash = h;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    calls = argc > 2 ? atoi(argv[2]) : 10000;
    pthread_t tid[64];
    struct job jobs[64];
    if (threads < 1 || threads > 64 || calls < 10) return 2;
    gemm64 = (gemm64_t)dlsym(RTLD_DEFAULT, "dgemm_64_");
    syrk64 = (syrk64_t)dlsym(RTLD_DEFAULT, "dsyrk_64_");
    if (!gemm64 || !syrk64) {
        /* RTLD_DEEPBIND: libblas64's routines call its own lsame_ and xerbla_, not the LP64 ones. */
        void *ref = dlopen("libblas64.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!ref) {
            printf("missing libblas64.so.3\n");
            return 3;
        }
        gemm64 = (gemm64_t)dlsym(ref, "dgemm_");
        syrk64 = (syrk64_t)dlsym(ref, "dsyrk_");
    }
    pthread_barrier_init(&tenth, NULL, threads);
    for (int t = 0; t < threads; t++) {
        jobs[t].family = t % 4;
        pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    for (int t = 0; t < threads; t++) printf("thread %d hash %016llx\n", t, (unsigned long long)jobs[t].hash);
    printf("calls lp64 %ld ilp64 %ld cblas %ld quick %ld illegal %ld reports %ld\n", (long)n_lp64, (long)n_ilp64,
           (long)n_cblas, (long)n_quick, (long)n_illegal, (long)reports);
    fprintf(stderr, "rss_kib tenth %ld end %ld\n", rss_tenth, rss_kib());
    return 0;
}
