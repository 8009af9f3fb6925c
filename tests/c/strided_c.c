/* A small update of a C with a huge leading dimension must touch only the m x n block: the
 * rows between C's columns may be another thread's data, and copying the whole strided span
 * costs time and memory out of all proportion (8 x 2000 with ldc = 20000 spans 320 MB).
 *
 * The gaps here are PROT_NONE pages, so reading or writing them kills the program: each
 * column starts a 4-page stride whose first page holds the block's rows. dgemm_ (both
 * transposes), cblas_dgemm row-major (the transposed column-major call) and dsyrk_ each
 * update such a C. The data are small integers, so every route computes the same exact
 * result. Then a timing line: the same 8 x 2000 update with ldc = 20000 (mapped, untouched).
 * Output: one "result" line per call (hash of the blocks), "time ms=..." last (the
 * fastest of 5); with the argument "time", only the timing line. */
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { M = 8, NC = 2000, K = 16, LDC = 2048 /* doubles: 16 KiB, 4 pages per column */ };

static double *guarded_c(size_t cols) {
    size_t bytes = cols * LDC * sizeof(double);
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    long page = sysconf(_SC_PAGESIZE);
    for (size_t j = 0; j < cols; j++) {
        char *col = p + j * LDC * sizeof(double);
        if (mprotect(col + page, LDC * sizeof(double) - page, PROT_NONE) != 0) {
            perror("mprotect");
            exit(2);
        }
    }
    return (double *)p;
}

static double ints(void) { return (double)((int)(rnd() * 4.0)); }

static void fill_block(double *c, int rows, size_t cols, size_t ld) {
    for (size_t j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) c[i + j * ld] = ints();
}

static uint64_t hash_block(const double *c, int rows, size_t cols, size_t ld) {
    uint64_t h = 0;
    for (size_t j = 0; j < cols; j++) h = h * 31 + hash_bits(c + j * ld, rows);
    return h;
}

static double a[NC * K], b[NC * K];

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    for (int i = 0; i < NC * K; i++) a[i] = ints(), b[i] = ints();
    int m = M, n = NC, k = K, ldc = LDC, lda = M, ldb = K, ldbt = NC;
    double alpha = 1.0, beta = 0.5;
    /* "time": only the timing line */
    if (argc > 1 && strcmp(argv[1], "time") == 0) goto timing;
    double *c = guarded_c(NC);

    fill_block(c, M, NC, LDC);
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    printf("result dgemm NN %016llx\n", (unsigned long long)hash_block(c, M, NC, LDC));

    fill_block(c, M, NC, LDC);
    dgemm_("N", "T", &m, &n, &k, &alpha, a, &lda, b, &ldbt, &beta, c, &ldc, 1, 1);
    printf("result dgemm NT %016llx\n", (unsigned long long)hash_block(c, M, NC, LDC));

    /* Row-major C of NC x M, rows LDC apart: the column-major C^T of M x NC. */
    fill_block(c, M, NC, LDC);
    cblas_dgemm(RowMajor, NoTrans, NoTrans, NC, M, K, 1.0, b, K, a, M, 0.5, c, LDC);
    printf("result cblas_dgemm row %016llx\n", (unsigned long long)hash_block(c, M, NC, LDC));

    int ns = M;
    fill_block(c, M, M, LDC);
    dsyrk_("U", "N", &ns, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
    printf("result dsyrk U %016llx\n", (unsigned long long)hash_block(c, M, M, LDC));
    dsyrk_("L", "T", &ns, &k, &alpha, b, &ldb, &beta, c, &ldc, 1, 1);
    printf("result dsyrk L %016llx\n", (unsigned long long)hash_block(c, M, M, LDC));

timing:;
    /* Timing: the shape of the report, ldc = 20000 (320 MB mapped, only the block touched). */
    size_t big_ld = 20000;
    double *big = mmap(NULL, NC * big_ld * sizeof(double), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (big == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    int ldbig = (int)big_ld;
    fill_block(big, M, NC, big_ld);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t = now_ms();
        dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, big, &ldbig, 1, 1);
        t = now_ms() - t;
        if (t < best) best = t;
    }
    printf("time ms=%.3f\n", best);
    return 0;
}
