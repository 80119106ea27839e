/*
 * tensor.h — dtype-tagged, contiguous, row-major buffers and the row copies.
 *
 * Every buffer the model touches is a vt_tensor: its dtype tag, its shape in
 * numpy order (shape[ndim-1] is the row, contiguous), and byte strides derived
 * from the dtype when the tensor is made. Nothing outside this file computes a
 * byte stride.
 *
 * Row copy, gather and scatter take the number of bytes per row from the
 * tensors themselves and refuse to run when source and destination disagree in
 * dtype or row width. A copy that changes dtype is a different operation,
 * vt_rows_convert, so that a dtype change is always visible at the call site.
 * Each copy can report what it did (vt_copy_stats) for the runtime probes.
 */
#ifndef VT_TENSOR_H
#define VT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define VT_MAX_DIMS 4

typedef struct vt_tensor {
    vt_dtype dtype;
    int      ndim;                  /* 1..VT_MAX_DIMS */
    int64_t  shape[VT_MAX_DIMS];    /* numpy order; shape[ndim-1] is the row width */
    size_t   stride[VT_MAX_DIMS];   /* byte strides, stride[ndim-1] == element size */
    size_t   nbytes;                /* bytes covered by the tensor */
    void    *data;
    int      owned;                 /* 1: vt_tensor_free releases data */
    int      panel;                 /* 0: row-major; VT_PANEL: a weight in panels (below) */
} vt_tensor;

/* The panel layout of a 2-D weight [N, K] (vt_tensor_panelize): its first
 * N - N % VT_PANEL rows in panels of VT_PANEL rows, panel p holding
 * W[VT_PANEL p + c][k] at element VT_PANEL p K + VT_PANEL k + c, i.e. the
 * panel's rows interleaved, one k after the other; the last N % VT_PANEL rows
 * row-major where they were. The same bytes in the same place, reordered
 * within each panel: the GEMMs (gemm.h) then read a weight as the packed
 * kernels want it, with no transpose. Only gemm.c reads a panel tensor's
 * elements; the row functions below refuse one (vt_tensor_row: NULL), and
 * vt_tensor_unpanel gives the rows back. */
#define VT_PANEL 32

/* What a row copy did, recorded by the probes. */
typedef struct vt_copy_stats {
    int64_t rows;            /* rows copied */
    size_t  bytes_per_row;   /* bytes copied per row */
    size_t  src_row_bytes;   /* bytes in one row of the source */
    size_t  dst_row_bytes;   /* bytes in one row of the destination */
    vt_dtype src_dtype, dst_dtype;
} vt_copy_stats;

/* Allocates a zeroed, 64-byte-aligned tensor. Shape entries must be > 0 and
 * the total byte count must not overflow. */
int  vt_tensor_alloc(vt_tensor *t, vt_dtype dtype, int ndim, const int64_t *shape, vt_err *err);
/* Describes memory owned elsewhere. Fails when the shape needs more than
 * capacity bytes. */
int  vt_tensor_view(vt_tensor *t, vt_dtype dtype, int ndim, const int64_t *shape,
                    void *data, size_t capacity, vt_err *err);
/* Releases owned data; leaves *t zeroed. Safe on a zeroed tensor. */
void vt_tensor_free(vt_tensor *t);

int64_t vt_tensor_nelem(const vt_tensor *t);
int64_t vt_tensor_nrows(const vt_tensor *t);     /* product of all dims but the last */
int64_t vt_tensor_ncols(const vt_tensor *t);     /* shape[ndim-1] */
size_t  vt_tensor_row_bytes(const vt_tensor *t); /* vt_row_size(dtype, ncols) */
/* Rearranges a row-major 2-D float tensor into the panel layout, in place
 * (t->data must be writable; scratch of VT_PANEL rows). Idempotent. */
int  vt_tensor_panelize(vt_tensor *t, vt_err *err);
/* Rows in panels: N - N % VT_PANEL for a tensor in panels, else 0. */
int64_t vt_tensor_panel_rows(const vt_tensor *t);
/* Rows [r0, r0 + n) of a 2-D tensor, row-major, into dst (any layout). */
void vt_tensor_unpanel(const vt_tensor *t, int64_t r0, int64_t n, void *dst);
/* Pointer to row i, or NULL when i is out of range or t is in panels. */
void   *vt_tensor_row(const vt_tensor *t, int64_t i);

/* dst rows [d0, d0+n) <- src rows [s0, s0+n). Same dtype and row width. */
int vt_rows_copy(vt_tensor *dst, int64_t d0, const vt_tensor *src, int64_t s0, int64_t n,
                 vt_copy_stats *st, vt_err *err);
/* dst row i <- src row src_rows[i], for i in [0, n). */
int vt_rows_gather(vt_tensor *dst, const vt_tensor *src, const int64_t *src_rows, int64_t n,
                   vt_copy_stats *st, vt_err *err);
/* dst row dst_rows[i] <- src row i, for i in [0, n), as if in order of i (a
 * repeated destination row ends up with its last source; rows are copied in
 * parallel only when none repeats). */
int vt_rows_scatter(vt_tensor *dst, const int64_t *dst_rows, const vt_tensor *src, int64_t n,
                    vt_copy_stats *st, vt_err *err);
/* Converting copy of whole tensors with the same shape (float dtypes only). */
int vt_rows_convert(vt_tensor *dst, const vt_tensor *src, vt_copy_stats *st, vt_err *err);

/* Audit mode. fill_sentinel writes a sentinel element (for floats a signalling
 * NaN with a payload arithmetic never produces) into every element;
 * rows_unwritten counts rows in which any element still holds it (first_row:
 * the first such row, or -1); clear_sentinel turns remaining sentinels into
 * zeros, so that an audited run computes exactly what an unaudited one does
 * on a zero-filled buffer. */
void    vt_tensor_fill_sentinel(vt_tensor *t);
int64_t vt_tensor_rows_unwritten(const vt_tensor *t, int64_t *first_row);
void    vt_tensor_clear_sentinel(vt_tensor *t);

#endif
