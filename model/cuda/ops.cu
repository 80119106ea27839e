/*
 * ops.cu — the device building blocks shared by the layers: the one GEMM
 * entry point (cuBLAS), bf16 rounding and conversions, RMSNorm, the residual
 * store, SwiGLU, the checked row copies (tensor.c's rules on the device), the
 * replayed scatter defect (faults.c's arithmetic on the device) and the audit
 * sentinels (tensor.c's patterns).
 *
 * Every function mirrors a CPU one; the comment names it. Element-wise
 * kernels use grid-stride loops so any n fits any grid.
 */
#include <climits>
#include <cmath>

#include "model/cuda/vtcuda.h"

/* ================================================================ kernels */

__global__ void act_round_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cu_round_bf16(x[i]);
}

/* dst[i] <- src[i] between f32 and bf16 (is_bf16 flags). */
__global__ void convert_kernel(void *dst, int dst_bf16, const void *src, int src_bf16, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (dst_bf16 && src_bf16) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i];
        else if (dst_bf16) ((uint16_t *)dst)[i] = cu_f32_to_bf16(((const float *)src)[i]);
        else ((float *)dst)[i] = cu_load(src, src_bf16, (size_t)i);
    }
}

/* One block per row: ops.c's vt_rmsnorm (sum of squares in double). */
__global__ void rmsnorm_kernel(const float *x, int64_t xs, float *y, int64_t ys, const float *w, int64_t M,
                               int64_t n, double eps, int act) {
    for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
        const float *xr = x + r * xs;
        float *yr = y + r * ys;
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
        ss = cu_block_sum(ss);
        float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = xr[i] * inv;
            yr[i] = act ? cu_round_bf16(cu_round_bf16(v) * w[i]) : v * w[i];
        }
        __syncthreads();   /* y may alias x: finish this row before the next block-wide pass */
    }
}

/* forward.c's residual_add (o != NULL) and the embedding store (o == NULL). */
__global__ void stream_store_kernel(float *hf, const float *o, void *h, int h_bf16, int act, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = hf[i];
        if (o) v += o[i];
        if (act) v = cu_round_bf16(v);
        if (h_bf16) {
            uint16_t b = cu_f32_to_bf16(v);
            ((uint16_t *)h)[i] = b;
            v = cu_bf16_to_f32(b);
        } else {
            ((float *)h)[i] = v;
        }
        hf[i] = v;
    }
}

__global__ void add_round_kernel(float *out, const float *add, int act, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = out[i];
        if (add) v += add[i];
        out[i] = act ? cu_round_bf16(v) : v;
    }
}

/* moe.c: round a and b, a = silu(a) * b, round a. */
__global__ void swiglu_kernel(float *a, const float *b, int act, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float av = a[i], bv = b[i];
        if (act) { av = cu_round_bf16(av); bv = cu_round_bf16(bv); }
        float v = cu_silu(av) * bv;
        a[i] = act ? cu_round_bf16(v) : v;
    }
}

/* Row copy: dst row (dst_idx ? dst_idx[i] : i) <- src row (src_idx ? src_idx[i] : i),
 * row_bytes bytes at the given byte strides, one block per row. Rows whose
 * copy would leave either buffer are skipped (faults.c's rule: the replayed
 * defect corrupts data, never memory); the checked copies never get there. */
template <typename U>
__global__ void copy_rows_kernel(char *dst, size_t dst_stride, size_t dst_nbytes, const int *dst_idx, const char *src,
                                 size_t src_stride, size_t src_nbytes, const int *src_idx, int64_t n,
                                 size_t row_bytes) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int64_t dr = dst_idx ? dst_idx[i] : i, sr = src_idx ? src_idx[i] : i;
        if (dr < 0 || sr < 0) continue;
        size_t doff = (size_t)dr * dst_stride, soff = (size_t)sr * src_stride;
        if (doff > dst_nbytes || row_bytes > dst_nbytes - doff || soff > src_nbytes || row_bytes > src_nbytes - soff)
            continue;
        U *d = (U *)(dst + doff);
        const U *s = (const U *)(src + soff);
        for (size_t u = threadIdx.x; u < row_bytes / sizeof(U); u += blockDim.x) d[u] = s[u];
    }
}

/* tensor.c's sentinels: f32 0x7FA5A5A5, bf16 0x7FA5 (signalling NaNs). */
#define CU_SENT_F32 0x7FA5A5A5u
#define CU_SENT_BF16 ((uint16_t)0x7FA5u)

