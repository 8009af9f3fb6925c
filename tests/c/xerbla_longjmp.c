/* An xerbla_ that longjmps out of the BLAS, as R's does: every later call on the thread must
 * still be intercepted (traced and routed), from the same depth and from deeper ones.
 * Output: "expect" lines for the legal calls (common.h) and their results. */
#include <setjmp.h>

#include "common.h"

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

static void legal(int m) {
    int n = 2, k = 3, lda = m, ldb = 3, ldc = m;
    double alpha = 1.0, beta = 0.0;
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    printf("result m=%d c=%016llx\n", m, (unsigned long long)hash_bits(c, (size_t)m * 2));
    expect_gemm("dgemm_", "col", 'N', 'N', m, n, k, lda, ldb, ldc, alpha, beta, 0);
}

/* A call from deeper in the stack, over the memory the abandoned call's frames used. */
static void deeper(int m) {
    volatile char pad[8192];
    memset((char *)pad, 0x5a, sizeof pad);
    legal(m);
    printf("pad %d\n", pad[100]);
}

static void illegal(char ta) {
    int two = 2;
    double one = 1.0;
    if (setjmp(env) == 0) dgemm_(&ta, "N", &two, &two, &two, &one, a, &two, b, &two, &one, c, &two, 1, 1);
}

int main(void) {
    fill(a, 64);
    fill(b, 64);
    illegal('X');
    legal(1);
    deeper(2);
    illegal('Y');
    deeper(3);
    legal(4);
    /* Reference CBLAS calls dgemm_ inside: still one record per call. */
    cblas_dgemm(ColMajor, NoTrans, NoTrans, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2);
    expect_gemm("cblas_dgemm", "col", 'N', 'N', 2, 2, 2, 2, 2, 2, 1.0, 0.0, 0);
    printf("jumps %d\n", jumps);
    return 0;
}
