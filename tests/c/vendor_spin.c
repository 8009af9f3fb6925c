/* How long an OpenBLAS pool keeps its idle threads spinning after a call, as a program sees
 * it: prints the OPENBLAS_THREAD_TIMEOUT it was given, then (with an OpenBLAS library path
 * as argv[1]) loads that library the way Python does, after start-up, runs one threaded
 * dgemm on it and prints the CPU time the process burned during the next 300 ms of sleep:
 * the pool's spinning. A 1x1 dgemm_ through the global symbol follows, so that a preloaded
 * shim writes its trace header. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

typedef void dgemm_fn(const char *, const char *, const int *, const int *, const int *,
                      const double *, const double *, const int *, const double *,
                      const int *, const double *, double *, const int *);

static double cpu_ms(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

int main(int argc, char **argv) {
    const char *t = getenv("OPENBLAS_THREAD_TIMEOUT");
    printf("timeout %s\n", t ? t : "unset");
    if (argc < 2) return 0;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    dgemm_fn *vendor = (dgemm_fn *)dlsym(h, "dgemm_");
    if (!vendor) { fprintf(stderr, "no dgemm_ in %s\n", argv[1]); return 2; }
    const int n = 512;
    double *a = calloc((size_t)n * n, sizeof *a), *c = calloc((size_t)n * n, sizeof *c);
    for (int i = 0; i < n * n; i++) a[i] = (i % 7) - 3;
    const double one = 1, zero = 0;
    vendor("N", "N", &n, &n, &n, &one, a, &n, a, &n, &zero, c, &n);
    double before = cpu_ms();
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    printf("idle_cpu_ms %.1f\n", cpu_ms() - before);
    dgemm_fn *global = (dgemm_fn *)dlsym(RTLD_DEFAULT, "dgemm_");
    if (global) {
        const int k = 1;
        global("N", "N", &k, &k, &k, &one, a, &k, a, &k, &zero, c, &k);
    }
    printf("c00 %.1f\n", c[0]);
    return 0;
}
