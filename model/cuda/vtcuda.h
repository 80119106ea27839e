/*
 * vtcuda.h — internal header of the CUDA/cuBLAS backend (the .cu files in model/cuda).
 *
 * The CUDA backend computes what the CPU reference (the C files in model/) computes, with
 * the same knobs, the same probe records and the same replayed faults. It is
 * written as a mirror of the CPU files, one layer per .cu file:
 *
 *   ops.cu      the shared building blocks: bf16 rounding, conversions,
 *               RMSNorm, the residual store, checked row copies (gather,
 *               scatter, the fault's copy), audit sentinels, the GEMM entry
 *   kda.cu      Kimi Delta Attention (conv + SiLU, gates, L2 norm, recurrence,
 *               gated output norm)
 *   mla.cu      MLA attention (NoPE) with the device KV cache
 *   moe.cu      dense SwiGLU MLP and the MoE block (router, gather, experts,
 *               scatter, combine)
 *   backend.cu  device discovery, weight upload, sessions, the decoder loop
 *   bench.cu    the full-size benchmark with weights generated on the device
 *
 * Conventions (llm.c's): every kernel is followed by LAUNCH_CHECK(); every
 * CUDA and cuBLAS call is checked with CUDA_CHECK / CUBLAS_CHECK, which fill
 * the caller's vt_err with file, line, call and reason and return the status
 * — nothing here exits or prints. Functions that can fail take `vt_err *err`
 * as their last argument and return VT_OK or a VT_E* status.
 *
 * Numerics: activations are f32 on the device, exactly as on the CPU, and
 * bf16 rounding happens at the same points (the CPU's vt_act_round calls) with
 * the same round-to-nearest-even bit arithmetic as dtype.c. GEMMs take their
 * weights in the set's dtype: f32 (f32 reference: cuBLAS f32 with
 * CUBLAS_COMPUTE_32F_PEDANTIC, so no TF32) or bf16 (only when every GEMM
 * input is bf16-exact: a bf16 checkpoint with VT_KIMI_BF16_ACT=1; then the
 * bf16 x bf16 products are exact in f32 and only the summation order differs
 * from the CPU). The default (legacy) stream is used throughout, so every
 * host-side cudaMemcpy is ordered after the kernels before it.
 *
 * Shapes are written on every field as on the CPU: [rows, cols] row-major.
 * Rows R = B*T: B sequences decoded together (1 for a vt_session; the
 * benchmark uses 32), T new tokens each, row r = b*T + t.
 */
#ifndef VT_CUDA_INTERNAL_H
#define VT_CUDA_INTERNAL_H

#include <cstdint>
#include <cstdio>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "model/backend.h"
#include "model/model.h"
}

/* ------------------------------------------------------------ checked calls */

/* A failed call also leaves its error as the runtime's "last error": clear it,
 * or a non-sticky one (an allocation failure) would fail the next
 * LAUNCH_CHECK of a later, healthy call. */
#define CUDA_CHECK(call)                                                                                  \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            (void)cudaGetLastError();                                                                     \
            return vt_errf(err, e_ == cudaErrorMemoryAllocation ? VT_ENOMEM : VT_EINTERNAL, "%s:%d: %s: %s", \
                           __FILE__, __LINE__, #call, cudaGetErrorString(e_));                            \
        }                                                                                                 \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                  \
            return vt_errf(err, s_ == CUBLAS_STATUS_ALLOC_FAILED ? VT_ENOMEM : VT_EINTERNAL,              \
                           "%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_));        \
    } while (0)

/* After every kernel launch: a bad launch configuration is reported here;
 * faults inside a kernel surface at the next checked synchronising call. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* Propagates a non-zero status (the callee has filled err). */
#define TRY(expr)                   \
    do {                            \
        int rc_ = (expr);           \
        if (rc_) return rc_;        \
    } while (0)

/* Blocks for element-wise kernels. */
#define CU_THREADS 256
static inline unsigned cu_blocks(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    return (unsigned)(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));   /* kernels use grid-stride loops */
}

