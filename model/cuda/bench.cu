/*
 * bench.cu — the full-size benchmark: a Kimi-Linear config (e.g.
 * kimi-linear-48b-a3b.json) with bf16 weights generated ON THE DEVICE by a
 * counter-based PRNG at the synth scales (synth.c's role_scale: fan-in
 * uniform, residual-branch outputs scaled by 1/sqrt(2L), norms near 1, A_log
 * and dt_bias as FLA initialises them, a nonzero router bias). No checkpoint
 * is read or written: the 48B model's ~98 GB of bf16 weights would take far
 * longer to synthesise on the host than to measure.
 *
 * The forward pass is the session's own (cu_forward, same kernels, same
 * GEMMs), with the public bf16 implementations' precision: bf16 weights,
 * bf16 activation rounding and a bf16 residual stream (VT_KIMI_BF16_ACT=1,
 * VT_KIMI_BF16_STREAM=1), probes off. Measured:
 *   prefill  T tokens of one sequence (logits for every position)
 *   decode   batch 1: one token per step after that prefill (context T)
 *   decode   batch B: B independent sequences stepped together, one token
 *            each per step, after a prefill of BATCH_CONTEXT tokens each
 * FLOPs are counted as issued: 2·M·N·K per GEMM (cuBLAS), the attention
 * GEMMs, and 7·d² per token and head for the KDA recurrence. Bytes are what
 * the kernels must read at least: every GEMM's weights, the KV cache, the
 * KDA state (read and written); activations are not counted, so GB/s is a
 * lower bound on HBM traffic (tight for decode, loose for prefill).
 */
#include <cmath>
#include <cstring>
#include <ctime>

#include "model/bench_report.h"
#include "model/cuda/vtcuda.h"

#define BENCH_SEED 20251030ull
#define BENCH_REPS 3           /* prefill repetitions after one warm-up; the median is reported */
#define BENCH_STEPS 32         /* timed decode steps, after BENCH_WARM untimed ones */
#define BENCH_WARM 2
#define BATCH_CONTEXT 256      /* tokens per sequence before the batched decode */

enum { R_UNIFORM = 0, R_NORM, R_A_LOG, R_DT_BIAS, R_ROUTER_BIAS };

/* ================================================================ kernels */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* p[i] for i < n from stream `seed`, by role (see synth.c); bf16 or f32. */
__global__ void fill_kernel(void *p, int is_bf16, int64_t n, uint64_t seed, int role, float a) {
    const float lo = logf(1e-3f), hi = logf(1e-1f);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float u = (float)(mix64(seed ^ mix64((uint64_t)i)) >> 40) * (1.0f / 16777216.0f);
        float v;
        switch (role) {
        case R_NORM: v = 0.9f + 0.2f * u; break;
        case R_A_LOG: v = logf(1.0f + 15.0f * u); break;
        case R_DT_BIAS: v = logf(expm1f(expf(lo + u * (hi - lo)))); break;
        case R_ROUTER_BIAS: v = -0.2f + 0.4f * u; break;
        default: v = a * (2.0f * u - 1.0f); break;
        }
        if (is_bf16) ((uint16_t *)p)[i] = cu_f32_to_bf16(v);
        else ((float *)p)[i] = v;
    }
}

/* ================================================================ weights */

typedef struct gen {
    cu_weights *w;
    uint64_t    next;     /* per-tensor stream */
    double      params;   /* elements generated */
} gen;

static int fill(gen *g, void *p, int is_bf16, int64_t n, int role, double a, vt_err *err) {
    fill_kernel<<<cu_blocks(n), CU_THREADS>>>(p, is_bf16, n, BENCH_SEED * 0x100000001B3ull + g->next++, role, (float)a);
    LAUNCH_CHECK();
    g->params += (double)n;
    return VT_OK;
}

