/*
 * ops.c — the small numeric building blocks of the CPU forward pass: the one
 * GEMM entry points (gemm.h, timed so the benchmark can report the GEMM
 * share), the session's workspace, RMSNorm, bf16 activation rounding and the
 * activations (scalar and array forms, on vmath.h's exp).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "vmath.h"

void vt_gemm_jobs(vt_session *s, const vt_gemm_job *jobs, int64_t njobs) {
    double t0 = omp_get_wtime();
    const int64_t parallel_madds = vt_gemm_batch(jobs, njobs);
    s->gemm_sec += omp_get_wtime() - t0;
    vt_team_add(&s->team, parallel_madds);
}

void vt_gemm_xwT(vt_session *s, const float *x, int64_t M, int64_t K, const vt_tensor *W, float *y) {
    vt_gemm_job j = {x, K, M, W, y, W->shape[0]};
    vt_gemm_jobs(s, &j, 1);
}

double vt_host_gemm_gflops(void) {
    enum { N = 256, ITER = 4, REPS = 5 };
    float *a = malloc(vt_row_size(VT_F32, (int64_t)N * N * 3));
    if (!a) return NAN;
    float *b = a + N * N, *c = b + N * N;
    for (int i = 0; i < N * N; i++) a[i] = (float)(i % 17) / 17.0f, b[i] = (float)(i % 13) / 13.0f;
    vt_tensor w = {0};
    const int64_t shp[2] = {N, N};
    if (vt_tensor_view(&w, VT_F32, 2, shp, b, vt_row_size(VT_F32, (int64_t)N * N), NULL)) { free(a); return NAN; }
    const vt_gemm_job job = {a, N, N, &w, c, N};
    double best = INFINITY;
    for (int r = 0; r < REPS; r++) {
        double t0 = omp_get_wtime();
        for (int k = 0; k < ITER; k++) vt_gemm_batch(&job, 1);
        double dt = omp_get_wtime() - t0;
        if (dt > 0 && dt < best) best = dt;
    }
    free(a);
    return isinf(best) ? NAN : 2.0 * N * N * N * ITER / best / 1e9;
}

/* ------------------------------------------------------------ workspace */

enum { WS_ALIGN = 64 };

