/*
 * backend.cu — the CUDA/cuBLAS backend: device discovery, the model's device
 * weights, sessions, and the decoder loop (the mirror of forward.c).
 *
 * Weights. The CPU model holds every weight as f32 (widened exactly from the
 * checkpoint). The device holds a set of GEMM weights in one dtype:
 *   - bf16, for a bf16 checkpoint run with VT_KIMI_BF16_ACT=1: narrowed back
 *     to bf16 on upload, which is lossless (checked element by element; a
 *     tensor that does not survive the round trip sends the model to the f32
 *     set instead). With bf16 activation rounding every GEMM input is
 *     bf16-exact, so bf16 x bf16 products accumulated in f32 are the CPU's
 *     products, summed in another order.
 *   - f32 otherwise (f32 and f16 checkpoints, and any checkpoint without
 *     activation rounding: the f32 reference arm must multiply f32 inputs).
 * Small vectors (norms, conv, A_log, dt_bias, router bias) are f32 in both.
 * Sets are uploaded once per model and dtype, on the first session that needs
 * them, and shared by every later session (vt_model.cuda).
 *
 * Sessions. A CUDA session is a vt_session with s->cuda set: forward.c hands
 * prefill and decode here. Caches (KDA conv inputs and state, MLA keys and
 * values) live on the device. Probes are recorded through the same host
 * functions with the same copy statistics as the CPU; residual capture copies
 * the f32 stream back after each sublayer.
 */
#include <climits>
#include <cmath>
#include <cstring>

#include "model/cuda/vtcuda.h"

/* ================================================================ kernels */

/* hf[r, i] = embed[tok[r], i] widened to f32 (exact). */
__global__ void embed_kernel(const void *emb, int emb_bf16, const int *tok, float *hf, int64_t R, int64_t D) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < R * D; idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = idx / D, i = idx % D;
        hf[idx] = cu_load(emb, emb_bf16, (size_t)tok[r] * (size_t)D + (size_t)i);
    }
}

/* ================================================================ device discovery */

extern "C" int vt_cuda_probe_device(char *err, size_t errlen) {
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        snprintf(err, errlen, "VT_BACKEND=cuda: no CUDA device (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        cudaGetLastError();
        return VT_STATUS_UNSUPPORTED;
    }
    cublasHandle_t h;
    cublasStatus_t cs = cublasCreate(&h);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "VT_BACKEND=cuda: cublasCreate failed (status %d)", (int)cs);
        return VT_STATUS_UNSUPPORTED;
    }
    cublasDestroy(h);
    return VT_STATUS_OK;
}

extern "C" int vt_cuda_device_name(char *out, size_t outlen, char *err, size_t errlen) {
    int rc = vt_cuda_probe_device(err, errlen);
    if (rc) return rc;
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        snprintf(err, errlen, "cudaGetDeviceProperties failed");
        return VT_STATUS_INTERNAL;
    }
    snprintf(out, outlen, "%s", p.name);
    return VT_OK;
}

/* ================================================================ weights */

int cu_alloc(cu_weights *w, void **p, size_t bytes, vt_err *err) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 4);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return vt_errf(err, VT_ENOMEM, "cuda: cannot allocate %zu bytes of weights (%s)", bytes, cudaGetErrorString(e));
    }
    w->allocs.push_back(*p);
    return VT_OK;
}

void cu_weights_free(cu_weights *w) {
    if (!w) return;
    for (void *p : w->allocs) cudaFree(p);
    delete[] w->layers;
    delete w;
}

/* Upload state: host staging buffers for widening (the host weights are
 * views of the checkpoint in its dtype) and narrowing, and whether any value
 * failed the bf16 round trip. */
typedef struct upload {
    cu_weights           *w;
    std::vector<float>    wide;
    std::vector<uint16_t> stage;
    int                   inexact;
} upload;

