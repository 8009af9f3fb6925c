/* ScaLAPACK pdgemm under the shim.
 *
 * Usage: mpirun -n P ./pdgemm_test [n=256] [nb=32]
 *
 * Computes C = 0.5 op(A) B + 2 C0 for op = N and T on a block-cyclic grid. All entries
 * are small integers and alpha/beta are powers of two, so every product is exact: elements
 * are checked against their closed form (all of them up to n = 2048, beyond that the
 * elements on a 128 x 128 sub-grid, so a benchmark-sized run stays cheap to check), and the
 * printed fingerprints must be the same for any rank count and with or without the shim
 * (pass-through is bit-exact). Rank 0 prints "fingerprint NAME 0x..." lines, "time NAME
 * SECONDS" (wall time of the pdgemm call, slowest rank) and "OK"; exit status 1 on a wrong
 * result. */
#include "scalapack_common.h"

static double a_val(int i, int j) { return (double)((i * 7 + j * 3) % 11 - 5); }
static double b_val(int i, int j) { return (double)((i * 5 + j * 2) % 13 - 6); }
static double c_val(int i, int j) { return (double)((i + j) % 3); }

static void fill(const struct grid *g, struct dmat *d, double (*f)(int, int)) {
    for (int lj = 0; lj < d->lcols; lj++)
        for (int li = 0; li < d->lrows; li++)
            d->a[li + (size_t)lj * d->desc[8]] =
                f(global_index(li, d->nb, g->myrow, g->nprow), global_index(lj, d->nb, g->mycol, g->npcol));
}

/* Largest |C - expected| over this rank's elements, reduced over all ranks. */
static double max_error(const struct grid *g, const struct dmat *c, int transa, int n, double alpha, double beta) {
    double err = 0.0, all = 0.0;
    int step = n <= 2048 ? 1 : n / 128;
    for (int lj = 0; lj < c->lcols; lj++) {
        int j = global_index(lj, c->nb, g->mycol, g->npcol);
        if (j % step != 0) continue;
        for (int li = 0; li < c->lrows; li++) {
            int i = global_index(li, c->nb, g->myrow, g->nprow);
            if (i % step != 0) continue;
            double s = 0.0;
            for (int l = 0; l < n; l++) s += (transa ? a_val(l, i) : a_val(i, l)) * b_val(l, j);
            double d = c->a[li + (size_t)lj * c->desc[8]] - (alpha * s + beta * c_val(i, j));
            if (d < 0) d = -d;
            if (d > err) err = d;
        }
    }
    MPI_Allreduce(&err, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = arg_int(argc, argv, 1, 256), nb = arg_int(argc, argv, 2, 32), one = 1, bad = 0;
    struct grid g = grid_open();
    const double alpha = 0.5, beta = 2.0;
    struct dmat a = dmat_new(&g, n, n, nb), b = dmat_new(&g, n, n, nb);
    fill(&g, &a, a_val);
    fill(&g, &b, b_val);
    if (g.rank == 0) printf("pdgemm n=%d nb=%d grid=%dx%d ranks=%d\n", n, nb, g.nprow, g.npcol, g.nprocs);
    const char *ops[2] = {"N", "T"};
    for (int t = 0; t < 2; t++) {
        struct dmat c = dmat_new(&g, n, n, nb);
        fill(&g, &c, c_val);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        pdgemm_(ops[t], "N", &n, &n, &n, &alpha, a.a, &one, &one, a.desc, b.a, &one, &one, b.desc, &beta, c.a,
                &one, &one, c.desc);
        double dt = MPI_Wtime() - t0, slowest = 0.0;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double err = max_error(&g, &c, t, n, alpha, beta);
        uint64_t fp = dmat_fingerprint(&g, &c);
        if (g.rank == 0) {
            printf("check C_%sN max_abs_err=%g\n", ops[t], err);
            printf("fingerprint C_%sN 0x%016llx\n", ops[t], (unsigned long long)fp);
            printf("time C_%sN %.6f s\n", ops[t], slowest);
        }
        bad |= err != 0.0;
        free(c.a);
    }
    if (g.rank == 0) puts(bad ? "FAILED" : "OK");
    free(a.a);
    free(b.a);
    Cblacs_gridexit(g.ctxt);
    Cblacs_exit(1);
    MPI_Finalize();
    return bad;
}
