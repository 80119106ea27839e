/*
 * faults.c — replayed defects.
 *
 * A fault reproduces a known defect on demand (VT_FAULT), so that a recorded
 * result can be re-measured through the defect and shown to be explained by
 * it. The code here is wrong on purpose, and only here: the normal paths
 * cannot express these mistakes because tensor.c derives row sizes from the
 * buffers' own dtypes.
 *
 * moe_scatter_row_bytes_from_stream — from the defect report: the MoE scatter
 * computed row_bytes = hidden * sizeof(stream dtype) while its source y and
 * destination expert_out were f32. With a bf16 stream each row is copied at
 * half length, and because the same row_bytes is the stride, row i is read
 * from and written to byte offset i * row_bytes: the copies land in the first
 * half of the buffers, scrambled, and the second half is never written.
 */
#include <string.h>

#include "model.h"

void vt_fault_scatter_rows(vt_tensor *dst, const int64_t *dst_rows, const vt_tensor *src, int64_t n,
                           vt_dtype row_dtype, vt_copy_stats *st) {
    size_t row_bytes = vt_row_size(row_dtype, vt_tensor_ncols(dst));   /* the defect */
    char *d = dst->data;
    const char *sp = src->data;
    for (int64_t i = 0; i < n; i++) {
        size_t doff = (size_t)dst_rows[i] * row_bytes, soff = (size_t)i * row_bytes;
        /* keep memory safe even when the defect's arithmetic would not be */
        if (doff + row_bytes > dst->nbytes || soff + row_bytes > src->nbytes) continue;
        memcpy(d + doff, sp + soff, row_bytes);
    }
    st->rows = n;
    st->bytes_per_row = row_bytes;
    st->src_row_bytes = vt_tensor_row_bytes(src);
    st->dst_row_bytes = vt_tensor_row_bytes(dst);
    st->src_dtype = src->dtype;
    st->dst_dtype = dst->dtype;
}
