/*
 * attn.c — causal softmax attention (attn.h): the reference loop and the
 * blocked flash-attention form built on vt_sgemm_nt / vt_sgemm_nn.
 *
 * Blocked form, for one work item (head h, query block of up to BQ rows,
 * a contiguous range of key blocks of BK keys):
 *
 *     for each key block kb in the range (blocks above the diagonal excluded):
 *         S = Q·Kᵀ                       (vt_sgemm_nt, [mq x nk])
 *         per row i: s *= scale; keys past the row's position masked (only
 *                    in a block that crosses the diagonal, which is done in
 *                    chunks of 32 rows, each up to its last row's keys);
 *                    m' = max(m, max_j s);  a = exp(m - m');  p = exp(s - m');
 *                    l = a*l + sum_j p;  O_i *= a  (skipped when a == 1)
 *         O += P·V                       (vt_sgemm_nn, accumulating)
 *     o = O / l
 *
 * Precision: the running max m is f32 (it is one of the scores, exact), p is
 * f32 (what the P·V product consumes), the running sum l is f64. Within one
 * key block p is summed in f32 over 16 fixed lanes and a fixed tree (at most
 * BK/16 terms per lane, so its error is a few ulp whatever the context); the
 * block sums are added into the f64 l, so l's error does not grow with the
 * context length (1M tokens at most is 16k blocks; an f32 running sum would
 * lose ~log2(16k) bits there). It costs one f64 add per row per block.
 *
 * exp is vt_expf / vt_exp16 (vmath.h): a fixed polynomial (Cephes' expf,
 * ~1 ulp) written with plain IEEE operations, so that a vectorised loop and
 * the scalar one give the same bits; inputs are always <= 0 here, and
 * anything below -87 (including a masked -inf) gives 0.
 *
 * Work partition: items are (query block, head, key split). The number of
 * key splits is 1 unless there are too few (head, query block) items to
 * keep the threads busy (decode: T = 1 with a long cache); then each query
 * block's key blocks are cut into nsplit contiguous ranges, each range
 * produces (O, m, l) partials in the workspace, and a second loop merges
 * them in split order. nsplit depends only on (T, p0, Nh), never on the
 * thread count, so the result is bit-identical for any number of threads.
 * Items are scheduled dynamically, costliest (last) query blocks first.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "gemm.h"
#include "vmath.h"

/* ------------------------------------------------------------ reference */

size_t vt_attn_causal_ref_work_bytes(int64_t T, int64_t p0) {
    return sizeof(float) * (size_t)omp_get_max_threads() * (size_t)(p0 + T);
}

void vt_attn_causal_ref(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float scale, const float *q,
                        int64_t ldq, const float *kc, int64_t ldk, const float *vc, int64_t ldv, float *o, int64_t ldo,
                        float *scores) {
    const int64_t qk = dqk, Tall = p0 + T;
    const int nthr = omp_get_max_threads();
    #pragma omp parallel for collapse(2) schedule(dynamic) num_threads(nthr)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Nh; h++) {
            int64_t n = p0 + t + 1;
            float *sc = scores + (int64_t)omp_get_thread_num() * Tall;
            const float *qh = q + t * ldq + h * qk;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                const float *kj = kc + j * ldk + h * qk;
                float acc = 0.0f;
                for (int64_t i = 0; i < qk; i++) acc += qh[i] * kj[i];
                sc[j] = acc * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) { sc[j] = expf(sc[j] - mx); sum += sc[j]; }
            float *oh = o + t * ldo + h * dv;
            for (int64_t i = 0; i < dv; i++) oh[i] = 0.0f;
            for (int64_t j = 0; j < n; j++) {
                float pj = (float)(sc[j] / sum);
                const float *vj = vc + j * ldv + h * dv;
                for (int64_t i = 0; i < dv; i++) oh[i] += pj * vj[i];
            }
        }
}

/* -------------------------------------------------------------- blocked */

