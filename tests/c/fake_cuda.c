/* A stand-in for the CUDA driver and cuBLAS, for testing the shim's background GPU start on
 * machines without a GPU (shim/tests/gpu_start.rs). Built twice: as libcuda.so, whose first
 * cuInit sleeps FAKE_CUINIT_MS milliseconds (default 0), and every cuInit reports "no device"
 * (CUDA_ERROR_NO_DEVICE = 100), and with -DFAKE_CUBLAS as libcublas.so, so the shim finds both
 * libraries and its start fails in cuInit, as on a machine whose driver sees no GPU.
 *
 * The fake cuBLAS behaves like a C++ library with static objects: its constructor registers
 * their teardown as an exit handler, then takes FAKE_LOAD_MS milliseconds (cuBLAS's load took
 * 350-410 ms on the H200 machine). Library code running after that teardown aborts the
 * process, as a use of destroyed statics may crash a real one (which happened to 5 of 10
 * NumPy scripts that exited while the shim's start thread loaded cuBLAS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void nap(const char *var) {
    const char *ms = getenv(var);
    long t = ms ? atol(ms) : 0;
    struct timespec ts = {t / 1000, (t % 1000) * 1000000L};
    while (t > 0 && nanosleep(&ts, &ts) != 0) {
    }
}

/* With FAKE_CUINIT_MARK=PREFIX, cuInit creates PREFIX.entered when it begins and
 * PREFIX.returned just before it returns, so a test can tell whether a process exited while
 * a thread was inside it. */
static void mark(const char *suffix) {
    const char *prefix = getenv("FAKE_CUINIT_MARK");
    if (!prefix) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", prefix, suffix);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

int cuInit(unsigned flags) {
    (void)flags;
    /* Only the first call takes its time, as with the real driver, whose later calls return
     * at once; the marks stay those of the first call. */
    static int calls;
    if (__atomic_fetch_add(&calls, 1, __ATOMIC_SEQ_CST) > 0) return 100;
    mark("entered");
    nap("FAKE_CUINIT_MS");
    mark("returned");
    return 100;
}

#ifdef FAKE_CUBLAS
static volatile int torn_down;

static void teardown(void) { torn_down = 1; }

__attribute__((constructor)) static void load(void) {
    atexit(teardown);
    nap("FAKE_LOAD_MS");
    if (torn_down) abort();
}
#endif

/* What cudarc asks to describe the error. */
int cuGetErrorString(int error, const char **s) {
    *s = error == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}

int cuGetErrorName(int error, const char **s) {
    *s = error == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

/* What the shim's cuBLAS hook asks the driver (shim/tests/cublas_hook.rs): the calling
 * thread's context (none) and whether a stream is being captured into a graph, which
 * FAKE_CAPTURING=1 says of every stream (CU_STREAM_CAPTURE_STATUS_ACTIVE = 1). */
int cuCtxGetCurrent(void **ctx) {
    *ctx = 0;
    return 0;
}

int cuStreamIsCapturing(void *stream, int *status) {
    (void)stream;
    const char *c = getenv("FAKE_CAPTURING");
    *status = c && c[0] == '1';
    return 0;
}
