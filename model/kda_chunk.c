/*
 * kda_chunk.c — the KDA delta-rule core: the token loop and the chunked form
 * (kda_chunk.h).
 *
 * The chunked form, for one head and one chunk of n <= C tokens r = 0..n-1
 * starting from state S0 (f_r = exp(g_r) per key channel; "x o y" is the
 * elementwise product; every decay factor below is a product of f's, so it
 * lies in [0, 1]: no exp(-G) is ever formed and nothing can overflow):
 *
 *   Gam_r    = f_0 o ... o f_r                      decay from the chunk start
 *   A[r][s]  = k_r . (k_s o f_{s+1} o ... o f_r)    (s < r)
 *   Aq[r][s] = q_r . (k_s o f_{s+1} o ... o f_r)    (s <= r)
 *
 * The recurrence for the delta of token r, d_r = beta_r (v_r - k_r^T S_r^-),
 * with S_r^- the state decayed to r before r's update, unrolls to
 *
 *   d_r + beta_r sum_{s<r} A[r][s] d_s = beta_r (v_r - (k_r o Gam_r)^T S0)
 *
 * i.e. (I + diag(beta) A) D = R: a unit lower-triangular system, solved with
 * the explicit inverse Tm = (I + diag(beta) A)^-1 (the UT transform, by
 * forward substitution), D = Tm R. Then
 *
 *   o_r = (q_r o Gam_r)^T S0 + sum_{s<=r} Aq[r][s] d_s
 *   S   = diag(Gam_{n-1}) S0 + sum_s (k_s o f_{s+1} o ... o f_{n-1}) d_s^T
 *
 * all matrix products (vt_sgemm_nn / vt_sgemm_nt). A and Aq are built in
 * sub-chunks of B tokens: the block of rows in sub-chunk a against the columns
 * of the earlier sub-chunks is one product of (x_r o f_{a0} o ... o f_r) with
 * (k_s o f_{s+1} o ... o f_{a0-1}) (a0: the sub-chunk's first token); the
 * diagonal block is built token by token from a running buffer of the
 * sub-chunk's keys decayed to the current token (the recurrence's own
 * products of f, with no reference point that could overflow).
 *
 * Heads are independent and each is computed by one thread start to end with
 * the same sequence of operations, so the result does not depend on the
 * thread count.
 */
#include "kda_chunk.h"

#include <immintrin.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "model.h"
#include "vmath.h"

/* ------------------------------------------------------------- recurrent */

/* One head's token loop with whole state rows in registers (d = 16 nv,
 * nv <= 8): per element the same operations in the same order as the
 * blocked loop of vt_kda_recurrent (a multiply, then an add: C11 mode
 * contracts nothing into an FMA there, so neither does this), hence the same
 * bits. It walks the head's d x d state front to back, twice per token; the
 * blocked loop strides across it 32 columns at a time, and at decode, with the
 * state of every layer evicted by the weights streamed since the last token,
 * waits on memory for each stride (the loop was ~4% of a 288M decode step). */
#define VT_AVX512 __attribute__((target("avx512f")))
static inline __attribute__((always_inline)) VT_AVX512 void head_rows(
    const int nv, int64_t T, int64_t H, int64_t d, int64_t h, const float *q, const float *k, const float *v,
    const float *g, const float *beta, float *S, float *o, const float *f) {
    const int64_t P = H * d;
    float *Sh = S + h * d * d;
    for (int64_t t = 0; t < T; t++) {
        const float *qh = q + t * P + h * d, *kh = k + t * P + h * d, *vh = v + t * P + h * d;
        const __m512 bt = _mm512_set1_ps(beta[t * H + h]);
        __m512 u[8], dl[8], acc[8];
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++) u[c] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i++) {
            float *row = Sh + i * d;
            const __m512 di = _mm512_set1_ps(f ? f[t * P + h * d + i] : vt_expf(g[t * P + h * d + i]));
            const __m512 ki = _mm512_set1_ps(kh[i]);
#pragma GCC unroll 8
            for (int c = 0; c < nv; c++) {
                const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * c), di);
                _mm512_storeu_ps(row + 16 * c, r);
                u[c] = _mm512_add_ps(u[c], _mm512_mul_ps(ki, r));
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++) {
            dl[c] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(vh + 16 * c), u[c]));
            acc[c] = _mm512_setzero_ps();
        }
        for (int64_t i = 0; i < d; i++) {
            float *row = Sh + i * d;
            const __m512 ki = _mm512_set1_ps(kh[i]), qi = _mm512_set1_ps(qh[i]);
#pragma GCC unroll 8
            for (int c = 0; c < nv; c++) {
                const __m512 r = _mm512_add_ps(_mm512_loadu_ps(row + 16 * c), _mm512_mul_ps(ki, dl[c]));
                _mm512_storeu_ps(row + 16 * c, r);
                acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(qi, r));
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++) _mm512_storeu_ps(o + t * P + h * d + 16 * c, acc[c]);
    }
}

