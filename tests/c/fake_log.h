/* The call log the fake cuBLAS and cuBLASLt (fake_cublas_api.c, fake_cublaslt.c) append to:
 * the file FAKE_CUBLAS_LOG (stderr without it), line-buffered, so the two libraries' lines
 * land in call order. */
#include <stdio.h>
#include <stdlib.h>

static FILE *log_file(void) {
    static FILE *f;
    if (!f) {
        const char *p = getenv("FAKE_CUBLAS_LOG");
        f = p ? fopen(p, "a") : stderr;
        setvbuf(f, NULL, _IOLBF, 0);
    }
    return f;
}
