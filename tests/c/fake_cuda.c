/* A stand-in for the CUDA driver and cuBLAS, for testing the shim's background GPU start on
 * machines without a GPU (shim/tests/gpu_start.rs). Built twice: as libcuda.so, whose cuInit
 * sleeps FAKE_CUINIT_MS milliseconds (default 0) and then reports "no device"
 * (CUDA_ERROR_NO_DEVICE = 100), and as an empty libcublas.so, so the shim finds both libraries
 * and its start fails in cuInit, as on a machine whose driver sees no GPU.
 */
#include <stdlib.h>
#include <time.h>

int cuInit(unsigned flags) {
    (void)flags;
    const char *ms = getenv("FAKE_CUINIT_MS");
    long t = ms ? atol(ms) : 0;
    struct timespec ts = {t / 1000, (t % 1000) * 1000000L};
    while (t > 0 && nanosleep(&ts, &ts) != 0) {
    }
    return 100;
}

/* What cudarc asks to describe the error. */
int cuGetErrorString(int error, const char **s) {
    *s = error == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}

int cuGetErrorName(int error, const char **s) {
    *s = error == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