__global__ void fill_sentinel_kernel(void *p, int is_bf16, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (is_bf16) ((uint16_t *)p)[i] = CU_SENT_BF16;
        else ((uint32_t *)p)[i] = CU_SENT_F32;
    }
}

__global__ void clear_sentinel_kernel(void *p, int is_bf16, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (is_bf16) { if (((uint16_t *)p)[i] == CU_SENT_BF16) ((uint16_t *)p)[i] = 0; }
        else if (((uint32_t *)p)[i] == CU_SENT_F32) ((uint32_t *)p)[i] = 0;
    }
}

/* One block per row: counts rows holding the sentinel in any element. */
__global__ void rows_unwritten_kernel(const void *p, int is_bf16, int64_t rows, int64_t cols,
                                      unsigned long long *count) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int hit = 0;
        for (int64_t cc = threadIdx.x; cc < cols; cc += blockDim.x) {
            size_t i = (size_t)r * cols + cc;
            hit |= is_bf16 ? ((const uint16_t *)p)[i] == CU_SENT_BF16 : ((const uint32_t *)p)[i] == CU_SENT_F32;
        }
        if (__syncthreads_or(hit) && threadIdx.x == 0) atomicAdd(count, 1ull);
    }
}

/* ================================================================ launchers */

static int is_bf16_dtype(vt_dtype t, vt_err *err) {
    if (t == VT_BF16) return 1;
    if (t == VT_F32) return 0;
    vt_errf(err, VT_EINTERNAL, "cuda: dtype %s is not held on the device (f32 and bf16 only)", vt_dtype_name(t));
    return -1;
}

int cu_gemm_xwT(vt_cuda *c, const float *x, int64_t M, int64_t K, const cu_mat *W, float *y, vt_err *err) {
    const int64_t N = W->rows;
    if (M == 0) return VT_OK;
    if (W->cols != K)
        return vt_errf(err, VT_EINTERNAL, "cuda gemm: W has %lld columns, x has %lld", (long long)W->cols, (long long)K);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return vt_errf(err, VT_EUNSUPPORTED, "cuda gemm: %lld x %lld x %lld exceeds cuBLAS's int dimensions",
                       (long long)M, (long long)N, (long long)K);
    const float one = 1.0f, zero = 0.0f;
    if (W->dtype == VT_BF16) {
        /* every GEMM input is bf16-exact when the bf16 set is in use (see vtcuda.h), so this is exact */
        SCRATCH(uint16_t, xb, S_GEMM_IN, vt_row_size(VT_BF16, M * K));
        TRY(cu_convert(xb, VT_BF16, x, VT_F32, M * K, err));
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, W->p, CUDA_R_16BF,
                                  (int)K, xb, CUDA_R_16BF, (int)K, &zero, y, CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    } else if (W->dtype == VT_F32) {
        /* the f32 reference: no TF32, no reduced-precision reductions */
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, W->p, CUDA_R_32F,
                                  (int)K, x, CUDA_R_32F, (int)K, &zero, y, CUDA_R_32F, (int)N,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    } else {
        return vt_errf(err, VT_EINTERNAL, "cuda gemm: weight dtype %s", vt_dtype_name(W->dtype));
    }
    c->flops += 2.0 * (double)M * (double)N * (double)K;
    c->bytes += (double)cu_nbytes(W);
    return VT_OK;
}

