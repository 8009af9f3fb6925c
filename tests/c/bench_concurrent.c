/* Small dgemm_ calls from many threads at once, for scripts/bench-concurrent: what the shim
 * costs a program whose threads all call the BLAS together (PySCF's integral transformation
 * calls dgemm_ from every OpenMP thread, three small shapes in turn).
 *
 * THREADS threads each make CALLS calls of dgemm_("T", "N", ...), cycling through the shapes
 * 18x114x114, 48x96x114, 48x48x114 (m x n x k, the three shapes of PySCF's RHF/CCSD benzene
 * cc-pVDZ first phase, 13110 calls each), every thread on its own operands. The threads start
 * together behind a barrier after a warm-up of 100 calls each.
 *
 * Usage: bench_concurrent [THREADS [CALLS [SHAPES]]]   (default 4 20000 pyscf)
 * SHAPES `tiny` uses 8x8x8 instead, where the shim's own cost dominates the vendor's.
 * Prints: wall_ns=... cpu_ns=... proc_cpu_ns=... calls=... checksum=...
 * where wall_ns is the wall time from the barrier to the last thread's end divided by CALLS
 * (the time one call takes a thread, everything running beside it included), cpu_ns the
 * threads' own CPU time per call (CLOCK_THREAD_CPUTIME_ID, summed over threads, divided by
 * THREADS x CALLS) and proc_cpu_ns the whole process's per call (the library's own threads
 * included). The checksum hashes every thread's last C, so runs over one BLAS compare.
 */
#include <pthread.h>
#include <time.h>

#include "common.h"

#define SHAPES 3
static int shape_m[SHAPES] = {18, 48, 48}, shape_n[SHAPES] = {114, 96, 48}, shape_k[SHAPES] = {114, 114, 114};

static int calls;
static pthread_barrier_t ready;

struct worker {
    double *a, *b, *c;
    double cpu_ns;
    uint64_t hash;
};

static double ns(const struct timespec *t) { return t->tv_sec * 1e9 + t->tv_nsec; }

/* C = A^T B for shape s: A is k x m, B is k x n (column-major), C is m x n. */
static void call(int s, const struct worker *w) {
    double alpha = 1.0, beta = 0.0;
    dgemm_("T", "N", &shape_m[s], &shape_n[s], &shape_k[s], &alpha, w->a, &shape_k[s], w->b, &shape_k[s], &beta,
           w->c, &shape_m[s], 1, 1);
}

static void *run(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < 100; i++) call(i % SHAPES, w);
    pthread_barrier_wait(&ready);
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (int i = 0; i < calls; i++) call(i % SHAPES, w);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    w->cpu_ns = ns(&c1) - ns(&c0);
    /* The last call's shape: (calls - 1) % SHAPES. */
    int s = (calls - 1) % SHAPES;
    w->hash = hash_bits(w->c, (size_t)shape_m[s] * shape_n[s]);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    calls = argc > 2 ? atoi(argv[2]) : 20000;
    if (argc > 3 && strcmp(argv[3], "tiny") == 0)
        for (int s = 0; s < SHAPES; s++) shape_m[s] = shape_n[s] = shape_k[s] = 8;
    if (threads < 1 || calls < 1) return 2;
    size_t most = 0;
    for (int s = 0; s < SHAPES; s++) {
        size_t x = (size_t)shape_k[s] * (shape_m[s] > shape_n[s] ? shape_m[s] : shape_n[s]);
        if (x > most) most = x;
    }
    struct worker *w = calloc(threads, sizeof *w);
    pthread_t *t = calloc(threads, sizeof *t);
    pthread_barrier_init(&ready, NULL, threads + 1);
    for (int i = 0; i < threads; i++) {
        w[i].a = malloc(sizeof(double) * most);
        w[i].b = malloc(sizeof(double) * most);
        w[i].c = calloc(most, sizeof(double));
        fill(w[i].a, most);
        fill(w[i].b, most);
        if (pthread_create(&t[i], NULL, run, &w[i]) != 0) return 3;
    }
    struct timespec w0, w1, p0, p1;
    pthread_barrier_wait(&ready);
    clock_gettime(CLOCK_MONOTONIC, &w0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p0);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
    double cpu = 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < threads; i++) {
        cpu += w[i].cpu_ns;
        h = (h ^ w[i].hash) * 0x100000001b3ULL;
    }
    double total = (double)threads * calls;
    printf("wall_ns=%.1f cpu_ns=%.1f proc_cpu_ns=%.1f calls=%.0f checksum=%016llx\n", (ns(&w1) - ns(&w0)) / calls,
           cpu / total, (ns(&p1) - ns(&p0)) / total, total, (unsigned long long)h);
    return 0;
}
