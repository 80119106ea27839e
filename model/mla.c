/*
 * mla.c — Multi-head Latent Attention without rotary embeddings (NoPE), as
 * Kimi-Linear's full-attention layers use it.
 *
 * The latent c = x·Wkv_aᵀ splits into c_kv (normed by kv_a_layernorm, then
 * expanded per head into k_nope and v) and k_rot, a few extra key dims shared
 * by all heads. No rotation is applied anywhere. The cache keeps the expanded
 * keys [Nh, nope+rope] and values [Nh, dv] of every position, so a call with
 * T new tokens attends over the cached positions plus its own, causally
 * (attn.c: blocked products, the same code for prefill and decode). In a
 * pack of whole sequences (forward.c, vt_segs) each attends over its own
 * keys only, from position 0.
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

/* Causal softmax attention as blocked products (attn.c: f32 scores, an
 * online softmax with an f64 running sum) of each sequence of the pass over
 * its own keys. The pass's keys are in the cache at rows p0 + t; a lone pass
 * attends over positions 0 .. p0 + t, a pack's sequence starting at row r0
 * over its rows r0 .. r0 + t as positions 0 .. t (the call a forward of that
 * sequence alone makes, with the same shapes, hence the same split and bits). */
static int attend(vt_session *s, int layer, int64_t T, int64_t p0, const float *q, const vt_layer_cache *c, float *o,
                  vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t Nh = cfg->num_attention_heads, qk = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    const int64_t dv = cfg->v_head_dim, kw = Nh * qk, vw = Nh * dv, pack = s->seg.n > 0;
    const float scale = 1.0f / sqrtf((float)qk);
    size_t wb = 0;
    for (int64_t i = 0; i < vt_seg_count(s); i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        const size_t b = vt_attn_causal_work_bytes(r1 - r0, pack ? 0 : p0, Nh, qk, dv);
        if (b > wb) wb = b;
    }
    const vt_ws_mark mk = vt_ws_mark_now(s);
    float *work = vt_ws_alloc(s, VT_U8, (int64_t)wb, err);
    int rc = work ? VT_OK : err->code;
    for (int64_t i = 0; !rc && i < vt_seg_count(s); i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        /* the sequence's first key row in the cache, and its first query's position */
        const int64_t key0 = pack ? p0 + r0 : 0, pos0 = pack ? 0 : p0;
        if (vt_attn_causal(r1 - r0, pos0, Nh, qk, dv, scale, q + r0 * kw, kw, c->kc + key0 * kw, kw, c->vc + key0 * vw,
                           vw, o + r0 * vw, vw, work, wb) != 0)
            rc = vt_errf(err, VT_EINTERNAL, "mla layer %d: attention refused its arguments", layer);
    }
    vt_ws_release(s, mk);
    return rc;
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

    if ((rc = attend(s, layer, T, p0, q, c, o, err))) goto done;
    vt_act_round(s, o, T * vw);
    vt_gemm_xwT(s, o, T, vw, &w->o, out);
    vt_act_round(s, out, T * D);
done:
    vt_ws_release(s, mk);
    return rc;
}
