/*
 * forward.c — opening a model and running it: the decoder loop, the residual
 * stream, sessions, prefill and decode.
 *
 * The residual stream h is a vt_tensor in the stream dtype (f32, or bf16 with
 * VT_KIMI_BF16_STREAM). Each sublayer reads h widened to f32, computes in f32,
 * and stores h + out back in the stream dtype: with a bf16 stream that store
 * is the rounding under test. After each layer the `residual.stream` probe
 * records the dtype h really had. A scoped lever (VT_KIMI_BF16_*_LAYERS,
 * docs/localize.md) acts at some sites only: each store has its site's
 * dtype, and vt_site_enter says what the code of a site rounds.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "backend.h"
#include "kda_chunk.h"
#include "model.h"

/* ------------------------------------------------------------------ loading */

/* The checkpoint tensor `name`, checked to hold exactly the elements of shape
 * shp (shapes were validated against the config already; reshape only). */
static const vt_st_entry *entry_of(const vt_ckpt *ck, const char *name, int ndim, const int64_t *shp, vt_err *err) {
    const vt_st_entry *e = vt_ckpt_find(ck, name);
    if (!e) {
        vt_errf(err, VT_EINPUT, "tensor %s: missing", name);
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shp[i];
    if (!vt_dtype_traits_of(e->dtype) || !vt_dtype_traits_of(e->dtype)->is_float) {
        vt_errf(err, VT_EINPUT, "%s: tensor %s: dtype %s is not a float type", vt_ckpt_file_name(ck, e->file), name,
                vt_dtype_name(e->dtype));
        return NULL;
    }
    if ((int64_t)vt_ckpt_nbytes(ck, e) != (int64_t)vt_row_size(e->dtype, n)) {
        vt_errf(err, VT_EINPUT, "%s: tensor %s: %zu bytes, expected %zu", vt_ckpt_file_name(ck, e->file), name,
                vt_ckpt_nbytes(ck, e), vt_row_size(e->dtype, n));
        return NULL;
    }
    return e;
}

/* Copies a small checkpoint tensor (norm weights, biases, conv kernels) into
 * an owned f32 tensor: widening is exact and these are read element-wise. */
static int load_f32(const vt_ckpt *ck, const char *name, vt_tensor *t, int ndim, const int64_t *shp, vt_err *err) {
    const vt_st_entry *e = entry_of(ck, name, ndim, shp, err);
    if (!e) return err->code;
    int rc = vt_tensor_alloc(t, VT_F32, ndim, shp, err);
    if (rc) return rc;
    vt_convert(t->data, VT_F32, e->data, e->dtype, (size_t)vt_tensor_nelem(t));
    return VT_OK;
}

/* A matrix weight stays where it is, in the checkpoint's dtype: a view into
 * the mapped file (the GEMMs widen bf16/f16 inside the kernel), so opening a
 * model copies nothing and its resident size is what the forward touches. */
static int load_view(const vt_ckpt *ck, const char *name, vt_tensor *t, int ndim, const int64_t *shp, vt_err *err) {
    const vt_st_entry *e = entry_of(ck, name, ndim, shp, err);
    if (!e) return err->code;
    return vt_tensor_view(t, e->dtype, ndim, shp, (void *)e->data, vt_ckpt_nbytes(ck, e), err);
}

#define LOAD1(T, NAME, A)        do { int64_t s_[1] = {A}; if ((rc = load_f32(ck, NAME, T, 1, s_, err))) return rc; } while (0)
#define LOAD2F(T, NAME, A, B)    do { int64_t s_[2] = {A, B}; if ((rc = load_f32(ck, NAME, T, 2, s_, err))) return rc; } while (0)
#define LOAD2(T, NAME, A, B)     do { int64_t s_[2] = {A, B}; if ((rc = load_view(ck, NAME, T, 2, s_, err))) return rc; } while (0)

static int load_swiglu(const vt_ckpt *ck, const char *pfx, const char *g, const char *u, const char *dn,
                       int64_t inter, int64_t D, vt_swiglu_w *w, vt_err *err) {
    char n[256];
    int rc;
    snprintf(n, sizeof n, "%s.%s.weight", pfx, g);  LOAD2(&w->gate, n, inter, D);
    snprintf(n, sizeof n, "%s.%s.weight", pfx, u);  LOAD2(&w->up, n, inter, D);
    snprintf(n, sizeof n, "%s.%s.weight", pfx, dn); LOAD2(&w->down, n, D, inter);
    return VT_OK;
}

static int load_layer(const vt_config *cfg, const vt_ckpt *ck, int64_t i, vt_layer_w *L, vt_err *err) {
    const int64_t D = cfg->hidden_size;
    char n[256], p[128];
    int rc;
    snprintf(p, sizeof p, "model.layers.%lld", (long long)i);
    L->kind = cfg->layer_kind[i];
    snprintf(n, sizeof n, "%s.input_layernorm.weight", p);          LOAD1(&L->in_norm, n, D);
    snprintf(n, sizeof n, "%s.post_attention_layernorm.weight", p); LOAD1(&L->post_norm, n, D);
    if (L->kind == VT_LAYER_KDA) {
        const int64_t H = cfg->kda_num_heads, d = cfg->kda_head_dim, P = H * d, K = cfg->short_conv_kernel_size;
        vt_kda_w *w = &L->kda;
        snprintf(n, sizeof n, "%s.self_attn.q_proj.weight", p);   LOAD2(&w->q, n, P, D);
        snprintf(n, sizeof n, "%s.self_attn.k_proj.weight", p);   LOAD2(&w->k, n, P, D);
        snprintf(n, sizeof n, "%s.self_attn.v_proj.weight", p);   LOAD2(&w->v, n, P, D);
        snprintf(n, sizeof n, "%s.self_attn.q_conv1d.weight", p); LOAD2F(&w->qc, n, P, K);
        snprintf(n, sizeof n, "%s.self_attn.k_conv1d.weight", p); LOAD2F(&w->kc, n, P, K);
        snprintf(n, sizeof n, "%s.self_attn.v_conv1d.weight", p); LOAD2F(&w->vc, n, P, K);
        snprintf(n, sizeof n, "%s.self_attn.A_log", p);           LOAD1(&w->A_log, n, H);
        snprintf(n, sizeof n, "%s.self_attn.dt_bias", p);         LOAD1(&w->dt_bias, n, P);
        snprintf(n, sizeof n, "%s.self_attn.f_a_proj.weight", p); LOAD2(&w->fa, n, d, D);
        snprintf(n, sizeof n, "%s.self_attn.f_b_proj.weight", p); LOAD2(&w->fb, n, P, d);
        snprintf(n, sizeof n, "%s.self_attn.b_proj.weight", p);   LOAD2(&w->b, n, H, D);
        snprintf(n, sizeof n, "%s.self_attn.g_a_proj.weight", p); LOAD2(&w->ga, n, d, D);
        snprintf(n, sizeof n, "%s.self_attn.g_b_proj.weight", p); LOAD2(&w->gb, n, P, d);
        snprintf(n, sizeof n, "%s.self_attn.o_norm.weight", p);   LOAD1(&w->onorm, n, d);
        snprintf(n, sizeof n, "%s.self_attn.o_proj.weight", p);   LOAD2(&w->o, n, D, P);
    } else {
        const int64_t Nh = cfg->num_attention_heads, qk = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
        const int64_t r = cfg->kv_lora_rank, rope = cfg->qk_rope_head_dim;
        vt_mla_w *w = &L->mla;
        snprintf(n, sizeof n, "%s.self_attn.q_proj.weight", p);             LOAD2(&w->q, n, Nh * qk, D);
        snprintf(n, sizeof n, "%s.self_attn.kv_a_proj_with_mqa.weight", p); LOAD2(&w->kva, n, r + rope, D);
        snprintf(n, sizeof n, "%s.self_attn.kv_a_layernorm.weight", p);     LOAD1(&w->kvnorm, n, r);
        snprintf(n, sizeof n, "%s.self_attn.kv_b_proj.weight", p);
        LOAD2(&w->kvb, n, Nh * (cfg->qk_nope_head_dim + cfg->v_head_dim), r);
        snprintf(n, sizeof n, "%s.self_attn.o_proj.weight", p);             LOAD2(&w->o, n, D, Nh * cfg->v_head_dim);
    }
    vt_ffn_w *f = &L->ffn;
    f->moe = vt_config_layer_is_moe(cfg, i);
    if (!f->moe) {
        snprintf(n, sizeof n, "%s.mlp", p);
        return load_swiglu(ck, n, "gate_proj", "up_proj", "down_proj", cfg->intermediate_size, D, &f->dense, err);
    }
    const int64_t E = cfg->num_experts, Im = cfg->moe_intermediate_size;
    snprintf(n, sizeof n, "%s.block_sparse_moe.gate.weight", p);                LOAD2(&f->router, n, E, D);
    snprintf(n, sizeof n, "%s.block_sparse_moe.gate.e_score_correction_bias", p); LOAD1(&f->router_bias, n, E);
    f->experts = calloc((size_t)E, sizeof *f->experts);
    if (!f->experts) return vt_errf(err, VT_ENOMEM, "out of memory loading experts");
    for (int64_t e = 0; e < E; e++) {
        snprintf(n, sizeof n, "%s.block_sparse_moe.experts.%lld", p, (long long)e);
        if ((rc = load_swiglu(ck, n, "w1", "w3", "w2", Im, D, &f->experts[e], err))) return rc;
    }
    f->has_shared = cfg->num_shared_experts > 0;
    if (f->has_shared) {
        snprintf(n, sizeof n, "%s.block_sparse_moe.shared_experts", p);
        return load_swiglu(ck, n, "gate_proj", "up_proj", "down_proj", Im * cfg->num_shared_experts, D, &f->shared, err);
    }
    return VT_OK;
}

static void free_swiglu(vt_swiglu_w *w) {
    vt_tensor_free(&w->gate); vt_tensor_free(&w->up); vt_tensor_free(&w->down);
}

void vt_model_free(vt_model *m) {
    if (!m) return;
    for (int64_t i = 0; m->layers && i < m->cfg.num_hidden_layers; i++) {
        vt_layer_w *L = &m->layers[i];
        vt_tensor *ts[] = {&L->in_norm, &L->post_norm, &L->kda.q, &L->kda.k, &L->kda.v, &L->kda.qc, &L->kda.kc,
                           &L->kda.vc, &L->kda.A_log, &L->kda.dt_bias, &L->kda.fa, &L->kda.fb, &L->kda.b,
                           &L->kda.ga, &L->kda.gb, &L->kda.onorm, &L->kda.o, &L->mla.q, &L->mla.kva,
                           &L->mla.kvnorm, &L->mla.kvb, &L->mla.o, &L->ffn.router, &L->ffn.router_bias};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) vt_tensor_free(ts[j]);
        free_swiglu(&L->ffn.dense);
        free_swiglu(&L->ffn.shared);
        if (L->ffn.experts)
            for (int64_t e = 0; e < m->cfg.num_experts; e++) free_swiglu(&L->ffn.experts[e]);
        free(L->ffn.experts);
    }
    free(m->layers);
    vt_cuda_model_free(m);     /* CUDA backend (issue 7): device weights, if any session made them */
    vt_tensor_free(&m->embed);
    vt_tensor_free(&m->norm);
    vt_tensor_free(&m->lm_head);
    vt_ckpt_close(m->ck);
    free(m);
}

