/*
 * bench.c — `make bench`: forward-pass throughput on the CPU backend, measured
 * against the machine's own peaks (OpenBLAS sgemm and a STREAM triad) in the
 * same process, its memory, and the cost of the probes. docs/bench.md says
 * what every printed figure means.
 *
 * Prints, for the model directory given (a synthetic tiny model by default):
 *   - the checkpoint's size on disk, the RSS after the model is opened and
 *     the peak RSS (getrusage ru_maxrss) of the forward phases;
 *   - the FLOPs per prefill token and the bytes of active weights per decode
 *     token, each with its arithmetic (flops_per_token, active_bytes_per_token);
 *   - OpenBLAS sgemm GFLOP/s on a square GEMM (the machine's reachable peak);
 *   - prefill and decode tokens/s at 1 and 2 threads, the achieved GFLOP/s and
 *     its ratio to the sgemm peak, and the share of forward time inside GEMMs;
 *   - prefill ms/token at T = 256, 1024, 4096 (2 threads; BENCH_TMAX caps T),
 *     so a cost that grows faster than linearly in T shows as a rising column;
 *   - the batched sweep: 8 sequences of 32 tokens one per forward and packed
 *     into one (vt_session_prefill_batch), against a prefill of T = 256, at 1
 *     and 2 threads (skipped with BENCH_TMAX < 256 or BENCH_BATCH=0);
 *   - with --busy: the contention table (contention.h): prefill and decode at
 *     the default thread count (all cores) against 1 thread while other
 *     tenants hold the cores (busy loops, bursts, other vtlab teams, a build
 *     with its tests), in interleaved rounds; --contention [PATTERNS] runs
 *     only that table (`make bench-contention`); with PEER_MODELING set, the
 *     official peer's prefill in the same rounds (contention_peer.h);
 *   - prefill time with VT_PROBE=on and =audit relative to off;
 *   - a STREAM triad (3 arrays of BENCH_TRIAD_MIB MiB, default 512, far beyond
 *     the last-level cache) at 1 and 2 threads, and decode's achieved
 *     bandwidth (tok/s x active bytes per token) as a fraction of it: the
 *     decode phase's against the best triad, and in rounds interleaved with
 *     the triad, each against its own.
 *
 * With --json OUT it also writes every phase as a benchmark report
 * (model/bench_report.h), which `vtlab record-bench OUT` stores in results.db
 * as runs (tests/bench/run.sh does both).
 *
 * `bench MODEL_DIR --serve` answers commands on stdin, one per line, for the
 * peer mode (tests/bench/peer.py, which times the official implementation in
 * its own process in rounds interleaved with these):
 *   tokens T               -> ok ID,ID,...   the T input tokens every phase uses
 *   prefill T THREADS      -> ok SECONDS     wall time of one prefill of T tokens
 *   logits T PATH          -> ok             the prefill's logits, raw f32 LE [T, vocab]
 *   peak THREADS           -> ok GFLOPS      sgemm 1024^3 peak, best of >= 5 calls and 0.3 s
 *   blas                   -> ok TEXT        the OpenBLAS kernels of that peak (blas_core.h)
 *   flops T                -> ok FLOPS       FLOPs per prefill token at length T
 *   phase NAME T THREADS SECONDS PEAK_GFLOPS -> ok   a prefill phase for the report
 *   write PATH             -> ok             the report of the phases given
 *   quit
 * Errors answer "err MESSAGE".
 */
#include <cblas.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "blas_core.h"
#include "harness/runner.h"
#include "model/bench_report.h"
#include "model/config.h"
#include "model/gemm.h"
#include "model/model.h"
#include "model/vt.h"

static double now(void) { return omp_get_wtime(); }

static double sgemm_gflops(int n, int threads) {
    openblas_set_num_threads(threads);
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
    float *c = malloc(sizeof(float) * (size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    /* best of at least 5 calls and 0.3 s: five 2-thread calls take ~25 ms, a
     * window a short burst on the other core (the kernel writing back a
     * just-written checkpoint, say) can cover whole. That alone did not cure
     * a 2-thread peak equal to the 1-thread one on the Zen 5 VM, so main()
     * also measures it again after the phases */
    double best = 1e30, start = now();
    for (int r = 0; r < 5 || now() - start < 0.3; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double t = now() - t0;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * n * (double)n * n / best / 1e9;
}

/* ------------------------------------------------------------------ memory */

/* Resident bytes now (/proc/self/statm, field 2, in pages). */
static int64_t rss_now(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = 0;
    fclose(f);
    return (int64_t)res * (int64_t)sysconf(_SC_PAGESIZE);
}

/* Peak resident bytes of this process so far (ru_maxrss is in KiB on Linux). */
static int64_t rss_peak(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (int64_t)ru.ru_maxrss * 1024;
}

/* Bytes of the checkpoint's *.safetensors files in dir. */
static int64_t checkpoint_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t total = 0;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0) total += (int64_t)st.st_size;
    }
    closedir(d);
    return total;
}

static double mb(double bytes) { return bytes / 1e6; }

/* The 1-minute load average: other processes on a shared machine take cores
 * the N-thread phases count on (printed before and after, to read them by). */
static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) { if (fscanf(f, "%lf", &l) != 1) l = -1; fclose(f); }
    return l;
}

/* ------------------------------------------------------------ STREAM triad */

/* a[i] = b[i] + s * c[i] over three f64 arrays of n elements; bytes counted
 * as STREAM does: 3 x 8 x n per pass (two reads and a write; the
 * write-allocate read of a is not counted). */
typedef struct triad_arrays { double *a, *b, *c; size_t n; } triad_arrays;

/* 0 on success, -1 when the arrays cannot be allocated. */
static int triad_open(triad_arrays *t, size_t n) {
    t->a = malloc(n * sizeof *t->a), t->b = malloc(n * sizeof *t->b), t->c = malloc(n * sizeof *t->c), t->n = n;
    if (!t->a || !t->b || !t->c) { free(t->a); free(t->b); free(t->c); return -1; }
    #pragma omp parallel for num_threads(2) schedule(static)
    for (size_t i = 0; i < n; i++) { t->a[i] = 0; t->b[i] = 1.0 + (double)(i & 7); t->c[i] = 0.5; }
    return 0;
}