static size_t ws_round(size_t n) { return (n + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

void *vt_ws_alloc(vt_session *s, vt_dtype dt, int64_t n, vt_err *err) {
    vt_ws *w = &s->ws;
    size_t bytes = ws_round(vt_row_size(dt, n > 0 ? n : 1));
    if (bytes == 0) { vt_errf(err, VT_ENOMEM, "workspace: %lld elements of %s overflow", (long long)n, vt_dtype_name(dt)); return NULL; }
    void *p = NULL;
    if (w->cap - w->used >= bytes) {
        p = w->base + w->used;
        w->used += bytes;
    } else {
        if (w->nextra == w->extra_cap) {
            int64_t cap = w->extra_cap ? 2 * w->extra_cap : 16;
            void **e = realloc(w->extra, (size_t)cap * sizeof *e);
            if (e) w->extra = e;
            size_t *z = e ? realloc(w->extra_size, (size_t)cap * sizeof *z) : NULL;
            if (z) w->extra_size = z;
            if (!e || !z) { vt_errf(err, VT_ENOMEM, "workspace: out of memory"); return NULL; }
            w->extra_cap = cap;
        }
        if (!(p = aligned_alloc(WS_ALIGN, bytes))) { vt_errf(err, VT_ENOMEM, "workspace: out of memory for %zu bytes", bytes); return NULL; }
        w->extra[w->nextra] = p;
        w->extra_size[w->nextra++] = bytes;
        w->extra_bytes += bytes;
    }
    if (w->used + w->extra_bytes > w->peak) w->peak = w->used + w->extra_bytes;
    return p;
}

vt_ws_mark vt_ws_mark_now(const vt_session *s) { return (vt_ws_mark){s->ws.used, s->ws.nextra}; }

void vt_ws_release(vt_session *s, vt_ws_mark mk) {
    vt_ws *w = &s->ws;
    while (w->nextra > mk.nextra) {
        w->nextra--;
        w->extra_bytes -= w->extra_size[w->nextra];
        free(w->extra[w->nextra]);
    }
    w->used = mk.used;
}

/* Start of a forward: everything is released; when the last forward needed
 * more than the base block, the base grows to its peak (best effort: on
 * failure the old block stays and blocks are malloc'ed as needed). */
void vt_ws_reset(vt_session *s) {
    vt_ws *w = &s->ws;
    vt_ws_release(s, (vt_ws_mark){0, 0});
    if (w->peak > w->cap) {
        void *p = aligned_alloc(WS_ALIGN, ws_round(w->peak));
        if (p) {
            free(w->base);
            w->base = p;
            w->cap = ws_round(w->peak);
        }
    }
}

void vt_ws_free(vt_session *s) {
    vt_ws_release(s, (vt_ws_mark){0, 0});
    free(s->ws.base);
    free(s->ws.extra);
    free(s->ws.extra_size);
    memset(&s->ws, 0, sizeof s->ws);
}

void vt_act_round(const vt_session *s, float *x, int64_t n) {
    if (!s->act_cur) return;
    if (s->lossy_cur) {
        for (int64_t i = 0; i < n; i++) x[i] = vt_round_mantissa(x[i], s->k.lossy_bits);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = vt_round_bf16(x[i]);
}

float vt_round_mantissa(float x, int bits) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u || bits >= 23) return x;
    const int drop = 23 - (bits < 0 ? 0 : bits);
    const uint32_t half = (1u << (drop - 1)) - 1u, lsb = (u >> drop) & 1u;
    u = (u + half + lsb) & ~((1u << drop) - 1u);
    memcpy(&x, &u, 4);
    return x;
}

/* Element i goes to partial sum i mod 8, each partial added in order of i;
 * the partials then combine pairwise in a fixed tree. Eight independent
 * chains where one sequential chain waited on every add (a 1024-element row
 * took ~4000 cycles: rmsnorm, the KDA q/k and output norms were ~2.5% of a
 * 1-thread 288M prefill); the order is fixed, so every compiler and
 * instruction set gives the same bits. */
double vt_sum_squares(const float *x, int64_t n) {
    double p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0, p6 = 0, p7 = 0;   /* locals: kept in registers */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float *v = x + i;
        p0 += (double)v[0] * v[0], p1 += (double)v[1] * v[1], p2 += (double)v[2] * v[2], p3 += (double)v[3] * v[3];
        p4 += (double)v[4] * v[4], p5 += (double)v[5] * v[5], p6 += (double)v[6] * v[6], p7 += (double)v[7] * v[7];
    }
    double t[8] = {0, 0, 0, 0, 0, 0, 0, 0};   /* the tail, n mod 8 elements, to partials 0.. in order */
    for (int j = 0; i < n; i++, j++) t[j] = (double)x[i] * x[i];
    p0 += t[0], p1 += t[1], p2 += t[2], p3 += t[3], p4 += t[4], p5 += t[5], p6 += t[6], p7 += t[7];
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
}

void vt_rmsnorm(vt_session *s, const float *x, int64_t M, int64_t n, const float *w, double eps, float *y) {
    const int act = s->act_cur;
    #pragma omp parallel for schedule(static) if (M * n >= VT_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const double ss = vt_sum_squares(xr, n);
        float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
        if (act) {
            for (int64_t i = 0; i < n; i++) yr[i] = vt_lever_round(s, vt_lever_round(s, xr[i] * inv) * w[i]);
            continue;
        }
        /* The same two multiplies per element, in vectors (x == y in place is
         * fine: element i is read before it is written, and by no other). */
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * inv * w[i];
    }
}

/* The activations, on vt_expf (vmath.h): the scalar forms below and the
 * array forms after them compute the same operations, so an element's bits
 * never depend on which ran it (nor on the instruction set). */
float vt_silu(float x) { return x / (1.0f + vt_expf(-x)); }
float vt_sigmoid(float x) { return 1.0f / (1.0f + vt_expf(-x)); }
float vt_softplus(float x) { return x > 20.0f ? x : vt_log1pf_pos(vt_expf(x)); }

static int simd512(void) { return strcmp(vt_gemm_isa(), "avx512") == 0; }   /* VTLAB_GEMM_ISA=scalar: none */
static int simd256(void) { return strcmp(vt_gemm_isa(), "avx2") == 0; }

#define VT_AVX512_FN __attribute__((target("avx512f")))
/* -x as the scalar code's -x: a sign flip (0 - x would keep a NaN's sign) */
VT_AVX512_FN static __m512 neg16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}
VT_AVX512_FN static __m512 silu16(__m512 x) {
    const __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), vt_exp16(neg16(x)));