#define HEAD_ROWS_FN(n)                                                                                         \
    VT_AVX512 __attribute__((noinline)) static void head_rows_##n(                                             \
        int64_t T, int64_t H, int64_t d, int64_t h, const float *q, const float *k, const float *v,             \
        const float *g, const float *beta, float *S, float *o, const float *f) {                              \
        head_rows(n, T, H, d, h, q, k, v, g, beta, S, o, f);                                                  \
    }
HEAD_ROWS_FN(1) HEAD_ROWS_FN(2) HEAD_ROWS_FN(3) HEAD_ROWS_FN(4)
HEAD_ROWS_FN(5) HEAD_ROWS_FN(6) HEAD_ROWS_FN(7) HEAD_ROWS_FN(8)

typedef void (*head_rows_fn)(int64_t, int64_t, int64_t, int64_t, const float *, const float *, const float *,
                             const float *, const float *, float *, float *, const float *);
static const head_rows_fn head_rows_by_nv[9] = {NULL,        head_rows_1, head_rows_2, head_rows_3, head_rows_4,
                                                head_rows_5, head_rows_6, head_rows_7, head_rows_8};

typedef struct recurrent_heads {
    head_rows_fn fn;
    int64_t T, H, d;
    const float *q, *k, *v, *g, *beta;
    float *S, *o;
    const float *f;
} recurrent_heads;

static void recurrent_head(void *arg, int64_t h, int thread) {
    const recurrent_heads *a = arg;
    a->fn(a->T, a->H, a->d, h, a->q, a->k, a->v, a->g, a->beta, a->S, a->o, a->f);
}

/* Same structure as kda.c's loop (column blocks of JB, i outside, j inside,
 * u and o summed over i in order 0..d-1), so the same bits; with AVX-512 and
 * d a multiple of 16 up to 128, head_rows computes the same elements the same
 * way a whole row at a time (test_kda_chunk.c, test_recurrent_is_kda_loop). */
