/* A stand-in for cuBLASLt, for testing the shim's cuBLAS hook on machines without a GPU
 * (shim/tests/cublas_hook.rs). Built as libcublasLt.so.13. Matmul descriptors and matrix
 * layouts keep their attributes as cuBLASLt documents them (each with its type's size: a
 * getter asked for another size, or for an attribute this library does not know, returns
 * CUBLAS_STATUS_INVALID_VALUE). cublasLtMatmul appends one line to the file FAKE_CUBLAS_LOG
 * naming itself and every argument and attribute it got (alpha and beta by value in host
 * pointer mode with an fp64 or fp32 scale type, by address otherwise) and returns
 * CUBLAS_STATUS_SUCCESS; it reads and writes no matrix (the test passes made-up device
 * addresses).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_log.h"

#define INVALID_VALUE 7
#define DESC_ATTRS 31  /* CUBLASLT_MATMUL_DESC_COMPUTE_TYPE .. ATOMIC_SYNC_OUT_COUNTERS_POINTER */
#define LAYOUT_ATTRS 8 /* CUBLASLT_MATRIX_LAYOUT_TYPE .. PLANE_OFFSET */

typedef struct {
    int id;
} lt_handle_t;

/* One object's attributes: each a value of up to 8 bytes and its size (0: not an attribute). */
typedef struct {
    int count;
    unsigned char size[DESC_ATTRS];
    uint64_t value[DESC_ATTRS];
} attrs_t;

static int set(attrs_t *o, int attr, const void *buf, size_t bytes) {
    if (!o || attr < 0 || attr >= o->count || !o->size[attr] || bytes != o->size[attr] || !buf)
        return INVALID_VALUE;
    o->value[attr] = 0;
    memcpy(&o->value[attr], buf, bytes);
    return 0;
}

static int get(const attrs_t *o, int attr, void *buf, size_t bytes, size_t *written) {
    if (!o || attr < 0 || attr >= o->count || !o->size[attr] || bytes != o->size[attr] || !buf)
        return INVALID_VALUE;
    memcpy(buf, &o->value[attr], bytes);
    if (written) *written = bytes;
    return 0;
}

int cublasLtCreate(lt_handle_t **h) {
    static int handles;
    *h = calloc(1, sizeof **h);
    (*h)->id = ++handles;
    return 0;
}
int cublasLtDestroy(lt_handle_t *h) {
    free(h);
    return 0;
}

/* Sizes of the descriptor attributes: int32 enums, pointers, int64 strides and leading
 * dimensions, the int8 fast-accumulation flag; 9 and 16 are not attributes. */
static const unsigned char DESC_SIZES[DESC_ATTRS] = {
    4, 4, 4, 4, 4, 4, 4, 4, 8, 0, 8, 8, 8, 8, 8, 4, /* 0-15 */
    0, 8, 8, 8, 8, 8, 4, 8, 8, 1, 4, 4, 4, 8, 8,    /* 16-30 */
};

int cublasLtMatmulDescCreate(attrs_t **d, int compute, int scale) {
    attrs_t *o = calloc(1, sizeof *o);
    o->count = DESC_ATTRS;
    memcpy(o->size, DESC_SIZES, sizeof DESC_SIZES);
    o->value[0] = (uint32_t)compute;
    o->value[1] = (uint32_t)scale;
    o->value[6] = 2;                    /* CUBLAS_FILL_MODE_FULL */
    o->value[7] = 1;                    /* CUBLASLT_EPILOGUE_DEFAULT */
    o->value[26] = (uint32_t)-1;        /* bias data type: that of D */
    *d = o;
    return 0;
}
int cublasLtMatmulDescDestroy(attrs_t *d) {
    free(d);
    return 0;
}
int cublasLtMatmulDescSetAttribute(attrs_t *d, int attr, const void *buf, size_t bytes) {
    return set(d, attr, buf, bytes);
}
int cublasLtMatmulDescGetAttribute(attrs_t *d, int attr, void *buf, size_t bytes,
                                   size_t *written) {
    return get(d, attr, buf, bytes, written);
}

static const unsigned char LAYOUT_SIZES[LAYOUT_ATTRS] = {4, 4, 8, 8, 8, 4, 8, 8};

int cublasLtMatrixLayoutCreate(attrs_t **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    attrs_t *o = calloc(1, sizeof *o);
    o->count = LAYOUT_ATTRS;
    memcpy(o->size, LAYOUT_SIZES, sizeof LAYOUT_SIZES);
    o->value[0] = (uint32_t)type;
    o->value[2] = rows;
    o->value[3] = cols;
    o->value[4] = (uint64_t)ld;
    o->value[5] = 1; /* batch count */
    *l = o;
    return 0;
}
int cublasLtMatrixLayoutDestroy(attrs_t *l) {
    free(l);
    return 0;
}
int cublasLtMatrixLayoutSetAttribute(attrs_t *l, int attr, const void *buf, size_t bytes) {
    return set(l, attr, buf, bytes);
}
int cublasLtMatrixLayoutGetAttribute(attrs_t *l, int attr, void *buf, size_t bytes,
                                     size_t *written) {
    return get(l, attr, buf, bytes, written);
}

static void attrs(FILE *f, const char *name, const attrs_t *o) {
    fprintf(f, " %s=", name);
    for (int i = 0; i < o->count; i++)
        if (o->size[i]) fprintf(f, "%s%llx", i ? "," : "", (unsigned long long)o->value[i]);
}

int cublasLtMatmul(lt_handle_t *h, attrs_t *desc, const void *alpha, const void *a, attrs_t *ad,
                   const void *b, attrs_t *bd, const void *beta, const void *c, attrs_t *cd,
                   void *d, attrs_t *dd, const void *algo, void *workspace, size_t ws_bytes,
                   void *stream) {
    FILE *f = log_file();
    fprintf(f, "cublasLtMatmul h=%d", h->id);
    attrs(f, "desc", desc);
    if (desc->value[2] == 0 && desc->value[1] == 1) /* host pointer mode, fp64 scale */
        fprintf(f, " alpha=%.17g beta=%.17g", *(const double *)alpha, *(const double *)beta);
    else if (desc->value[2] == 0 && desc->value[1] == 0) /* fp32 scale */
        fprintf(f, " alpha32=%g beta32=%g", *(const float *)alpha, *(const float *)beta);
    else
        fprintf(f, " alpha@%p beta@%p", alpha, beta);
    fprintf(f, " A=%p", a);
    attrs(f, "Adesc", ad);
    fprintf(f, " B=%p", b);
    attrs(f, "Bdesc", bd);
    fprintf(f, " C=%p", c);
    attrs(f, "Cdesc", cd);
    fprintf(f, " D=%p", d);
    attrs(f, "Ddesc", dd);
    fprintf(f, " algo=%p workspace=%p/%zu stream=%p\n", algo, workspace, ws_bytes, stream);
    return 0;
}
