/* cuBLAS under CUDA graph capture, and cuBLASLt's fp64 matmul, for the `cublas` stage of
 * scripts/gpu-check: run without and with the shim preloaded, the output must say "ok" for
 * all three parts either way.
 *
 * 1. graph: cublasDgemm captured on a stream into a graph, the graph instantiated and
 *    replayed several times with new A each time (copied in between replays); each replay's C
 *    is checked on sampled entries against dot products accumulated in long double. A hook
 *    that froze a plan made from the capture-time operands, or allocated during capture,
 *    fails here.
 * 2. global: another thread holds a capture in global mode (the mode that forbids every
 *    other thread potentially unsafe calls) while this thread calls cublasDgemm on its own,
 *    uncaptured stream; C must be right and the other thread's capture must end intact.
 * 3. lt: cublasLtMatmul in fp64, D = alpha A B + beta C with C and D one matrix, with C and D
 *    apart (beta != 0, so C must reach D), and as a strided batch of 3; each D checked on
 *    sampled entries.
 * 4. queue: products issued without waiting in between, as a program that synchronises only
 *    when it reads a result: three on one stream (different A and C), then one of size 2N on
 *    a stream and at once one of size N/2 on another stream with its own handle (the larger
 *    one still runs when the smaller one starts); each C checked after the streams are
 *    synchronised. A hooked call that returns while its work
 *    still runs must not let the next call, on any stream, reuse its buffers early.
 *
 * The CUDA driver and cuBLAS are opened with dlopen(RTLD_GLOBAL) and cuBLAS's entry points
 * found with dlsym(RTLD_DEFAULT), so a preloaded library's definitions win as they do for a
 * program linked against cuBLAS; no CUDA header or toolkit is needed to build it:
 *     cc -O2 -o cublas-check scripts/cublas-check.c -ldl -lpthread -lm
 * Usage: cublas-check [N] [REPLAYS]   (default 2048 4)
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef void *ptr_t;
typedef uint64_t CUdeviceptr;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(ptr_t *, int);
static CUresult (*cuCtxSetCurrent)(ptr_t);
static CUresult (*cuStreamCreate)(ptr_t *, unsigned);
static CUresult (*cuStreamSynchronize)(ptr_t);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, ptr_t);
static CUresult (*cuStreamBeginCapture)(ptr_t, int);
static CUresult (*cuStreamEndCapture)(ptr_t, ptr_t *);
static CUresult (*cuGraphInstantiateWithFlags)(ptr_t *, ptr_t, unsigned long long);
static CUresult (*cuGraphLaunch)(ptr_t, ptr_t);
static int (*cublasCreate)(ptr_t *);
static int (*cublasSetStream)(ptr_t, ptr_t);
static int (*cublasDgemm)(ptr_t, int, int, int, int, int, const double *, const double *, int,
                          const double *, int, const double *, double *, int);
static int (*cublasLtCreate)(ptr_t *);
static int (*cublasLtMatmulDescCreate)(ptr_t *, int, int);
static int (*cublasLtMatrixLayoutCreate)(ptr_t *, int, uint64_t, uint64_t, int64_t);
static int (*cublasLtMatrixLayoutSetAttribute)(ptr_t, int, const void *, size_t);
static int (*cublasLtMatmul)(ptr_t, ptr_t, const void *, const void *, ptr_t, const void *, ptr_t,
                             const void *, const void *, ptr_t, void *, ptr_t, const void *,
                             void *, size_t, ptr_t);

#define CAPTURE_MODE_GLOBAL 0
#define STREAM_NON_BLOCKING 1

static void *sym(void *lib, const char *name) {
    void *p = lib ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name);
    if (!p) {
        fprintf(stderr, "cublas-check: %s not found\n", name);
        exit(2);
    }
    return p;
}

#define CHECK(what, call)                                                          \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != 0) {                                                            \
            fprintf(stderr, "cublas-check: %s failed (%d)\n", what, rc_);          \
            exit(3);                                                               \
        }                                                                          \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Max over sampled (i, j) of |D - (alpha A B + beta C)| / (|alpha| |A| |B| + |beta C|)(i, j),
 * column-major n x n (c may be NULL when beta = 0). */