void vt_kda_recurrent(int64_t T, int64_t H, int64_t d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, float *S, float *o, float *decay) {
    if (T <= 0 || H <= 0 || d <= 0) return;
    const int64_t P = H * d;
    /* exp(g) once per element into the caller's buffer; without one, each
     * column block computes it again, to the same value */
    float *f = decay;
    if (f) {
        #pragma omp parallel for schedule(static) if (T * P > 65536)
        for (int64_t t = 0; t < T; t++) vt_exp_array(g + t * P, f + t * P, P);
    }
    if (d % 16 == 0 && d <= 128 && strcmp(vt_gemm_isa(), "avx512") == 0) {   /* VTLAB_GEMM_ISA=scalar: the loop below */
        /* heads on the team: a decode step's (T = 1) on the step's (vt_par_for) */
        recurrent_heads a = {head_rows_by_nv[d / 16], T, H, d, q, k, v, g, beta, S, o, f};
        vt_par_for(H, T * P * d, INT_MAX, recurrent_head, &a);
        return;
    }
    enum { JB = 32 };
    const int64_t nb = (d + JB - 1) / JB;
    /* parallel only when the work pays for a fork-join (VT_PAR_MIN_WORK: a
     * decode of a small model, a tiny model's prefill run on the calling thread) */
    #pragma omp parallel for collapse(2) schedule(static) if (T * P * d >= VT_PAR_MIN_WORK)
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t j0 = b * JB, nj = d - j0 < JB ? d - j0 : JB;
            float u[JB], dl[JB], acc[JB];
            for (int64_t t = 0; t < T; t++) {
                const float *qh = q + t * P + h * d, *kh = k + t * P + h * d;
                const float *vh = v + t * P + h * d + j0;
                const float bt = beta[t * H + h];
                for (int64_t jj = 0; jj < nj; jj++) u[jj] = 0.0f;
                for (int64_t i = 0; i < d; i++) {
                    float *row = S + (h * d + i) * d + j0;
                    const float di = f ? f[t * P + h * d + i] : vt_expf(g[t * P + h * d + i]), ki = kh[i];
                    for (int64_t jj = 0; jj < nj; jj++) { row[jj] *= di; u[jj] += ki * row[jj]; }
                }
                for (int64_t jj = 0; jj < nj; jj++) { dl[jj] = bt * (vh[jj] - u[jj]); acc[jj] = 0.0f; }
                for (int64_t i = 0; i < d; i++) {
                    float *row = S + (h * d + i) * d + j0;
                    const float ki = kh[i], qi = qh[i];
                    for (int64_t jj = 0; jj < nj; jj++) { row[jj] += ki * dl[jj]; acc[jj] += qi * row[jj]; }
                }
                for (int64_t jj = 0; jj < nj; jj++) o[t * P + h * d + j0 + jj] = acc[jj];
            }
        }
}

/* --------------------------------------------------------------- chunked */

enum { C = VT_KDA_CHUNK, B = VT_KDA_SUBCHUNK, ALIGN = 16 /* floats: 64 bytes */ };

static int64_t round_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* One thread's buffers, carved from the workspace in this order. */
typedef struct {
    float *F;    /* [C][d]  f_r = exp(g_r) */
    float *KG;   /* [C][d]  k_r o Gam_r */
    float *QG;   /* [C][d]  q_r o Gam_r */
    float *PK;   /* [C][d]  (k_r o Gam_r)^T S0 */
    float *R;    /* [C][d]  beta_r (v_r - PK_r) */
    float *D;    /* [C][d]  the deltas d_r */
    float *KTO;  /* [C][d]  k_s decayed to the start of the current sub-chunk, at the end: to the chunk's end */
    float *KHT;  /* [d][C]  KTO transposed (the state update's left factor) */
    float *XK;   /* [B][d]  k_r decayed from the start of its sub-chunk to r (inclusive) */
    float *XQ;   /* [B][d]  q_r likewise */
    float *KD;   /* [B][d]  the sub-chunk's keys k_s decayed to the current token r */
    float *A;    /* [C][C]  k.k products (strictly lower used) */
    float *AQ;   /* [C][C]  q.k products (lower, zero above the diagonal) */
    float *TM;   /* [C][C]  (I + diag(beta) A)^-1, zero above the diagonal */
    float *GAM;  /* [d]     running Gam_r */
    float *RHO;  /* [d]     running decay from the sub-chunk start */
    int avx;     /* the diagonal block with AVX-512 (diag_block_avx512) */
} kda_buf;

static int64_t chunk_len(int64_t T) { return T < C ? T : C; }

static size_t per_thread_floats(int64_t T, int64_t d) {
    const int64_t c = chunk_len(T), dr = round_up(d), cr = round_up(c);
    return (size_t)(7 * c * dr + d * cr + 3 * B * dr + 3 * c * cr + 2 * dr);
}

static kda_buf carve(float *w, int64_t T, int64_t d) {
    const int64_t c = chunk_len(T), dr = round_up(d), cr = round_up(c);
    kda_buf b;
    b.F = w;            w += c * dr;
    b.KG = w;           w += c * dr;
    b.QG = w;           w += c * dr;
    b.PK = w;           w += c * dr;
    b.R = w;            w += c * dr;
    b.D = w;            w += c * dr;
    b.KTO = w;          w += c * dr;
    b.XK = w;           w += B * dr;
    b.XQ = w;           w += B * dr;
    b.KD = w;           w += B * dr;
    b.KHT = w;          w += d * cr;
    b.A = w;            w += c * cr;
    b.AQ = w;           w += c * cr;
    b.TM = w;           w += c * cr;
    b.GAM = w;          w += dr;
    b.RHO = w;
    b.avx = 0;
    return b;
}