/* ------------------------------------------------------------ device buffers */

/* A device matrix [rows, cols], row-major, with its dtype tag (f32 or bf16 on
 * the device). Byte counts come from vt_row_size(dtype, ...) only. */
typedef struct cu_mat {
    void    *p;
    vt_dtype dtype;
    int64_t  rows, cols;
} cu_mat;

static inline size_t cu_row_bytes(const cu_mat *m) { return vt_row_size(m->dtype, m->cols); }
static inline size_t cu_nbytes(const cu_mat *m) { return cu_row_bytes(m) * (size_t)m->rows; }
/* Rows [r0, r0+n) of m, as a matrix of its own. */
static inline cu_mat cu_rows(const cu_mat *m, int64_t r0, int64_t n) {
    cu_mat v = *m;
    v.p = (char *)m->p + cu_row_bytes(m) * (size_t)r0;
    v.rows = n;
    return v;
}

/* ------------------------------------------------------------ weights */

typedef struct cu_swiglu {
    cu_mat gate, up;            /* [I, D] */
    cu_mat down;                /* [D, I] */
} cu_swiglu;

typedef struct cu_layer {
    vt_layer_kind kind;
    float *in_norm, *post_norm; /* [D] */
    /* KDA */
    cu_mat q, k, v;             /* [P, D] */
    float *qc, *kc, *vc;        /* [P, K] depthwise conv */
    float *A_log;               /* [H] */
    float *dt_bias;             /* [P] */
    cu_mat fa, fb;              /* [d, D], [P, d] */
    cu_mat b;                   /* [H, D] */
    cu_mat ga, gb;              /* [d, D], [P, d] */
    float *onorm;               /* [d] */
    cu_mat o;                   /* [D, P] */
    /* MLA */
    cu_mat mq;                  /* [Nh*(nope+rope), D] */
    cu_mat kva;                 /* [r_kv+rope, D] */
    float *kvnorm;              /* [r_kv] */
    cu_mat kvb;                 /* [Nh*(nope+dv), r_kv] */
    cu_mat mo;                  /* [D, Nh*dv] */
    /* FFN */
    int moe;
    cu_swiglu dense;            /* [I, D] ... */
    cu_mat router;              /* [E, D] */
    float *router_bias;         /* [E] */
    cu_mat w1, w3;              /* [E*Im, D]: expert e is rows [e*Im, (e+1)*Im) */
    cu_mat w2;                  /* [E*D, Im]: expert e is rows [e*D, (e+1)*D) */
    int has_shared;
    cu_swiglu shared;           /* [Im*S, D] ... */
} cu_layer;

/* One set of device weights: the GEMM weights in `dtype`, small vectors
 * (norms, conv, A_log, dt_bias, router bias) always f32. */
typedef struct cu_weights {
    vt_dtype  dtype;
    cu_mat    embed;            /* [V, D] */
    float    *norm;             /* [D] */
    cu_mat    lm_head;          /* [V, D] */
    cu_layer *layers;           /* [n_layers] (new[]) */
    int64_t   n_layers;
    std::vector<void *> allocs; /* every cudaMalloc of this set, freed together */
} cu_weights;

int  cu_alloc(cu_weights *w, void **p, size_t bytes, vt_err *err);
void cu_weights_free(cu_weights *w);

/* ------------------------------------------------------------ the context */

/* Scratch slots: each is a device buffer that grows on demand and is reused
 * by every layer. A slot is requested once per op, at its start. */
enum {
    S_GEMM_IN = 0,              /* bf16 copy of a GEMM input */
    S_TOK, S_H, S_HF, S_X, S_O, S_LOGITS,
    S_KDA_Q0, S_KDA_K0, S_KDA_V0, S_KDA_Q, S_KDA_K, S_KDA_V, S_KDA_F, S_KDA_GG, S_KDA_O, S_KDA_LOW, S_KDA_BETA,
    S_MLA_Q, S_MLA_LAT, S_MLA_CN, S_MLA_KV, S_MLA_O, S_MLA_SCORES,
    S_MLP_A, S_MLP_B,
    S_MOE_LOGITS, S_MOE_SEL, S_MOE_WTS, S_MOE_ORDER, S_MOE_SRC, S_MOE_XG, S_MOE_YF, S_MOE_YB, S_MOE_EO,
    S_MOE_A, S_MOE_B, S_MOE_SH, S_COUNTER,
    S_NSLOTS
};