/* No a*b+c fused into an FMA anywhere below (the reference above compiles as
 * mla.c does): the scalar and the AVX-512 row pass must round alike, whatever
 * -std or -march the build uses. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

enum {
    BQ = 64,               /* queries per block */
    BK = 64,               /* keys per block, T >= BQ; fewer query rows get longer key blocks (kblock) */
    SBUF = BQ * BK,        /* floats of the score block */
    DIAG_ROWS = 32,        /* rows per product in a block that crosses the diagonal */
    LANES = 16,            /* f32 lanes of the in-block sum */
    MIN_ITEMS = 32,        /* split keys when (head, query block) items are fewer */
    MIN_SPLIT_KEYS = 512,  /* ... but never into ranges shorter than this */
    ALIGN = 64,
};


typedef struct {
    int64_t T, p0, Nh, dqk, dv, ldq, ldk, ldv, ldo;
    float scale;
    const float *q, *kc, *vc;
    float *o;
    int64_t nqb, nsplit, bk;
    int avx512;
} attn_args;

typedef struct {
    float *S;       /* [rows][bk] scores, then probabilities (SBUF floats) */
    float *m;       /* [BQ] running max */
    double *l;      /* [BQ] running sum */
} attn_scratch;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static size_t scratch_bytes(void) {
    return up(sizeof(float) * SBUF) + up(sizeof(float) * BQ) + up(sizeof(double) * BQ);
}

/* Keys per block: BK for full query blocks; a decode step (1 row) or a short
 * chunk fills the same score buffer with up to 512 keys per block instead,
 * fewer and longer products. A function of T only. */
static int64_t kblock(int64_t T) {
    int64_t rows = T < BQ ? T : BQ, bk = BK;
    while (bk < 512 && rows * bk * 2 <= SBUF) bk *= 2;
    return bk;
}

/* The key splits (T, p0, Nh) need; a function of the shapes only. */
static int64_t plan_splits(int64_t T, int64_t p0, int64_t Nh) {
    int64_t items = Nh * cdiv(T, BQ);
    if (items >= MIN_ITEMS) return 1;
    int64_t ns = cdiv(MIN_ITEMS, items), cap = (p0 + T) / MIN_SPLIT_KEYS;
    if (ns > cap) ns = cap;
    return ns < 1 ? 1 : ns;
}

/* partials of a split run: O [nsplit][Nh][T][dv], m [nsplit][Nh][T], l likewise (f64) */
static size_t partial_bytes(int64_t T, int64_t Nh, int64_t dv, int64_t ns) {
    if (ns <= 1) return 0;
    size_t rows = (size_t)ns * (size_t)Nh * (size_t)T;
    return up(sizeof(float) * rows * (size_t)dv) + up(sizeof(float) * rows) + up(sizeof(double) * rows);
}

size_t vt_attn_causal_work_bytes(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv) {
    if (T < 1 || p0 < 0 || Nh < 1 || dqk < 1 || dv < 1) return 0;
    return ALIGN + partial_bytes(T, Nh, dv, plan_splits(T, p0, Nh)) + (size_t)omp_get_max_threads() * scratch_bytes();
}

/* One row of a score block: scale, mask (keys >= nv), online-softmax update.
 * Leaves p in row[0..nk) (0 where masked) and returns the factor a the row's
 * accumulated output must be multiplied by. */
static float softmax_row_scalar(float *row, int64_t nv, int64_t nk, float scale, float *m, double *l) {
    if (nv <= 0) {   /* all of this block is in the row's future */
        memset(row, 0, sizeof(float) * (size_t)nk);
        return 1.0f;
    }
    float mx = *m;
    for (int64_t j = 0; j < nv; j++) {
        float s = row[j] * scale;
        row[j] = s;
        mx = s > mx ? s : mx;
    }
    float lane[LANES] = {0};
    for (int64_t j = 0; j < nv; j++) {
        float p = vt_expf(row[j] - mx);
        row[j] = p;
        lane[j % LANES] += p;
    }
    for (int64_t j = nv; j < nk; j++) row[j] = 0.0f;
    for (int w = LANES / 2; w; w /= 2)
        for (int i = 0; i < w; i++) lane[i] += lane[i + w];
    float a = vt_expf(*m - mx);   /* m = -inf at the start: a = 0 */
    *l = *l * a + lane[0];
    *m = mx;
    return a;
}