static void triad_close(triad_arrays *t) {
    volatile double sink = t->a[t->n / 2];   /* the stores are used */
    (void)sink;
    free(t->a); free(t->b); free(t->c);
}

/* GB/s of the best of `reps` passes on th threads. */
static double triad_gbs(const triad_arrays *t, int th, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        #pragma omp parallel for num_threads(th) schedule(static)
        for (size_t i = 0; i < t->n; i++) t->a[i] = t->b[i] + 3.0 * t->c[i];
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 3.0 * 8.0 * (double)t->n / best / 1e9;
}

/* ------------------------------------------------------ FLOPs and bytes */

/* Multiply-adds per token, by part, for a context of ctx tokens.
 *
 * Per KDA layer (P = H*d projection width, K the conv kernel):
 *   q, k, v projections 3*D*P, depthwise conv 3*P*K, forget gate low rank
 *   D*d + d*P, output gate low rank D*d + d*P, beta D*H, o_proj P*D, and the
 *   delta-rule recurrence 4*H*d*d (decay, the prediction k.S, the rank-1
 *   update, the read q.S: one d x d pass each per head).
 * Per MLA layer (qk = nope + rope):
 *   q_proj D*Nh*qk, kv_a D*(r + rope), kv_b r*Nh*(nope + dv), o_proj Nh*dv*D,
 *   and attention ctx*Nh*(qk + dv) (scores, then the weighted sum of values).
 * Per MoE layer: router D*E, and SwiGLU (gate, up, down: 3*D*Im) for the
 *   top-k routed experts and the shared ones: 3*D*Im*(k + S).
 * Per dense layer: 3*D*I. Once: lm_head D*V (prefill computes every
 * position's logits). Norms, activations and the softmax are not counted.
 * FLOPs = 2 x multiply-adds. */
typedef struct parts {
    int    n_kda, n_mla, n_moe, n_dense;
    double kda, mla, mla_per_ctx, moe, dense, lm_head;   /* multiply-adds per token, one layer each */
} parts;

static parts flop_parts(const vt_config *c) {
    double D = (double)c->hidden_size, H = (double)c->kda_num_heads, d = (double)c->kda_head_dim, P = H * d;
    double K = (double)c->short_conv_kernel_size;
    double Nh = (double)c->num_attention_heads, nope = (double)c->qk_nope_head_dim, rope = (double)c->qk_rope_head_dim;
    double r = (double)c->kv_lora_rank, dv = (double)c->v_head_dim;
    parts p = {0};
    for (int64_t i = 0; i < c->num_hidden_layers; i++) {
        if (c->layer_kind[i] == VT_LAYER_KDA) p.n_kda++; else p.n_mla++;
        if (vt_config_layer_is_moe(c, i)) p.n_moe++; else p.n_dense++;
    }
    p.kda = 3 * D * P + 3 * P * K + 2 * (D * d + d * P) + D * H + P * D + 4 * H * d * d;
    p.mla = D * Nh * (nope + rope) + D * (r + rope) + r * Nh * (nope + dv) + Nh * dv * D;
    p.mla_per_ctx = Nh * (nope + rope + dv);
    p.moe = D * (double)c->num_experts +
            3 * D * (double)c->moe_intermediate_size * (double)(c->num_experts_per_token + c->num_shared_experts);
    p.dense = 3 * D * (double)c->intermediate_size;
    p.lm_head = D * (double)c->vocab_size;
    return p;
}

static double flops_per_token(const vt_config *c, double ctx) {
    parts p = flop_parts(c);
    return 2 * (p.n_kda * p.kda + p.n_mla * (p.mla + ctx * p.mla_per_ctx) + p.n_moe * p.moe + p.n_dense * p.dense +
                p.lm_head);
}

static void print_flops(const vt_config *c, int T) {
    parts p = flop_parts(c);
    double ctx = T / 2.0;
    printf("prefill FLOPs/token at T=%d (2 x multiply-adds, attention at the mean context %.0f): "
           "KDA %d x %.3f + MLA %d x (%.3f + %.0f x %.6f) + MoE %d x %.3f + dense MLP %d x %.3f + lm_head %.3f "
           "= %.3f MFLOP\n",
           T, ctx, p.n_kda, 2e-6 * p.kda, p.n_mla, 2e-6 * p.mla, ctx, 2e-6 * p.mla_per_ctx, p.n_moe, 2e-6 * p.moe,
           p.n_dense, 2e-6 * p.dense, 2e-6 * p.lm_head, 1e-6 * flops_per_token(c, ctx));
}

/* Bytes of weights one decode token must read (batch 1: every weight it uses
 * is read once per token), with w bytes per element of the checkpoint's large
 * tensors (A_log, dt_bias and the router bias are f32 in every checkpoint):
 *   KDA layer: q, k, v 3*P*D, convs 3*P*K, A_log H (f32), dt_bias P (f32),
 *     f_a/g_a 2*d*D, f_b/g_b 2*P*d, b H*D, o_norm d, o_proj D*P;
 *   MLA layer: q Nh*qk*D, kv_a (r + rope)*D, kv_a norm r, kv_b Nh*(nope + dv)*r,
 *     o_proj D*Nh*dv;
 *   every layer: two RMSNorm weights 2*D;
 *   MoE layer: router E*D, its bias E (f32), and the top-k routed experts
 *     plus the shared ones, 3*Im*D each (gate, up, down);
 *   dense layer: 3*I*D;
 *   once: one embedding row D, the final norm D, lm_head V*D.
 * Not counted: the KDA state (H*d*d f32 per layer) and the MLA cache (ctx x
 * Nh*(qk + dv) f32 per layer), which are activations, not weights. */