static double sampled_error_ab(int n, double alpha, const double *a, const double *b,
                               double beta, const double *c, const double *d) {
    double worst = 0;
    unsigned s = 12345;
    for (int t = 0; t < 64; t++) {
        s = s * 1103515245u + 12345u;
        int i = (s >> 8) % n;
        s = s * 1103515245u + 12345u;
        int j = (s >> 8) % n;
        long double dot = 0, mag = 0;
        for (int l = 0; l < n; l++) {
            long double p = (long double)a[i + (size_t)l * n] * b[l + (size_t)j * n];
            dot += p;
            mag += fabsl(p);
        }
        long double cij = c ? (long double)beta * c[i + (size_t)j * n] : 0;
        long double want = alpha * dot + cij, scale = fabsl(alpha) * mag + fabsl(cij);
        double e = scale > 0 ? (double)(fabsl(d[i + (size_t)j * n] - want) / scale) : 0;
        if (e > worst) worst = e;
    }
    return worst;
}

static double sampled_error(int n, const double *a, const double *b, const double *c) {
    return sampled_error_ab(n, 1.0, a, b, 0.0, NULL, c);
}

/* n x n values uniform in [-scale, scale) with full 53-bit significands (SplitMix64), so
 * the products round and a wrong result cannot hide behind exact arithmetic. */
static void fill(int n, double *x, unsigned seed, double scale) {
    uint64_t z = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        uint64_t v = (z += 0x9e3779b97f4a7c15ull);
        v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
        v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
        v ^= v >> 31;
        x[i] = scale * (2.0 * ((v >> 11) * 0x1.0p-53) - 1.0);
    }
}

/* The other thread of part 2: begins a global-mode capture, waits for the main thread's
 * product to be issued, records a memset and ends the capture. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int phase; /* 1 capturing, 2 product issued, 3 ended */
    CUresult ended;
    ptr_t ctx;
    CUdeviceptr scratch;
} other = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};

static void set_phase(int p) {
    pthread_mutex_lock(&other.lock);
    other.phase = p;
    pthread_cond_broadcast(&other.cond);
    pthread_mutex_unlock(&other.lock);
}

static void wait_phase(int p) {
    pthread_mutex_lock(&other.lock);
    while (other.phase < p) pthread_cond_wait(&other.cond, &other.lock);
    pthread_mutex_unlock(&other.lock);
}

static void *capturer(void *arg) {
    (void)arg;
    ptr_t s, graph = 0;
    CHECK("cuCtxSetCurrent", cuCtxSetCurrent(other.ctx));
    CHECK("cuStreamCreate", cuStreamCreate(&s, STREAM_NON_BLOCKING));
    CHECK("cuStreamBeginCapture (global)", cuStreamBeginCapture(s, CAPTURE_MODE_GLOBAL));
    set_phase(1);
    wait_phase(2);
    cuMemsetD8Async(other.scratch, 0, 256, s);
    other.ended = cuStreamEndCapture(s, &graph);
    set_phase(3);
    return 0;
}

#define R64F 1
#define COMPUTE_64F 70
#define LAYOUT_BATCH_COUNT 5
#define LAYOUT_STRIDED_BATCH_OFFSET 6