/* Copies host tensor t (f32, bf16 or f16) into device matrix dst starting at element elem_off. */
static int put(upload *u, const cu_mat *dst, int64_t elem_off, const vt_tensor *t, vt_err *err) {
    if (!vt_dtype_traits_of(t->dtype) || !vt_dtype_traits_of(t->dtype)->is_float)
        return vt_errf(err, VT_EINTERNAL, "cuda upload: host weight is %s", vt_dtype_name(t->dtype));
    const int64_t n = vt_tensor_nelem(t);
    if (elem_off + n > dst->rows * dst->cols)
        return vt_errf(err, VT_EINTERNAL, "cuda upload: %lld elements at %lld overflow a %lld x %lld matrix",
                       (long long)n, (long long)elem_off, (long long)dst->rows, (long long)dst->cols);
    char *base = (char *)dst->p + vt_row_size(dst->dtype, elem_off);
    /* a CPU matrix in panels (tensor.h): its rows, in order, for the device */
    std::vector<char> rows(t->panel ? t->nbytes : 0);
    if (t->panel) vt_tensor_unpanel(t, 0, vt_tensor_nrows(t), rows.data());
    const char *src = t->panel ? rows.data() : (const char *)t->data;
    const int64_t chunk = (int64_t)u->stage.size();
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t m = n - i0 < chunk ? n - i0 : chunk;
        float *wide = u->wide.data();
        vt_convert(wide, VT_F32, src + vt_row_size(t->dtype, i0), t->dtype, (size_t)m);
        if (dst->dtype == VT_F32) {
            CUDA_CHECK(cudaMemcpy(base + vt_row_size(VT_F32, i0), wide, vt_row_size(VT_F32, m), cudaMemcpyHostToDevice));
            continue;
        }
        for (int64_t i = 0; i < m; i++) {
            vt_bf16 h = vt_f32_to_bf16(wide[i]);
            float back = vt_bf16_to_f32(h);
            if (memcmp(&back, &wide[i], sizeof back) != 0) u->inexact = 1;
            u->stage[(size_t)i] = h.bits;
        }
        CUDA_CHECK(cudaMemcpy(base + vt_row_size(VT_BF16, i0), u->stage.data(), vt_row_size(VT_BF16, m),
                              cudaMemcpyHostToDevice));
    }
    return VT_OK;
}

static int new_mat(upload *u, int64_t rows, int64_t cols, cu_mat *m, vt_err *err) {
    m->dtype = u->w->dtype;
    m->rows = rows;
    m->cols = cols;
    return cu_alloc(u->w, &m->p, vt_row_size(m->dtype, rows * cols), err);
}

static int up_mat(upload *u, const vt_tensor *t, cu_mat *m, vt_err *err) {
    TRY(new_mat(u, vt_tensor_nrows(t), vt_tensor_ncols(t), m, err));
    return put(u, m, 0, t, err);
}

static int up_vec(upload *u, const vt_tensor *t, float **out, vt_err *err) {
    const int64_t n = vt_tensor_nelem(t);
    TRY(cu_alloc(u->w, (void **)out, vt_row_size(VT_F32, n), err));
    CUDA_CHECK(cudaMemcpy(*out, t->data, vt_row_size(VT_F32, n), cudaMemcpyHostToDevice));
    return VT_OK;
}

static int up_swiglu(upload *u, const vt_swiglu_w *h, cu_swiglu *d, vt_err *err) {
    TRY(up_mat(u, &h->gate, &d->gate, err));
    TRY(up_mat(u, &h->up, &d->up, err));
    return up_mat(u, &h->down, &d->down, err);
}