/* VTLAB_WEIGHTS: how the weights are held.
 *   panel (the default): read into anonymous memory (vt_ckpt_load) and every
 *         matrix a GEMM reads rearranged there, in place, into panels
 *         (tensor.h): the kernels then read W as they want it, with no
 *         transpose. The same bytes, the same RSS as the checkpoint.
 *   map:  the checkpoint's mapped pages, zero-copy, rows as in the file.
 *   load: read into anonymous memory, rows as in the file.
 * The bits of every result are the same in all three (gemm.h). */
typedef enum { WEIGHTS_PANEL = 0, WEIGHTS_MAP, WEIGHTS_LOAD } weights_mode_t;

static int weights_mode(weights_mode_t *mode, vt_err *err) {
    const char *v = getenv("VTLAB_WEIGHTS");
    *mode = WEIGHTS_PANEL;
    if (!v || !*v || !strcmp(v, "panel")) return VT_OK;
    if (!strcmp(v, "map")) *mode = WEIGHTS_MAP;
    else if (!strcmp(v, "load")) *mode = WEIGHTS_LOAD;
    else return vt_errf(err, VT_EINPUT, "VTLAB_WEIGHTS=%s: expected panel (the default), map or load", v);
    return VT_OK;
}

/* Every matrix the GEMMs read as W (gemm.h), each once; the embedding is
 * gathered by rows and is not one of them. Returns the count (up to max). */