size_t vt_kda_chunked_work_bytes(int64_t T, int64_t H, int64_t d, int nthreads) {
    if (T < 0 || H <= 0 || d <= 0 || d > (1 << 16) || nthreads < 1) return 0;
    const size_t per = per_thread_floats(T, d) * sizeof(float);
    if ((size_t)nthreads > (SIZE_MAX - 64) / per) return 0;
    return per * (size_t)nthreads + 64;   /* + 64: room to align the start */
}

/* The diagonal block of sub-chunk [a0, a0 + nb) of A and AQ: for each row r
 * and s <= r in the sub-chunk, A[r][s] = k_r . KD_s and AQ[r][s] = q_r . KD_s
 * with KD_s the key k_s decayed to r (k_s o f_{s+1} o ... o f_r), each a
 * chain over the key channels i = 0..d-1 of acc = fmaf(x_i, KD_s[i], acc)
 * from 0 (the vt_sgemm_nt chain of gemm.h); AQ is 0 above the diagonal. KD
 * ([B][d], row stride ld) holds the keys decayed to the current token, each
 * decayed once per token by its f. At the end, the keys (decayed to the
 * sub-chunk's last token) go to KTO rows a0.. . */
static void diag_block(int64_t a0, int64_t nb, int64_t d, int64_t P, int64_t ld, int64_t lc, const float *q,
                       const float *k, const float *F, float *KD, float *A, float *AQ, float *KTO) {
    for (int64_t m = 0; m < nb; m++) {
        const int64_t r = a0 + m;
        const float *Fr = F + r * ld;
#ifndef VT_MUTATE_KDA_CHUNK_NO_DECAY
        for (int64_t s = 0; s < m; s++) {
            float *kd = KD + s * ld;
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) kd[i] *= Fr[i];
        }
#endif
        memcpy(KD + m * ld, k + r * P, (size_t)d * sizeof *KD);
        vt_sgemm_nt(1, m + 1, d, k + r * P, ld, KD, ld, A + r * lc + a0, lc, 0);
        vt_sgemm_nt(1, m + 1, d, q + r * P, ld, KD, ld, AQ + r * lc + a0, lc, 0);
        for (int64_t s = m + 1; s < nb; s++) AQ[r * lc + a0 + s] = 0.0f;
    }
    memcpy(KTO + a0 * ld, KD, (size_t)(nb * ld) * sizeof *KTO);
}

/* diag_block with AVX-512 and B = 16: the same products in the same order,
 * the keys held transposed (KDT[i][s], 16 floats per channel, in KD's space)
 * so that one channel step is one vector over the sub-chunk's tokens s: per
 * token r, d steps of (decay lanes s < m by f_r[i], put k_r[i] in lane m, two
 * FMAs). Lane s of the accumulators is the chain over i of A[r][s] and
 * AQ[r][s]; the two M = 1 products per token it replaces were ~1.3% of a
 * 1-thread 288M prefill (each call transposing its 16 rows of keys). */
