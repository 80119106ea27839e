/*
 * mla.c — Multi-head Latent Attention without rotary embeddings (NoPE), as
 * Kimi-Linear's full-attention layers use it.
 *
 * The latent c = x·Wkv_aᵀ splits into c_kv (normed by kv_a_layernorm, then
 * expanded per head into k_nope and v) and k_rot, a few extra key dims shared
 * by all heads. No rotation is applied anywhere. The cache keeps the expanded
 * keys [Nh, nope+rope] and values [Nh, dv] of every position, so a call with
 * T new tokens attends over the cached positions plus its own, causally
 * (attn.c: blocked products, the same code for prefill and decode).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "model.h"

static int grow(vt_layer_cache *c, int64_t need, int64_t kw, int64_t vw, vt_err *err) {
    if (need <= c->cap) return VT_OK;
    int64_t cap = c->cap ? c->cap : 64;
    while (cap < need) cap *= 2;
    float *kc = realloc(c->kc, vt_row_size(VT_F32, cap * kw));
    if (!kc) return vt_errf(err, VT_ENOMEM, "mla cache: out of memory");
    c->kc = kc;
    float *vc = realloc(c->vc, vt_row_size(VT_F32, cap * vw));
    if (!vc) return vt_errf(err, VT_ENOMEM, "mla cache: out of memory");
    c->vc = vc;
    c->cap = cap;
    return VT_OK;
}

int vt_mla_forward(vt_session *s, int layer, const float *x, int64_t T, float *out, vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const vt_mla_w *w = &s->m->layers[layer].mla;
    vt_layer_cache *c = &s->cache[layer];
    const int64_t D = cfg->hidden_size, Nh = cfg->num_attention_heads, nope = cfg->qk_nope_head_dim;
    const int64_t rope = cfg->qk_rope_head_dim, dv = cfg->v_head_dim, r = cfg->kv_lora_rank;
    const int64_t qk = nope + rope, kw = Nh * qk, vw = Nh * dv, p0 = s->pos, Tall = p0 + T;
    const double eps = s->k.kv_norm_eps_config ? cfg->rms_norm_eps : 1e-6;
    int rc = grow(c, Tall, kw, vw, err);
    if (rc) return rc;
    const vt_ws_mark mk = vt_ws_mark_now(s);
    float *q = vt_ws_alloc(s, VT_F32, T * kw, err);
    float *lat = vt_ws_alloc(s, VT_F32, T * (r + rope), err);
    float *cn = vt_ws_alloc(s, VT_F32, T * r, err);
    float *kv = vt_ws_alloc(s, VT_F32, T * Nh * (nope + dv), err);
    float *o = vt_ws_alloc(s, VT_F32, T * vw, err);
    if (!q || !lat || !cn || !kv || !o) { rc = err->code; goto done; }

    const vt_gemm_job proj[2] = {{x, D, T, &w->q, q, kw}, {x, D, T, &w->kva, lat, r + rope}};
    vt_gemm_jobs(s, proj, 2);
    vt_act_round(s, q, T * kw);
    vt_act_round(s, lat, T * (r + rope));
    for (int64_t t = 0; t < T; t++) memcpy(cn + t * r, lat + t * (r + rope), vt_row_size(VT_F32, r));
    vt_rmsnorm(s, cn, T, r, w->kvnorm.data, eps, cn);
    vt_gemm_xwT(s, cn, T, r, &w->kvb, kv);
    vt_act_round(s, kv, T * Nh * (nope + dv));

    /* append expanded keys and values to the cache */
    for (int64_t t = 0; t < T; t++) {
        float *kr = c->kc + (p0 + t) * kw, *vr = c->vc + (p0 + t) * vw;
        const float *krot = lat + t * (r + rope) + r;
        for (int64_t h = 0; h < Nh; h++) {
            const float *kvh = kv + t * Nh * (nope + dv) + h * (nope + dv);
            memcpy(kr + h * qk, kvh, vt_row_size(VT_F32, nope));
            memcpy(kr + h * qk + nope, krot, vt_row_size(VT_F32, rope));
            memcpy(vr + h * dv, kvh + nope, vt_row_size(VT_F32, dv));
        }
    }

    /* causal softmax attention as blocked products (attn.c): f32 scores, an
     * online softmax with an f64 running sum */
    const float scale = 1.0f / sqrtf((float)qk);
    const size_t wb = vt_attn_causal_work_bytes(T, p0, Nh, qk, dv);
    float *work = vt_ws_alloc(s, VT_U8, (int64_t)wb, err);
    if (!work) { rc = err->code; goto done; }
    if (vt_attn_causal(T, p0, Nh, qk, dv, scale, q, kw, c->kc, kw, c->vc, vw, o, vw, work, wb) != 0) {
        rc = vt_errf(err, VT_EINTERNAL, "mla layer %d: attention refused its arguments", layer);
        goto done;
    }
    vt_act_round(s, o, T * vw);
    vt_gemm_xwT(s, o, T, vw, &w->o, out);
    vt_act_round(s, out, T * D);
done:
    vt_ws_release(s, mk);
    return rc;
}