/* The same row pass with AVX-512: the same operations on 16 lanes at once
 * (the exp's polynomial, the in-block sum's lane j % 16 and its tree), so the
 * same bits as softmax_row_scalar (test_attn checks both; no FMA contraction,
 * see the pragma above). */
#define AVX512 __attribute__((target("avx512f")))

AVX512 static float softmax_row_avx512(float *row, int64_t nv, int64_t nk, float scale, float *m, double *l) {
    if (nv <= 0) {
        memset(row, 0, sizeof(float) * (size_t)nk);
        return 1.0f;
    }
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 vmx = _mm512_set1_ps(*m);
    int64_t j = 0;
    for (; j + 16 <= nv; j += 16) {
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row + j), vs);
        _mm512_storeu_ps(row + j, x);
        vmx = _mm512_max_ps(vmx, x);
    }
    const __mmask16 tail = (__mmask16)((1u << (nv - j)) - 1);
    if (j < nv) {
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + j), vs);
        _mm512_mask_storeu_ps(row + j, tail, x);
        vmx = _mm512_mask_max_ps(vmx, tail, vmx, x);
    }
    const float mx = _mm512_reduce_max_ps(vmx);
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (j = 0; j + 16 <= nv; j += 16) {
        __m512 p = vt_exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
        _mm512_storeu_ps(row + j, p);
        acc = _mm512_add_ps(acc, p);
    }
    if (j < nv) {
        __m512 p = _mm512_maskz_mov_ps(tail, vt_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + j), vm)));
        _mm512_mask_storeu_ps(row + j, tail, p);
        acc = _mm512_add_ps(acc, p);
    }
    for (int64_t c = nv; c < nk; c++) row[c] = 0.0f;
    float lane[LANES];
    _mm512_storeu_ps(lane, acc);
    for (int w = LANES / 2; w; w /= 2)
        for (int i = 0; i < w; i++) lane[i] += lane[i + w];
    float a = vt_expf(*m - mx);
    *l = *l * a + lane[0];
    *m = mx;
    return a;
}

/* 1: AVX-512 row pass, 0: scalar; decided once from the CPU (vt_attn_use_avx512 overrides). */
static int use_avx512 = -1;

int vt_attn_use_avx512(int on) {
    int prev = __atomic_load_n(&use_avx512, __ATOMIC_RELAXED);
    if (prev < 0) {
        __builtin_cpu_init();
        prev = __builtin_cpu_supports("avx512f") ? 1 : 0;
        __atomic_store_n(&use_avx512, prev, __ATOMIC_RELAXED);
    }
    if (on == 0 || (on == 1 && __builtin_cpu_supports("avx512f"))) __atomic_store_n(&use_avx512, on, __ATOMIC_RELAXED);
    return prev;
}

static inline float softmax_row(int avx512, float *row, int64_t nv, int64_t nk, float scale, float *m, double *l) {
    return avx512 ? softmax_row_avx512(row, nv, nk, scale, m, l) : softmax_row_scalar(row, nv, nk, scale, m, l);
}

/* Query block qb of head h over key blocks [kb0, kb1): leaves the unnormalised
 * O (rows of ldO floats), m and l of its rows. */