VT_AVX512 static void diag_block_avx512(int64_t a0, int64_t nb, int64_t d, int64_t P, int64_t ld, int64_t lc,
                                        const float *q, const float *k, const float *F, float *KDT, float *A,
                                        float *AQ, float *KTO) {
    for (int64_t m = 0; m < nb; m++) {
        const int64_t r = a0 + m;
        const float *Fr = F + r * ld, *kr = k + r * P, *qr = q + r * P;
        const __mmask16 prev = (__mmask16)((1u << m) - 1), self = (__mmask16)(1u << m);
        __m512 acc_a = _mm512_setzero_ps(), acc_q = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i++) {
            __m512 v = _mm512_maskz_loadu_ps(prev, KDT + i * 16);   /* lanes >= m: never read stale */
#ifndef VT_MUTATE_KDA_CHUNK_NO_DECAY
            v = _mm512_mul_ps(v, _mm512_set1_ps(Fr[i]));
#endif
            const __m512 ki = _mm512_set1_ps(kr[i]);
            v = _mm512_mask_mov_ps(v, self, ki);
            _mm512_storeu_ps(KDT + i * 16, v);
#ifndef VT_MUTATE_KDA_DIAG_UNFUSED   /* make mutation: a product then a sum, not the chain's FMA */
            acc_a = _mm512_fmadd_ps(ki, v, acc_a);
#else
            acc_a = _mm512_add_ps(_mm512_mul_ps(ki, v), acc_a);
#endif
            acc_q = _mm512_fmadd_ps(_mm512_set1_ps(qr[i]), v, acc_q);
        }
        const __mmask16 upto = (__mmask16)((2u << m) - 1), row = (__mmask16)((1u << nb) - 1);
        _mm512_mask_storeu_ps(A + r * lc + a0, upto, acc_a);
        _mm512_mask_storeu_ps(AQ + r * lc + a0, row, _mm512_maskz_mov_ps(upto, acc_q));
    }
    for (int64_t s = 0; s < nb; s++)
        for (int64_t i = 0; i < d; i++) KTO[(a0 + s) * ld + i] = KDT[i * 16 + s];
}

/* One chunk's geometry: n tokens of head dimension d; P and H the row
 * strides of q, k, v, g, o and of beta; ld the row stride of the [.][d]
 * buffers, lc that of the [c][c] buffers and of KHT. */
typedef struct chunk_dims {
    int64_t n, d, P, H, ld, lc;
} chunk_dims;

/* Decays F, and q, k decayed from the chunk start (QG, KG; GAM ends as
 * Gam_{n-1}); the next chunk's first n_next rows are prefetched on the way. */
static void chunk_decays(const kda_buf *b, const chunk_dims *cd, int64_t n_next, const float *q, const float *k,
                         const float *v, const float *g) {
    const int64_t n = cd->n, d = cd->d, P = cd->P, ld = cd->ld;
    float *F = b->F, *KG = b->KG, *QG = b->QG, *GAM = b->GAM;
    for (int64_t r = 0; r < n; r++) {
        const float *gr = g + r * P, *qr = q + r * P, *kr = k + r * P;
        float *Fr = F + r * ld, *kg = KG + r * ld, *qg = QG + r * ld;
        /* the same row of the next chunk: rows are a page apart (one head of a
         * token), too far apart for the hardware prefetcher */
        if (r < n_next)
            for (int64_t i = 0; i < d; i += 16) {
                __builtin_prefetch(gr + C * P + i);
                __builtin_prefetch(qr + C * P + i);
                __builtin_prefetch(kr + C * P + i);
                __builtin_prefetch(v + (r + C) * P + i);
            }
        vt_exp_array(gr, Fr, d);
        if (r == 0) memcpy(GAM, Fr, (size_t)d * sizeof *GAM);
        else {
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) GAM[i] *= Fr[i];
        }
        #pragma omp simd
        for (int64_t i = 0; i < d; i++) { kg[i] = kr[i] * GAM[i]; qg[i] = qr[i] * GAM[i]; }
    }
}

/* The initial state's contribution: PK = KG S0, o = QG S0, and the right-hand
 * side R = beta (v - PK). */
static void chunk_initial(const kda_buf *b, const chunk_dims *cd, const float *v, const float *beta, const float *S,
                          float *o) {
    const int64_t n = cd->n, d = cd->d, P = cd->P, H = cd->H, ld = cd->ld;
    float *PK = b->PK, *R = b->R;
    vt_sgemm_nn(n, d, d, b->KG, ld, S, d, PK, ld, 0);
    vt_sgemm_nn(n, d, d, b->QG, ld, S, d, o, P, 0);
    for (int64_t r = 0; r < n; r++) {
        const float br = beta[r * H];
        #pragma omp simd
        for (int64_t j = 0; j < d; j++) R[r * ld + j] = br * (v[r * P + j] - PK[r * ld + j]);
    }
}