static int upload_layer(upload *u, const vt_config *cfg, const vt_layer_w *h, cu_layer *d, vt_err *err) {
    d->kind = h->kind;
    TRY(up_vec(u, &h->in_norm, &d->in_norm, err));
    TRY(up_vec(u, &h->post_norm, &d->post_norm, err));
    if (h->kind == VT_LAYER_KDA) {
        const vt_kda_w *k = &h->kda;
        TRY(up_mat(u, &k->q, &d->q, err));
        TRY(up_mat(u, &k->k, &d->k, err));
        TRY(up_mat(u, &k->v, &d->v, err));
        TRY(up_vec(u, &k->qc, &d->qc, err));
        TRY(up_vec(u, &k->kc, &d->kc, err));
        TRY(up_vec(u, &k->vc, &d->vc, err));
        TRY(up_vec(u, &k->A_log, &d->A_log, err));
        TRY(up_vec(u, &k->dt_bias, &d->dt_bias, err));
        TRY(up_mat(u, &k->fa, &d->fa, err));
        TRY(up_mat(u, &k->fb, &d->fb, err));
        TRY(up_mat(u, &k->b, &d->b, err));
        TRY(up_mat(u, &k->ga, &d->ga, err));
        TRY(up_mat(u, &k->gb, &d->gb, err));
        TRY(up_vec(u, &k->onorm, &d->onorm, err));
        TRY(up_mat(u, &k->o, &d->o, err));
    } else {
        const vt_mla_w *m = &h->mla;
        TRY(up_mat(u, &m->q, &d->mq, err));
        TRY(up_mat(u, &m->kva, &d->kva, err));
        TRY(up_vec(u, &m->kvnorm, &d->kvnorm, err));
        TRY(up_mat(u, &m->kvb, &d->kvb, err));
        TRY(up_mat(u, &m->o, &d->mo, err));
    }
    const vt_ffn_w *f = &h->ffn;
    d->moe = f->moe;
    if (!f->moe) return up_swiglu(u, &f->dense, &d->dense, err);
    const int64_t E = cfg->num_experts, Im = cfg->moe_intermediate_size, D = cfg->hidden_size;
    TRY(up_mat(u, &f->router, &d->router, err));
    TRY(up_vec(u, &f->router_bias, &d->router_bias, err));
    TRY(new_mat(u, E * Im, D, &d->w1, err));
    TRY(new_mat(u, E * Im, D, &d->w3, err));
    TRY(new_mat(u, E * D, Im, &d->w2, err));
    for (int64_t e = 0; e < E; e++) {
        TRY(put(u, &d->w1, e * Im * D, &f->experts[e].gate, err));
        TRY(put(u, &d->w3, e * Im * D, &f->experts[e].up, err));
        TRY(put(u, &d->w2, e * D * Im, &f->experts[e].down, err));
    }
    d->has_shared = f->has_shared;
    if (f->has_shared) TRY(up_swiglu(u, &f->shared, &d->shared, err));
    return VT_OK;
}

/* Uploads model m's weights with GEMM weights in dtype dt. *inexact: some
 * value did not survive narrowing to bf16 (the set is then unusable). */
static int upload_model(const vt_model *m, vt_dtype dt, cu_weights **out, int *inexact, vt_err *err) {
    const vt_config *cfg = &m->cfg;
    upload u;
    u.w = new cu_weights();
    u.w->dtype = dt;
    u.w->n_layers = cfg->num_hidden_layers;
    u.w->layers = new cu_layer[cfg->num_hidden_layers]();
    u.stage.resize((size_t)1 << 22);
    u.wide.resize((size_t)1 << 22);
    u.inexact = 0;
    int rc = up_mat(&u, &m->embed, &u.w->embed, err);
    if (!rc) rc = up_vec(&u, &m->norm, &u.w->norm, err);
    if (!rc) rc = up_mat(&u, &m->lm_head, &u.w->lm_head, err);
    for (int64_t i = 0; !rc && i < cfg->num_hidden_layers; i++) rc = upload_layer(&u, cfg, &m->layers[i], &u.w->layers[i], err);
    if (!rc) {
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) rc = vt_errf(err, VT_EINTERNAL, "cuda upload: %s", cudaGetErrorString(e));
    }
    if (rc) {
        cu_weights_free(u.w);
        return rc;
    }
    *inexact = u.inexact;
    *out = u.w;
    return VT_OK;
}

