/*
 * model.h — internal structures of the CPU model: weights, sessions, and the
 * per-op entry points shared by forward.c, kda.c, mla.c and moe.c.
 *
 * Shapes are written on every field as in the checkpoint: [out, in] for
 * linear weights. Matrix weights are vt_tensor views into the checkpoint's
 * bytes, in its dtype (f32, bf16 or f16), by default loaded and rearranged in
 * place into panels (tensor.h; VTLAB_WEIGHTS, forward.c); the GEMMs (gemm.h)
 * widen bf16/f16 to f32 inside the kernel, which is exact.
 * The small vectors read element-wise (norm weights, biases, conv kernels,
 * A_log) are owned f32 copies. Activations are f32 except where a knob puts a
 * buffer in bf16: the residual stream (VT_KIMI_BF16_STREAM) and the expert
 * output path (VT_KIMI_BF16_EXPERT_OUT). Those buffers are vt_tensors with
 * their dtype tag, and every copy between them goes through tensor.c.
 */
#ifndef VT_MODEL_H
#define VT_MODEL_H

#include <stdint.h>

#include "config.h"
#include "gemm.h"
#include "team.h"
#include "knobs.h"
#include "safetensors.h"
#include "tensor.h"
#include "vt.h"

typedef struct vt_kda_w {
    vt_tensor q, k, v;          /* [P, D] */
    vt_tensor qc, kc, vc;       /* [P, K] depthwise conv (checkpoint [P, 1, K]) */
    vt_tensor A_log;            /* [H]   (checkpoint [1, 1, H, 1]) */
    vt_tensor dt_bias;          /* [P] */
    vt_tensor fa, fb;           /* [d, D], [P, d]  forget gate, low rank */
    vt_tensor b;                /* [H, D]  beta */
    vt_tensor ga, gb;           /* [d, D], [P, d]  output gate, low rank */
    vt_tensor onorm;            /* [d] */
    vt_tensor o;                /* [D, P] */
} vt_kda_w;

typedef struct vt_mla_w {
    vt_tensor q;                /* [Nh*(nope+rope), D] */
    vt_tensor kva;              /* [r_kv+rope, D] */
    vt_tensor kvnorm;           /* [r_kv] */
    vt_tensor kvb;              /* [Nh*(nope+dv), r_kv] */
    vt_tensor o;                /* [D, Nh*dv] */
} vt_mla_w;

typedef struct vt_swiglu_w {
    vt_tensor gate, up;         /* [I, D] (w1, w3 for experts) */
    vt_tensor down;             /* [D, I] (w2) */
} vt_swiglu_w;

typedef struct vt_ffn_w {
    int          moe;           /* 1: MoE block; 0: dense MLP in `dense` */
    vt_swiglu_w  dense;
    vt_tensor    router;        /* [E, D] */
    vt_tensor    router_bias;   /* [E] */
    vt_swiglu_w *experts;       /* [E] */
    int          has_shared;
    vt_swiglu_w  shared;        /* [Im*S, D] ... */
} vt_ffn_w;

typedef struct vt_layer_w {
    vt_layer_kind kind;
    vt_tensor  in_norm, post_norm;   /* [D] */
    vt_kda_w   kda;
    vt_mla_w   mla;
    vt_ffn_w   ffn;
} vt_layer_w;

struct vt_model {
    vt_config   cfg;
    vt_tensor   embed;          /* [V, D] */
    vt_tensor   norm;           /* [D] */
    vt_tensor   lm_head;        /* [V, D] */
    vt_layer_w *layers;         /* [n_layers] */
    vt_dtype    weight_dtype;   /* dtype of the checkpoint's large tensors */
    vt_ckpt    *ck;             /* the open checkpoint: the weight views point into its mappings */
    void       *cuda;           /* CUDA backend (issue 7): device weight sets, owned; NULL until a CUDA session */
};

/* Per-layer decode state. */
typedef struct vt_layer_cache {
    float  *conv;               /* KDA: [3][K-1][P] last pre-conv inputs of q, k, v */
    float  *state;              /* KDA: [H][d][d] f32 delta-rule state S[i][j] */
    float  *kc, *vc;            /* MLA: [cap][Nh*(nope+rope)], [cap][Nh*dv] */
    int64_t cap;                /* MLA cache capacity in tokens */
} vt_layer_cache;