static void attn_block(const attn_args *A, int64_t h, int64_t qb, int64_t kb0, int64_t kb1, float *O, int64_t ldO,
                       float *m, double *l, float *S) {
    const int64_t t0 = qb * BQ, mq = A->T - t0 < BQ ? A->T - t0 : BQ, nkeys = A->p0 + A->T;
    const int64_t dqk = A->dqk, dv = A->dv, lim0 = A->p0 + t0;   /* row i sees keys <= lim0 + i */
    const float *Q = A->q + t0 * A->ldq + h * dqk;
    for (int64_t i = 0; i < mq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0;
        memset(O + i * ldO, 0, sizeof(float) * (size_t)dv);
    }
    for (int64_t kb = kb0; kb < kb1; kb++) {
        const int64_t bk = A->bk, j0 = kb * bk, nk = nkeys - j0 < bk ? nkeys - j0 : bk;
        const int diag = j0 + nk - 1 > lim0;   /* some row of the block must not see some key */
        /* a block crossing the diagonal goes in chunks of DIAG_ROWS rows, each
         * computing only the keys its last row sees (3/4 of the work for 2 chunks) */
        for (int64_t r0 = 0; r0 < mq; r0 += diag ? DIAG_ROWS : mq) {
            const int64_t r1 = diag && r0 + DIAG_ROWS < mq ? r0 + DIAG_ROWS : mq;
            int64_t nc = nk;
            if (diag && lim0 + r1 - 1 - j0 + 1 < nc) nc = lim0 + r1 - 1 - j0 + 1;
            if (nc < 0) nc = 0;   /* the whole chunk is before these keys */
            float *Sc = S + r0 * bk;
            if (nc > 0) vt_sgemm_nt(r1 - r0, nc, dqk, Q + r0 * A->ldq, A->ldq, A->kc + j0 * A->ldk + h * dqk, A->ldk, Sc, bk, 0);
            for (int64_t i = r0; i < r1; i++) {
                int64_t nv = nc;
                if (diag) {
                    nv = lim0 + i - j0 + 1;
                    if (nv > nc) nv = nc;
#ifdef VT_MUTATE_ATTN_NO_CAUSAL_MASK
                    nv = nc;   /* deliberate defect: the diagonal block is not masked */
#endif
                }
                float a = softmax_row(A->avx512, S + i * bk, nv, nc, A->scale, &m[i], &l[i]);
                if (a != 1.0f) {
                    float *Oi = O + i * ldO;
                    for (int64_t c = 0; c < dv; c++) Oi[c] *= a;
                }
            }
            if (nc > 0) vt_sgemm_nn(r1 - r0, dv, nc, Sc, bk, A->vc + j0 * A->ldv + h * dv, A->ldv, O + r0 * ldO, ldO, 1);
        }
    }
}

/* Key blocks [kb0, kb1) of split s of query block qb. */
static void split_range(const attn_args *A, int64_t qb, int64_t s, int64_t *kb0, int64_t *kb1) {
    const int64_t t0 = qb * BQ, mq = A->T - t0 < BQ ? A->T - t0 : BQ;
    const int64_t nkb = cdiv(A->p0 + t0 + mq, A->bk);   /* blocks up to the last row's own position */
    *kb0 = s * nkb / A->nsplit;
    *kb1 = (s + 1) * nkb / A->nsplit;
}

int64_t vt_attn_piece_quantum(int64_t Nh) {
    if (Nh < 1) return 0;
    return BQ * cdiv(MIN_ITEMS, Nh);   /* whole query blocks, and plan_splits finds enough items never to split */
}

/* One call's items: the arguments, the scratch slots (sb bytes per thread)
 * and, when keys are split, the partials. */
typedef struct attn_run {
    const attn_args *A;
    char *scratch;
    size_t sb;
    float *Op, *mp;
    double *lp;
} attn_run;

/* Item it: (query block, head, split), the last query block first (the
 * longest rows). Unsplit, it writes its rows of o, normalised; split, its
 * partials. */
static void attn_item(void *arg, int64_t it, int thread) {
    const attn_run *R = arg;
    const attn_args *A = R->A;
    const int64_t Nh = A->Nh, ns = A->nsplit, dv = A->dv, T = A->T, ldo = A->ldo;
    char *sc = R->scratch + (size_t)thread * R->sb;
    attn_scratch X = {(float *)sc, (float *)(sc + up(sizeof(float) * SBUF)),
                      (double *)(sc + up(sizeof(float) * SBUF) + up(sizeof(float) * BQ))};
    const int64_t qb = A->nqb - 1 - it / (Nh * ns), h = it / ns % Nh, s = it % ns;
    const int64_t t0 = qb * BQ, mq = T - t0 < BQ ? T - t0 : BQ;
    int64_t kb0, kb1;
    split_range(A, qb, s, &kb0, &kb1);
    if (ns == 1) {
        float *O = A->o + t0 * ldo + h * dv;
        attn_block(A, h, qb, kb0, kb1, O, ldo, X.m, X.l, X.S);
        for (int64_t i = 0; i < mq; i++) {
            const double inv = 1.0 / X.l[i];
            for (int64_t c = 0; c < dv; c++) O[i * ldo + c] = (float)(O[i * ldo + c] * inv);
        }
    } else {
        const size_t r0 = ((size_t)s * (size_t)Nh + (size_t)h) * (size_t)T + (size_t)t0;
        attn_block(A, h, qb, kb0, kb1, R->Op + r0 * (size_t)dv, dv, R->mp + r0, R->lp + r0, X.S);
    }
}