/* The model's device state: one weight set per dtype, made on demand. */
typedef struct cu_model {
    cu_weights *set[2];          /* [0] f32, [1] bf16 */
    int         bf16_inexact;    /* 1: the checkpoint is not bf16-exact; use f32 */
} cu_model;

static int model_weights(vt_model *m, vt_dtype want, const cu_weights **out, vt_err *err) {
    cu_model *cm = (cu_model *)m->cuda;
    if (!cm) {
        cm = new cu_model();
        m->cuda = cm;
    }
    if (want == VT_BF16 && cm->bf16_inexact) want = VT_F32;
    int slot = want == VT_BF16;
    if (!cm->set[slot]) {
        int inexact = 0;
        TRY(upload_model(m, want, &cm->set[slot], &inexact, err));
        if (inexact) {   /* a tensor is not bf16-exact: the bf16 set would change numbers */
            cu_weights_free(cm->set[slot]);
            cm->set[slot] = NULL;
            cm->bf16_inexact = 1;
            return model_weights(m, VT_F32, out, err);
        }
    }
    *out = cm->set[slot];
    return VT_OK;
}

extern "C" void vt_cuda_model_free(vt_model *m) {
    if (!m || !m->cuda) return;
    cu_model *cm = (cu_model *)m->cuda;
    cu_weights_free(cm->set[0]);
    cu_weights_free(cm->set[1]);
    delete cm;
    m->cuda = NULL;
}

/* ================================================================ context */

void *cu_scratch(vt_cuda *c, int slot, size_t bytes, vt_err *err) {
    if (bytes == 0) bytes = 4;
    if (c->scr_bytes[slot] >= bytes) return c->scr[slot];
    if (c->scr[slot]) {
        cudaError_t e = cudaDeviceSynchronize();   /* earlier kernels may still use the old buffer */
        if (e != cudaSuccess) {
            vt_errf(err, VT_EINTERNAL, "cuda scratch: %s", cudaGetErrorString(e));
            return NULL;
        }
        cudaFree(c->scr[slot]);
        c->scr[slot] = NULL;
        c->scr_bytes[slot] = 0;
    }
    size_t cap = bytes + bytes / 4;   /* some headroom: prefills of growing T do not realloc each time */
    cudaError_t e = cudaMalloc(&c->scr[slot], cap);
    if (e != cudaSuccess) {
        cudaGetLastError();
        c->scr[slot] = NULL;
        vt_errf(err, VT_ENOMEM, "cuda: cannot allocate %zu bytes of scratch (slot %d): %s", cap, slot,
                cudaGetErrorString(e));
        return NULL;
    }
    c->scr_bytes[slot] = cap;
    return c->scr[slot];
}

void cu_ctx_release(vt_cuda *c) {
    if (!c) return;
    const int64_t L = c->cfg ? c->cfg->num_hidden_layers : 0;
    for (int64_t i = 0; i < L; i++) {
        if (c->conv) cudaFree(c->conv[i]);
        if (c->state) cudaFree(c->state[i]);
        if (c->kc) cudaFree(c->kc[i]);
        if (c->vc) cudaFree(c->vc[i]);
    }
    free(c->conv); free(c->state); free(c->kc); free(c->vc); free(c->cap);
    for (int i = 0; i < S_NSLOTS; i++) cudaFree(c->scr[i]);
    if (c->blas) cublasDestroy(c->blas);
    memset(c, 0, sizeof *c);
}