/* The session's scratch memory: a stack of 64-byte-aligned blocks reused by
 * every forward, so a forward allocates nothing once the session has run one
 * of that length. A block that does not fit is malloc'ed on its own (listed in
 * `extra`); the next forward starts with one base block of the peak size. */
typedef struct vt_ws {
    char   *base;
    size_t  cap, used, peak, extra_bytes;
    void  **extra;
    size_t *extra_size;
    int64_t nextra, extra_cap;
} vt_ws;
typedef struct vt_ws_mark { size_t used; int64_t nextra; } vt_ws_mark;

/* The sequences of one pass through the stack (forward.c). A pass of one
 * sequence (a prefill, a piece of one, a decode step) has n = 0: one segment
 * of all T rows, continuing from the caches at s->pos. A pack
 * (vt_session_prefill_batch) has n >= 1 segments: segment i is the pass's
 * rows [off[i] - base, off[i + 1] - base), a whole sequence from an empty
 * state: its short convs and delta-rule state start at zero and its attention
 * sees its own keys only, at positions 0.. . Row-wise work (norms, products,
 * gates, routing, experts) runs over all the pass's rows at once: no row
 * changes another's bits (gemm.h's chains are per output element). */
typedef struct vt_segs {
    int64_t        n;
    const int64_t *off;         /* [n + 1], increasing */
    int64_t        base;        /* off[0]: row 0 of the pass */
} vt_segs;

struct vt_session {
    vt_model   *m;
    vt_knobset *ks;
    vt_knobs    k;
    vt_dtype    stream_dtype;   /* residual stream: f32, or bf16 with VT_KIMI_BF16_STREAM */
    vt_dtype    expert_dtype;   /* y and expert_out: f32, or the stream dtype with VT_KIMI_BF16_EXPERT_OUT
                                   (unscoped: the lever's dtypes; per site vt_stream_dtype_at, vt_expert_dtype_at) */
    int         act_cur;        /* the site in flight rounds activations (VT_KIMI_BF16_ACT in its scope) */
    int         lossy_cur;      /* the site in flight is one of VT_TEST_LOSSY_LAYERS (the planted fault) */
    int64_t     pos;            /* tokens already in the caches */
    vt_layer_cache *cache;      /* [n_layers] */
    vtp_probes  probes;         /* mode follows VT_PROBE; .lost: observations dropped for lack of
                                   memory (the probes cannot vouch for the run) */
    int         capture;
    int         stale;          /* a forward failed midway: caches inconsistent until the next prefill */
    float      *captured;       /* [n_layers][2][T][D] when capture is on */
    int64_t     captured_T;
    int64_t     piece;          /* tokens per piece of a long prefill; 0: one pass (forward.c) */
    int64_t     batch_rows;     /* VTLAB_BATCH_ROWS: the most rows of a pack; 0: one sequence per pass */
    vt_segs     seg;            /* the pass in flight (n = 0: one sequence) */
    int         packed;         /* the last forward was a batch: the caches hold no one sequence */
    int64_t    *batch_off;      /* [batch_n + 1] the captured rows of each sequence of the last batch */
    int64_t     batch_n, batch_cap;
    double      fwd_sec, gemm_sec;
    vt_team     team;           /* the thread count of each decode step (team.h) */
    vt_ws       ws;
    void       *cuda;           /* CUDA backend (issue 7): device state when VT_BACKEND=cuda, else NULL */
};

/* The segments of the pass in flight (s->seg): their count, and the rows
 * [*r0, *r1) of segment i in a pass of T rows (no pack: one of all T). */
static inline int64_t vt_seg_count(const vt_session *s) { return s->seg.n > 0 ? s->seg.n : 1; }
static inline void vt_seg_rows(const vt_session *s, int64_t T, int64_t i, int64_t *r0, int64_t *r1) {
    if (s->seg.n > 0) {
        *r0 = s->seg.off[i] - s->seg.base;
        *r1 = s->seg.off[i + 1] - s->seg.base;
    } else {
        *r0 = 0;
        *r1 = T;
    }
}