/* Row hr = (head, row) of o from its splits' partials, merged in split order. */
static void attn_merge(void *arg, int64_t hr, int thread) {
    const attn_run *R = arg;
    const attn_args *A = R->A;
    const int64_t Nh = A->Nh, ns = A->nsplit, dv = A->dv, T = A->T, h = hr / T, t = hr % T;
    float M = -INFINITY;
    for (int64_t s = 0; s < ns; s++) {
        float ms = R->mp[((size_t)s * (size_t)Nh + (size_t)h) * (size_t)T + (size_t)t];
        M = ms > M ? ms : M;
    }
    double L = 0.0;
    float *out = A->o + t * A->ldo + h * dv;
    for (int64_t c = 0; c < dv; c++) out[c] = 0.0f;
    for (int64_t s = 0; s < ns; s++) {
        const size_t r = ((size_t)s * (size_t)Nh + (size_t)h) * (size_t)T + (size_t)t;
        const float wgt = vt_expf(R->mp[r] - M);   /* an empty split: m = -inf, weight 0 */
        if (wgt == 0.0f) continue;
        L += R->lp[r] * wgt;
        const float *Os = R->Op + r * (size_t)dv;
        for (int64_t c = 0; c < dv; c++) out[c] += wgt * Os[c];
    }
    const double inv = 1.0 / L;
    for (int64_t c = 0; c < dv; c++) out[c] = (float)(out[c] * inv);
}

int vt_attn_causal(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float scale, const float *q,
                   int64_t ldq, const float *kc, int64_t ldk, const float *vc, int64_t ldv, float *o, int64_t ldo,
                   float *work, size_t work_bytes) {
    if (T < 1 || p0 < 0 || Nh < 1 || dqk < 1 || dv < 1 || ldq < Nh * dqk || ldk < Nh * dqk || ldv < Nh * dv ||
        ldo < Nh * dv || !q || !kc || !vc || !o || !work)
        return -1;
    attn_args A = {T, p0, Nh, dqk, dv, ldq, ldk, ldv, ldo, scale, q, kc, vc, o, cdiv(T, BQ), plan_splits(T, p0, Nh),
                    kblock(T), vt_attn_use_avx512(-1)};
    /* carve the workspace: partials, then one scratch per thread */
    uintptr_t base = ((uintptr_t)work + ALIGN - 1) / ALIGN * ALIGN;
    size_t skip = base - (uintptr_t)work, pb = partial_bytes(T, Nh, dv, A.nsplit), sb = scratch_bytes();
    if (work_bytes < skip + pb + sb) return -1;
    int64_t slots = (int64_t)((work_bytes - skip - pb) / sb), nthr = omp_get_max_threads();
    if (nthr > slots) nthr = slots;
    char *w = (char *)base;
    const size_t rows = (size_t)A.nsplit * (size_t)Nh * (size_t)T;
    float *Op = NULL, *mp = NULL;
    double *lp = NULL;
    if (A.nsplit > 1) {
        Op = (float *)w;
        mp = (float *)(w + up(sizeof(float) * rows * (size_t)dv));
        lp = (double *)((char *)mp + up(sizeof(float) * rows));
    }
    attn_run R = {&A, w + pb, sb, Op, mp, lp};
    /* (head, query block, split) items, then the splits' merge; a small call
     * (a tiny model's short prefill) runs on the calling thread, a decode
     * step's heads on the step's team (vt_par_for) */
    const double madds = (double)T * (double)(p0 + T) * (double)Nh * (double)(dqk + dv);
    const int64_t iwork = madds < 9e18 ? (int64_t)madds : INT64_MAX;
    vt_par_for(A.nqb * Nh * A.nsplit, iwork, (int)nthr, attn_item, &R);
    if (A.nsplit > 1) vt_par_for(Nh * T, iwork, (int)nthr, attn_merge, &R);
    return 0;
}