/* A and AQ, sub-chunk by sub-chunk; KTO ends as the keys decayed to the
 * chunk's end. */
static void chunk_products(const kda_buf *b, const chunk_dims *cd, const float *q, const float *k) {
    const int64_t n = cd->n, d = cd->d, P = cd->P, ld = cd->ld, lc = cd->lc;
    float *F = b->F, *KTO = b->KTO, *XK = b->XK, *XQ = b->XQ, *KD = b->KD, *A = b->A, *AQ = b->AQ, *RHO = b->RHO;
    for (int64_t a0 = 0; a0 < n; a0 += B) {
        const int64_t nb = n - a0 < B ? n - a0 : B;
        /* XK, XQ: decayed from the sub-chunk start to r inclusive */
        for (int64_t m = 0; m < nb; m++) {
            const float *Fr = F + (a0 + m) * ld, *qr = q + (a0 + m) * P, *kr = k + (a0 + m) * P;
            float *xk = XK + m * ld, *xq = XQ + m * ld;
            /* RHO's first row apart: with "m == 0 ? Fr[i] : RHO[i] * Fr[i]"
             * inside the loop GCC left it scalar (the same products either way) */
#ifdef VT_MUTATE_KDA_CHUNK_NO_DECAY
            for (int64_t i = 0; i < d; i++) RHO[i] = 1.0f;
#else
            if (m == 0) memcpy(RHO, Fr, (size_t)d * sizeof *RHO);
            else {
                #pragma omp simd
                for (int64_t i = 0; i < d; i++) RHO[i] = RHO[i] * Fr[i];
            }
#endif
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) {
                xk[i] = kr[i] * RHO[i];
                xq[i] = qr[i] * RHO[i];
            }
        }
        /* rows of this sub-chunk against the columns of the earlier ones */
        if (a0 > 0) {
            vt_sgemm_nt(nb, a0, d, XK, ld, KTO, ld, A + a0 * lc, lc, 0);
            vt_sgemm_nt(nb, a0, d, XQ, ld, KTO, ld, AQ + a0 * lc, lc, 0);
            /* KTO: decayed over this sub-chunk too (RHO is its total decay) */
            for (int64_t s = 0; s < a0; s++) {
                float *kt = KTO + s * ld;
                #pragma omp simd
                for (int64_t i = 0; i < d; i++) kt[i] *= RHO[i];
            }
        }
        /* the diagonal block; the sub-chunk's keys, decayed to its end, join KTO */
        if (b->avx) diag_block_avx512(a0, nb, d, P, ld, lc, q, k, F, KD, A, AQ, KTO);
        else diag_block(a0, nb, d, P, ld, lc, q, k, F, KD, A, AQ, KTO);
    }
}

/* TM = (I + diag(beta) A)^-1 by forward substitution, row by row:
 * TM[r][s] = -sum_{m=s}^{r-1} beta_r A[r][m] TM[m][s], TM[r][r] = 1 */
static void chunk_inverse(const kda_buf *b, const chunk_dims *cd, const float *beta) {
    const int64_t n = cd->n, H = cd->H, lc = cd->lc;
    const float *A = b->A;
    float *TM = b->TM;
    for (int64_t r = 0; r < n; r++) {
        float *tr = TM + r * lc;
        const float br = beta[r * H];
        for (int64_t s = 0; s < n; s++) tr[s] = 0.0f;
        for (int64_t m = 0; m < r; m++) {
            const float a = br * A[r * lc + m];
            const float *tm = TM + m * lc;
            #pragma omp simd
            for (int64_t s = 0; s <= m; s++) tr[s] -= a * tm[s];
        }
        tr[r] = 1.0f;
    }
}

/* D = TM R and o += AQ D, by row blocks (TM and AQ are zero above the
 * diagonal); then S = diag(Gam_{n-1}) S0 + KTO^T D. */