static int64_t model_matrices(vt_model *m, vt_tensor **out, int64_t max) {
    int64_t n = 0;
#define ADD(T) do { if (n < max) out[n] = (T); n++; } while (0)
    ADD(&m->lm_head);
    for (int64_t i = 0; i < m->cfg.num_hidden_layers; i++) {
        vt_layer_w *L = &m->layers[i];
        vt_tensor *ts[] = {&L->kda.q, &L->kda.k, &L->kda.v, &L->kda.fa, &L->kda.fb, &L->kda.b, &L->kda.ga, &L->kda.gb,
                           &L->kda.o, &L->mla.q, &L->mla.kva, &L->mla.kvb, &L->mla.o, &L->ffn.router};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            if (ts[j]->data) ADD(ts[j]);
        vt_swiglu_w *sw[2] = {&L->ffn.dense, &L->ffn.shared};
        for (int j = 0; j < 2; j++)
            if (sw[j]->gate.data) { ADD(&sw[j]->gate); ADD(&sw[j]->up); ADD(&sw[j]->down); }
        for (int64_t e = 0; L->ffn.experts && e < m->cfg.num_experts; e++) {
            ADD(&L->ffn.experts[e].gate); ADD(&L->ffn.experts[e].up); ADD(&L->ffn.experts[e].down);
        }
    }
#undef ADD
    return n;
}

/* WEIGHTS_PANEL: the matrices into panels, in the loaded (anonymous) bytes. */
static int panelize_model(vt_model *m, vt_ckpt *ck, vt_err *err) {
    const int64_t n = model_matrices(m, NULL, 0);
    vt_tensor **ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    if (!ts) return vt_errf(err, VT_ENOMEM, "out of memory");
    model_matrices(m, ts, n);
    int rc = vt_ckpt_set_writable(ck, 1, err);
    for (int64_t i = 0; !rc && i < n; i++) rc = vt_tensor_panelize(ts[i], err);
    if (!rc) rc = vt_ckpt_set_writable(ck, 0, err);
    free(ts);
    return rc;
}

static int model_open(vt_model **out, const char *dir, vt_err *err) {
    char path[4200];
    weights_mode_t mode = WEIGHTS_PANEL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    vt_model *m = calloc(1, sizeof *m);
    if (!m) return vt_errf(err, VT_ENOMEM, "out of memory");
    vt_ckpt *ck = NULL;
    int rc = vt_config_load(path, &m->cfg, err);
    if (!rc) rc = weights_mode(&mode, err);
    if (!rc) rc = vt_ckpt_open(dir, &ck, err);
    if (!rc) rc = vt_ckpt_validate(&m->cfg, ck, err);
    if (!rc && mode != WEIGHTS_MAP) rc = vt_ckpt_load(ck, err);
    if (rc) goto fail;
    const vt_config *cfg = &m->cfg;
    const vt_st_entry *emb = vt_ckpt_find(ck, "model.embed_tokens.weight");
    m->weight_dtype = emb->dtype;
    {
        int64_t V = cfg->vocab_size, D = cfg->hidden_size;
        int64_t s2[2] = {V, D}, s1[1] = {D};
        if ((rc = load_view(ck, "model.embed_tokens.weight", &m->embed, 2, s2, err))) goto fail;
        if ((rc = load_f32(ck, "model.norm.weight", &m->norm, 1, s1, err))) goto fail;
        if ((rc = load_view(ck, "lm_head.weight", &m->lm_head, 2, s2, err))) goto fail;
    }
    m->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) { rc = vt_errf(err, VT_ENOMEM, "out of memory"); goto fail; }
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        if ((rc = load_layer(cfg, ck, i, &m->layers[i], err))) goto fail;
    if (mode == WEIGHTS_PANEL && (rc = panelize_model(m, ck, err))) goto fail;
    m->ck = ck;   /* the views above point into its mappings */
    *out = m;
    return VT_OK;