/* ------------------------------------------------------------ scopes */

/* A lever acts at the sites of its scope (docs/localize.md): site 0 is a
 * layer's attention block (input norm through its residual add; layer 0's
 * also holds the embedding), site 1 its FFN block (norm through its add;
 * the last layer's also holds the final norm and the logits). */

/* The dtype of the residual-stream store at site of layer. */
static inline vt_dtype vt_stream_dtype_at(const vt_session *s, int64_t layer, int site) {
#ifndef VT_MUTATE_SCOPE_IGNORED   /* make mutation: the stream's scope ignored; test_scope must fail */
    return s->k.bf16_stream && vtp_layer_set_has(&s->k.stream_scope, (int)layer, site) ? VT_BF16 : VT_F32;
#else
    (void)layer, (void)site;
    return s->k.bf16_stream ? VT_BF16 : VT_F32;
#endif
}
/* The dtype of layer's MoE expert output (y, expert_out): its FFN site's. */
static inline vt_dtype vt_expert_dtype_at(const vt_session *s, int64_t layer) {
    return s->k.bf16_expert_out && vtp_layer_set_has(&s->k.expert_scope, (int)layer, 1) ? vt_stream_dtype_at(s, layer, 1)
                                                                                       : VT_F32;
}
/* Enters site of layer: what runs next rounds activations when
 * VT_KIMI_BF16_ACT acts there, and takes the planted fault when it is there. */
static inline void vt_site_enter(vt_session *s, int64_t layer, int site) {
    s->act_cur = s->k.bf16_act && vtp_layer_set_has(&s->k.act_scope, (int)layer, site);
    s->lossy_cur = vtp_layer_set_has(&s->k.lossy, (int)layer, site);
}
/* x with `bits` mantissa bits (of f32's 23), rounded to nearest even: the
 * planted fault's coarse rounding (NaN and infinities as they are). */
float vt_round_mantissa(float x, int bits);
/* A lever's bf16 rounding at the site in flight: bf16, or, where the planted
 * fault is, its one mantissa bit. */
static inline float vt_lever_round(const vt_session *s, float x) {
    return s->lossy_cur ? vt_round_mantissa(x, s->k.lossy_bits) : vt_round_bf16(x);
}

/* ------------------------------------------------------------ ops.c */

/* Element-wise loops run in parallel only from this many elements: below it
 * (the tiny model, decode) a fork-join costs more than the work, and on a
 * busy host every parallel region waits for its slowest, possibly
 * descheduled, thread. Results do not depend on it. */
#define VT_PAR_MIN_ELEMS 32768

/* y[M, N] = x[M, K] · W[N, K]ᵀ, W in its checkpoint dtype (timed into s->gemm_sec). */
void vt_gemm_xwT(vt_session *s, const float *x, int64_t M, int64_t K, const vt_tensor *W, float *y);
/* Several products in one parallel region (gemm.h's vt_gemm_batch), timed. */
void vt_gemm_jobs(vt_session *s, const vt_gemm_job *jobs, int64_t njobs);

/* Scratch of n elements of dtype dt from the session's workspace, 64-byte
 * aligned, uninitialised; NULL (err set) when memory runs out. Valid until
 * vt_ws_release of a mark taken before it, or the next forward. */
void      *vt_ws_alloc(vt_session *s, vt_dtype dt, int64_t n, vt_err *err);
vt_ws_mark vt_ws_mark_now(const vt_session *s);
void       vt_ws_release(vt_session *s, vt_ws_mark mk);
void       vt_ws_reset(vt_session *s);   /* forward.c, at the start of each forward */
void       vt_ws_free(vt_session *s);
/* RMSNorm of each row of x[M, n] into y (may alias x). With bf16 activations
 * the normalised value is rounded before and after the weight multiply, as
 * the public bf16 implementations do. */