typedef struct bparts {
    double kda, mla, moe_router, expert, dense, once;   /* bytes; one layer / one expert each */
} bparts;

static bparts byte_parts(const vt_config *c, double w) {
    double D = (double)c->hidden_size, H = (double)c->kda_num_heads, d = (double)c->kda_head_dim, P = H * d;
    double K = (double)c->short_conv_kernel_size, E = (double)c->num_experts;
    double Nh = (double)c->num_attention_heads, nope = (double)c->qk_nope_head_dim, rope = (double)c->qk_rope_head_dim;
    double r = (double)c->kv_lora_rank, dv = (double)c->v_head_dim;
    bparts b;
    b.kda = w * (3 * P * D + 3 * P * K + 2 * d * D + 2 * P * d + H * D + d + D * P + 2 * D) + 4 * (H + P);
    b.mla = w * (Nh * (nope + rope) * D + (r + rope) * D + r + Nh * (nope + dv) * r + D * Nh * dv + 2 * D);
    b.moe_router = w * E * D + 4 * E;
    b.expert = w * 3 * (double)c->moe_intermediate_size * D;
    b.dense = w * 3 * (double)c->intermediate_size * D;
    b.once = w * (D + D + (double)c->vocab_size * D);
    return b;
}

static double active_bytes_per_token(const vt_config *c, double w) {
    parts p = flop_parts(c);
    bparts b = byte_parts(c, w);
    double k = (double)(c->num_experts_per_token + c->num_shared_experts);
    return p.n_kda * b.kda + p.n_mla * b.mla + p.n_moe * (b.moe_router + k * b.expert) + p.n_dense * b.dense + b.once;
}

static void print_bytes(const vt_config *c, const char *dtype, double w) {
    parts p = flop_parts(c);
    bparts b = byte_parts(c, w);
    printf("decode active weight bytes/token (%s, %.0f B/element): KDA %d x %.4f + MLA %d x %.4f + "
           "MoE %d x (router %.4f + (%lld routed + %lld shared) x %.4f) + dense MLP %d x %.4f + "
           "lm_head, final norm, embedding row %.4f = %.4f MB\n",
           dtype, w, p.n_kda, mb(b.kda), p.n_mla, mb(b.mla), p.n_moe, mb(b.moe_router),
           (long long)c->num_experts_per_token, (long long)c->num_shared_experts, mb(b.expert), p.n_dense,
           mb(b.dense), mb(b.once), mb(active_bytes_per_token(c, w)));
}

/* ---------------------------------------------------------------- sessions */

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

static void must(int rc, const char *err) {
    if (rc) { fprintf(stderr, "bench: %s\n", err); exit(1); }
}

/* Forward seconds of one prefill of T tokens. */
static double prefill_s(vt_session *s, const int32_t *tok, int T, float *logits) {
    char err[1024];
    double f0 = vt_session_forward_seconds(s);
    must(vt_session_prefill(s, tok, T, logits, err, sizeof err), err);
    return vt_session_forward_seconds(s) - f0;
}