fail:
    vt_ckpt_close(ck);
    vt_model_free(m);
    return rc;
}

static int ret_err(const vt_err *e, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s", e->msg);
    return e->code ? e->code : VT_STATUS_INTERNAL;
}

int vt_model_open(vt_model **out, const char *dir, char *err, size_t errlen) {
    vt_err e = {0};
    int rc = model_open(out, dir, &e);
    return rc ? ret_err(&e, err, errlen) : VT_OK;
}

static void info_of(const vt_config *cfg, vt_dtype weight_dtype, vt_model_info *info) {
    memset(info, 0, sizeof *info);
    info->vocab_size = cfg->vocab_size;
    info->hidden_size = cfg->hidden_size;
    info->n_layers = cfg->num_hidden_layers;
    info->n_moe_layers = vt_config_n_moe_layers(cfg);
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {   /* at most VT_MODEL_MAX_LAYERS (config.c) */
        info->layer_kind[i] = cfg->layer_kind[i] == VT_LAYER_KDA ? 'K' : 'M';
        info->layer_ffn[i] = vt_config_layer_is_moe(cfg, i) ? 'E' : 'D';
    }
    snprintf(info->weight_dtype, sizeof info->weight_dtype, "%s", vt_dtype_name(weight_dtype));
}

void vt_model_get_info(const vt_model *m, vt_model_info *info) { info_of(&m->cfg, m->weight_dtype, info); }

/* What vt_model_open checks, from the config and the safetensors headers
 * (and the shard index) alone: the files are mapped, never read, so a
 * checkpoint of any size validates in flat memory. */
int vt_model_validate(const char *dir, vt_model_info *info, char *err, size_t errlen) {
    vt_err e = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    vt_config *cfg = calloc(1, sizeof *cfg);
    vt_ckpt *ck = NULL;
    int rc = cfg ? vt_config_load(path, cfg, &e) : vt_errf(&e, VT_ENOMEM, "out of memory");
    if (!rc) rc = vt_ckpt_open(dir, &ck, &e);
    if (!rc) rc = vt_ckpt_validate(cfg, ck, &e);
    if (!rc) info_of(cfg, vt_ckpt_find(ck, "model.embed_tokens.weight")->dtype, info);
    vt_ckpt_close(ck);
    free(cfg);
    return rc ? ret_err(&e, err, errlen) : VT_OK;
}

/* ------------------------------------------------------------------ sessions */

static void reset_caches(vt_session *s) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t P = cfg->kda_num_heads * cfg->kda_head_dim, d = cfg->kda_head_dim, K = cfg->short_conv_kernel_size;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        vt_layer_cache *c = &s->cache[i];
        if (c->conv) memset(c->conv, 0, vt_row_size(VT_F32, 3 * (K - 1) * P));
        if (c->state) memset(c->state, 0, vt_row_size(VT_F32, cfg->kda_num_heads * d * d));
    }
    s->pos = 0;
}

/* VTLAB_PREFILL_PIECE: the tokens per piece of a long prefill (forward_pass);
 * 0: one pass. A prefill of T >= 2 pieces runs as pieces of this length, the
 * last one taking the rest (one to two pieces). The pieces keep every bit of
 * one pass when
 *   - each starts where the delta rule starts a chunk and attention a query
 *     block (kda_chunk.h, attn.h): the length is rounded up to a multiple of
 *     both, and the chunked KDA form serves every piece (no piece is shorter
 *     than a chunk), carrying its state across pieces as across chunks;
 *   - no piece's attention is split over keys: the length is at least
 *     vt_attn_piece_quantum(heads);
 *   - every other step is per token (norms, gates, the router, the experts) or
 *     a product whose rows do not change each other's bits (gemm.h);
 *   - no fault is replayed: a replayed defect's scrambled copy depends on the
 *     extent of the buffers (faults.c), so a replay keeps to one pass.
 * tests/unit/test_forward.c checks the bits. The default, 512, was the
 * fastest of 256/512/1024 for a 4096-token prefill of the 288M model. */
enum { PIECE_DEFAULT = 512, PIECE_MAX = 1 << 20 };

/* The token count in environment variable name (def when unset or empty);
 * anything but 0 .. max is bad input naming the variable and what `zero` means. */
static int env_count(const char *name, int64_t def, int64_t max, const char *zero, int64_t *out, char *err,
                     size_t errlen) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return VT_OK;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (*end || n < 0 || n > max) {
        snprintf(err, errlen, "%s=%s: expected a token count from 0 (%s) to %lld", name, v, zero, (long long)max);
        return VT_STATUS_INPUT;
    }
    *out = n;
    return VT_OK;
}

static int prefill_piece(const vt_model *m, const vt_knobs *k, int64_t *piece, char *err, size_t errlen) {
    int64_t want;
    int rc = env_count("VTLAB_PREFILL_PIECE", PIECE_DEFAULT, PIECE_MAX, "one pass", &want, err, errlen);
    if (rc) return rc;
    *piece = 0;
    if (want == 0 || k->fault != VT_FAULT_NONE) return VT_OK;
    const int64_t q = vt_attn_piece_quantum(m->cfg.num_attention_heads);
    int64_t unit = q;
    while (unit % VT_KDA_CHUNK) unit += q;   /* a multiple of both */
#ifndef VT_MUTATE_PIECE_UNROUNDED   /* make mutation: pieces of any length; test_forward must fail */
    *piece = (want + unit - 1) / unit * unit;
#else
    *piece = want;
#endif
    return VT_OK;
}

