/* What the ScaLAPACK example programs: BLACS/ScaLAPACK prototypes,
 * block-cyclic index arithmetic and an order-independent fingerprint of a distributed
 * matrix, so that runs with and without the shim can be compared bit for bit. */
#ifndef OZAKI_SCALAPACK_COMMON_H
#define OZAKI_SCALAPACK_COMMON_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* BLACS C interface (part of Debian's libscalapack-openmpi). */
void Cblacs_pinfo(int *mypnum, int *nprocs);
void Cblacs_get(int context, int what, int *val);
void Cblacs_gridinit(int *context, const char *order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int context);
void Cblacs_exit(int notdone);

/* ScaLAPACK tools (Fortran, no character arguments). */
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc, const int *nprocs);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb, const int *irsrc,
               const int *icsrc, const int *ictxt, const int *lld, int *info);

/* PBLAS pdgemm_ is written in C and takes no hidden string lengths. */
void pdgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
             const double *alpha, const double *a, const int *ia, const int *ja, const int *desca,
             const double *b, const int *ib, const int *jb, const int *descb, const double *beta,
             double *c, const int *ic, const int *jc, const int *descc);

/* Fortran routines: gfortran passes each CHARACTER's length as a trailing size_t. */
void pdgetrf_(const int *m, const int *n, double *a, const int *ia, const int *ja, const int *desca,
              int *ipiv, int *info);
void pdgetrs_(const char *trans, const int *n, const int *nrhs, const double *a, const int *ia,
              const int *ja, const int *desca, const int *ipiv, double *b, const int *ib,
              const int *jb, const int *descb, int *info, size_t trans_len);

/* A process grid as square as the rank count allows (2 -> 1x2, 4 -> 2x2). */
struct grid {
    int ctxt, nprow, npcol, myrow, mycol, rank, nprocs;
};

static struct grid grid_open(void) {
    struct grid g;
    Cblacs_pinfo(&g.rank, &g.nprocs);
    g.nprow = 1;
    for (int p = 1; p * p <= g.nprocs; p++)
        if (g.nprocs % p == 0) g.nprow = p;
    g.npcol = g.nprocs / g.nprow;
    Cblacs_get(-1, 0, &g.ctxt);
    Cblacs_gridinit(&g.ctxt, "Row", g.nprow, g.npcol);
    Cblacs_gridinfo(g.ctxt, &g.nprow, &g.npcol, &g.myrow, &g.mycol);
    return g;
}

/* A local n_rows x n_cols piece of a block-cyclic matrix (source process 0,0). */
struct dmat {
    int m, n, nb, lrows, lcols, desc[9];
    double *a;
};

static struct dmat dmat_new(const struct grid *g, int m, int n, int nb) {
    struct dmat d;
    int zero = 0, info = 0;
    d.m = m;
    d.n = n;
    d.nb = nb;
    d.lrows = numroc_(&m, &nb, &g->myrow, &zero, &g->nprow);
    d.lcols = numroc_(&n, &nb, &g->mycol, &zero, &g->npcol);
    int lld = d.lrows > 1 ? d.lrows : 1;
    descinit_(d.desc, &m, &n, &nb, &nb, &zero, &zero, &g->ctxt, &lld, &info);
    if (info != 0) {
        fprintf(stderr, "descinit failed: info=%d\n", info);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    d.a = calloc((size_t)lld * (size_t)(d.lcols > 0 ? d.lcols : 1), sizeof(double));
    return d;
}

/* Global index (0-based) of local index l on process coordinate p of np, block nb. */
static int global_index(int l, int nb, int p, int np) { return ((l / nb) * np + p) * nb + l % nb; }

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Fingerprint of the whole distributed matrix: a sum over elements of a mix of the global
 * position and the exact bits of the value. The sum is taken mod 2^64 in integers, so it
 * does not depend on the order of the reduction, and any changed bit changes it. */
static uint64_t dmat_fingerprint(const struct grid *g, const struct dmat *d) {
    uint64_t h = 0;
    for (int lj = 0; lj < d->lcols; lj++) {
        int gj = global_index(lj, d->nb, g->mycol, g->npcol);
        for (int li = 0; li < d->lrows; li++) {
            int gi = global_index(li, d->nb, g->myrow, g->nprow);
            uint64_t bits;
            memcpy(&bits, &d->a[li + (size_t)lj * d->desc[8]], sizeof bits);
            h += splitmix64(bits ^ splitmix64((uint64_t)gi * (uint64_t)d->n + (uint64_t)gj));
        }
    }
    uint64_t total = 0;
    MPI_Allreduce(&h, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

static int arg_int(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

#endif
