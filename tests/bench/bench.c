/*
 * bench.c — `make bench`: forward-pass throughput on the CPU backend, measured
 * against OpenBLAS's own sgemm peak in the same process, and the cost of the
 * probes.
 *
 * Prints, for the model directory given (a synthetic tiny model by default):
 *   - OpenBLAS sgemm GFLOP/s on a square GEMM (the machine's reachable peak);
 *   - prefill and decode tokens/s at 1 and 2 threads, the achieved GFLOP/s
 *     (2 x active multiply-adds per token, from the config) and its ratio to
 *     the sgemm peak, and the share of forward time spent inside GEMM calls;
 *   - prefill time with VT_PROBE=on and =audit relative to off (median of
 *     interleaved repeats, so drift hits every mode alike).
 *
 * With --json OUT it also writes the throughput phases as a benchmark report
 * (model/bench_report.h), which `vtlab record-bench OUT` stores in results.db
 * as runs (tests/bench/run.sh does both).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/runner.h"
#include "model/bench_report.h"
#include "model/config.h"
#include "model/model.h"
#include "model/vt.h"

static double now(void) { return omp_get_wtime(); }

static double sgemm_gflops(int n, int threads) {
    openblas_set_num_threads(threads);
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
    float *c = malloc(sizeof(float) * (size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double t = now() - t0;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * n * (double)n * n / best / 1e9;
}

/* Multiply-adds per token of the linear layers actually used (active experts
 * only), plus the KDA recurrence; attention's T-dependent part is added for
 * a context of `ctx` tokens. */
static double flops_per_token(const vt_config *c, double ctx) {
    double D = (double)c->hidden_size, f = 0;
    double H = (double)c->kda_num_heads, d = (double)c->kda_head_dim, P = H * d;
    double Nh = (double)c->num_attention_heads, qk = (double)(c->qk_nope_head_dim + c->qk_rope_head_dim);
    double r = (double)c->kv_lora_rank, rope = (double)c->qk_rope_head_dim, dv = (double)c->v_head_dim;
    for (int64_t i = 0; i < c->num_hidden_layers; i++) {
        if (c->layer_kind[i] == VT_LAYER_KDA)
            f += 3 * D * P + 2 * (D * d + d * P) + D * H + P * D + 4 * H * d * d;
        else
            f += D * Nh * qk + D * (r + rope) + r * Nh * (qk - rope + dv) + Nh * dv * D + ctx * Nh * (qk + dv);
        if (vt_config_layer_is_moe(c, i))
            f += D * (double)c->num_experts +
                 3 * D * (double)c->moe_intermediate_size * (double)(c->num_experts_per_token + c->num_shared_experts);
        else
            f += 3 * D * (double)c->intermediate_size;
    }
    f += D * (double)c->vocab_size;
    return 2 * f;
}

