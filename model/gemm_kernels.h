/*
 * gemm_kernels.h — the internal interface between gemm.c (dispatch, work
 * split, scalar fallback) and the instruction-set kernels (gemm_avx512.c).
 * Every kernel computes, for each output element it owns, exactly the chain
 * of gemm.h; none of them is allowed to reassociate.
 */
#ifndef VT_GEMM_KERNELS_H
#define VT_GEMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "tensor.h"

/* Element i of w in dtype dt, widened to f32 exactly (the scalar loops, and
 * the AVX2 kernel's copies of W). */
static inline float vt_gemm_widen(const void *w, vt_dtype dt, int64_t i) {
    switch (dt) {
    case VT_BF16: return vt_bf16_to_f32(((const vt_bf16 *)w)[i]);
    case VT_F16: return vt_f16_to_f32(((const vt_f16 *)w)[i]);
    default: {
        float v;
        memcpy(&v, (const char *)w + (size_t)i * sizeof v, sizeof v);   /* mmapped f32 may be unaligned */
        return v;
    }
    }
}

/* One product y[M,N] (+)= x[M,K] · W[N,K]ᵀ as the kernels see it: W row j is
 * at (const char *)w + j * wstride, in dtype dt (f32, bf16 or f16), with no
 * alignment beyond the element's. acc = 1: each chain starts at y's value. */
typedef struct vt_gemm_args {
    const float *x;
    int64_t      ldx;
    const void  *w;
    size_t       wstride;
    vt_dtype     dt;
    int64_t      K;
    float       *y;
    int64_t      ldy;
    int          acc;
    int          solo;   /* 1: the whole product runs on this thread (picks the GEMV's bf16 step) */
    int64_t      npanel; /* columns [0, npanel) of W are in panels of VT_PANEL (tensor.h): column
                            j's element k at w + (j - j % 32) wstride + (32 k + j % 32) es. The
                            kernels take blocks entirely inside or entirely past it. 0: none */
    const float *xp;     /* NULL, or x's rows [0, xpm) packed by vt_gemm512_pack_x, for blocks
                            over all of them (the packed kernel then packs nothing) */
    int64_t      xpm;
    const char  *pf_next; /* NULL, or the first K block of the W panel this thread runs right after
                            this block (another tile's or another expert's): the packed kernel on
                            panels prefetches it, pf_step bytes per k, under its last panel */
    int64_t      pf_step;
    uint64_t     batch;   /* 0, or the batch this block is of (unique per vt_gemm_batch call): a tile
                             may reuse x as packed by the previous tile of the same batch */
} vt_gemm_args;

/* x[M, K] packed as the packed kernel packs it for rows [0, M) (per K block
 * of VT_PACK_KC, per MC rows), once for every tile of a batch that reads it;
 * xp holds vt_gemm512_pack_x_floats(M, K) floats. One K block (k0 a
 * multiple of VT_PACK_KC) per call: blocks can be packed in parallel. */
#define VT_PACK_KC 256
size_t vt_gemm512_pack_x_floats(int64_t M, int64_t K);
void   vt_gemm512_pack_x(const float *x, int64_t ldx, int64_t M, int64_t K, int64_t k0, float *xp);

/* A tile of at most this many rows packs x into a memo that the next tile
 * of the same batch on the same thread reuses when it reads the same rows
 * (vt_gemm_args.batch); gemm.c packs x for the batch only for more rows. */
#define VT_XMEMO_MAX_ROWS 96

/* Rows at or below this go to the GEMV kernel (W read in place, no packing);
 * above it, to the packed micro-kernel. Measured: see gemm_avx512.c. */
#define VT_GEMV_MAX_ROWS 4

/* AVX-512 kernels over the block rows [r0, r1) x columns [c0, c1) of y.
 * block: the register-blocked micro-kernel on W per (32 columns, KC): rows
 * packed, panels read in place (f32) or widened (bf16/f16); any row count.
 * gemv: W in rows, r1 - r0 <= VT_GEMV_MAX_ROWS. */
void vt_gemm512_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
/* next: the first W row of what the caller runs after this block (another
 * job's rows, say), prefetched during its last 32 columns; NULL: none. */
void vt_gemm512_gemv(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const void *next);

/* Rows from VT_GEMV_MAX_ROWS + 1 up to this, f32 W in rows (c0 >= npanel),
 * no accumulate: vt_gemm512_bcast (W broadcast from its rows in place, no
 * packing). */
#define VT_BCAST_MAX_ROWS 64
void vt_gemm512_bcast(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* Columns [c0, c1) inside the panels (c0, c1 multiples of VT_PANEL,
 * c1 <= npanel), r1 - r0 <= VT_GEMV_MAX_ROWS: the GEMV streaming W's panels
 * in place. (vt_gemm512_block takes blocks inside the panels too.) */
void vt_gemm512_panel_gemv(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* C[M,N] (+)= A[M,K] · B[K,N] (B row-major [K][N], read in place). */
void vt_sgemm512_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float *C, int64_t ldc, int accumulate);

/* AVX2 + FMA + F16C (gemm_avx2.c), for a CPU without AVX-512: a block of
 * rows [r0, r1) and columns [c0, c1) of the product, any layout and dtype;
 * and vt_sgemm_nn. The chains of gemm.h. */
void vt_gemm256_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
void vt_sgemm256_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float *C, int64_t ldc, int accumulate);

#endif