typedef struct vt_cuda {
    const vt_config  *cfg;      /* not owned */
    const cu_weights *w;        /* not owned (the model's, or the benchmark's) */
    vt_knobs          k;
    vt_session       *s;        /* probes and residual capture go here; NULL in the benchmark */
    vt_dtype          stream_dtype, expert_dtype;
    cublasHandle_t    blas;
    int64_t           B;        /* sequences decoded together */
    int64_t           pos;      /* tokens already in the caches, per sequence */
    /* caches, per layer */
    float  **conv;              /* KDA: [B][3][K-1][P] last pre-conv inputs of q, k, v */
    float  **state;             /* KDA: [B][H][d_v][d_k] f32 state, column j of head h contiguous */
    float  **kc, **vc;          /* MLA: [B][cap][Nh*(nope+rope)], [B][cap][Nh*dv] */
    int64_t *cap;               /* MLA capacity in tokens, per layer */
    /* scratch */
    void   *scr[S_NSLOTS];
    size_t  scr_bytes[S_NSLOTS];
    /* accounting for the benchmark: issued FLOPs and the bytes of weights,
     * caches and state the kernels must read (a lower bound on HBM traffic) */
    double  flops, bytes;
} vt_cuda;

int  cu_ctx_init(vt_cuda *c, const vt_config *cfg, const cu_weights *w, const vt_knobs *k, vt_session *s,
                 int64_t B, vt_err *err);
void cu_ctx_release(vt_cuda *c);
/* Zeroes the KDA caches and rewinds the position (the start of a prefill). */
int  cu_ctx_reset(vt_cuda *c, vt_err *err);
/* Returns a device buffer of at least `bytes` for slot, or NULL with err set. */
void *cu_scratch(vt_cuda *c, int slot, size_t bytes, vt_err *err);

#define SCRATCH(T, var, slot, bytes)                                     \
    T *var = (T *)cu_scratch(c, (slot), (bytes), err);                   \
    if (!var) return err->code ? err->code : VT_EINTERNAL

/* The decoder: tok_host [B*T] row r = b*T + t. Writes logits [B*T, V] f32 to
 * logits_host when non-NULL; computes them on the device when want_logits. */
int cu_forward(vt_cuda *c, const int32_t *tok_host, int64_t T, int want_logits, float *logits_host, vt_err *err);

/* ------------------------------------------------------------ probes */

void cu_probe_copy(vt_cuda *c, const char *site, int layer, const vt_copy_stats *st, int converting,
                   int64_t rows_unwritten);
void cu_probe_buffer(vt_cuda *c, const char *site, int layer, vt_dtype dtype, int64_t rows, int64_t ncols);

/* ------------------------------------------------------------ ops.cu */

/* y[M, N] = x[M, K] · W[N, K]ᵀ, x and y f32 on the device. */
int cu_gemm_xwT(vt_cuda *c, const float *x, int64_t M, int64_t K, const cu_mat *W, float *y, vt_err *err);
/* Rounds x[n] to bf16 in place when VT_KIMI_BF16_ACT is on. */
int cu_act_round(vt_cuda *c, float *x, int64_t n, vt_err *err);
/* RMSNorm of M rows of n elements (x row stride xs, y row stride ys; y may be x). */
int cu_rmsnorm(vt_cuda *c, const float *x, int64_t xs, int64_t M, int64_t n, const float *w, double eps, float *y,
               int64_t ys, vt_err *err);