static vt_session *session(vt_model *m, int threads, const char *probe) {
    vt_knobset *ks;
    char err[512], th[16];
    vt_knobset_new(&ks);
    snprintf(th, sizeof th, "%d", threads);
    vt_knobset_set(ks, "VT_THREADS", th, err, sizeof err);
    vt_knobset_set(ks, "VT_PROBE", probe, err, sizeof err);
    vt_session *s = NULL;
    if (vt_session_new(&s, m, ks, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); exit(1); }
    vt_knobset_free(ks);
    return s;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *json = NULL;
    if (argc >= 3 && !strcmp(argv[argc - 2], "--json")) { json = argv[argc - 1]; argc -= 2; }
    if (argc < 2 || argc > 3) { fprintf(stderr, "usage: bench MODEL_DIR [T] [--json OUT.json]\n"); return 2; }
    const char *dir = argv[1];
    int T = argc > 2 ? atoi(argv[2]) : 128, NDEC = 64;
    if (T < 1) { fprintf(stderr, "bench: T must be >= 1\n"); return 2; }
    vt_bench_phase ph[4];
    char phname[4][32], dev[256];
    memset(ph, 0, sizeof ph);
    char err[1024], path[4096];
    vt_config cfg;
    vt_err e = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (vt_config_load(path, &cfg, &e)) { fprintf(stderr, "bench: %s\n", e.msg); return 2; }
    vt_model *m;
    if (vt_model_open(&m, dir, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 2; }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(T + NDEC));
    for (int i = 0; i < T + NDEC; i++) tok[i] = (int32_t)(3 + (i * 7919) % (cfg.vocab_size - 3));
    float *logits = malloc(sizeof(float) * (size_t)T * (size_t)cfg.vocab_size);

    printf("model %s: hidden %lld, %lld layers, vocab %lld; prefill T=%d, decode %d tokens\n", dir,
           (long long)cfg.hidden_size, (long long)cfg.num_hidden_layers, (long long)cfg.vocab_size, T, NDEC);
    for (int threads = 1; threads <= 2; threads++) {
        double peak = sgemm_gflops(1024, threads);
        vt_session *s = session(m, threads, "off");
        if (vt_session_prefill(s, tok, T, logits, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 1; }
        double f0 = vt_session_forward_seconds(s), g0 = vt_session_gemm_seconds(s);
        int reps = 3;
        for (int r = 0; r < reps; r++)
            if (vt_session_prefill(s, tok, T, logits, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 1; }
        double pf = (vt_session_forward_seconds(s) - f0) / reps, pg = (vt_session_gemm_seconds(s) - g0) / reps;
        double ptoks = T / pf, pgf = ptoks * flops_per_token(&cfg, T / 2.0) / 1e9;
        double f1 = vt_session_forward_seconds(s), g1 = vt_session_gemm_seconds(s);
        for (int i = 0; i < NDEC; i++)
            if (vt_session_decode(s, tok[T + i], logits, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 1; }
        double df = vt_session_forward_seconds(s) - f1, dg = vt_session_gemm_seconds(s) - g1;
        double dtoks = NDEC / df, dgf = dtoks * flops_per_token(&cfg, T + NDEC / 2.0) / 1e9;
        vt_bench_phase *pp = &ph[2 * (threads - 1)], *pd = pp + 1;
        snprintf(phname[2 * (threads - 1)], 32, "prefill-t%d", threads);
        snprintf(phname[2 * (threads - 1) + 1], 32, "decode-t%d", threads);
        *pp = (vt_bench_phase){phname[2 * (threads - 1)], 1, 0, threads, T, pf, (double)T * flops_per_token(&cfg, T / 2.0),
                               0, peak * 1e9, 0, pg};
        *pd = (vt_bench_phase){phname[2 * (threads - 1) + 1], 1, T, threads, NDEC, df,
                               NDEC * flops_per_token(&cfg, T + NDEC / 2.0), 0, peak * 1e9, 0, dg};
        printf("threads %d: sgemm peak %.1f GFLOP/s\n", threads, peak);
        printf("  prefill %8.1f tok/s  %6.2f GFLOP/s = %5.1f%% of sgemm peak, GEMM share %4.1f%%\n", ptoks, pgf,
               100 * pgf / peak, 100 * pg / pf);
        printf("  decode  %8.1f tok/s  %6.2f GFLOP/s = %5.1f%% of sgemm peak, GEMM share %4.1f%%\n", dtoks, dgf,
               100 * dgf / peak, 100 * dg / df);
        vt_session_free(s);
    }

    /* probe overhead: interleave off / on / audit, median of per-mode times */
    enum { R = 9 };
    const char *modes[3] = {"off", "on", "audit"};
    double t[3][R];
    vt_session *ss[3];
    for (int k = 0; k < 3; k++) ss[k] = session(m, 2, modes[k]);
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 3; k++) {
            double t0 = vt_session_forward_seconds(ss[k]);
            if (vt_session_prefill(ss[k], tok, T, logits, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 1; }
            t[k][r] = vt_session_forward_seconds(ss[k]) - t0;
        }
    double med[3];
    for (int k = 0; k < 3; k++) { qsort(t[k], R, sizeof t[k][0], cmp); med[k] = t[k][R / 2]; }
    double spread = (t[0][R - 2] - t[0][1]) / med[0];
    printf("probes (prefill T=%d, 2 threads, median of %d): on/off = %.3f, audit/off = %.3f "
           "(off's own spread, p10-p90: %.1f%%)\n", T, R, med[1] / med[0], med[2] / med[0], 100 * spread);
    /* the off path itself: what a probe call costs when VT_PROBE=off, times the
     * probe calls of one forward (counted by an `on` session), against the
     * forward's own time */
    int64_t calls_per_fwd = 0;
    for (int64_t i = 0; i < vt_session_probe_count(ss[1]); i++) calls_per_fwd += vt_session_probe_at(ss[1], i)->calls;
    calls_per_fwd /= R;
    const int64_t NCALL = 20000000;
    double t0 = now();
    for (int64_t i = 0; i < NCALL; i++) vt_probe_buffer(ss[0], "residual.stream", (int)(i & 7), VT_F32, T, 192);
    double per_call = (now() - t0) / (double)NCALL;
    printf("probes off: %.2f ns per probe call x %lld calls per forward = %.2e of a %.2f ms forward "
           "(not measurable against the forward's own spread)\n",
           per_call * 1e9, (long long)calls_per_fwd, per_call * (double)calls_per_fwd / med[0], med[0] * 1e3);
    for (int k = 0; k < 3; k++) vt_session_free(ss[k]);
    int rc = 0;
    if (json) {
        char msha[65], tsha[65];
        if (lab_model_sha256(dir, msha, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 2; }
        vt_bench_tokens_sha256(tok, T + NDEC, tsha);
        vt_device_name("cpu", dev, sizeof dev);
        const char *kn[] = {"VT_BACKEND", "VT_PROBE"}, *kv[] = {"cpu", "off"};   /* VT_THREADS: per phase */
        vt_bench_report r = {"cpu", dev, dir, msha, tsha, "the checkpoint in the model directory",
                             "OpenBLAS sgemm peak (1024^3, best of 5) measured in the same process at the phase's threads",
                             "2 x multiply-adds of the active linear layers and the KDA recurrence, attention at the mean context",
                             "not counted", 2, kn, kv, 4, ph};
        vt_err we = {0};
        if (vt_bench_write(json, &r, &we)) { fprintf(stderr, "bench: %s\n", we.msg); rc = 1; }
        else printf("bench: wrote %s\n", json);
    }
    vt_model_free(m);
    free(tok); free(logits);
    return rc;
}