/* VTLAB_BATCH_ROWS: the most rows (tokens) of a pack, the passes of
 * vt_session_prefill_batch: several whole sequences in one pass through the
 * stack, each from an empty state, with the same bits as one forward each
 * (vt_segs in model.h). A pass's products then stream each weight once for
 * the pack instead of once per sequence, and a MoE expert gets the rows of
 * all of them: the 288M model's 32-token sequences run at its T = 256 rate
 * (bf16-stream design, 48 x 32 tokens, 4 runs, 1 thread: 10.8 -> 8.7 s of
 * CPU, interleaved runs). 512 measured no faster than 256 there. 0: one
 * sequence per pass. */
enum { BATCH_ROWS_DEFAULT = 256, BATCH_ROWS_MAX = 1 << 20 };

int vt_session_new(vt_session **out, vt_model *m, const vt_knobset *ks, char *err, size_t errlen) {
    vt_session *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return VT_STATUS_NOMEM; }
    s->m = m;
    if (vt_knobset_copy(&s->ks, ks) != 0) { free(s); snprintf(err, errlen, "out of memory"); return VT_STATUS_NOMEM; }
    vt_knobs_resolve(ks, &s->k);
    int lrc = vt_knobs_check_layers(ks, m->cfg.num_hidden_layers, err, errlen);
    if (!lrc && s->k.backend == VT_BACKEND_CUDA && vt_knobs_scoped(ks)) {
        snprintf(err, errlen, "the CUDA backend runs every lever unscoped: VT_KIMI_BF16_*_LAYERS and "
                 "VT_TEST_LOSSY_LAYERS are CPU only (docs/localize.md)");
        lrc = VT_STATUS_UNSUPPORTED;
    }
    if (lrc) {
        vt_session_free(s);
        return lrc;
    }
    if (s->k.backend == VT_BACKEND_CUDA) {
        /* CUDA backend (issue 7, model/cuda): the device holds the caches; s->cache stays NULL */
        s->stream_dtype = s->k.bf16_stream ? VT_BF16 : VT_F32;
        s->expert_dtype = s->k.bf16_expert_out ? s->stream_dtype : VT_F32;
        int rc = vt_cuda_probe_device(err, errlen);
        if (rc == VT_OK) rc = vt_cuda_session_open(s, err, errlen);
        if (rc) {
            vt_session_free(s);
            return rc;
        }
        *out = s;
        return VT_OK;
    }
    int prc = prefill_piece(m, &s->k, &s->piece, err, errlen);
    if (!prc)
        prc = env_count("VTLAB_BATCH_ROWS", BATCH_ROWS_DEFAULT, BATCH_ROWS_MAX, "one sequence per pass",
                        &s->batch_rows, err, errlen);
    if (prc) {
        vt_session_free(s);
        return prc;
    }
    /* one thread pool: OpenMP's, sized by VT_THREADS (gemm.c runs every product);
     * on a busy host a pass, decode step or prefill, may run on one thread
     * (team.h: the governor learns each kind apart) */
    vt_team_init(&s->team, s->k.threads > 0 ? s->k.threads : vt_team_default_threads());
    s->stream_dtype = s->k.bf16_stream ? VT_BF16 : VT_F32;
    s->expert_dtype = s->k.bf16_expert_out ? s->stream_dtype : VT_F32;
    const vt_config *cfg = &m->cfg;
    const int64_t P = cfg->kda_num_heads * cfg->kda_head_dim, d = cfg->kda_head_dim, K = cfg->short_conv_kernel_size;
    s->cache = calloc((size_t)cfg->num_hidden_layers, sizeof *s->cache);
    if (!s->cache) goto nomem;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        if (cfg->layer_kind[i] != VT_LAYER_KDA) continue;
        s->cache[i].conv = calloc((size_t)(3 * (K - 1) * P) + 1, vt_dtype_size(VT_F32));
        s->cache[i].state = calloc((size_t)(cfg->kda_num_heads * d * d), vt_dtype_size(VT_F32));
        if (!s->cache[i].conv || !s->cache[i].state) goto nomem;
    }
    *out = s;
    return VT_OK;
nomem:
    vt_session_free(s);
    snprintf(err, errlen, "out of memory creating a session");
    return VT_STATUS_NOMEM;
}

void vt_session_free(vt_session *s) {
    if (!s) return;
    vt_cuda_session_free(s);   /* CUDA backend (issue 7): no-op for a CPU session */
    for (int64_t i = 0; s->cache && i < s->m->cfg.num_hidden_layers; i++) {
        free(s->cache[i].conv); free(s->cache[i].state); free(s->cache[i].kc); free(s->cache[i].vc);
    }
    free(s->cache);
    vtp_probes_free(&s->probes);
    vt_ws_free(s);
    free(s->captured);
    free(s->batch_off);
    vt_knobset_free(s->ks);
    free(s);
}

void vt_session_capture(vt_session *s, int on) { s->capture = on; }

const float *vt_session_residual(const vt_session *s, int64_t layer, int site, int64_t *T) {
    if (!s->captured || layer < 0 || layer >= s->m->cfg.num_hidden_layers || site < 0 || site > 1) return NULL;
    if (T) *T = s->captured_T;
    return s->captured + (layer * 2 + site) * s->captured_T * s->m->cfg.hidden_size;
}