/* A bf16 [rows, cols] linear weight, U(-a, a) with a = branch * sqrt(3 / cols). */
static int gmat(gen *g, int64_t rows, int64_t cols, double branch, cu_mat *m, vt_err *err) {
    m->dtype = VT_BF16;
    m->rows = rows;
    m->cols = cols;
    TRY(cu_alloc(g->w, &m->p, vt_row_size(VT_BF16, rows * cols), err));
    return fill(g, m->p, 1, rows * cols, R_UNIFORM, branch * sqrt(3.0 / (double)cols), err);
}

static int gvec(gen *g, int64_t n, int role, double a, float **out, vt_err *err) {
    TRY(cu_alloc(g->w, (void **)out, vt_row_size(VT_F32, n), err));
    return fill(g, *out, 0, n, role, a, err);
}

static int gswiglu(gen *g, int64_t I, int64_t D, double branch, cu_swiglu *s, vt_err *err) {
    TRY(gmat(g, I, D, 1.0, &s->gate, err));
    TRY(gmat(g, I, D, 1.0, &s->up, err));
    return gmat(g, D, I, branch, &s->down, err);
}

static int generate(const vt_config *cfg, cu_weights *w, double *params, vt_err *err) {
    gen g = {w, 1, 0.0};
    const int64_t D = cfg->hidden_size, V = cfg->vocab_size, L = cfg->num_hidden_layers;
    const double branch = 1.0 / sqrt(2.0 * (double)L);   /* o_proj, down_proj, w2 (synth.c) */
    w->dtype = VT_BF16;
    w->n_layers = L;
    w->layers = new cu_layer[L]();
    w->embed.dtype = VT_BF16;
    w->embed.rows = V;
    w->embed.cols = D;
    TRY(cu_alloc(w, &w->embed.p, vt_row_size(VT_BF16, V * D), err));
    TRY(fill(&g, w->embed.p, 1, V * D, R_UNIFORM, sqrt(3.0), err));
    TRY(gvec(&g, D, R_NORM, 0, &w->norm, err));
    TRY(gmat(&g, V, D, 3.5, &w->lm_head, err));   /* VT_SYNTH_LM_HEAD_GAIN */
    for (int64_t i = 0; i < L; i++) {
        cu_layer *l = &w->layers[i];
        l->kind = cfg->layer_kind[i];
        TRY(gvec(&g, D, R_NORM, 0, &l->in_norm, err));
        TRY(gvec(&g, D, R_NORM, 0, &l->post_norm, err));
        if (l->kind == VT_LAYER_KDA) {
            const int64_t H = cfg->kda_num_heads, d = cfg->kda_head_dim, P = H * d, K = cfg->short_conv_kernel_size;
            const double ac = sqrt(3.0 / (double)K);
            TRY(gmat(&g, P, D, 1.0, &l->q, err));
            TRY(gmat(&g, P, D, 1.0, &l->k, err));
            TRY(gmat(&g, P, D, 1.0, &l->v, err));
            TRY(gvec(&g, P * K, R_UNIFORM, ac, &l->qc, err));
            TRY(gvec(&g, P * K, R_UNIFORM, ac, &l->kc, err));
            TRY(gvec(&g, P * K, R_UNIFORM, ac, &l->vc, err));
            TRY(gvec(&g, H, R_A_LOG, 0, &l->A_log, err));
            TRY(gvec(&g, P, R_DT_BIAS, 0, &l->dt_bias, err));
            TRY(gmat(&g, d, D, 1.0, &l->fa, err));
            TRY(gmat(&g, P, d, 1.0, &l->fb, err));
            TRY(gmat(&g, H, D, 1.0, &l->b, err));
            TRY(gmat(&g, d, D, 1.0, &l->ga, err));
            TRY(gmat(&g, P, d, 1.0, &l->gb, err));
            TRY(gvec(&g, d, R_NORM, 0, &l->onorm, err));
            TRY(gmat(&g, D, P, branch, &l->o, err));
        } else {
            const int64_t Nh = cfg->num_attention_heads, nope = cfg->qk_nope_head_dim, rope = cfg->qk_rope_head_dim;
            const int64_t dv = cfg->v_head_dim, r = cfg->kv_lora_rank;
            TRY(gmat(&g, Nh * (nope + rope), D, 1.0, &l->mq, err));
            TRY(gmat(&g, r + rope, D, 1.0, &l->kva, err));
            TRY(gvec(&g, r, R_NORM, 0, &l->kvnorm, err));
            TRY(gmat(&g, Nh * (nope + dv), r, 1.0, &l->kvb, err));
            TRY(gmat(&g, D, Nh * dv, branch, &l->mo, err));
        }
        l->moe = vt_config_layer_is_moe(cfg, i);
        if (!l->moe) {
            TRY(gswiglu(&g, cfg->intermediate_size, D, branch, &l->dense, err));
            continue;
        }
        const int64_t E = cfg->num_experts, Im = cfg->moe_intermediate_size;
        TRY(gmat(&g, E, D, 1.0, &l->router, err));
        TRY(gvec(&g, E, R_ROUTER_BIAS, 0, &l->router_bias, err));
        TRY(gmat(&g, E * Im, D, 1.0, &l->w1, err));
        TRY(gmat(&g, E * Im, D, 1.0, &l->w3, err));
        TRY(gmat(&g, E * D, Im, branch, &l->w2, err));
        l->has_shared = cfg->num_shared_experts > 0;
        if (l->has_shared) TRY(gswiglu(&g, Im * cfg->num_shared_experts, D, branch, &l->shared, err));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    *params = g.params;
    return VT_OK;
}

/* ================================================================ measurement */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void tokens_for(int32_t *t, int64_t n, int64_t V, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)(3 + (seed >> 8) % (uint32_t)(V - 3));
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prefill T tokens (batch c->B) REPS times after a warm-up; median time. */
static int time_prefill(vt_cuda *c, const int32_t *tok, int64_t T, int want_logits, int reps, vt_bench_phase *ph, vt_err *err) {
    double t[16];
    TRY(cu_ctx_reset(c, err));
    TRY(cu_forward(c, tok, T, want_logits, NULL, err));   /* warm-up: scratch, cache growth, cuBLAS heuristics */
    for (int r = 0; r < reps; r++) {
        TRY(cu_ctx_reset(c, err));
        c->flops = c->bytes = 0;
        double t0 = now_s();
        TRY(cu_forward(c, tok, T, want_logits, NULL, err));   /* ends with cudaDeviceSynchronize */
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    ph->batch = c->B;
    ph->context = 0;   /* the report's context: tokens cached when the phase starts (bench_report.h) */
    ph->tokens = c->B * T;
    ph->seconds = t[reps / 2];
    ph->flops = c->flops;
    ph->bytes = c->bytes;
    return VT_OK;
}

/* Decode steps (one token per sequence each) from the current caches. */
static int time_decode(vt_cuda *c, const int32_t *tok, int warm, int steps, vt_bench_phase *ph, vt_err *err) {
    for (int i = 0; i < warm; i++) TRY(cu_forward(c, tok, 1, 1, NULL, err));
    ph->context = c->pos;
    c->flops = c->bytes = 0;
    double t0 = now_s();
    for (int i = 0; i < steps; i++) TRY(cu_forward(c, tok, 1, 1, NULL, err));
    double dt = now_s() - t0;
    ph->batch = c->B;
    ph->tokens = c->B;
    ph->seconds = dt / steps;
    ph->flops = c->flops / steps;
    ph->bytes = c->bytes / steps;
    return VT_OK;
}

/* Peak dense bf16 tensor TFLOP/s and HBM GB/s by device name (vendor data
 * sheets, SXM parts); bandwidth falls back to the memory clock x bus width. */
static void device_peaks(const char *name, int dev, double *tflops, double *gbs) {
    *tflops = 0;
    *gbs = 0;
    if (strstr(name, "H200")) { *tflops = 989; *gbs = 4800; }
    else if (strstr(name, "H100") && strstr(name, "PCIe")) { *tflops = 756; *gbs = 2000; }
    else if (strstr(name, "H100")) { *tflops = 989; *gbs = 3350; }
    else if (strstr(name, "A100")) { *tflops = 312; *gbs = strstr(name, "80GB") ? 2039 : 1555; }
    if (*gbs == 0) {
        int clk = 0, bus = 0;   /* kHz, bits */
        if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
            *gbs = 2.0 * (double)clk * 1e3 * (double)bus / 8.0 / 1e9;
        cudaGetLastError();
    }
}

/* One phase's line on stdout (the report carries the same numbers). */
static void log_phase(FILE *log, const vt_bench_phase *p) {
    if (!log) return;
    double tps = (double)p->tokens / p->seconds, tf = p->flops / p->seconds / 1e12, gbs = p->bytes / p->seconds / 1e9;
    double peak_tf = p->peak_flops / 1e12, peak_gbs = p->peak_bytes / 1e9;
    fprintf(log, "bench %-11s batch %3lld context %5lld: %10.1f tokens/s  %8.2f TFLOP/s (%5.1f%% of peak)  %8.1f GB/s (%5.1f%% of peak)\n",
            p->name, (long long)p->batch, (long long)p->context, tps, tf, peak_tf > 0 ? 100 * tf / peak_tf : 0.0, gbs,
            peak_gbs > 0 ? 100 * gbs / peak_gbs : 0.0);
}

static int bench(const char *config_path, int64_t T, int64_t batch, const char *json_path, FILE *log, vt_err *err) {
    vt_config cfg;
    TRY(vt_config_load(config_path, &cfg, err));
    int dev = 0;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    double peak_tf, peak_gbs;
    device_peaks(prop.name, dev, &peak_tf, &peak_gbs);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (log) fprintf(log, "bench: %s, %.1f GiB free of %.1f; peaks %.0f TFLOP/s bf16, %.0f GB/s\n", prop.name,
                     free_b / 1073741824.0, total_b / 1073741824.0, peak_tf, peak_gbs);

    cu_weights *w = new cu_weights();
    vt_cuda c;
    memset(&c, 0, sizeof c);
    int32_t *tok = NULL;
    /* the report's phases, filled by the timings; threads 0 (a GPU), GEMMs not timed on the device */
    vt_bench_phase ph[4] = {{"prefill"}, {"decode-b1"}, {"prefill-batch"}, {"decode-batch"}};
    for (vt_bench_phase &p : ph) p.peak_flops = peak_tf * 1e12, p.peak_bytes = peak_gbs * 1e9, p.gemm_seconds = -1.0;
    double params = 0, t0 = now_s();
    int finite = 1, rc = generate(&cfg, w, &params, err);
    double gen_s = now_s() - t0;
    if (rc) goto done;
    if (log) fprintf(log, "bench: %.3g parameters (%.1f GB bf16) generated on the device in %.2f s\n", params,
                     params * 2 / 1e9, gen_s);
    {
        vt_knobs k;
        memset(&k, 0, sizeof k);
        k.bf16_stream = 1;
        k.bf16_act = 1;
        k.backend = VT_BACKEND_CUDA;
        k.probe = VT_PROBE_OFF;
        k.fault = VT_FAULT_NONE;
        const int64_t nb = T > batch * BATCH_CONTEXT ? T : batch * BATCH_CONTEXT;
        tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)nb);
        if (!tok) { rc = vt_errf(err, VT_ENOMEM, "bench: out of memory"); goto done; }
        tokens_for(tok, nb, cfg.vocab_size, 17);

        /* batch 1: prefill T, then decode at context T */
        if ((rc = cu_ctx_init(&c, &cfg, w, &k, NULL, 1, err))) goto done;
        if ((rc = time_prefill(&c, tok, T, 1, BENCH_REPS, &ph[0], err))) goto done;
        {   /* the last position's logits must be finite: a NaN would make every number above meaningless */
            float *row = (float *)malloc(vt_row_size(VT_F32, cfg.vocab_size));
            if (!row) { rc = vt_errf(err, VT_ENOMEM, "bench: out of memory"); goto done; }
            cudaError_t e = cudaMemcpy(row, (float *)c.scr[S_LOGITS] + (T - 1) * cfg.vocab_size,
                                       vt_row_size(VT_F32, cfg.vocab_size), cudaMemcpyDeviceToHost);
            for (int64_t v = 0; e == cudaSuccess && v < cfg.vocab_size; v++) finite &= std::isfinite(row[v]) ? 1 : 0;
            free(row);
            if (e != cudaSuccess) { rc = vt_errf(err, VT_EINTERNAL, "bench: %s", cudaGetErrorString(e)); goto done; }
            if (!finite) { rc = vt_errf(err, VT_EINTERNAL, "bench: non-finite logits after the prefill"); goto done; }
        }
        if (log) log_phase(log, &ph[0]);
        if ((rc = time_decode(&c, tok, BENCH_WARM, BENCH_STEPS, &ph[1], err))) goto done;
        if (log) log_phase(log, &ph[1]);
        cu_ctx_release(&c);

        /* batch B: B sequences prefilled with BATCH_CONTEXT tokens each, then stepped together */
        if ((rc = cu_ctx_init(&c, &cfg, w, &k, NULL, batch, err))) goto done;
        if ((rc = time_prefill(&c, tok, BATCH_CONTEXT, 0, 1, &ph[2], err))) goto done;
        if (log) log_phase(log, &ph[2]);
        if ((rc = time_decode(&c, tok, BENCH_WARM, BENCH_STEPS, &ph[3], err))) goto done;
        if (log) log_phase(log, &ph[3]);
    }
    {   /* the report (model/bench_report.h), which `vtlab record-bench` stores as runs */
        char csha[65], msha[65], tsha[65], ident[256];
        if ((rc = vt_sha256_file(config_path, csha, err->msg, sizeof err->msg))) { err->code = rc; goto done; }
        /* the weights are a function of the config and the seed: that is their identity */
        snprintf(ident, sizeof ident, "bench.cu device weights: seed %llu, bf16, config sha256 %s",
                 (unsigned long long)BENCH_SEED, csha);
        vt_sha256_hex(ident, strlen(ident), msha);
        vt_bench_tokens_sha256(tok, T > batch * BATCH_CONTEXT ? T : batch * BATCH_CONTEXT, tsha);
        static const char *const kn[] = {"VT_BACKEND", "VT_KIMI_BF16_ACT", "VT_KIMI_BF16_STREAM", "VT_PROBE"};
        static const char *const kv[] = {"cuda", "1", "1", "off"};
        char weights[160];
        snprintf(weights, sizeof weights, "bf16, %.4g parameters generated on the device (seed %llu; no checkpoint)",
                 params, (unsigned long long)BENCH_SEED);
        vt_bench_report r = {"cuda", prop.name, config_path, msha, tsha, weights,
                             "dense bf16 tensor-core peak and HBM bandwidth of the device (vendor datasheet)",
                             "2MNK per GEMM, attention GEMMs, 7 d^2 per token and head (KDA recurrence)",
                             "GEMM weights, KV cache, KDA state read+write; activations not counted (lower bound)",
                             4, kn, kv, 4, ph};
        rc = vt_bench_write(json_path, &r, err);
    }
done:
    cu_ctx_release(&c);
    cu_weights_free(w);
    free(tok);
    return rc;
}

extern "C" int vt_cuda_bench(const char *config_path, int64_t prefill_T, int64_t batch, const char *json_path,
                             FILE *log, char *errbuf, size_t errlen) {
    int rc = vt_cuda_probe_device(errbuf, errlen);
    if (rc) return rc;
    if (prefill_T < 1 || batch < 1 || batch > 4096) {
        snprintf(errbuf, errlen, "bench: T %lld and batch %lld must be >= 1 (batch <= 4096)", (long long)prefill_T,
                 (long long)batch);
        return VT_STATUS_INPUT;
    }
    vt_err e = {};
    rc = bench(config_path, prefill_T, batch, json_path, log, &e);
    if (rc) snprintf(errbuf, errlen, "%s", e.msg);
    return rc;
}