/* 3. cublasLtMatmul in fp64 (A, B in da, db; C's data in dc; a, b, c host scratch). */
static int lt_part(int n, double *a, double *b, double *c, CUdeviceptr da, CUdeviceptr db,
                   CUdeviceptr dc, ptr_t s) {
    void *lt = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!lt) lt = dlopen("libcublasLt.so.12", RTLD_NOW | RTLD_GLOBAL);
    if (!lt) {
        printf("lt: skipped: no cuBLASLt\n");
        return 1;
    }
    *(void **)&cublasLtCreate = sym(NULL, "cublasLtCreate");
    *(void **)&cublasLtMatmulDescCreate = sym(NULL, "cublasLtMatmulDescCreate");
    *(void **)&cublasLtMatrixLayoutCreate = sym(NULL, "cublasLtMatrixLayoutCreate");
    *(void **)&cublasLtMatrixLayoutSetAttribute = sym(NULL, "cublasLtMatrixLayoutSetAttribute");
    *(void **)&cublasLtMatmul = sym(NULL, "cublasLtMatmul");
    size_t bytes = (size_t)n * n * sizeof(double);
    ptr_t h, desc, l, lb;
    CUdeviceptr dd, ws, dab, dbb, dcb;
    CHECK("cublasLtCreate", cublasLtCreate(&h));
    CHECK("cublasLtMatmulDescCreate", cublasLtMatmulDescCreate(&desc, COMPUTE_64F, R64F));
    CHECK("layout", cublasLtMatrixLayoutCreate(&l, R64F, n, n, n));
    CHECK("cuMemAlloc", cuMemAlloc(&dd, bytes));
    CHECK("cuMemAlloc", cuMemAlloc(&ws, 32 << 20));
    double *cold = malloc(bytes);
    double alpha = 1.5, beta = 0.5;
    int ok = 1;
    fill(n, a, 11, 1.0);
    fill(n, b, 12, 1.0);
    fill(n, cold, 13, 1.0);
    CHECK("copy A", cuMemcpyHtoD(da, a, bytes));
    CHECK("copy B", cuMemcpyHtoD(db, b, bytes));
    for (int apart = 0; apart < 2; apart++) {
        CHECK("copy C", cuMemcpyHtoD(dc, cold, bytes));
        CUdeviceptr out = apart ? dd : dc;
        CHECK("cublasLtMatmul", cublasLtMatmul(h, desc, &alpha, (void *)da, l, (void *)db, l, &beta,
                                               (void *)dc, l, (void *)out, l, NULL, (void *)ws,
                                               32 << 20, s));
        CHECK("sync", cuStreamSynchronize(s));
        CHECK("copy D", cuMemcpyDtoH(c, out, bytes));
        double e = sampled_error_ab(n, alpha, a, b, beta, cold, c);
        printf("lt: C %s D, beta %.1f: max sampled error %.2e: %s\n", apart ? "apart from" : "is",
               beta, e, e < 1e-12 ? "ok" : "WRONG");
        ok &= e < 1e-12;
    }
    /* a strided batch of 3 products of size n/2, members packed one after another */
    int h2 = n / 2, count = 3;
    int64_t stride = (int64_t)h2 * h2;
    size_t member = (size_t)stride * sizeof(double);
    CHECK("layout", cublasLtMatrixLayoutCreate(&lb, R64F, h2, h2, h2));
    CHECK("batch", cublasLtMatrixLayoutSetAttribute(lb, LAYOUT_BATCH_COUNT, &count, sizeof count));
    CHECK("stride", cublasLtMatrixLayoutSetAttribute(lb, LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof stride));
    CHECK("cuMemAlloc", cuMemAlloc(&dab, member * count));
    CHECK("cuMemAlloc", cuMemAlloc(&dbb, member * count));
    CHECK("cuMemAlloc", cuMemAlloc(&dcb, member * count));
    double *ab = malloc(member * count), *bb = malloc(member * count), *cb = malloc(member * count);
    for (int i = 0; i < count; i++) {
        fill(h2, ab + i * stride, 20 + i, 1.0);
        fill(h2, bb + i * stride, 30 + i, 1.0);
    }
    CHECK("copy A", cuMemcpyHtoD(dab, ab, member * count));
    CHECK("copy B", cuMemcpyHtoD(dbb, bb, member * count));
    double zero = 0.0;
    CHECK("cublasLtMatmul (batch)", cublasLtMatmul(h, desc, &alpha, (void *)dab, lb, (void *)dbb, lb,
                                                   &zero, (void *)dcb, lb, (void *)dcb, lb, NULL,
                                                   (void *)ws, 32 << 20, s));
    CHECK("sync", cuStreamSynchronize(s));
    CHECK("copy D", cuMemcpyDtoH(cb, dcb, member * count));
    double worst = 0;
    for (int i = 0; i < count; i++) {
        double e = sampled_error_ab(h2, alpha, ab + i * stride, bb + i * stride, 0.0, NULL,
                                    cb + i * stride);
        if (e > worst) worst = e;
    }
    printf("lt: strided batch of %d at %d: max sampled error %.2e: %s\n", count, h2, worst,
           worst < 1e-12 ? "ok" : "WRONG");
    return ok && worst < 1e-12;
}