const float *vt_session_residual_seq(const vt_session *s, int64_t i, int64_t layer, int site, int64_t *T) {
    if (s->batch_n == 0) return i == 0 ? vt_session_residual(s, layer, site, T) : NULL;
    const float *all = i >= 0 && i < s->batch_n ? vt_session_residual(s, layer, site, NULL) : NULL;
    if (!all) return NULL;
    if (T) *T = s->batch_off[i + 1] - s->batch_off[i];
    return all + s->batch_off[i] * s->m->cfg.hidden_size;
}

int64_t vt_session_batch_rows(const vt_session *s) { return s->cuda ? 0 : s->batch_rows; }

double vt_session_forward_seconds(const vt_session *s) { return s->fwd_sec; }
double vt_session_gemm_seconds(const vt_session *s) { return s->gemm_sec; }

/* Stores the rows hr[0..D) into row sr of stream h and reads back what was
 * stored (the rounding under test); the planted fault (VT_TEST_LOSSY_LAYERS)
 * coarsens a bf16 store first. */
static void stream_store(const vt_session *s, const vt_tensor *h, void *sr, float *hr, int64_t D) {
    if (h->dtype != VT_F32 && s->lossy_cur)
        for (int64_t i = 0; i < D; i++) hr[i] = vt_round_mantissa(hr[i], s->k.lossy_bits);
    vt_convert(sr, h->dtype, hr, VT_F32, (size_t)D);
    if (h->dtype != VT_F32) vt_convert(hr, VT_F32, sr, h->dtype, (size_t)D);   /* read back the rounding */
}

/* h <- h + o, in the stream dtype; hf receives the stored value widened to f32. */
static void residual_add(vt_session *s, vt_tensor *h, float *hf, const float *o, int64_t T, int64_t D) {
    #pragma omp parallel for schedule(static) if (T * D >= VT_PAR_MIN_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        float *hr = hf + t * D;
        #pragma omp simd   /* hf and o never overlap; one add per element either way */
        for (int64_t i = 0; i < D; i++) hr[i] += o[t * D + i];
        vt_act_round(s, hr, D);
        stream_store(s, h, vt_tensor_row(h, t), hr, D);
    }
}

/* h: the stream buffer hbuf (room for f32 rows) as the store of site of
 * layer sees it: f32, or bf16 where VT_KIMI_BF16_STREAM acts. The stream is
 * written and read back at once, so each store may have its own dtype. */
static int stream_at(const vt_session *s, int64_t layer, int site, void *hbuf, int64_t T, vt_tensor *h, vt_err *err) {
    const int64_t D = s->m->cfg.hidden_size, shp[2] = {T, D};
    return vt_tensor_view(h, vt_stream_dtype_at(s, layer, site), 2, shp, hbuf, vt_row_size(VT_F32, T * D), err);
}

/* One pass of T tokens through the whole stack, from the caches at s->pos.
 * Capture rows go to row c0 of the capture (s->captured_T rows per site). */
static int stack_pass(vt_session *s, const int32_t *tok, int64_t T, float *logits, int capture, int64_t c0,
                      vt_err *err) {
    const vt_model *m = s->m;
    const vt_config *cfg = &m->cfg;
    const int64_t D = cfg->hidden_size, V = cfg->vocab_size, L = cfg->num_hidden_layers;
    vt_tensor h = {0};
    vt_ws_reset(s);
    int rc = VT_OK;
    void *hbuf = vt_ws_alloc(s, VT_F32, T * D, err);   /* room for the widest store */
    float *hf = vt_ws_alloc(s, VT_F32, T * D, err), *x = vt_ws_alloc(s, VT_F32, T * D, err);
    float *o = vt_ws_alloc(s, VT_F32, T * D, err);
    if (!hbuf || !hf || !x || !o) { rc = err->code; goto done; }

    /* the embedding is stored by layer 0's attention site (docs/localize.md) */
    vt_site_enter(s, 0, 0);
    if ((rc = stream_at(s, 0, 0, hbuf, T, &h, err))) goto done;
    for (int64_t t = 0; t < T; t++) vt_convert(hf + t * D, VT_F32, vt_tensor_row(&m->embed, tok[t]), m->embed.dtype, (size_t)D);
    vt_act_round(s, hf, T * D);
    for (int64_t t = 0; t < T; t++) stream_store(s, &h, vt_tensor_row(&h, t), hf + t * D, D);

    for (int64_t l = 0; l < L; l++) {
        const vt_layer_w *Lw = &m->layers[l];
        vt_site_enter(s, l, 0);
        if ((rc = stream_at(s, l, 0, hbuf, T, &h, err))) goto done;
        vt_rmsnorm(s, hf, T, D, Lw->in_norm.data, cfg->rms_norm_eps, x);
        rc = Lw->kind == VT_LAYER_KDA ? vt_kda_forward(s, (int)l, x, T, o, err) : vt_mla_forward(s, (int)l, x, T, o, err);
        if (rc) goto done;
        residual_add(s, &h, hf, o, T, D);
        if (capture) memcpy(s->captured + ((l * 2 + 0) * s->captured_T + c0) * D, hf, vt_row_size(VT_F32, T * D));

        vt_site_enter(s, l, 1);
        if ((rc = stream_at(s, l, 1, hbuf, T, &h, err))) goto done;
        vt_rmsnorm(s, hf, T, D, Lw->post_norm.data, cfg->rms_norm_eps, x);
        rc = Lw->ffn.moe ? vt_moe_forward(s, (int)l, &Lw->ffn, x, T, o, NULL, err)
                         : vt_mlp_forward(s, (int)l, &Lw->ffn.dense, x, T, o, err);
        if (rc) goto done;
        residual_add(s, &h, hf, o, T, D);
        if (capture) memcpy(s->captured + ((l * 2 + 1) * s->captured_T + c0) * D, hf, vt_row_size(VT_F32, T * D));
        vt_probe_buffer_seqs(s, "residual.stream", (int)l, h.dtype, T, 1, D);
    }
    s->pos += T;
    if (logits) {   /* the final norm and the logits: the last layer's FFN site (still entered) */
        vt_rmsnorm(s, hf, T, D, m->norm.data, cfg->rms_norm_eps, x);
        vt_gemm_xwT(s, x, T, D, &m->lm_head, logits);
        vt_probe_buffer_seqs(s, "logits", -1, VT_F32, T, 1, V);
    }
done:
    vt_ws_release(s, (vt_ws_mark){0, 0});
    return rc;
}

