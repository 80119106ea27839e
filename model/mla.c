/*
 * mla.c — Multi-head Latent Attention without rotary embeddings (NoPE), as
 * Kimi-Linear's full-attention layers use it.
 *
 * The latent c = x·Wkv_aᵀ splits into c_kv (normed by kv_a_layernorm, then
 * expanded per head into k_nope and v) and k_rot, a few extra key dims shared
 * by all heads. No rotation is applied anywhere. The cache keeps the expanded
 * keys [Nh, nope+rope] and values [Nh, dv] of every position, so a call with
 * T new tokens attends over the cached positions plus its own, causally.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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

    /* causal softmax attention, f32 scores, f64 normaliser; one score row of
     * Tall entries per thread */
    const float scale = 1.0f / sqrtf((float)qk);
    const int nthr = omp_get_max_threads();
    float *scores = vt_ws_alloc(s, VT_F32, (int64_t)nthr * Tall, err);
    if (!scores) { rc = err->code; goto done; }
    #pragma omp parallel for collapse(2) schedule(dynamic) num_threads(nthr)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Nh; h++) {
            int64_t n = p0 + t + 1;
            float *sc = scores + (int64_t)omp_get_thread_num() * Tall;
            const float *qh = q + t * kw + h * qk;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                const float *kj = c->kc + j * kw + h * qk;
                float acc = 0.0f;
                for (int64_t i = 0; i < qk; i++) acc += qh[i] * kj[i];
                sc[j] = acc * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) { sc[j] = expf(sc[j] - mx); sum += sc[j]; }
            float *oh = o + t * vw + h * dv;
            for (int64_t i = 0; i < dv; i++) oh[i] = 0.0f;
            for (int64_t j = 0; j < n; j++) {
                float pj = (float)(sc[j] / sum);
                const float *vj = c->vc + j * vw + h * dv;
                for (int64_t i = 0; i < dv; i++) oh[i] += pj * vj[i];
            }
        }
    vt_act_round(s, o, T * vw);
    vt_gemm_xwT(s, o, T, vw, &w->o, out);
    vt_act_round(s, out, T * D);
done:
    vt_ws_release(s, mk);
    return rc;
}