/* Converting copy of n elements between f32 and bf16 buffers (RNE as dtype.c). */
int cu_convert(void *dst, vt_dtype dt, const void *src, vt_dtype st, int64_t n, vt_err *err);
/* hf <- round(hf + o) (o may be NULL); h <- hf in h's dtype; hf <- h widened. */
int cu_stream_store(vt_cuda *c, float *hf, const float *o, void *h, vt_dtype hdt, int64_t n, vt_err *err);
/* out <- out + add (add may be NULL), then rounded when VT_KIMI_BF16_ACT is on. */
int cu_add_round(vt_cuda *c, float *out, const float *add, int64_t n, vt_err *err);
/* a <- silu(a) * b with the CPU's rounding points. */
int cu_swiglu_act(vt_cuda *c, float *a, const float *b, int64_t n, vt_err *err);

/* Checked row copies, as tensor.c: same dtype and row width or refused; row
 * bytes from the buffers; idx_host is the host copy of idx_dev for the
 * bounds checks. */
int cu_rows_gather(cu_mat *dst, const cu_mat *src, const int *idx_dev, const int *idx_host, int64_t n,
                   vt_copy_stats *st, vt_err *err);
int cu_rows_scatter(cu_mat *dst, const int *idx_dev, const int *idx_host, const cu_mat *src, int64_t n,
                    vt_copy_stats *st, vt_err *err);
int cu_rows_convert(cu_mat *dst, const cu_mat *src, vt_copy_stats *st, vt_err *err);
/* faults.c's vt_fault_scatter_rows on the device: row size from row_dtype. */
int cu_fault_scatter_rows(cu_mat *dst, const int *idx_dev, const cu_mat *src, int64_t n, vt_dtype row_dtype,
                          vt_copy_stats *st, vt_err *err);
/* Audit sentinels (tensor.c's patterns). */
int cu_fill_sentinel(cu_mat *m, vt_err *err);
int cu_rows_unwritten(vt_cuda *c, const cu_mat *m, int64_t *out, vt_err *err);
int cu_clear_sentinel(cu_mat *m, vt_err *err);

/* ------------------------------------------------------------ layers */

int cu_kda_forward(vt_cuda *c, int layer, const float *x, int64_t T, float *out, vt_err *err);
int cu_mla_forward(vt_cuda *c, int layer, const float *x, int64_t T, float *out, vt_err *err);
int cu_mlp_forward(vt_cuda *c, const cu_swiglu *w, const float *x, int64_t N, float *out, vt_err *err);
/* trace may be NULL (tests: tests/unit/test_cuda.c). */
int cu_moe_forward(vt_cuda *c, int layer, const float *x, int64_t N, float *out, vt_moe_trace *trace, vt_err *err);

/* ------------------------------------------------------------ device helpers */

#ifdef __CUDACC__
/* dtype.c's vt_f32_to_bf16 bit for bit: RNE, NaN kept quiet. */
__device__ __forceinline__ uint16_t cu_f32_to_bf16(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb;
    return (uint16_t)(u >> 16);
}
__device__ __forceinline__ float cu_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float cu_round_bf16(float x) { return cu_bf16_to_f32(cu_f32_to_bf16(x)); }
/* Element i of a f32 (is_bf16 = 0) or bf16 (is_bf16 = 1) buffer. */
__device__ __forceinline__ float cu_load(const void *p, int is_bf16, size_t i) {
    return is_bf16 ? cu_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
/* The CPU's scalar activations (ops.c), same formulas. */
__device__ __forceinline__ float cu_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float cu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float cu_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the total, summed in the same order on every call. */
__device__ __forceinline__ double cu_block_sum(double v) {
    __shared__ double part[32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();                        /* part[] may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (unsigned i = 0; i < (blockDim.x + 31) / 32; i++) t += part[i];
    return t;
}
__device__ __forceinline__ float cu_block_max(float v) {
    __shared__ float part[32];
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (unsigned i = 0; i < (blockDim.x + 31) / 32; i++) t = fmaxf(t, part[i]);
    return t;
}
__device__ __forceinline__ float cu_warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
#endif

#endif