/* The tokens of the first piece of a prefill that starts at c0 of T (see
 * prefill_piece): the rest when fewer than two pieces are left, so that no
 * piece is shorter than s->piece. */
static int64_t piece_len(const vt_session *s, int64_t c0, int64_t T) {
    const int64_t left = T - c0;
    return s->piece > 0 && left >= 2 * s->piece ? s->piece : left;
}

/* A forward of T tokens. A long prefill runs as pieces of s->piece tokens,
 * each through the whole stack before the next (the caches carry the
 * earlier pieces, as between a prefill and its decode steps): the
 * activations of a piece stay in the caches where those of 4096 tokens (16
 * MB per buffer at 1024 wide) went to memory between every two passes over
 * them. Same bits as one pass (prefill_piece says why). */
static int forward_pass(vt_session *s, const int32_t *tok, int64_t T, float *logits, int capture, int64_t cap0,
                        vt_err *err) {
    const int64_t V = s->m->cfg.vocab_size;
    if (s->seg.n > 0) return stack_pass(s, tok, T, logits, capture, cap0, err);   /* a pack: no pieces (pack_end) */
    int rc = VT_OK;
    for (int64_t c0 = 0, n; !rc && c0 < T; c0 += n) {
        n = piece_len(s, c0, T);
        rc = stack_pass(s, tok + c0, n, logits ? logits + c0 * V : NULL, capture, cap0 + c0, err);
    }
    return rc;
}

/* The capture of a prefill or a batch of T rows in all: [L][2][T][D]. */
static int capture_alloc(vt_session *s, int64_t T, vt_err *err) {
    const int64_t D = s->m->cfg.hidden_size, L = s->m->cfg.num_hidden_layers;
    float *cap = realloc(s->captured, vt_row_size(VT_F32, L * 2 * T * D));
    if (!cap) return vt_errf(err, VT_ENOMEM, "forward: out of memory for capture");
    s->captured = cap;
    s->captured_T = T;
    return VT_OK;
}

typedef struct pass_args {
    vt_session *s;
    const int32_t *tok;
    int64_t T;
    float *logits;
    int capture;
    int64_t cap0;
    vt_err *err;
} pass_args;

static int pass_cb(void *p) {
    const pass_args *a = p;
    return forward_pass(a->s, a->tok, a->T, a->logits, a->capture, a->cap0, a->err);
}

/* A pass of T tokens (a sequence, or a pack: s->seg) on the session's team;
 * capture: its residuals go to rows cap0.. of the capture. */
static int forward(vt_session *s, const int32_t *tok, int64_t T, float *logits, int capture, int64_t cap0,
                   vt_err *err) {
    const int64_t V = s->m->cfg.vocab_size;
    for (int64_t t = 0; t < T; t++)
        if (tok[t] < 0 || tok[t] >= V)
            return vt_errf(err, VT_EINPUT, "token %d at position %lld is outside the vocabulary [0, %lld)",
                           tok[t], (long long)t, (long long)V);
    /* The OpenMP thread count is process-wide: set it for this session's call,
     * so that two sessions with different VT_THREADS never see each other's;
     * the governor (team.h) may choose one thread for this pass, a decode
     * step (T == 1) or a prefill or pack (T > 1), each kind learnt apart
     * (docs/architecture.md, "Threads under other tenants"). A decode
     * step on the team runs as one vt_gemm_step (gemm.h): the team waits for
     * its ~30 products spinning instead of sleeping between them. */
    const int n = vt_team_begin(&s->team, T);
    omp_set_num_threads(n);
    const double t_begin = omp_get_wtime();
    int rc;
    if (T == 1 && n > 1 && s->team.pool) {
        pass_args a = {s, tok, T, logits, capture, cap0, err};
        rc = vt_gemm_step(n, pass_cb, &a);
    } else rc = forward_pass(s, tok, T, logits, capture, cap0, err);
    vt_team_end(&s->team, omp_get_wtime() - t_begin);
    omp_set_num_threads(s->team.max);   /* callers see the session's count, not this pass's */
    return rc;
}

/* CUDA backend (issue 7): the same call on the device, timed the same way. */
static int cuda_forward(vt_session *s, const int32_t *tokens, int64_t T, int reset, float *logits, char *err,
                        size_t errlen) {
    double t0 = omp_get_wtime();
    int rc = vt_cuda_session_forward(s, tokens, T, reset, logits, err, errlen);
    s->fwd_sec += omp_get_wtime() - t0;
    return rc;
}