int cu_ctx_init(vt_cuda *c, const vt_config *cfg, const cu_weights *w, const vt_knobs *k, vt_session *s, int64_t B,
                vt_err *err) {
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    c->w = w;
    c->k = *k;
    c->s = s;
    c->B = B;
    c->stream_dtype = k->bf16_stream ? VT_BF16 : VT_F32;
    c->expert_dtype = k->bf16_expert_out ? c->stream_dtype : VT_F32;
    if (cfg->kda_head_dim > 256 || cfg->num_experts_per_token > 64)
        return vt_errf(err, VT_EUNSUPPORTED, "cuda: kda head_dim %lld (max 256) or top-k %lld (max 64) not supported",
                       (long long)cfg->kda_head_dim, (long long)cfg->num_experts_per_token);
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));   /* TF32 only if asked: never */
    const int64_t L = cfg->num_hidden_layers, P = cfg->kda_num_heads * cfg->kda_head_dim, d = cfg->kda_head_dim;
    const int64_t K = cfg->short_conv_kernel_size;
    c->conv = (float **)calloc((size_t)L, sizeof(float *));
    c->state = (float **)calloc((size_t)L, sizeof(float *));
    c->kc = (float **)calloc((size_t)L, sizeof(float *));
    c->vc = (float **)calloc((size_t)L, sizeof(float *));
    c->cap = (int64_t *)calloc((size_t)L, sizeof(int64_t));
    if (!c->conv || !c->state || !c->kc || !c->vc || !c->cap) return vt_errf(err, VT_ENOMEM, "cuda: out of memory");
    for (int64_t i = 0; i < L; i++) {
        if (cfg->layer_kind[i] != VT_LAYER_KDA) continue;
        CUDA_CHECK(cudaMalloc((void **)&c->conv[i], vt_row_size(VT_F32, B * 3 * (K - 1) * P) + 4));
        CUDA_CHECK(cudaMalloc((void **)&c->state[i], vt_row_size(VT_F32, B * cfg->kda_num_heads * d * d)));
    }
    return cu_ctx_reset(c, err);
}

int cu_ctx_reset(vt_cuda *c, vt_err *err) {
    const vt_config *cfg = c->cfg;
    const int64_t P = cfg->kda_num_heads * cfg->kda_head_dim, d = cfg->kda_head_dim, K = cfg->short_conv_kernel_size;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        if (c->conv[i]) CUDA_CHECK(cudaMemset(c->conv[i], 0, vt_row_size(VT_F32, c->B * 3 * (K - 1) * P) + 4));
        if (c->state[i]) CUDA_CHECK(cudaMemset(c->state[i], 0, vt_row_size(VT_F32, c->B * cfg->kda_num_heads * d * d)));
    }
    c->pos = 0;
    return VT_OK;
}

/* ================================================================ probes */

void cu_probe_copy(vt_cuda *c, const char *site, int layer, const vt_copy_stats *st, int converting,
                   int64_t rows_unwritten) {
    if (c->s) vt_probe_copy(c->s, site, layer, st, converting, rows_unwritten);
}

void cu_probe_buffer(vt_cuda *c, const char *site, int layer, vt_dtype dtype, int64_t rows, int64_t ncols) {
    if (c->s) vt_probe_buffer(c->s, site, layer, dtype, rows, ncols);
}

/* ================================================================ the decoder */