/* Forward seconds of n decode steps (after a prefill). */
static double decode_s(vt_session *s, const int32_t *tok, int n, float *logits) {
    char err[1024];
    double f0 = vt_session_forward_seconds(s);
    for (int i = 0; i < n; i++) must(vt_session_decode(s, tok[i], logits, err, sizeof err), err);
    return vt_session_forward_seconds(s) - f0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The input tokens every phase uses (and the peer mode's `tokens`). */
static int32_t *make_tokens(int64_t vocab, int n) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(3 + ((int64_t)i * 7919) % (vocab - 3));
    return tok;
}

/* ------------------------------------------------------------------ report */

enum { MAX_PH = 96 };
typedef struct phases {
    int            n;
    vt_bench_phase ph[MAX_PH];
    char           name[MAX_PH][32];
} phases;

static vt_bench_phase *add_phase(phases *P, const char *name) {
    if (P->n >= MAX_PH) { fprintf(stderr, "bench: more than %d phases\n", MAX_PH); exit(1); }
    snprintf(P->name[P->n], 32, "%s", name);
    vt_bench_phase *p = &P->ph[P->n];
    memset(p, 0, sizeof *p);
    p->name = P->name[P->n++];
    p->batch = 1;
    p->gemm_seconds = -1;
    return p;
}

static int write_report(const char *json, const char *dir, const int32_t *tok, int ntok, const phases *P,
                        int64_t rss_open, int64_t rss_pk, int64_t ckpt) {
    char msha[65], tsha[65], dev[256], err[1024];
    if (lab_model_sha256(dir, msha, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 2; }
    vt_bench_tokens_sha256(tok, ntok, tsha);
    vt_device_name("cpu", dev, sizeof dev);
    const char *kn[] = {"VT_BACKEND", "VT_PROBE"}, *kv[] = {"cpu", "off"};   /* VT_THREADS: per phase */
    vt_bench_report r = {"cpu", dev, dir, msha, tsha, "the checkpoint in the model directory",
                         "OpenBLAS sgemm peak (1024^3, best of 5) measured in the same process at the phase's "
                         "threads (peer-torch-*: torch.mm 1024^3 in the peer's process); bytes: STREAM triad, "
                         "same process, same threads",
                         "2 x multiply-adds of the active linear layers, the KDA convs and recurrence, attention at "
                         "the mean context (docs/bench.md)",
                         "decode phases: active weight bytes per token (checkpoint dtype) x tokens; others: not "
                         "counted",
                         2, kn, kv, P->n, P->ph, rss_open, rss_pk, ckpt};
    vt_err we = {0};
    if (vt_bench_write(json, &r, &we)) { fprintf(stderr, "bench: %s\n", we.msg); return 1; }
    return 0;
}

/* ------------------------------------------------------------------- serve */

static int serve(const char *dir) {
    vt_config cfg;
    vt_err e = {0};
    char path[4096], err[1024], line[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (vt_config_load(path, &cfg, &e)) { fprintf(stderr, "bench: %s\n", e.msg); return 2; }
    vt_model *m;
    if (vt_model_open(&m, dir, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 2; }
    vt_session *ss[65] = {0};
    int32_t *tok = NULL;
    float *logits = NULL;
    int cap = 0, last_T = 0;
    phases P = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", arg[4096] = "", name[64] = "";
        int T = 0, th = 0;
        double sec = 0, pk = 0;
        if (sscanf(line, "%31s", cmd) != 1) continue;
        if (!strcmp(cmd, "quit")) break;
        if (!strcmp(cmd, "peak") && sscanf(line, "%*s %d", &th) == 1 && th >= 1 && th <= 64) {
            printf("ok %.3f\n", sgemm_gflops(1024, th));
            continue;
        }
        if (!strcmp(cmd, "blas")) {
            char blas[256];
            bench_blas_describe(blas, sizeof blas);
            printf("ok %s\n", blas);
            continue;
        }
        if (!strcmp(cmd, "phase") && sscanf(line, "%*s %63s %d %d %lf %lf", name, &T, &th, &sec, &pk) == 5) {
            if (!vt_bench_name_ok(name) || T < 1 || th < 0 || !(sec > 0) || !(pk >= 0)) { printf("err bad phase\n"); continue; }
            vt_bench_phase *p = add_phase(&P, name);
            p->threads = th, p->tokens = T, p->seconds = sec, p->flops = T * flops_per_token(&cfg, T / 2.0);
            p->peak_flops = pk * 1e9;
            last_T = T > last_T ? T : last_T;
            printf("ok\n");
            continue;
        }
        if (!strcmp(cmd, "write") && sscanf(line, "%*s %4095s", arg) == 1) {
            if (P.n < 1) { printf("err no phases\n"); continue; }
            int32_t *t = make_tokens(cfg.vocab_size, last_T);
            int rc = write_report(arg, dir, t, last_T, &P, 0, 0, 0);
            free(t);
            printf(rc ? "err could not write %s\n" : "ok\n", arg);
            continue;
        }
        int nf = sscanf(line, "%*s %d %4095s", &T, arg);
        if (nf < 1 || T < 1 || T > 1 << 20) { printf("err unknown or malformed command: %s", line); continue; }
        if (T > cap) {
            free(tok); free(logits);
            cap = T;
            tok = make_tokens(cfg.vocab_size, cap);
            logits = malloc(sizeof(float) * (size_t)cap * (size_t)cfg.vocab_size);
            if (!logits) { printf("err out of memory\n"); cap = 0; continue; }
        }
        if (!strcmp(cmd, "tokens")) {
            printf("ok");
            for (int i = 0; i < T; i++) printf("%c%d", i ? ',' : ' ', tok[i]);
            printf("\n");
        } else if (!strcmp(cmd, "flops")) {
            printf("ok %.6e\n", flops_per_token(&cfg, T / 2.0));
        } else if (!strcmp(cmd, "prefill") && nf == 2 && (th = atoi(arg)) >= 1 && th <= 64) {
            if (!ss[th]) ss[th] = session(m, th, "off");
            double t0 = now();
            if (vt_session_prefill(ss[th], tok, T, logits, err, sizeof err)) { printf("err %s\n", err); continue; }
            printf("ok %.9f\n", now() - t0);
        } else if (!strcmp(cmd, "logits") && nf == 2) {
            int d = omp_get_num_procs();
            if (d > 64) d = 64;
            if (!ss[d]) ss[d] = session(m, d, "off");
            if (vt_session_prefill(ss[d], tok, T, logits, err, sizeof err)) { printf("err %s\n", err); continue; }
            FILE *f = fopen(arg, "wb");
            size_t n = (size_t)T * (size_t)cfg.vocab_size;
            if (!f || fwrite(logits, sizeof(float), n, f) != n || fclose(f)) { printf("err cannot write %s\n", arg); continue; }
            printf("ok\n");
        } else {
            printf("err unknown or malformed command: %s", line);
        }
    }
    for (int i = 0; i <= 64; i++) if (ss[i]) vt_session_free(ss[i]);
    vt_model_free(m);
    free(tok); free(logits);
    return 0;
}

/* -------------------------------------------------------------------- main */

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Decode with the weights in panels (the default: loaded into anonymous
 * memory and rearranged, tensor.h) and as the checkpoint's mapped rows
 * (VTLAB_WEIGHTS=map, model/forward.c), 1 and 2 threads. Runs after the peak
 * RSS is printed: the second copy of the weights would count in it. (Not in
 * a forked child: libgomp's thread pool does not survive a fork.) Each of the
 * four sessions prefills T tokens once, then NL rounds of NB decode steps
 * interleave. out[mode][threads] = median tok/s (mode 0 panels, 1 mapped
 * rows). Returns 0, or -1 when the mapped model cannot open. */
#include "contention.h"

static int weights_phase(vt_model *m, const char *dir, const int32_t *tok, int T, float *logits,
                         double out[2][3]) {
    enum { NL = 3, NB = 32 };
    char err[1024];
    vt_model *ml = NULL;
    const char *prev = getenv("VTLAB_WEIGHTS");
    char *saved = prev ? strdup(prev) : NULL;
    setenv("VTLAB_WEIGHTS", "map", 1);
    int rc = vt_model_open(&ml, dir, err, sizeof err);
    if (saved) setenv("VTLAB_WEIGHTS", saved, 1);
    else unsetenv("VTLAB_WEIGHTS");
    free(saved);
    if (rc) { fprintf(stderr, "bench: %s\n", err); return -1; }
    vt_session *s[2][3] = {{0}};
    double t[2][3][NL];
    for (int mode = 0; mode < 2; mode++)
        for (int th = 1; th <= 2; th++) {
            s[mode][th] = session(mode ? ml : m, th, "off");
            prefill_s(s[mode][th], tok, T, logits);
        }
    for (int r = 0; r < NL; r++)
        for (int th = 1; th <= 2; th++)
            for (int mode = 0; mode < 2; mode++) t[mode][th][r] = decode_s(s[mode][th], tok + T + r * NB, NB, logits);
    for (int mode = 0; mode < 2; mode++)
        for (int th = 1; th <= 2; th++) {
            out[mode][th] = NB / median(t[mode][th], NL);
            vt_session_free(s[mode][th]);
        }
    vt_model_free(ml);
    return 0;
}

/* The batched sweep (issue 32): NSEQ sequences of SEQ tokens (the shipped
 * experiments' length) one per forward (vt_session_prefill each) and packed
 * (vt_session_prefill_batch: passes of up to VTLAB_BATCH_ROWS rows, one pass
 * at the default 256), against one prefill of the same NSEQ x SEQ tokens; 1
 * and 2 threads, NR interleaved rounds. sec[threads][k]: the median seconds of
 * k = 0 one per forward, 1 packed, 2 the long prefill. The logits of the
 * packed pass must be those of one per forward (checked here too). */
enum { BATCH_NSEQ = 8, BATCH_SEQ = 32, BATCH_NR = 5 };

static double batch_sweep_round(vt_session *s, int k, const int32_t *tok, float *logits) {
    char err[1024];
    int64_t off[BATCH_NSEQ + 1];
    for (int i = 0; i <= BATCH_NSEQ; i++) off[i] = (int64_t)i * BATCH_SEQ;
    double f0 = vt_session_forward_seconds(s);
    if (k == 0)
        for (int i = 0; i < BATCH_NSEQ; i++)
            must(vt_session_prefill(s, tok + off[i], BATCH_SEQ, logits + off[i] * s->m->cfg.vocab_size, err,
                                    sizeof err), err);
    else if (k == 1) must(vt_session_prefill_batch(s, BATCH_NSEQ, tok, off, logits, err, sizeof err), err);
    else must(vt_session_prefill(s, tok, BATCH_NSEQ * BATCH_SEQ, logits, err, sizeof err), err);
    return vt_session_forward_seconds(s) - f0;
}

static int batch_sweep(vt_model *m, const int32_t *tok, float *logits, double sec[3][3], int64_t *rows) {
    const int64_t n = (int64_t)BATCH_NSEQ * BATCH_SEQ * m->cfg.vocab_size;
    float *ref = malloc(sizeof(float) * (size_t)n);
    if (!ref) return -1;
    int same = 1;
    for (int th = 1; th <= 2; th++) {
        vt_session *s = session(m, th, "off");
        double t[3][BATCH_NR];
        *rows = vt_session_batch_rows(s);
        batch_sweep_round(s, 0, tok, ref);   /* warm-up, and the packed logits checked */
        batch_sweep_round(s, 1, tok, logits);
        same &= memcmp(ref, logits, sizeof(float) * (size_t)n) == 0;
        batch_sweep_round(s, 2, tok, logits);
        for (int r = 0; r < BATCH_NR; r++)
            for (int k = 0; k < 3; k++) t[k][r] = batch_sweep_round(s, k, tok, logits);
        for (int k = 0; k < 3; k++) sec[th][k] = median(t[k], BATCH_NR);
        vt_session_free(s);
    }
    free(ref);
    return same ? 0 : 1;
}

/* Prints the sweep and adds its phases: batch-one-tN, batch-packed-tN, batch-long-tN. */
static void batch_report(vt_model *m, const vt_config *cfg, const int32_t *tok, float *logits, const double *peak,
                         phases *P) {
    double sec[3][3];
    int64_t rows = 0;
    const int ntok = BATCH_NSEQ * BATCH_SEQ;
    int rc = batch_sweep(m, tok, logits, sec, &rows);
    if (rc < 0) { printf("batched sweep: skipped (out of memory)\n"); return; }
    printf("batched sweep (%d sequences of %d tokens: one per forward, and packed into passes of up to %lld rows "
           "(VTLAB_BATCH_ROWS); against one prefill of T=%d; median of %d interleaved rounds)%s:\n",
           BATCH_NSEQ, BATCH_SEQ, (long long)rows, ntok, BATCH_NR,
           rc ? " LOGITS DIFFER: packed != one per forward" : "; packed logits == one per forward");
    const char *nm[3] = {"one", "packed", "long"};
    for (int th = 1; th <= 2; th++) {
        printf("  t%d: one per forward %7.1f tok/s, packed %7.1f tok/s, T=%d %7.1f tok/s: packed/one = %.2fx, "
               "packed/T%d = %.2f\n", th, ntok / sec[th][0], ntok / sec[th][1], ntok, ntok / sec[th][2],
               sec[th][0] / sec[th][1], ntok, sec[th][2] / sec[th][1]);
        for (int k = 0; k < 3; k++) {
            char name[32];
            snprintf(name, sizeof name, "batch-%s-t%d", nm[k], th);
            vt_bench_phase *p = add_phase(P, name);
            const double ctx = (k == 2 ? ntok : BATCH_SEQ) / 2.0;
            p->batch = k == 1 ? BATCH_NSEQ : 1, p->threads = th, p->tokens = ntok, p->seconds = sec[th][k];
            p->flops = ntok * flops_per_token(cfg, ctx), p->peak_flops = peak[th] * 1e9;
        }
    }
}

/* `bench --load KIND ...`: a load of the contention table (contention.h). */
static int load_main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[2], "spin")) return cont_load_spin();
    if (argc >= 4 && !strcmp(argv[2], "bursty")) return cont_load_bursty((unsigned)atoi(argv[3]));
    if (argc >= 3 && !strcmp(argv[2], "membw")) return cont_load_membw();
    if (argc >= 6 && !strcmp(argv[2], "team")) return cont_load_team(argv[3], atoi(argv[4]), atoi(argv[5]));
    fprintf(stderr, "bench: --load spin | bursty SEED | membw | team DIR THREADS READY_FD\n");
    return 2;
}

int main(int argc, char **argv) {
    vt_openmp_wait_passively(argv);   /* as vtlab does: idle threads sleep */
    if (argc >= 2 && !strcmp(argv[1], "--load")) return load_main(argc, argv);
    bench_blas_best_core(argv);       /* the sgemm peak with OpenBLAS's AVX-512 kernels where the CPU has them */
    const char *json = NULL, *dir = NULL, *only = NULL;
    int T = 128, NDEC = 64, busy = 0, serve_mode = 0, npos = 0, contention = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--busy")) busy = 1;
        else if (!strcmp(argv[i], "--contention")) {
            contention = 1;
            if (i + 1 < argc && argv[i + 1][0] >= 'a' && argv[i + 1][0] <= 'z') only = argv[++i];
        }
        else if (!strcmp(argv[i], "--serve")) serve_mode = 1;
        else if (argv[i][0] != '-' && npos == 0) dir = argv[i], npos++;
        else if (argv[i][0] != '-' && npos == 1) T = atoi(argv[i]), npos++;
        else { dir = NULL; break; }
    }
    if (!dir) {
        fprintf(stderr, "usage: bench MODEL_DIR [T] [--json OUT.json] [--busy]\n"
                        "       bench MODEL_DIR [T] [--json OUT.json] --contention [PATTERN,...]  (contention.h)\n"
                        "       bench MODEL_DIR --serve      (commands on stdin; see tests/bench/bench.c)\n"
                        "env: BENCH_TMAX (largest T of the T-scaling table, default 4096), "
                        "BENCH_TRIAD_MIB (MiB per triad array, default 512)\n");
        return 2;
    }
    if (serve_mode) return serve(dir);
    setvbuf(stdout, NULL, _IOLBF, 0);   /* progress shows in a log file as it happens */
    if (T < 1) { fprintf(stderr, "bench: T must be >= 1\n"); return 2; }
    int tmax = env_int("BENCH_TMAX", 4096), triad_mib = env_int("BENCH_TRIAD_MIB", 512);
    int ndef = omp_get_num_procs();   /* VT_THREADS=0: all cores */
    phases P = {0};
    char err[1024], path[4096];
    vt_config cfg;
    vt_err e = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (vt_config_load(path, &cfg, &e)) { fprintf(stderr, "bench: %s\n", e.msg); return 2; }
    int64_t rss0 = rss_now();
    vt_model *m;
    if (vt_model_open(&m, dir, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 2; }
    int64_t rss_open = rss_now(), ckpt = checkpoint_bytes(dir);
    vt_model_info info;
    vt_model_get_info(m, &info);
    vt_dtype wdt = VT_F32;
    if (vt_dtype_from_name(info.weight_dtype, &wdt) != 0) wdt = VT_F32;
    double wsize = (double)vt_dtype_size(wdt), bpt = active_bytes_per_token(&cfg, wsize);

    int tlong = tmax >= 4096 ? 4096 : tmax >= 1024 ? 1024 : 256, tbuf = T > tlong ? T : tlong;
    int32_t *tok = make_tokens(cfg.vocab_size, tbuf + NDEC + 96);   /* + the weights phase's 3 x 32 steps */
    float *logits = malloc(sizeof(float) * (size_t)tbuf * (size_t)cfg.vocab_size);
    if (!logits) { fprintf(stderr, "bench: out of memory\n"); return 1; }
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);

    printf("model %s: hidden %lld, %lld layers, vocab %lld, weights %s; prefill T=%d, decode %d tokens\n", dir,
           (long long)cfg.hidden_size, (long long)cfg.num_hidden_layers, (long long)cfg.vocab_size, info.weight_dtype,
           T, NDEC);
    printf("memory: checkpoint %.1f MB on disk; RSS %.1f MB after opening the model (+%.1f MB over %.1f MB before "
           "= %.2f x the checkpoint)\n",
           mb((double)ckpt), mb((double)rss_open), mb((double)(rss_open - rss0)), mb((double)rss0),
           ckpt > 0 ? (double)(rss_open - rss0) / (double)ckpt : 0.0);
    printf("load: 1-minute load average %.2f on %d cores before the phases (above ~0: other processes share "
           "the cores; the %d-thread figures pay for it first)\n", loadavg(), ndef, ndef);
    print_flops(&cfg, T);
    {
        char blas[256];
        bench_blas_describe(blas, sizeof blas);
        printf("sgemm peak: %s\n", blas);
        printf("vtlab kernels: %s (model/gemm.h: avx512, else avx2, else scalar; VTLAB_GEMM_ISA forces one)\n",
               vt_gemm_isa());
    }
    print_bytes(&cfg, info.weight_dtype, wsize);
    if (contention) {   /* the contention table alone (make bench-contention) */
        int rc = contention_table(m, dir, &cfg, tok, tbuf + NDEC, T, logits, only, &P) ? 1 : 0;
        if (!rc && json && (rc = write_report(json, dir, tok, T + CONT_DECODE, &P, rss_open, rss_peak(), ckpt)) == 0)
            printf("bench: wrote %s\n", json);
        vt_model_free(m);
        free(tok); free(logits);
        return rc;
    }

    double peak[3] = {0}, dec_toks[3] = {0};
    vt_bench_phase *dec_ph[3] = {0};
    for (int threads = 1; threads <= 2; threads++) {
        char nm[32];
        peak[threads] = sgemm_gflops(1024, threads);
        vt_session *s = session(m, threads, "off");
        prefill_s(s, tok, T, logits);   /* warm-up */
        /* the median of 5 prefills: another tenant's burst can only slow a
         * prefill down, and a mean of 3 took one such burst in whole (one run:
         * 737 tok/s at 1 thread here, 903 in its own contention phase) */
        enum { RP = 5 };
        double g0 = vt_session_gemm_seconds(s), pt[RP], pmean = 0;
        for (int r = 0; r < RP; r++) pmean += pt[r] = prefill_s(s, tok, T, logits);
        pmean /= RP;
        double pg = (vt_session_gemm_seconds(s) - g0) / RP;
        const double pf = median(pt, RP);
        double ptoks = T / pf, pgf = ptoks * flops_per_token(&cfg, T / 2.0) / 1e9;
        double g1 = vt_session_gemm_seconds(s);
        double df = decode_s(s, tok + T, NDEC, logits), dg = vt_session_gemm_seconds(s) - g1;
        double dtoks = NDEC / df, dgf = dtoks * flops_per_token(&cfg, T + NDEC / 2.0) / 1e9;
        /* the peak again after the phases, the higher one kept: a burst on the
         * other core during one measurement (seen on the Zen 5 VM: a 2-thread
         * peak of 215 GFLOP/s, the 1-thread one, in 2 runs of 5, where others
         * gave 370-430) would otherwise inflate every fraction of this phase */
        const double peak_after = sgemm_gflops(1024, threads), peak_before = peak[threads];
        if (peak_after > peak[threads]) peak[threads] = peak_after;
        dec_toks[threads] = dtoks;
        snprintf(nm, sizeof nm, "prefill-t%d", threads);
        vt_bench_phase *p = add_phase(&P, nm);
        p->threads = threads, p->tokens = T, p->seconds = pf, p->flops = T * flops_per_token(&cfg, T / 2.0);
        p->peak_flops = peak[threads] * 1e9, p->gemm_seconds = pg;
        snprintf(nm, sizeof nm, "decode-t%d", threads);
        p = dec_ph[threads] = add_phase(&P, nm);
        p->context = T, p->threads = threads, p->tokens = NDEC, p->seconds = df;
        p->flops = NDEC * flops_per_token(&cfg, T + NDEC / 2.0), p->bytes = NDEC * bpt;
        p->peak_flops = peak[threads] * 1e9, p->gemm_seconds = dg;
        printf("threads %d: sgemm peak %.1f GFLOP/s (before the phases %.1f, after %.1f: the higher)\n", threads,
               peak[threads], peak_before, peak_after);
        printf("  prefill %8.1f tok/s  %6.2f GFLOP/s = %5.1f%% of sgemm peak, GEMM share %4.1f%% (median of %d; "
               "mean %.1f tok/s, slowest %.1f)\n", ptoks, pgf, 100 * pgf / peak[threads], 100 * pg / pmean, RP,
               T / pmean, T / pt[RP - 1]);
        printf("  decode  %8.1f tok/s  %6.2f GFLOP/s = %5.1f%% of sgemm peak, GEMM share %4.1f%%\n", dtoks, dgf,
               100 * dgf / peak[threads], 100 * dg / df);
        vt_session_free(s);
    }

    /* T-scaling: prefill ms/token at T = 256, 1024, 4096 (up to BENCH_TMAX),
     * 2 threads, median of interleaved rounds. Constant ms/token is linear
     * cost; a rising column is the T^2 of attention (or worse). */
    {
        int Ts[3] = {256, 1024, 4096}, nT = 0;
        while (nT < 3 && Ts[nT] <= tmax) nT++;
        if (nT == 0) printf("T-scaling: skipped (BENCH_TMAX=%d < 256)\n", tmax);
        else {
            enum { RS = 3 };
            double t[3][RS];
            vt_session *s = session(m, 2, "off");
            prefill_s(s, tok, Ts[0], logits);   /* warm-up */
            for (int r = 0; r < RS; r++)
                for (int i = 0; i < nT; i++) t[i][r] = prefill_s(s, tok, Ts[i], logits);
            vt_session_free(s);
            printf("T-scaling (prefill, 2 threads, median of %d interleaved rounds; BENCH_TMAX=%d):\n", RS, tmax);
            printf("  %6s %10s %12s %9s %11s\n", "T", "ms/token", "x ms/token", "GFLOP/s", "% of peak");
            double base = 0;
            for (int i = 0; i < nT; i++) {
                double sec = median(t[i], RS), mspt = 1e3 * sec / Ts[i];
                double fl = Ts[i] * flops_per_token(&cfg, Ts[i] / 2.0);
                if (i == 0) base = mspt;
                printf("  %6d %10.3f %11.2fx %9.2f %10.1f%%\n", Ts[i], mspt, mspt / base, fl / sec / 1e9,
                       100 * fl / sec / 1e9 / peak[2]);
                char nm[32];
                snprintf(nm, sizeof nm, "prefill-len%d-t2", Ts[i]);
                vt_bench_phase *p = add_phase(&P, nm);
                p->threads = 2, p->tokens = Ts[i], p->seconds = sec, p->flops = fl, p->peak_flops = peak[2] * 1e9;
            }
        }
    }

    /* against T = 256, as the T-scaling table: skipped with it (BENCH_TMAX < 256, the quick phases of
     * tests/cli/test_bench_record.sh), or alone with BENCH_BATCH=0 */
    if (tmax < BATCH_NSEQ * BATCH_SEQ)
        printf("batched sweep: skipped (BENCH_TMAX=%d < %d)\n", tmax, BATCH_NSEQ * BATCH_SEQ);
    else if (!env_int("BENCH_BATCH", 1)) printf("batched sweep: skipped (BENCH_BATCH=0)\n");
    else batch_report(m, &cfg, tok, logits, peak, &P);

    /* Contention (contention.h): other tenants on the cores while prefill and
     * decode run at the default thread count and at 1 thread, interleaved. */
    if (busy && contention_table(m, dir, &cfg, tok, tbuf + NDEC, T, logits, NULL, &P)) printf("contention: skipped (no /proc/self/exe)\n");

    /* probe overhead: interleave off / on / audit, median of per-mode times */
    enum { R = 9 };
    const char *modes[3] = {"off", "on", "audit"};
    double t[3][R];
    vt_session *ss[3];
    for (int k = 0; k < 3; k++) ss[k] = session(m, 2, modes[k]);
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 3; k++) t[k][r] = prefill_s(ss[k], tok, T, logits);
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

    printf("load: 1-minute load average %.2f after the forward phases (this bench's own threads included)\n",
           loadavg());
    /* peak RSS of everything above, before the triad's arrays */
    int64_t rss_pk = rss_peak();
    printf("memory: peak RSS %.1f MB (getrusage ru_maxrss, all phases above) = %.2f x the checkpoint's %.1f MB\n",
           mb((double)rss_pk), ckpt > 0 ? (double)rss_pk / (double)ckpt : 0.0, mb((double)ckpt));
    /* decode with the weights in panels (the default) vs mapped rows (VTLAB_WEIGHTS=map) */
    double wl[2][3] = {{0}};
    int have_wl = 0;
    vt_bench_phase *wl_ph[3] = {0};
    if (env_int("BENCH_WEIGHTS", 1)) {
        if (weights_phase(m, dir, tok, T, logits, wl) != 0) printf("weights panels vs mapped: failed (see above)\n");
        else {
            have_wl = 1;
            printf("weights in panels (default) vs mapped rows (VTLAB_WEIGHTS=map: the checkpoint's pages, zero-copy), "
                   "decode 32 steps after a %d-token prefill, median of 3 interleaved rounds:\n", T);
            for (int th = 1; th <= 2; th++) {
                printf("  t%d: panels %6.1f tok/s, mapped %6.1f tok/s: panels/mapped = %.2f\n", th, wl[0][th],
                       wl[1][th], wl[0][th] / wl[1][th]);
                char nm[32];
                snprintf(nm, sizeof nm, "decode-mapped-t%d", th);
                vt_bench_phase *p = wl_ph[th] = add_phase(&P, nm);
                p->context = T, p->threads = th, p->tokens = 32, p->seconds = 32 / wl[1][th];
                p->flops = 32 * flops_per_token(&cfg, T + 48.0), p->bytes = 32 * bpt;
                p->peak_flops = peak[th] * 1e9;
            }
        }
    } else printf("weights panels vs mapped: skipped (BENCH_WEIGHTS=0)\n");


    /* The triad, and decode against it. The host's memory bandwidth moves
     * with its other tenants (this VM's 2-thread triad: 34-71 GB/s from one
     * run to the next, minutes apart), so the triad runs in rounds
     * interleaved with decode rounds on the same threads, and each round's
     * decode bandwidth is divided by the triad measured next to it. */
    double gbs[3] = {0};
    triad_arrays ta;
    if (triad_mib < 1) printf("STREAM triad: skipped (BENCH_TRIAD_MIB=%d)\n", triad_mib);
    else if (triad_open(&ta, (size_t)triad_mib * 1024 * 1024 / sizeof(double)) != 0)
        printf("STREAM triad: skipped (cannot allocate 3 x %d MiB)\n", triad_mib);
    else {
        enum { RT = 5, NBT = 32 };
        double tg[3][RT], td[3][RT], fr[3][RT];
        vt_session *st[3] = {NULL, session(m, 1, "off"), session(m, 2, "off")};
        for (int th = 1; th <= 2; th++) prefill_s(st[th], tok, T, logits);
        for (int r = 0; r < RT; r++)
            for (int th = 1; th <= 2; th++) {
                tg[th][r] = triad_gbs(&ta, th, 2);
                td[th][r] = NBT / decode_s(st[th], tok + T, NBT, logits);
                fr[th][r] = td[th][r] * bpt / 1e9 / tg[th][r];
                if (tg[th][r] > gbs[th]) gbs[th] = tg[th][r];
            }
        for (int th = 1; th <= 2; th++) vt_session_free(st[th]);
        triad_close(&ta);
        printf("STREAM triad (a = b + s*c, 3 x %d MiB f64 arrays, 24 B/element, best of %d rounds of 2): "
               "1 thread %.2f GB/s, 2 threads %.2f GB/s\n", triad_mib, RT, gbs[1], gbs[2]);
        for (int th = 1; th <= 2; th++) {
            double bw = dec_toks[th] * bpt / 1e9;
            printf("  decode t%d: %.1f tok/s x %.4f MB/token = %.2f GB/s = %.1f%% of triad%s\n", th, dec_toks[th],
                   mb(bpt), bw, 100 * bw / gbs[th],
                   bw > gbs[th] && llc > 0 && bpt < (double)llc
                       ? " (above 100%: the active weights fit in the last-level cache)"
                       : "");
            dec_ph[th]->peak_bytes = gbs[th] * 1e9;
        }
        printf("decode vs triad, interleaved (%d rounds: triad, then %d decode steps, on the same threads; "
               "each round's decode GB/s over its own triad):\n", RT, NBT);
        for (int th = 1; th <= 2; th++) {
            double f[RT], g[RT], d[RT];
            memcpy(f, fr[th], sizeof f); memcpy(g, tg[th], sizeof g); memcpy(d, td[th], sizeof d);
            qsort(f, RT, sizeof f[0], cmp);
            printf("  t%d: decode %.1f tok/s = %.2f GB/s, triad %.2f GB/s (medians): decode/triad median %.1f%% "
                   "(min %.1f%%, max %.1f%%)\n", th, median(d, RT), median(d, RT) * bpt / 1e9, median(g, RT),
                   100 * f[RT / 2], 100 * f[0], 100 * f[RT - 1]);
        }
        if (have_wl)
            for (int th = 1; th <= 2; th++) {
                double bw = wl[1][th] * bpt / 1e9;
                printf("  decode t%d, weights mapped: %.1f tok/s = %.2f GB/s = %.1f%% of triad\n", th, wl[1][th], bw,
                       100 * bw / gbs[th]);
                wl_ph[th]->peak_bytes = gbs[th] * 1e9;
            }
    }

    int rc = 0;
    if (json) {
        int ntok = T + NDEC;
        rc = write_report(json, dir, tok, ntok, &P, rss_open, rss_pk, ckpt);
        if (!rc) printf("bench: wrote %s\n", json);
    }
    vt_model_free(m);
    free(tok); free(logits);
    return rc;
}