int cu_act_round(vt_cuda *c, float *x, int64_t n, vt_err *err) {
    if (!c->k.bf16_act || n <= 0) return VT_OK;
    act_round_kernel<<<cu_blocks(n), CU_THREADS>>>(x, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_rmsnorm(vt_cuda *c, const float *x, int64_t xs, int64_t M, int64_t n, const float *w, double eps, float *y,
               int64_t ys, vt_err *err) {
    if (M <= 0) return VT_OK;
    unsigned grid = (unsigned)(M < 65535 * 16 ? M : 65535 * 16);
    rmsnorm_kernel<<<grid, 256>>>(x, xs, y, ys, w, M, n, eps, c->k.bf16_act);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_convert(void *dst, vt_dtype dt, const void *src, vt_dtype st, int64_t n, vt_err *err) {
    int db = is_bf16_dtype(dt, err), sb = is_bf16_dtype(st, err);
    if (db < 0 || sb < 0) return err->code;
    if (n <= 0) return VT_OK;
    convert_kernel<<<cu_blocks(n), CU_THREADS>>>(dst, db, src, sb, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_stream_store(vt_cuda *c, float *hf, const float *o, void *h, vt_dtype hdt, int64_t n, vt_err *err) {
    int hb = is_bf16_dtype(hdt, err);
    if (hb < 0) return err->code;
    stream_store_kernel<<<cu_blocks(n), CU_THREADS>>>(hf, o, h, hb, c->k.bf16_act, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_add_round(vt_cuda *c, float *out, const float *add, int64_t n, vt_err *err) {
    if (!add && !c->k.bf16_act) return VT_OK;
    add_round_kernel<<<cu_blocks(n), CU_THREADS>>>(out, add, c->k.bf16_act, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_swiglu_act(vt_cuda *c, float *a, const float *b, int64_t n, vt_err *err) {
    if (n <= 0) return VT_OK;
    swiglu_kernel<<<cu_blocks(n), CU_THREADS>>>(a, b, c->k.bf16_act, n);
    LAUNCH_CHECK();
    return VT_OK;
}

static int launch_copy_rows(void *dst, size_t dst_stride, size_t dst_nbytes, const int *dst_idx, const void *src,
                            size_t src_stride, size_t src_nbytes, const int *src_idx, int64_t n, size_t row_bytes,
                            vt_err *err) {
    if (n <= 0 || row_bytes == 0) return VT_OK;
    unsigned grid = (unsigned)(n < 65535 * 16 ? n : 65535 * 16);
    if (row_bytes % 4 == 0 && dst_stride % 4 == 0 && src_stride % 4 == 0)
        copy_rows_kernel<uint32_t><<<grid, 256>>>((char *)dst, dst_stride, dst_nbytes, dst_idx, (const char *)src,
                                                  src_stride, src_nbytes, src_idx, n, row_bytes);
    else if (row_bytes % 2 == 0 && dst_stride % 2 == 0 && src_stride % 2 == 0)
        copy_rows_kernel<uint16_t><<<grid, 256>>>((char *)dst, dst_stride, dst_nbytes, dst_idx, (const char *)src,
                                                  src_stride, src_nbytes, src_idx, n, row_bytes);
    else
        return vt_errf(err, VT_EINTERNAL, "cuda row copy: %zu bytes per row is not a multiple of 2", row_bytes);
    LAUNCH_CHECK();
    return VT_OK;
}

/* tensor.c's check_pair / check_range / check_index, same messages. */
static int check_pair(const char *op, const cu_mat *dst, const cu_mat *src, vt_err *err) {
    if (!dst->p || !src->p) return vt_errf(err, VT_EINTERNAL, "%s: tensor without data", op);
    if (dst->dtype != src->dtype)
        return vt_errf(err, VT_EINTERNAL, "%s: source is %s, destination is %s (a dtype change needs vt_rows_convert)",
                       op, vt_dtype_name(src->dtype), vt_dtype_name(dst->dtype));
    if (dst->cols != src->cols)
        return vt_errf(err, VT_EINTERNAL, "%s: source rows have %lld elements, destination rows %lld", op,
                       (long long)src->cols, (long long)dst->cols);
    return VT_OK;
}

static int check_range(const char *op, const char *which, int64_t r0, int64_t n, int64_t nrows, vt_err *err) {
    if (n < 0 || r0 < 0 || r0 > nrows || n > nrows - r0)
        return vt_errf(err, VT_EINTERNAL, "%s: %s rows [%lld, %lld+%lld) outside [0, %lld)", op, which, (long long)r0,
                       (long long)r0, (long long)n, (long long)nrows);
    return VT_OK;
}

static int check_index(const char *op, const char *which, const int *rows, int64_t n, int64_t nrows, vt_err *err) {
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= nrows)
            return vt_errf(err, VT_EINTERNAL, "%s: %s row index %lld at position %lld outside [0, %lld)", op, which,
                           (long long)rows[i], (long long)i, (long long)nrows);
    return VT_OK;
}

static void fill_stats(vt_copy_stats *st, int64_t n, size_t bytes, const cu_mat *dst, const cu_mat *src) {
    if (!st) return;
    st->rows = n;
    st->bytes_per_row = bytes;
    st->src_row_bytes = cu_row_bytes(src);
    st->dst_row_bytes = cu_row_bytes(dst);
    st->src_dtype = src->dtype;
    st->dst_dtype = dst->dtype;
}

int cu_rows_gather(cu_mat *dst, const cu_mat *src, const int *idx_dev, const int *idx_host, int64_t n,
                   vt_copy_stats *st, vt_err *err) {
    TRY(check_pair("gather", dst, src, err));
    TRY(check_range("gather", "destination", 0, n, dst->rows, err));
    TRY(check_index("gather", "source", idx_host, n, src->rows, err));
    size_t rb = cu_row_bytes(src);
    TRY(launch_copy_rows(dst->p, rb, cu_nbytes(dst), NULL, src->p, rb, cu_nbytes(src), idx_dev, n, rb, err));
    fill_stats(st, n, rb, dst, src);
    return VT_OK;
}

int cu_rows_scatter(cu_mat *dst, const int *idx_dev, const int *idx_host, const cu_mat *src, int64_t n,
                    vt_copy_stats *st, vt_err *err) {
    TRY(check_pair("scatter", dst, src, err));
    TRY(check_range("scatter", "source", 0, n, src->rows, err));
    TRY(check_index("scatter", "destination", idx_host, n, dst->rows, err));
    size_t rb = cu_row_bytes(dst);
    TRY(launch_copy_rows(dst->p, rb, cu_nbytes(dst), idx_dev, src->p, rb, cu_nbytes(src), NULL, n, rb, err));
    fill_stats(st, n, rb, dst, src);
    return VT_OK;
}

int cu_rows_convert(cu_mat *dst, const cu_mat *src, vt_copy_stats *st, vt_err *err) {
    if (!dst->p || !src->p) return vt_errf(err, VT_EINTERNAL, "convert: tensor without data");
    if (dst->cols != src->cols || dst->rows != src->rows)
        return vt_errf(err, VT_EINTERNAL, "convert: shapes differ (%lld x %lld vs %lld x %lld)", (long long)src->rows,
                       (long long)src->cols, (long long)dst->rows, (long long)dst->cols);
    TRY(cu_convert(dst->p, dst->dtype, src->p, src->dtype, src->rows * src->cols, err));
    if (st) {
        st->rows = src->rows;
        st->bytes_per_row = cu_row_bytes(dst);
        st->src_row_bytes = cu_row_bytes(src);
        st->dst_row_bytes = cu_row_bytes(dst);
        st->src_dtype = src->dtype;
        st->dst_dtype = dst->dtype;
    }
    return VT_OK;
}

/* faults.c's vt_fault_scatter_rows: row size AND stride from row_dtype (the
 * defect), bounds still checked per row in the kernel. Wrong on purpose. */
int cu_fault_scatter_rows(cu_mat *dst, const int *idx_dev, const cu_mat *src, int64_t n, vt_dtype row_dtype,
                          vt_copy_stats *st, vt_err *err) {
    size_t row_bytes = vt_row_size(row_dtype, dst->cols);   /* the defect */
    TRY(launch_copy_rows(dst->p, row_bytes, cu_nbytes(dst), idx_dev, src->p, row_bytes, cu_nbytes(src), NULL, n,
                         row_bytes, err));
    st->rows = n;
    st->bytes_per_row = row_bytes;
    st->src_row_bytes = cu_row_bytes(src);
    st->dst_row_bytes = cu_row_bytes(dst);
    st->src_dtype = src->dtype;
    st->dst_dtype = dst->dtype;
    return VT_OK;
}

int cu_fill_sentinel(cu_mat *m, vt_err *err) {
    int b = is_bf16_dtype(m->dtype, err);
    if (b < 0) return err->code;
    int64_t n = m->rows * m->cols;
    if (n <= 0) return VT_OK;
    fill_sentinel_kernel<<<cu_blocks(n), CU_THREADS>>>(m->p, b, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_clear_sentinel(cu_mat *m, vt_err *err) {
    int b = is_bf16_dtype(m->dtype, err);
    if (b < 0) return err->code;
    int64_t n = m->rows * m->cols;
    if (n <= 0) return VT_OK;
    clear_sentinel_kernel<<<cu_blocks(n), CU_THREADS>>>(m->p, b, n);
    LAUNCH_CHECK();
    return VT_OK;
}

int cu_rows_unwritten(vt_cuda *c, const cu_mat *m, int64_t *out, vt_err *err) {
    int b = is_bf16_dtype(m->dtype, err);
    if (b < 0) return err->code;
    *out = 0;
    if (m->rows <= 0) return VT_OK;
    SCRATCH(unsigned long long, cnt, S_COUNTER, sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(cnt, 0, sizeof(unsigned long long)));
    unsigned grid = (unsigned)(m->rows < 65535 * 16 ? m->rows : 65535 * 16);
    rows_unwritten_kernel<<<grid, 256>>>(m->p, b, m->rows, m->cols, cnt);
    LAUNCH_CHECK();
    unsigned long long h = 0;
    CUDA_CHECK(cudaMemcpy(&h, cnt, sizeof h, cudaMemcpyDeviceToHost));
    *out = (int64_t)h;
    return VT_OK;
}