/* 4. products queued without a host wait (B in b and db; h on stream s). */
static int queue_part(int n, double *b, CUdeviceptr db, ptr_t h, ptr_t s) {
    size_t bytes = (size_t)n * n * sizeof(double);
    double one = 1.0, zero = 0.0;
    int ok = 1;
    /* three products on one stream: A_i = A scaled by 4^i, each into its own C */
    double *ai[3], *c = malloc(bytes);
    CUdeviceptr dai[3], dci[3];
    for (int i = 0; i < 3; i++) {
        ai[i] = malloc(bytes);
        fill(n, ai[i], 40 + i, pow(4.0, i));
        CHECK("cuMemAlloc", cuMemAlloc(&dai[i], bytes));
        CHECK("cuMemAlloc", cuMemAlloc(&dci[i], bytes));
        CHECK("copy A", cuMemcpyHtoD(dai[i], ai[i], bytes));
    }
    for (int i = 0; i < 3; i++)
        CHECK("cublasDgemm (queued)", cublasDgemm(h, 0, 0, n, n, n, &one, (double *)dai[i], n,
                                                  (double *)db, n, &zero, (double *)dci[i], n));
    CHECK("sync", cuStreamSynchronize(s));
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        CHECK("copy C", cuMemcpyDtoH(c, dci[i], bytes));
        double e = sampled_error(n, ai[i], b, c);
        if (e > worst) worst = e;
    }
    printf("queue: 3 products on one stream, one wait: max sampled error %.2e: %s\n", worst,
           worst < 1e-12 ? "ok" : "WRONG");
    ok &= worst < 1e-12;
    /* a product of size 2n on s, at once one of size n/2 on another stream and handle */
    int n2 = 2 * n, h2 = n / 2;
    size_t big = (size_t)n2 * n2 * sizeof(double);
    double *ab = malloc(big), *bb = malloc(big), *cb = malloc(big);
    fill(n2, ab, 60, 1.0);
    fill(n2, bb, 61, 1.0);
    CUdeviceptr dab, dbb, dcb;
    CHECK("cuMemAlloc", cuMemAlloc(&dab, big));
    CHECK("cuMemAlloc", cuMemAlloc(&dbb, big));
    CHECK("cuMemAlloc", cuMemAlloc(&dcb, big));
    CHECK("copy A", cuMemcpyHtoD(dab, ab, big));
    CHECK("copy B", cuMemcpyHtoD(dbb, bb, big));
    size_t small = (size_t)h2 * h2 * sizeof(double);
    double *as = malloc(small), *bs = malloc(small), *cs = malloc(small);
    fill(h2, as, 50, 1.0);
    fill(h2, bs, 51, 1.0);
    ptr_t s2, hb;
    CUdeviceptr das, dbs, dcs;
    CHECK("cuStreamCreate", cuStreamCreate(&s2, STREAM_NON_BLOCKING));
    CHECK("cublasCreate", cublasCreate(&hb));
    CHECK("cublasSetStream", cublasSetStream(hb, s2));
    CHECK("cuMemAlloc", cuMemAlloc(&das, small));
    CHECK("cuMemAlloc", cuMemAlloc(&dbs, small));
    CHECK("cuMemAlloc", cuMemAlloc(&dcs, small));
    CHECK("copy A", cuMemcpyHtoD(das, as, small));
    CHECK("copy B", cuMemcpyHtoD(dbs, bs, small));
    /* sizes the emulation's buffers for 2n first, so the pair below grows none */
    CHECK("cublasDgemm (2n)", cublasDgemm(h, 0, 0, n2, n2, n2, &one, (double *)dab, n2,
                                          (double *)dbb, n2, &zero, (double *)dcb, n2));
    CHECK("sync", cuStreamSynchronize(s));
    CHECK("cublasDgemm (stream 1)", cublasDgemm(h, 0, 0, n2, n2, n2, &one, (double *)dab, n2,
                                                (double *)dbb, n2, &zero, (double *)dcb, n2));
    CHECK("cublasDgemm (stream 2)", cublasDgemm(hb, 0, 0, h2, h2, h2, &one, (double *)das, h2,
                                                (double *)dbs, h2, &zero, (double *)dcs, h2));
    CHECK("sync", cuStreamSynchronize(s));
    CHECK("sync", cuStreamSynchronize(s2));
    CHECK("copy C", cuMemcpyDtoH(cb, dcb, big));
    CHECK("copy C", cuMemcpyDtoH(cs, dcs, small));
    double e1 = sampled_error(n2, ab, bb, cb), e2 = sampled_error(h2, as, bs, cs);
    int two_ok = e1 < 1e-12 && e2 < 1e-12;
    printf("queue: %d on one stream, %d at once on another: max sampled errors %.2e, %.2e: %s\n",
           n2, h2, e1, e2, two_ok ? "ok" : "WRONG");
    return ok && two_ok;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048, replays = argc > 2 ? atoi(argv[2]) : 4;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void *cublas = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!cublas) cublas = dlopen("libcublas.so.12", RTLD_NOW | RTLD_GLOBAL);
    if (!cuda || !cublas) {
        printf("skipped: no CUDA driver or cuBLAS (%s)\n", dlerror());
        return 0;
    }
    *(void **)&cuInit = sym(cuda, "cuInit");
    *(void **)&cuDeviceGet = sym(cuda, "cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = sym(cuda, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = sym(cuda, "cuCtxSetCurrent");
    *(void **)&cuStreamCreate = sym(cuda, "cuStreamCreate");
    *(void **)&cuStreamSynchronize = sym(cuda, "cuStreamSynchronize");
    *(void **)&cuMemAlloc = sym(cuda, "cuMemAlloc_v2");
    *(void **)&cuMemcpyHtoD = sym(cuda, "cuMemcpyHtoD_v2");
    *(void **)&cuMemcpyDtoH = sym(cuda, "cuMemcpyDtoH_v2");
    *(void **)&cuMemsetD8Async = sym(cuda, "cuMemsetD8Async");
    *(void **)&cuStreamBeginCapture = sym(cuda, "cuStreamBeginCapture_v2");
    *(void **)&cuStreamEndCapture = sym(cuda, "cuStreamEndCapture");
    *(void **)&cuGraphInstantiateWithFlags = sym(cuda, "cuGraphInstantiateWithFlags");
    *(void **)&cuGraphLaunch = sym(cuda, "cuGraphLaunch");
    /* the program's view of cuBLAS: the first definition in the global scope */
    *(void **)&cublasCreate = sym(NULL, "cublasCreate_v2");
    *(void **)&cublasSetStream = sym(NULL, "cublasSetStream_v2");
    *(void **)&cublasDgemm = sym(NULL, "cublasDgemm_v2");

    int dev;
    ptr_t ctx, s, h, graph, exec;
    CHECK("cuInit", cuInit(0));
    CHECK("cuDeviceGet", cuDeviceGet(&dev, 0));
    CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    CHECK("cuStreamCreate", cuStreamCreate(&s, STREAM_NON_BLOCKING));
    CHECK("cublasCreate", cublasCreate(&h));
    CHECK("cublasSetStream", cublasSetStream(h, s));

    size_t bytes = (size_t)n * n * sizeof(double);
    double *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    CUdeviceptr da, db, dc;
    CHECK("cuMemAlloc", cuMemAlloc(&da, bytes));
    CHECK("cuMemAlloc", cuMemAlloc(&db, bytes));
    CHECK("cuMemAlloc", cuMemAlloc(&dc, bytes));
    fill(n, a, 1, 1.0);
    fill(n, b, 2, 1.0);
    CHECK("copy A", cuMemcpyHtoD(da, a, bytes));
    CHECK("copy B", cuMemcpyHtoD(db, b, bytes));
    double one = 1.0, zero = 0.0;
    /* warm-up outside any capture: cuBLAS's own per-stream setup, the hook's plans */
    CHECK("cublasDgemm (warm-up)", cublasDgemm(h, 0, 0, n, n, n, &one, (double *)da, n,
                                               (double *)db, n, &zero, (double *)dc, n));
    CHECK("sync", cuStreamSynchronize(s));

    /* 1. capture, instantiate, replay with new A */
    CHECK("cuStreamBeginCapture", cuStreamBeginCapture(s, CAPTURE_MODE_GLOBAL));
    CHECK("cublasDgemm (captured)", cublasDgemm(h, 0, 0, n, n, n, &one, (double *)da, n,
                                                (double *)db, n, &zero, (double *)dc, n));
    CHECK("cuStreamEndCapture", cuStreamEndCapture(s, &graph));
    CHECK("cuGraphInstantiate", cuGraphInstantiateWithFlags(&exec, graph, 0));
    double worst = 0, t_total = 0;
    for (int r = 0; r < replays; r++) {
        fill(n, a, 100 + r, pow(1e3, r)); /* each replay on data of another scale */
        CHECK("copy A", cuMemcpyHtoD(da, a, bytes));
        double t = now();
        CHECK("cuGraphLaunch", cuGraphLaunch(exec, s));
        CHECK("sync", cuStreamSynchronize(s));
        t_total += now() - t;
        CHECK("copy C", cuMemcpyDtoH(c, dc, bytes));
        double e = sampled_error(n, a, b, c);
        printf("graph replay %d: max sampled error %.2e\n", r, e);
        if (e > worst) worst = e;
    }
    /* the fp64 contract: well within a few units of n u of |A| |B| */
    int graph_ok = worst < 1e-12;
    printf("graph: n=%d replays=%d mean replay %.4f s, max error %.2e: %s\n", n, replays,
           t_total / replays, worst, graph_ok ? "ok" : "WRONG");

    /* 2. another thread's global-mode capture while this thread multiplies */
    other.ctx = ctx;
    CHECK("cuMemAlloc", cuMemAlloc(&other.scratch, 256));
    fill(n, a, 7, 1.0);
    CHECK("copy A", cuMemcpyHtoD(da, a, bytes));
    pthread_t th;
    pthread_create(&th, 0, capturer, 0);
    wait_phase(1);
    int rc = cublasDgemm(h, 0, 0, n, n, n, &one, (double *)da, n, (double *)db, n, &zero,
                         (double *)dc, n);
    set_phase(2);
    wait_phase(3);
    pthread_join(th, 0);
    CHECK("sync", cuStreamSynchronize(s));
    CHECK("copy C", cuMemcpyDtoH(c, dc, bytes));
    double e = sampled_error(n, a, b, c);
    int global_ok = rc == 0 && other.ended == 0 && e < 1e-12;
    printf("global: cublasDgemm status %d, the other thread's capture ended with %d, max error "
           "%.2e: %s\n",
           rc, other.ended, e, global_ok ? "ok" : "WRONG");
    int lt_ok = lt_part(n, a, b, c, da, db, dc, s);
    /* lt_part left its own data in b: the queue's products use B = b again */
    fill(n, b, 2, 1.0);
    CHECK("copy B", cuMemcpyHtoD(db, b, bytes));
    int queue_ok = queue_part(n, b, db, h, s);
    return graph_ok && global_ok && lt_ok && queue_ok ? 0 : 1;
}