int cu_forward(vt_cuda *c, const int32_t *tok, int64_t T, int want_logits, float *logits_host, vt_err *err) {
    const vt_config *cfg = c->cfg;
    const cu_weights *w = c->w;
    const int64_t D = cfg->hidden_size, V = cfg->vocab_size, L = cfg->num_hidden_layers, R = c->B * T;
    for (int64_t r = 0; r < R; r++)
        if (tok[r] < 0 || tok[r] >= V)
            return vt_errf(err, VT_EINPUT, "token %d at position %lld is outside the vocabulary [0, %lld)", tok[r],
                           (long long)(r % T), (long long)V);
    if (R > INT_MAX / (cfg->num_experts_per_token > 0 ? cfg->num_experts_per_token : 1))
        return vt_errf(err, VT_EUNSUPPORTED, "cuda: %lld rows exceed the device path's int indices", (long long)R);
    vt_session *s = c->s;
    const int capture = s && s->capture && c->B == 1;
    if (capture) {
        float *cap = (float *)realloc(s->captured, vt_row_size(VT_F32, L * 2 * T * D));
        if (!cap) return vt_errf(err, VT_ENOMEM, "forward: out of memory for capture");
        s->captured = cap;
        s->captured_T = T;
    }
    SCRATCH(int, tok_d, S_TOK, vt_row_size(VT_I32, R));
    SCRATCH(void, h, S_H, vt_row_size(c->stream_dtype, R * D));
    SCRATCH(float, hf, S_HF, vt_row_size(VT_F32, R * D));
    SCRATCH(float, x, S_X, vt_row_size(VT_F32, R * D));
    SCRATCH(float, o, S_O, vt_row_size(VT_F32, R * D));
    static_assert(sizeof(int32_t) == sizeof(int), "int32 tokens");
    CUDA_CHECK(cudaMemcpy(tok_d, tok, vt_row_size(VT_I32, R), cudaMemcpyHostToDevice));

    embed_kernel<<<cu_blocks(R * D), CU_THREADS>>>(w->embed.p, w->embed.dtype == VT_BF16, tok_d, hf, R, D);
    LAUNCH_CHECK();
    TRY(cu_stream_store(c, hf, NULL, h, c->stream_dtype, R * D, err));

    for (int64_t l = 0; l < L; l++) {
        const cu_layer *Lw = &w->layers[l];
        TRY(cu_rmsnorm(c, hf, D, R, D, Lw->in_norm, cfg->rms_norm_eps, x, D, err));
        TRY(Lw->kind == VT_LAYER_KDA ? cu_kda_forward(c, (int)l, x, T, o, err) : cu_mla_forward(c, (int)l, x, T, o, err));
        TRY(cu_stream_store(c, hf, o, h, c->stream_dtype, R * D, err));
        if (capture)
            CUDA_CHECK(cudaMemcpy(s->captured + (l * 2 + 0) * T * D, hf, vt_row_size(VT_F32, T * D), cudaMemcpyDeviceToHost));

        TRY(cu_rmsnorm(c, hf, D, R, D, Lw->post_norm, cfg->rms_norm_eps, x, D, err));
        TRY(Lw->moe ? cu_moe_forward(c, (int)l, x, R, o, NULL, err) : cu_mlp_forward(c, &Lw->dense, x, R, o, err));
        TRY(cu_stream_store(c, hf, o, h, c->stream_dtype, R * D, err));
        if (capture)
            CUDA_CHECK(cudaMemcpy(s->captured + (l * 2 + 1) * T * D, hf, vt_row_size(VT_F32, T * D), cudaMemcpyDeviceToHost));
        cu_probe_buffer(c, "residual.stream", (int)l, c->stream_dtype, R, D);
    }
    c->pos += T;
    if (want_logits) {
        SCRATCH(float, lg, S_LOGITS, vt_row_size(VT_F32, R * V));
        TRY(cu_rmsnorm(c, hf, D, R, D, w->norm, cfg->rms_norm_eps, x, D, err));
        TRY(cu_gemm_xwT(c, x, R, D, &w->lm_head, lg, err));
        cu_probe_buffer(c, "logits", -1, VT_F32, R, V);
        if (logits_host) CUDA_CHECK(cudaMemcpy(logits_host, lg, vt_row_size(VT_F32, R * V), cudaMemcpyDeviceToHost));
    }
    CUDA_CHECK(cudaDeviceSynchronize());   /* surfaces any fault of this call here, and makes timing honest */
    return VT_OK;
}

/* ================================================================ sessions */

static int ret_err(const vt_err *e, int rc, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s", e->msg);
    return rc;
}