void vt_rmsnorm(vt_session *s, const float *x, int64_t M, int64_t n, const float *w, double eps, float *y);
/* sum of x[i]^2 in double, in a fixed order of eight partial sums (ops.c) */
double vt_sum_squares(const float *x, int64_t n);
/* Rounds to bf16 in place when VT_KIMI_BF16_ACT acts at the site in flight
 * (s->act_cur; the planted fault's bits there); otherwise nothing. */
void vt_act_round(const vt_session *s, float *x, int64_t n);
/* SiLU, sigmoid and softplus on vt_expf and vt_log1pf_pos (vmath.h: fixed
 * polynomials, not libm's). The array forms give each element the bits of
 * the scalar form, AVX-512 or not: y = exp(x); a = silu(a) * b (b NULL:
 * silu(a)); y = sigmoid(x); y = softplus(x). x and y may be the same array. */
float vt_silu(float x);
float vt_sigmoid(float x);
float vt_softplus(float x);
void  vt_exp_array(const float *x, float *y, int64_t n);
void  vt_silu_mul(float *a, const float *b, int64_t n);
void  vt_sigmoid_array(const float *x, float *y, int64_t n);
void  vt_softplus_array(const float *x, float *y, int64_t n);

/* ------------------------------------------------------------ probes.c */

/* Records one observation at (site, layer); aggregated with earlier ones of
 * the same site, layer and dtypes. `st` may be NULL for non-copy sites, then
 * bytes are the row bytes of a buffer of `dtype` with `ncols` columns. */
void vt_probe_copy(vt_session *s, const char *site, int layer, const vt_copy_stats *st,
                   int converting, int64_t rows_unwritten);
void vt_probe_buffer(vt_session *s, const char *site, int layer, vt_dtype dtype, int64_t rows, int64_t ncols);
/* The same once per sequence of a pass of T tokens (s->seg), each call with
 * its tokens x rows_per_token rows (K at the MoE sites): a pack records what
 * one forward per sequence records (calls, rows), so a run's records do not
 * depend on the packing. unwritten: per sequence (NULL: not audited). */
void vt_probe_buffer_seqs(vt_session *s, const char *site, int layer, vt_dtype dtype, int64_t T,
                          int64_t rows_per_token, int64_t ncols);
void vt_probe_copy_seqs(vt_session *s, const char *site, int layer, vt_copy_stats st, int converting, int64_t T,
                        int64_t rows_per_token, const int64_t *unwritten);

/* ------------------------------------------------------------ layers */

/* Each takes the normed input x[T, D] and writes out[T, D] (f32), using and
 * advancing the layer's cache for positions s->pos .. s->pos+T-1, or, in a
 * pack (s->seg), each sequence from an empty state. */
int vt_kda_forward(vt_session *s, int layer, const float *x, int64_t T, float *out, vt_err *err);
int vt_mla_forward(vt_session *s, int layer, const float *x, int64_t T, float *out, vt_err *err);
int vt_mlp_forward(vt_session *s, int layer, const vt_swiglu_w *w, const float *x, int64_t T, float *out, vt_err *err);

/* What the MoE block leaves behind for tests (tests/unit/test_scatter.c). */
typedef struct vt_moe_trace {
    vt_tensor expert_out;       /* [N*K, D] copy of the scattered expert output, in its dtype */
    int64_t  *pair_token;       /* [N*K] token of each expert_out row */
    int64_t  *pair_expert;      /* [N*K] expert of each expert_out row */
    int64_t   rows_unwritten;   /* audit: rows of expert_out left with the sentinel */
} vt_moe_trace;
void vt_moe_trace_free(vt_moe_trace *t);

int vt_moe_forward(vt_session *s, int layer, const vt_ffn_w *w, const float *x, int64_t N, float *out,
                   vt_moe_trace *trace, vt_err *err);

/* faults.c: the replayed defect. Copies n rows src -> dst[dst_rows] with the
 * row size taken from row_dtype (not from the buffers), at that row size's
 * stride, exactly as the defect did. Bounds are still checked: it corrupts
 * data, never memory. */
void vt_fault_scatter_rows(vt_tensor *dst, const int64_t *dst_rows, const vt_tensor *src, int64_t n,
                           vt_dtype row_dtype, vt_copy_stats *st);

#endif
