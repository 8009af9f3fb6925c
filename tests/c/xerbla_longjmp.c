/* An xerbla_ that longjmps out of the BLAS, as R's does: every later call on the thread must
 * still be intercepted (traced and routed), from the same depth and from deeper ones.
 *
 * `xerbla_longjmp ilp64` makes the same calls through the ILP64 names dgemm_64_ and
 * cblas_dgemm64_, looked up at run time: no Debian library exports them, so under the shim
 * there is no vendor to forward them to and the shim calls the program's xerbla_ itself;
 * the longjmp then leaves from the shim's own frames. Exits 3 when the names are missing.
 * Output: "expect" lines for the legal calls (common.h) and their results. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>

#include "common.h"

#include "ilp64_types.h"
static gemm64_t gemm64;
static cgemm64_t cgemm64;

static jmp_buf env;
static int jumps = 0;

void xerbla_(const char *srname, const int *info, size_t len) {
    (void)srname;
    (void)len;
    printf("xerbla info=%d\n", *info);
    jumps++;
    longjmp(env, 1);
}

static double a[64], b[64], c[64];

/* dgemm_, or dgemm_64_ when gemm64 is set. */
static void gemm(char ta, int m, int n, int k, double alpha, int lda, int ldb, double beta, int ldc) {
    if (gemm64) {
        I M = m, N = n, K = k, LDA = lda, LDB = ldb, LDC = ldc;
        gemm64(&ta, "N", &M, &N, &K, &alpha, a, &LDA, b, &LDB, &beta, c, &LDC, 1, 1);
    } else {
        dgemm_(&ta, "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    }
}

static void legal(int m) {
    gemm('N', m, 2, 3, 1.0, m, 3, 0.0, m);
    printf("result m=%d c=%016llx\n", m, (unsigned long long)hash_bits(c, (size_t)m * 2));
    expect_gemm(gemm64 ? "dgemm_64_" : "dgemm_", "col", 'N', 'N', m, 2, 3, m, 3, m, 1.0, 0.0, gemm64 != NULL);
}

/* A call from deeper in the stack, over the memory the abandoned call's frames used. */
static void deeper(int m) {
    volatile char pad[8192];
    memset((char *)pad, 0x5a, sizeof pad);
    legal(m);
    printf("pad %d\n", pad[100]);
}

static void illegal(char ta) {
    if (setjmp(env) == 0) gemm(ta, 2, 2, 2, 1.0, 2, 2, 1.0, 2);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "ilp64") == 0) {
        gemm64 = (gemm64_t)dlsym(RTLD_DEFAULT, "dgemm_64_");
        cgemm64 = (cgemm64_t)dlsym(RTLD_DEFAULT, "cblas_dgemm64_");
        if (!gemm64 || !cgemm64) {
            printf("missing the ILP64 names\n");
            return 3;
        }
    }
    fill(a, 64);
    fill(b, 64);
    illegal('X');
    legal(1);
    deeper(2);
    illegal('Y');
    deeper(3);
    legal(4);
    /* Reference CBLAS calls dgemm_ inside: still one record per call. */
    if (cgemm64)
        cgemm64(ColMajor, NoTrans, NoTrans, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2);
    else
        cblas_dgemm(ColMajor, NoTrans, NoTrans, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2);
    expect_gemm(cgemm64 ? "cblas_dgemm64_" : "cblas_dgemm", "col", 'N', 'N', 2, 2, 2, 2, 2, 2, 1.0, 0.0,
                cgemm64 != NULL);
    printf("jumps %d\n", jumps);
    return 0;
}