#ifdef VT_MUTATE_SILU_RCP
    return _mm512_mul_ps(x, _mm512_rcp14_ps(den));   /* mutation (make mutation): a "fast" reciprocal, other bits */
#else
    return _mm512_div_ps(x, den);
#endif
}
VT_AVX512_FN static __m512 sigmoid16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, vt_exp16(neg16(x))));
}

VT_AVX512_FN static __m512 softplus16(__m512 x) {
    const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ);
    return _mm512_mask_blend_ps(big, vt_log1p16_pos(vt_exp16(x)), x);
}

/* The same on 8 lanes with AVX2 (a CPU without AVX-512). */
#define VT_AVX2_FN __attribute__((target("avx2")))
VT_AVX2_FN static __m256 neg8(__m256 x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }
VT_AVX2_FN static __m256 silu8(__m256 x) {
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), vt_exp8(neg8(x)));
#ifdef VT_MUTATE_SILU_RCP
    return _mm256_mul_ps(x, _mm256_div_ps(_mm256_set1_ps(1.0f), den));   /* silu_rcp's defect (below) */
#else
    return _mm256_div_ps(x, den);
#endif
}
VT_AVX2_FN static __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, vt_exp8(neg8(x))));
}
VT_AVX2_FN static __m256 softplus8(__m256 x) {
    const __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(20.0f), _CMP_GT_OQ);
    return _mm256_blendv_ps(vt_log1p8_pos(vt_exp8(x)), x, big);
}

/* The array forms: y = op(x), 16 lanes at a time with AVX-512 (the tail
 * masked), 8 at a time with AVX2 (the tail by the scalar form), else the
 * scalar form element by element. */
enum act_op { ACT_EXP, ACT_SIGMOID, ACT_SOFTPLUS };
static float act1(enum act_op op, float x) {
    return op == ACT_EXP ? vt_expf(x) : op == ACT_SIGMOID ? vt_sigmoid(x) : vt_softplus(x);
}
static inline __mmask16 lanes16(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }
VT_AVX512_FN static void act512(enum act_op op, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, op == ACT_EXP ? vt_exp16(v) : op == ACT_SIGMOID ? sigmoid16(v) : softplus16(v));
    }
}
VT_AVX2_FN static int64_t act256(enum act_op op, const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, op == ACT_EXP ? vt_exp8(v) : op == ACT_SIGMOID ? sigmoid8(v) : softplus8(v));
    }
    return i;
}
static void act_array(enum act_op op, const float *x, float *y, int64_t n) {
    if (simd512()) { act512(op, x, y, n); return; }
    for (int64_t i = simd256() ? act256(op, x, y, n) : 0; i < n; i++) y[i] = act1(op, x[i]);
}
void vt_exp_array(const float *x, float *y, int64_t n) { act_array(ACT_EXP, x, y, n); }
void vt_sigmoid_array(const float *x, float *y, int64_t n) { act_array(ACT_SIGMOID, x, y, n); }
void vt_softplus_array(const float *x, float *y, int64_t n) { act_array(ACT_SOFTPLUS, x, y, n); }

/* a = silu(a) * b (b NULL: silu(a)), in place. */
VT_AVX512_FN static void silu_mul512(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 x = silu16(_mm512_maskz_loadu_ps(m, a + i));
        _mm512_mask_storeu_ps(a + i, m, b ? _mm512_mul_ps(x, _mm512_maskz_loadu_ps(m, b + i)) : x);
    }
}
#ifdef VT_MUTATE_SILU_RCP
static float silu_rcp(float x) { return x * (1.0f / (1.0f + vt_expf(-x))); }   /* the same defect, no AVX-512 */
#define SILU_ARRAY silu_rcp
#else
#define SILU_ARRAY vt_silu
#endif
VT_AVX2_FN static int64_t silu_mul256(float *a, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = silu8(_mm256_loadu_ps(a + i));
        _mm256_storeu_ps(a + i, b ? _mm256_mul_ps(x, _mm256_loadu_ps(b + i)) : x);
    }
    return i;
}
void vt_silu_mul(float *a, const float *b, int64_t n) {
    if (simd512()) { silu_mul512(a, b, n); return; }
    const int64_t i0 = simd256() ? silu_mul256(a, b, n) : 0;
    if (b) for (int64_t i = i0; i < n; i++) a[i] = SILU_ARRAY(a[i]) * b[i];
    else for (int64_t i = i0; i < n; i++) a[i] = SILU_ARRAY(a[i]);
}