int vt_session_prefill(vt_session *s, const int32_t *tokens, int64_t T, float *logits, char *err, size_t errlen) {
    vt_err e = {0};
    if (T <= 0) { snprintf(err, errlen, "prefill: no tokens"); return VT_STATUS_INPUT; }
    if (s->cuda) return cuda_forward(s, tokens, T, 1, logits, err, errlen);   /* CUDA backend (issue 7) */
    reset_caches(s);
    s->packed = 0;
    s->batch_n = 0;
    double t0 = omp_get_wtime();
    int rc = s->capture ? capture_alloc(s, T, &e) : VT_OK;
    if (!rc) rc = forward(s, tokens, T, logits, s->capture, 0, &e);
    s->fwd_sec += omp_get_wtime() - t0;
    s->stale = rc != VT_OK;
    return rc ? ret_err(&e, err, errlen) : VT_OK;
}

/* The sequences [i, j) of a batch that run as one pass: as many as fit in
 * s->batch_rows rows, each one a prefill of its own runs in one pass (no
 * pieces: a pack is never cut). j = i + 1: sequence i runs alone. */
static int64_t pack_end(const vt_session *s, const int64_t *off, int64_t n, int64_t i) {
    int64_t j = i;
    while (j < n && off[j + 1] - off[i] <= s->batch_rows) {
        const int64_t T = off[j + 1] - off[j];
        if (piece_len(s, 0, T) < T) break;
        j++;
    }
    return j > i + 1 ? j : i + 1;
}

/* Keeps the batch's sequence offsets for vt_session_residual_seq. */
static int batch_keep(vt_session *s, int64_t n, const int64_t *off, vt_err *err) {
    if (n + 1 > s->batch_cap) {
        int64_t *b = realloc(s->batch_off, (size_t)(n + 1) * sizeof *b);
        if (!b) return vt_errf(err, VT_ENOMEM, "prefill batch: out of memory for the capture's offsets");
        s->batch_off = b;
        s->batch_cap = n + 1;
    }
    memcpy(s->batch_off, off, (size_t)(n + 1) * sizeof *off);
    s->batch_n = n;
    return VT_OK;
}

/* The passes of a batch: packs of whole sequences (pack_end), a sequence
 * that fits no pack alone (with its pieces); every pass from empty caches. */
static int batch_passes(vt_session *s, int64_t n, const int32_t *tokens, const int64_t *off, float *logits,
                        vt_err *err) {
    const int64_t V = s->m->cfg.vocab_size;
    int rc = VT_OK;
    for (int64_t i = 0, j; !rc && i < n; i = j) {
        j = pack_end(s, off, n, i);
        reset_caches(s);
        if (j > i + 1) s->seg = (vt_segs){j - i, off + i, off[i]};
        float *lg = logits ? logits + off[i] * V : NULL;
        rc = forward(s, tokens + off[i], off[j] - off[i], lg, s->capture, off[i], err);
        s->seg = (vt_segs){0};
    }
    return rc;
}

int vt_session_prefill_batch(vt_session *s, int64_t n, const int32_t *tokens, const int64_t *off, float *logits,
                             char *err, size_t errlen) {
    vt_err e = {0};
    if (n < 1 || !off || off[0] != 0) {
        snprintf(err, errlen, "prefill batch: expected n >= 1 sequences and offsets from 0");
        return VT_STATUS_INPUT;
    }
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] <= off[i]) {
            snprintf(err, errlen, "prefill batch: sequence %lld has no tokens", (long long)i);
            return VT_STATUS_INPUT;
        }
    if (s->cuda) {   /* CUDA backend (issue 7): one sequence per call, no captures kept across them */
        if (s->capture && n > 1) {
            snprintf(err, errlen, "prefill batch: the CUDA backend keeps one sequence's capture; batch 1");
            return VT_STATUS_UNSUPPORTED;
        }
        int rc = VT_OK;
        for (int64_t i = 0; !rc && i < n; i++)
            rc = cuda_forward(s, tokens + off[i], off[i + 1] - off[i], 1,
                              logits ? logits + off[i] * s->m->cfg.vocab_size : NULL, err, errlen);
        return rc;
    }
    double t0 = omp_get_wtime();
    int rc = s->capture ? capture_alloc(s, off[n], &e) : VT_OK;
    if (!rc && s->capture) rc = batch_keep(s, n, off, &e);
    if (!rc) rc = batch_passes(s, n, tokens, off, logits, &e);
    s->fwd_sec += omp_get_wtime() - t0;
    s->stale = rc != VT_OK;
    s->packed = n > 1;
    if (!s->capture) s->batch_n = 0;
    return rc ? ret_err(&e, err, errlen) : VT_OK;
}

int vt_session_decode(vt_session *s, int32_t token, float *logits, char *err, size_t errlen) {
    vt_err e = {0};
    if (s->cuda) return cuda_forward(s, &token, 1, 0, logits, err, errlen);   /* CUDA backend (issue 7) */
#ifndef VT_MUTATE_NO_STALE_GUARD   /* make mutation: the guard removed; tests/unit/test_oom.c must fail */
    if (s->stale) {
#else
    if (0) {
#endif
        snprintf(err, errlen, "decode: an earlier forward of this session failed midway; prefill again first");
        return VT_STATUS_INPUT;
    }
    if (s->packed) {   /* the caches hold the last pack's sequences, not one to continue */
        snprintf(err, errlen, "decode: the last forward was a batch of sequences; prefill one sequence first");
        return VT_STATUS_INPUT;
    }
    double t0 = omp_get_wtime();
    int rc = forward(s, &token, 1, logits, 0, 0, &e);
    s->fwd_sec += omp_get_wtime() - t0;
    s->stale = rc != VT_OK;
    return rc ? ret_err(&e, err, errlen) : VT_OK;
}