extern "C" int vt_cuda_session_open(vt_session *s, char *errbuf, size_t errlen) {
    vt_err e = {};
    vt_err *err = &e;
    vt_model *m = s->m;
    /* bf16 GEMMs only where every GEMM input is bf16-exact (see the banner) */
    vt_dtype want = m->weight_dtype == VT_BF16 && s->k.bf16_act ? VT_BF16 : VT_F32;
    const cu_weights *w = NULL;
    int rc = model_weights(m, want, &w, err);
    if (rc) return ret_err(&e, rc, errbuf, errlen);
    vt_cuda *c = (vt_cuda *)calloc(1, sizeof *c);
    if (!c) { snprintf(errbuf, errlen, "out of memory"); return VT_STATUS_NOMEM; }
    rc = cu_ctx_init(c, &m->cfg, w, &s->k, s, 1, err);
    if (rc) {
        cu_ctx_release(c);
        free(c);
        return ret_err(&e, rc, errbuf, errlen);
    }
    s->cuda = c;
    return VT_OK;
}

extern "C" void vt_cuda_session_free(vt_session *s) {
    if (!s || !s->cuda) return;
    vt_cuda *c = (vt_cuda *)s->cuda;
    cu_ctx_release(c);
    free(c);
    s->cuda = NULL;
}

extern "C" int vt_cuda_session_forward(vt_session *s, const int32_t *tokens, int64_t T, int reset, float *logits,
                                       char *errbuf, size_t errlen) {
    vt_err e = {};
    vt_cuda *c = (vt_cuda *)s->cuda;
    if (!c) {
        snprintf(errbuf, errlen, "cuda: session has no device state");
        return VT_STATUS_INTERNAL;
    }
    /* forward.c's rules for a CPU session: a decode after a failed forward is refused */
    if (!reset && s->stale) {
        snprintf(errbuf, errlen, "decode: an earlier forward of this session failed midway; prefill again first");
        return VT_STATUS_INPUT;
    }
    /* only a prefill captures; a decode keeps the prefill's capture (cu_forward reads s->capture) */
    const int capture = s->capture;
    if (!reset) s->capture = 0;
    int rc = reset ? cu_ctx_reset(c, &e) : VT_OK;
    if (!rc) rc = cu_forward(c, tokens, T, logits != NULL, logits, &e);
    s->capture = capture;
    s->pos = c->pos;
    s->stale = rc != VT_OK;   /* caches may be half-updated until the next prefill */
    return rc ? ret_err(&e, rc, errbuf, errlen) : VT_OK;
}

extern "C" int vt_cuda_moe_layer(vt_session *s, int layer, const float *x, int64_t N, float *out,
                                 struct vt_moe_trace *trace, char *errbuf, size_t errlen) {
    vt_err e = {};
    vt_err *err = &e;
    vt_cuda *c = (vt_cuda *)s->cuda;
    if (!c) {
        snprintf(errbuf, errlen, "cuda: session has no device state");
        return VT_STATUS_INTERNAL;
    }
    if (layer < 0 || layer >= c->cfg->num_hidden_layers || !c->w->layers[layer].moe) {
        snprintf(errbuf, errlen, "cuda: layer %d has no MoE block", layer);
        return VT_STATUS_INPUT;
    }
    const int64_t D = c->cfg->hidden_size;
    int rc = VT_OK;
    float *xd = (float *)cu_scratch(c, S_X, vt_row_size(VT_F32, N * D), err);
    float *od = xd ? (float *)cu_scratch(c, S_O, vt_row_size(VT_F32, N * D), err) : NULL;
    if (!xd || !od) return ret_err(&e, e.code ? e.code : VT_STATUS_INTERNAL, errbuf, errlen);
    cudaError_t ce = cudaMemcpy(xd, x, vt_row_size(VT_F32, N * D), cudaMemcpyHostToDevice);
    if (ce != cudaSuccess) rc = vt_errf(err, VT_EINTERNAL, "cuda: %s", cudaGetErrorString(ce));
    if (!rc) rc = cu_moe_forward(c, layer, xd, N, od, trace, err);
    if (!rc) {
        ce = cudaMemcpy(out, od, vt_row_size(VT_F32, N * D), cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess) rc = vt_errf(err, VT_EINTERNAL, "cuda: %s", cudaGetErrorString(ce));
    }
    return rc ? ret_err(&e, rc, errbuf, errlen) : VT_OK;
}