static void chunk_outputs(const kda_buf *b, const chunk_dims *cd, float *S, float *o) {
    const int64_t n = cd->n, d = cd->d, P = cd->P, ld = cd->ld, lc = cd->lc;
    float *D = b->D, *KTO = b->KTO, *KHT = b->KHT, *GAM = b->GAM;
    for (int64_t a0 = 0; a0 < n; a0 += B) {
        const int64_t nb = n - a0 < B ? n - a0 : B;
        vt_sgemm_nn(nb, d, a0 + nb, b->TM + a0 * lc, lc, b->R, ld, D + a0 * ld, ld, 0);
    }
    for (int64_t a0 = 0; a0 < n; a0 += B) {
        const int64_t nb = n - a0 < B ? n - a0 : B;
        vt_sgemm_nn(nb, d, a0 + nb, b->AQ + a0 * lc, lc, D, ld, o + a0 * P, P, 1);
    }

    for (int64_t s = 0; s < n; s++)
        for (int64_t i = 0; i < d; i++) KHT[i * lc + s] = KTO[s * ld + i];
    for (int64_t i = 0; i < d; i++) {
        float *si = S + i * d;
        const float gi = GAM[i];
        #pragma omp simd
        for (int64_t j = 0; j < d; j++) si[j] *= gi;
    }
    vt_sgemm_nn(d, d, n, KHT, lc, D, ld, S, d, 1);
}

/* One chunk of n <= c tokens of one head (c: the chunk length the buffers
 * were carved for; pointers at the chunk's first token of the head, row stride
 * P for q, k, v, g, o, stride H for beta): the banner's steps in order, each
 * a function above. The next chunk's first n_next rows are prefetched on the
 * way. */
static void chunk_step(const kda_buf *b, int64_t c, int64_t n, int64_t n_next, int64_t d, int64_t P, int64_t H,
                       const float *q, const float *k, const float *v, const float *g, const float *beta, float *S,
                       float *o) {
    const chunk_dims cd = {n, d, P, H, round_up(d), round_up(c)};
    chunk_decays(b, &cd, n_next, q, k, v, g);
    chunk_initial(b, &cd, v, beta, S, o);
    chunk_products(b, &cd, q, k);
    chunk_inverse(b, &cd, beta);
    chunk_outputs(b, &cd, S, o);
}

int vt_kda_chunked(int64_t T, int64_t H, int64_t d, const float *q, const float *k, const float *v, const float *g,
                   const float *beta, float *S, float *o, float *work, size_t work_bytes) {
    if (T < 0 || H <= 0 || d <= 0 || !work) return -1;
    if (T == 0) return 0;
    const size_t one = vt_kda_chunked_work_bytes(T, H, d, 1);
    if (one == 0 || work_bytes < one) return -1;
    const size_t per = per_thread_floats(T, d);
    float *base = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    const size_t usable = work_bytes - (size_t)((char *)base - (char *)work);
    int64_t nthr = (int64_t)(usable / (per * sizeof(float)));
    if (nthr > omp_get_max_threads()) nthr = omp_get_max_threads();
    if (nthr > H) nthr = H;
    if (nthr < 1) return -1;
    const int64_t P = H * d;

    /* heads outside, chunks inside: no barrier between chunks (a chunk-outer
     * loop with the heads of each chunk in parallel streamed the inputs as
     * fast as this with the prefetch, but waits at every chunk for the slowest
     * thread, ~6x slower on an oversubscribed machine); the diagonal blocks
     * with AVX-512 but under VTLAB_GEMM_ISA=scalar (the same bits either way) */
    const int avx = B == 16 && strcmp(vt_gemm_isa(), "avx512") == 0;
    #pragma omp parallel for schedule(static) num_threads((int)nthr)
    for (int64_t h = 0; h < H; h++) {
        kda_buf b = carve(base + (size_t)omp_get_thread_num() * per, T, d);
        b.avx = avx;
        for (int64_t t0 = 0; t0 < T; t0 += C) {
            const int64_t n = T - t0 < C ? T - t0 : C, rest = T - t0 - n, n_next = rest < C ? rest : C;
            const int64_t off = t0 * P + h * d;
            chunk_step(&b, chunk_len(T), n, n_next, d, P, H, q + off, k + off, v + off, g + off,
                       beta + t0 * H + h, S + h * d * d, o + off);
        }
    }
    return 0;
}
