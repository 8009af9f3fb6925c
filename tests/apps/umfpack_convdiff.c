/* Multifrontal sparse LU (UMFPACK) of a 2-D convection-diffusion operator: the workload
 * of trace #3 in the Ozaki 2.5 paper (section 6.1: "700^2 convection-diffusion").
 *
 *   -lap(u) + w . grad(u) = f  on the unit square, u = 0 on the boundary,
 *
 * discretised on a G x G interior grid (n = G^2 unknowns) with the 5-point Laplacian and
 * centred differences for the convection term, w = (wx, wy) constant, so the matrix is
 * nonsymmetric with a structurally symmetric pattern. UMFPACK's numeric factorisation
 * calls dgemm_ for its frontal updates; that is what the shim traces.
 *
 * Build: gcc -O2 -I/usr/include/suitesparse umfpack_convdiff.c -o umfpack_convdiff -lumfpack -lm
 * Run:   ./umfpack_convdiff [G=700] [wx=20] [wy=10]
 * Prints n, nnz, the factor sizes, UMFPACK's own flop count, the time of the factorisation
 * (symbolic and numeric) and the residual of one solve; exit status 1 when the residual is
 * over 1e-8.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <umfpack.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    int g = argc > 1 ? atoi(argv[1]) : 700;
    double wx = argc > 2 ? atof(argv[2]) : 20.0, wy = argc > 3 ? atof(argv[3]) : 10.0;
    if (g < 2) { fprintf(stderr, "grid must be >= 2\n"); return 2; }
    int n = g * g;
    double h = 1.0 / (g + 1);
    /* Column-compressed storage: column j holds row indices of its (at most 5) entries in
     * increasing order, which is the order below (south, west, centre, east, north). */
    int *ap = malloc(sizeof(int) * (n + 1));
    int *ai = malloc(sizeof(int) * 5 * (size_t)n);
    double *ax = malloc(sizeof(double) * 5 * (size_t)n);
    double *b = malloc(sizeof(double) * n), *x = malloc(sizeof(double) * n), *r = malloc(sizeof(double) * n);
    if (!ap || !ai || !ax || !b || !x || !r) { fprintf(stderr, "out of memory\n"); return 1; }
    /* Entry A(row, col) is the coefficient of u_col in the equation of node `row`. */
    double diff = 1.0 / (h * h), cx = wx / (2 * h), cy = wy / (2 * h);
    int nz = 0;
    for (int col = 0; col < n; col++) {
        int ci = col % g, cj = col / g;
        ap[col] = nz;
        /* equation of node (ci, cj - 1): its north neighbour is col -> -diff + cy */
        if (cj > 0) { ai[nz] = col - g; ax[nz++] = -diff + cy; }
        /* equation of node (ci - 1, cj): its east neighbour is col -> -diff + cx */
        if (ci > 0) { ai[nz] = col - 1; ax[nz++] = -diff + cx; }
        ai[nz] = col; ax[nz++] = 4 * diff;
        /* equation of node (ci + 1, cj): its west neighbour is col -> -diff - cx */
        if (ci < g - 1) { ai[nz] = col + 1; ax[nz++] = -diff - cx; }
        /* equation of node (ci, cj + 1): its south neighbour is col -> -diff - cy */
        if (cj < g - 1) { ai[nz] = col + g; ax[nz++] = -diff - cy; }
    }
    ap[n] = nz;
    for (int i = 0; i < n; i++) b[i] = 1.0;

    double control[UMFPACK_CONTROL], info[UMFPACK_INFO];
    umfpack_di_defaults(control);
    void *symbolic = NULL, *numeric = NULL;
    double t0 = now();
    int status = umfpack_di_symbolic(n, n, ap, ai, ax, &symbolic, control, info);
    if (status != UMFPACK_OK) { fprintf(stderr, "umfpack_di_symbolic failed: %d\n", status); return 1; }
    status = umfpack_di_numeric(ap, ai, ax, symbolic, &numeric, control, info);
    if (status != UMFPACK_OK) { fprintf(stderr, "umfpack_di_numeric failed: %d\n", status); return 1; }
    double factor_s = now() - t0;
    double lu_nnz = info[UMFPACK_LNZ] + info[UMFPACK_UNZ], flops = info[UMFPACK_FLOPS];
    status = umfpack_di_solve(UMFPACK_A, ap, ai, ax, x, b, numeric, control, info);
    if (status != UMFPACK_OK) { fprintf(stderr, "umfpack_di_solve failed: %d\n", status); return 1; }
    /* r = b - A x, by hand (no BLAS, so the trace holds only the factorisation's calls). */
    for (int i = 0; i < n; i++) r[i] = b[i];
    for (int col = 0; col < n; col++)
        for (int p = ap[col]; p < ap[col + 1]; p++) r[ai[p]] -= ax[p] * x[col];
    double rn = 0, bn = 0;
    for (int i = 0; i < n; i++) { rn = fmax(rn, fabs(r[i])); bn = fmax(bn, fabs(b[i])); }
    printf("grid %d x %d, n = %d, nnz(A) = %d, nnz(L+U) = %.0f, umfpack flops = %.3e, factorisation %.3f s, "
           "|b-Ax|/|b| = %.2e\n", g, g, n, nz, lu_nnz, flops, factor_s, rn / bn);
    umfpack_di_free_symbolic(&symbolic);
    umfpack_di_free_numeric(&numeric);
    free(ap); free(ai); free(ax); free(b); free(x); free(r);
    return rn / bn < 1e-8 ? 0 : 1;
}
