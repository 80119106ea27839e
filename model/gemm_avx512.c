/*
 * gemm_avx512.c — the AVX-512 kernels of gemm.h (called only after gemm.c's
 * runtime check; every function carries its own target attribute, so the
 * build needs no -march flag).
 *
 * The contract forbids reassociating a dot product, so the kernels never
 * vectorise along k: a vector always holds 16 different output elements
 * (16 columns j of one row i), and k advances one step at a time, one FMA per
 * step per accumulator, exactly the scalar chain. Speed comes from keeping
 * many independent chains in registers, not from splitting one.
 *
 *  - block: BLIS-style. W is packed per (32 columns, KC values of k) into a
 *    thread-local buffer, transposed to [k][32] and widened to f32; the
 *    micro-kernel keeps a 12x32 tile of y in 24 zmm accumulators, broadcasts
 *    x[i][k] and does 24 FMAs per k against the two packed vectors. Between
 *    K blocks the accumulators go through y (an f32 store and reload is exact,
 *    so the chain continues bit for bit).
 *  - gemv (decode, few rows): W is read in place, 16 rows x 16 k at a time,
 *    transposed in registers so that each vector holds one k of 16 columns,
 *    then 16 FMAs per row of x. No packing: each W element is used M <= 4
 *    times, packing would cost a second pass over W.
 *  - W in panels (tensor.h, the model's default): the GEMV reads each k's 32
 *    weights as two vectors (no transpose), the packed kernel copies or
 *    widens a panel instead of transposing it, the broadcast kernel
 *    broadcasts from the panel. gemm_bench decode, 1 thread, W from memory:
 *    f32 0.76-0.80 of triad as rows, 0.94-1.07 in panels; bf16 0.72-0.78 ->
 *    0.92-1.01; 2 threads f32 0.75-0.81 -> 1.03-1.31.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_kernels.h"

#define VT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define VT_INLINE static inline __attribute__((always_inline)) VT_AVX512

/* Blocking.
 * MR x NR = 12 x 32: 24 accumulators + 2 W vectors + 1 broadcast = 27 of the
 *   32 zmm registers; per k 14 loads (12 broadcasts, 2 vectors) feed 24 FMAs,
 *   under the 2 loads/cycle the core sustains at 2 FMAs/cycle.
 * KC = 256: the packed panel is KC*NR*4 = 32 KiB, which stays in the 48 KiB
 *   L1D next to the 12 x KC slice of x (12 KiB) that one micro-kernel call
 *   streams; the M x KC block of x stays in L2 (2 MiB) across panels. */
enum { MR = 12, NR = 32, KC = 256 };
/* x is packed too, per row block as xp[k*mr + r] (one pointer, one broadcast
 * stream; x rows 4 KiB apart, as with K = 1024, would all fall in one L1 set).
 * MC rows of it at a time (96 KiB), packed once per K block and reused by
 * every panel of the tile. Up to TILE_COLS columns of W are packed per K
 * block (256 KiB, eight panels), once per tile whatever its row count; x is
 * packed once per tile, so wide tiles make its packing (a 16x16 transpose per
 * 256 values) 1/16 of the tile's FMA work at 128 columns, 1/32 at 256. */
enum { MC = 96, TILE_COLS = 256 };
_Static_assert(NR == VT_PANEL, "a W panel (tensor.h) is one micro-kernel panel");
_Static_assert(MC == VT_XMEMO_MAX_ROWS, "the x memo holds one block of MC rows");

/* How a micro-kernel's chains start: at 0, or at y's value (a later K block,
 * or accumulate = 1). MODE_ADD exists only in the mutation build below. */
enum { MODE_ZERO = 0, MODE_LOAD = 1, MODE_ADD = 2 };
#ifdef VT_MUTATE_GEMM_SPLIT_K
/* Mutation (make mutation): every K block after the first starts a fresh
 * partial sum at 0 and adds it to y: the reassociation test_gemm must catch. */
#define MODE_CONTINUE MODE_ADD
#else
#define MODE_CONTINUE MODE_LOAD
#endif

static inline __mmask16 mask_n(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* 16 consecutive weights of one row from element k, widened exactly to f32
 * (lanes outside m read as 0 and touch no memory). Unaligned loads. */
VT_INLINE __m512 wload(const char *row, vt_dtype dt, int64_t k, __mmask16 m) {
    if (dt == VT_F32) return _mm512_maskz_loadu_ps(m, row + 4 * k);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
    if (dt == VT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

VT_INLINE __m512 unpacklo_pd(__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
VT_INLINE __m512 unpackhi_pd(__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

/* In-register 16x16 transpose: r[t] = row t (16 k)  ->  r[c] = column c (16 rows). 64 shuffles. */
VT_INLINE void tr16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {               /* 4-lane groups: (a0 b0 a1 b1), (a2 b2 a3 b3) */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {               /* r[i+c], lane L: rows i..i+3 of column 4L+c */
        r[i + 0] = unpacklo_pd(t[i + 0], t[i + 2]);
        r[i + 1] = unpackhi_pd(t[i + 0], t[i + 2]);
        r[i + 2] = unpacklo_pd(t[i + 1], t[i + 3]);
        r[i + 3] = unpackhi_pd(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {                   /* 128-bit lanes: gather the four row groups */
        t[c + 0] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        t[c + 4] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        t[c + 8] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        t[c + 12] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        r[c + 0] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0xdd);
        r[c + 4] = _mm512_shuffle_f32x4(t[c + 4], t[c + 12], 0x88);
        r[c + 12] = _mm512_shuffle_f32x4(t[c + 4], t[c + 12], 0xdd);
    }
}

/* ------------------------------------------------------------ micro-kernel */

/* y[0..mr)[0..32) over kc steps: x packed as x[k*mr + r], W vectors at
 * b + k*ldb (+16), columns outside m0/m1 neither read nor written. mr is a
 * constant after inlining into ukr_<n>. pf (NULL: none): the panel read
 * next, prefetched pfstep bytes per step (64 or 128: one or two lines), so
 * that memory streams it in while these FMAs run. */
VT_INLINE void ukr(const int mr, int64_t kc, const float *x, const float *b, int64_t ldb, float *y, int64_t ldy,
                   __mmask16 m0, __mmask16 m1, int mode, const char *pf, int64_t pfstep) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        c0[r] = mode == MODE_LOAD ? _mm512_maskz_loadu_ps(m0, y + r * ldy) : _mm512_setzero_ps();
        c1[r] = mode == MODE_LOAD ? _mm512_maskz_loadu_ps(m1, y + r * ldy + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; k++) {
        if (pf) {
            _mm_prefetch(pf + k * pfstep, _MM_HINT_T0);
            if (pfstep > 64) _mm_prefetch(pf + k * pfstep + 64, _MM_HINT_T0);
        }
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + k * ldb), b1 = _mm512_maskz_loadu_ps(m1, b + k * ldb + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            const __m512 a = _mm512_set1_ps(x[k * mr + r]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        if (mode == MODE_ADD) {
            c0[r] = _mm512_add_ps(c0[r], _mm512_maskz_loadu_ps(m0, y + r * ldy));
            c1[r] = _mm512_add_ps(c1[r], _mm512_maskz_loadu_ps(m1, y + r * ldy + 16));
        }
        _mm512_mask_storeu_ps(y + r * ldy, m0, c0[r]);
        _mm512_mask_storeu_ps(y + r * ldy + 16, m1, c1[r]);
    }
}

#define UKR_FN(n)                                                                                        \
    VT_AVX512 __attribute__((noinline)) static void ukr_##n(int64_t kc, const float *x, const float *b,  \
                                                            int64_t ldb, float *y, int64_t ldy,           \
                                                            __mmask16 m0, __mmask16 m1, int mode,         \
                                                            const char *pf, int64_t pfstep) {             \
        ukr(n, kc, x, b, ldb, y, ldy, m0, m1, mode, pf, pfstep);                                         \
    }
UKR_FN(1) UKR_FN(2) UKR_FN(3) UKR_FN(4) UKR_FN(5) UKR_FN(6)
UKR_FN(7) UKR_FN(8) UKR_FN(9) UKR_FN(10) UKR_FN(11) UKR_FN(12)

typedef void (*ukr_fn)(int64_t, const float *, const float *, int64_t, float *, int64_t, __mmask16, __mmask16, int,
                       const char *, int64_t);
static const ukr_fn ukr_by_rows[MR + 1] = {NULL,   ukr_1, ukr_2, ukr_3, ukr_4,  ukr_5, ukr_6,
                                           ukr_7,  ukr_8, ukr_9, ukr_10, ukr_11, ukr_12};

/* All row blocks of rows [r0, r1) against one W panel of kc k and 32 columns.
 * The rows are cut into equal blocks (25 = 9+8+8, not 12+12+1): a block of
 * under 4 rows has under 8 chains, too few to hide the FMA latency (4 cycles
 * at 2 FMAs per cycle), and would take as long as a full one.
 * pf (the panel read next, pfstep bytes per k) is spread over the blocks:
 * block q prefetches the q-th of nb equal parts. All of it in the first
 * block asked memory for a whole panel in a third of the panel's time at an
 * expert's ~32 rows, faster than one core streams, and the next panel's
 * first block waited on it. 288M f32 prefill, 1 thread, 15 interleaved
 * rounds (per batch, GFLOP/s): MoE gate+up 205 -> 217, MoE down 190 -> 198,
 * the dense products +1-2%; the prefill 1.022x. */
static void ukr_rows(int64_t r0, int64_t r1, int64_t kc, const float *xp, const float *b, int64_t ldb, float *y,
                     int64_t ldy, int64_t nc, int mode, const char *pf, int64_t pfstep) {
    const __mmask16 m0 = mask_n(nc), m1 = mask_n(nc - 16);
    const int64_t nb = (r1 - r0 + MR - 1) / MR;
    /* the prefetch spread over the blocks: block q takes 1/nb of the panel, one line per k at most
     * (ukr prefetches at most two lines per k: a wider step stays with the first block) */
    const int spread = nb > 1 && pfstep <= 128;
    const int64_t share = spread ? (pfstep + nb - 1) / nb : pfstep;
    for (int64_t q = 0, i = r0; q < nb; q++) {
        const int mr = (int)((r1 - i) / (nb - q));   /* the remaining rows shared by the remaining blocks */
        const char *qpf = pf && (spread || q == 0) ? pf + q * share * kc : NULL;
        ukr_by_rows[mr](kc, xp + (i - r0) * kc, b, ldb, y + i * ldy, ldy, m0, m1, mode, qpf, share);
        i += mr;
    }
}

/* r[c] = x[i0 + t][k + c] for t < nr (rows past nr: 0) and c < min(kn, 16)
 * (lanes past kn: 0, unread), i.e. 16 k of up to 16 rows, transposed. */
VT_INLINE void x_block(const float *x, int64_t ldx, int64_t i0, int64_t nr, int64_t k, int64_t kn, __m512 r[16]) {
    const __mmask16 km = mask_n(kn);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) r[t] = t < nr ? _mm512_maskz_loadu_ps(km, x + (i0 + t) * ldx + k) : _mm512_setzero_ps();
    tr16(r);
}

/* x rows [r0, r1), k in [k0, k0+kc), into xp in the row blocks of ukr_rows:
 * block at rows i..i+mr is xp + (i-r0)*kc, laid out [k][mr]. 16 k of up to
 * 16 rows at a time through the register transpose, stored mr lanes wide. */
enum { PACK_PF = 64 };   /* floats ahead per row */
VT_AVX512 static void pack_rows(const float *x, int64_t ldx, int64_t r0, int64_t r1, int64_t k0, int64_t kc,
                                float *xp) {
    const int64_t nb = (r1 - r0 + MR - 1) / MR;
    for (int64_t q = 0, i = r0; q < nb; q++) {
        const int mr = (int)((r1 - i) / (nb - q));
        const __mmask16 rm = mask_n(mr);
        float *dst = xp + (i - r0) * kc;
        for (int64_t kk = 0; kk < kc; kk += 16) {
            __m512 r[16];
            if (kk + PACK_PF < kc)
                for (int t = 0; t < mr; t++) _mm_prefetch(x + (i + t) * ldx + k0 + kk + PACK_PF, _MM_HINT_T0);
            x_block(x, ldx, i, mr, k0 + kk, kc - kk, r);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                if (kk + t < kc) _mm512_mask_storeu_ps(dst + (kk + t) * mr, rm, r[t]);
        }
        i += mr;
    }
}

/* ------------------------------------------------------------------ packing */

/* The panel packed after this one, prefetched while this one is packed: W is
 * read 32 rows at a time, 16 k per row per step, a pattern the hardware
 * prefetchers do not follow far enough (from memory, packing would wait on
 * every row). nc = 0: none. */
typedef struct panel_pf { int64_t j0, nc, k0, kc; } panel_pf;

/* buf[kk*NR + jj] = W[j0 + jj][k0 + kk] as f32, for jj < nc (nc <= NR), kk < kc.
 * Lanes past nc hold copies of the last column (computed, never stored), a
 * 16-column half with no column at all holds zeros. */
VT_INLINE void pack_dt(const vt_gemm_args *a, vt_dtype dt, int64_t j0, int64_t nc, int64_t k0, int64_t kc,
                       float *buf, const panel_pf *pf) {
    const size_t es = dt == VT_F32 ? 4 : 2;
    for (int h = 0; h < NR / 16; h++) {
        const int64_t jn = nc - 16 * h, pn = pf->nc - 16 * h;
        const char *rows[16], *pfrows[16];
        for (int t = 0; t < 16; t++) {
            rows[t] = (const char *)a->w + (size_t)(j0 + 16 * h + (t < jn ? t : jn - 1)) * a->wstride + (size_t)k0 * es;
            pfrows[t] = pn > 0 ? (const char *)a->w + (size_t)(pf->j0 + 16 * h + (t < pn ? t : pn - 1)) * a->wstride +
                                     (size_t)pf->k0 * es
                               : NULL;
        }
        for (int64_t kk = 0; kk < kc; kk += 16) {
            const int64_t kn = kc - kk < 16 ? kc - kk : 16;
            __m512 r[16];
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) {
                if (pfrows[t] && kk < pf->kc) _mm_prefetch(pfrows[t] + (size_t)kk * es, _MM_HINT_T0);
                r[t] = jn > 0 ? wload(rows[t], dt, kk, mask_n(kn)) : _mm512_setzero_ps();
            }
            tr16(r);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)   /* a constant t keeps r[t] in a register */
                if (t < kn) _mm512_store_ps(buf + (kk + t) * NR + 16 * h, r[t]);
        }
    }
}

VT_AVX512 static void pack_panel(const vt_gemm_args *a, int64_t j0, int64_t nc, int64_t k0, int64_t kc, float *buf,
                                  const panel_pf *pf) {
    switch (a->dt) {
    case VT_BF16: pack_dt(a, VT_BF16, j0, nc, k0, kc, buf, pf); break;
    case VT_F16: pack_dt(a, VT_F16, j0, nc, k0, kc, buf, pf); break;
    default: pack_dt(a, VT_F32, j0, nc, k0, kc, buf, pf); break;
    }
}

/* K == 0: every chain is empty, y = 0 (or stays y with accumulate). */
static void empty_chain(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (a->acc) return;
    for (int64_t i = r0; i < r1; i++) memset(a->y + i * a->ldy + c0, 0, (size_t)(c1 - c0) * sizeof(float));
}

static _Thread_local _Alignas(64) float xbuf[MC * KC];
/* A tile's W panels of one K block as f32 [k][NR] (block_cols, block_panels). */
static _Thread_local _Alignas(64) float wbuf[TILE_COLS / NR][KC * NR];

/* The last x a tile of this thread packed whole (at most MC rows, every K
 * block), kept for the next tile of the same batch over the same rows: an
 * expert's up after its gate (288M f32 prefill, 1 thread, MoE gate+up
 * GFLOP/s 202 -> 207 and 194 -> 197 in two interleaved runs of 21 rounds;
 * the x packing was ~3.5% of the prefill). done: K blocks [0, done) are packed.
 * Its buffer (MC x K floats at most, 384 KiB at K = 1024) grows, is kept
 * while its thread lives, and is never shared. */
typedef struct x_memo {
    uint64_t     batch;
    const float *x;
    int64_t      ldx, m0, m1, K, done;
    float       *buf;
    size_t       cap;   /* floats */
} x_memo;
static _Thread_local x_memo t_memo;

/* The memo's buffer is freed when its thread ends (an OpenMP team's worker
 * may end before the process: its thread-local pointer would be lost). */
static pthread_key_t memo_key;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;
static int memo_key_ok;
static void memo_free(void *p) { free(p); }
static void memo_key_init(void) { memo_key_ok = pthread_key_create(&memo_key, memo_free) == 0; }

/* The memo's K block k0 for these rows (packed now if it is not yet), or
 * NULL when the memo does not apply (no batch, more than MC rows, no memory). */
VT_AVX512 static const float *x_memo_rows(const vt_gemm_args *a, int64_t m0, int64_t m1, int64_t k0, int64_t kc) {
    x_memo *m = &t_memo;
    const int64_t rows = m1 - m0;
    if (!a->batch || rows > MC) return NULL;
#ifdef VT_MUTATE_XMEMO_KEY
    /* mutation (make mutation): the memo taken whatever the batch and K; test_gemm must go red */
    if (m->x != a->x || m->ldx != a->ldx || m->m0 != m0 || m->m1 != m1) {
#else
    if (m->batch != a->batch || m->x != a->x || m->ldx != a->ldx || m->m0 != m0 || m->m1 != m1 || m->K != a->K) {
#endif
        if (k0 != 0) return NULL;   /* a memo starts with the first K block */
        const size_t need = (size_t)rows * (size_t)((a->K + KC - 1) / KC * KC);
        if (need > m->cap) {
            pthread_once(&memo_once, memo_key_init);
            float *nb = memo_key_ok ? aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64) : NULL;
            if (!nb) return NULL;
            free(m->buf);
            m->buf = nb, m->cap = need;
            pthread_setspecific(memo_key, nb);   /* the thread's end frees it */
        }
        *m = (x_memo){a->batch, a->x, a->ldx, m0, m1, a->K, 0, m->buf, m->cap};
    }
    float *dst = m->buf + k0 * rows;
    if (k0 >= m->done) {
        pack_rows(a->x, a->ldx, m0, m1, k0, kc, dst);
        m->done = k0 + kc;
    }
    return dst;
}

/* x rows [m0, m1) of K block k0 as the micro-kernel reads them: the batch's
 * packing (a->xp, r0 = 0) when there is one, else the memo's, else packed
 * into xbuf now. */
VT_AVX512 static const float *x_rows(const vt_gemm_args *a, int64_t m0, int64_t m1, int64_t k0, int64_t kc) {
    if (a->xp) return a->xp + k0 * a->xpm + m0 * kc;
    const float *xm = x_memo_rows(a, m0, m1, k0, kc);
    if (xm) return xm;
    pack_rows(a->x, a->ldx, m0, m1, k0, kc, xbuf);
    return xbuf;
}

/* Panel p (its first column, a multiple of NR) of a W in panels, from k0 on:
 * [k][NR] as the micro-kernel reads a packed panel (tensor.h). */
static inline const char *panel_at(const vt_gemm_args *a, int64_t p, int64_t k0) {
    return (const char *)a->w + (size_t)p * a->wstride + (size_t)k0 * NR * (a->dt == VT_F32 ? 4 : 2);
}

/* A bf16/f16 panel's K block widened into buf[kk*NR + jj]: no transpose,
 * the panel already is [k][NR]. */
VT_AVX512 static void widen_panel(const vt_gemm_args *a, int64_t p, int64_t k0, int64_t kc, float *buf) {
    const char *src = panel_at(a, p, k0);
    for (int64_t kk = 0; kk < kc; kk++) {
        _mm512_store_ps(buf + kk * NR, wload(src, a->dt, kk * NR, 0xFFFF));
        _mm512_store_ps(buf + kk * NR + 16, wload(src, a->dt, kk * NR + 16, 0xFFFF));
    }
}

/* The columns [c0, c1) of one tile, c1 - c0 <= TILE_COLS, W in rows: per K
 * block, its W panels packed once (each packing prefetches the next), then
 * x by MC rows, each against every panel. */
VT_AVX512 static void block_cols(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t k0 = 0; k0 < a->K; k0 += KC) {
        const int64_t kc = a->K - k0 < KC ? a->K - k0 : KC;
        const int mode = k0 > 0 ? MODE_CONTINUE : a->acc ? MODE_LOAD : MODE_ZERO;
        for (int64_t p = c0; p < c1; p += NR) {
            panel_pf pf = {p + NR, c1 - p - NR, k0, kc};                /* the next panel, same K block */
            if (pf.nc <= 0) pf = (panel_pf){c0, c1 - c0, k0 + KC, a->K - k0 - KC};   /* the first, next K block */
            if (pf.nc > NR) pf.nc = NR;
            if (pf.kc <= 0) pf.nc = 0;
            if (pf.kc > KC) pf.kc = KC;
            pack_panel(a, p, c1 - p < NR ? c1 - p : NR, k0, kc, wbuf[(p - c0) / NR], &pf);
        }
        for (int64_t m0 = r0; m0 < r1; m0 += MC) {
            const int64_t m1 = r1 - m0 < MC ? r1 : m0 + MC;
            const float *xs = x_rows(a, m0, m1, k0, kc);
            for (int64_t p = c0; p < c1; p += NR)
                ukr_rows(m0, m1, kc, xs, wbuf[(p - c0) / NR], NR, a->y + p, a->ldy, c1 - p < NR ? c1 - p : NR, mode,
                         NULL, 0);
        }
    }
}

/* The same for W in panels (tensor.h), whose K block already is [k][NR]:
 * f32 is read in place, bf16/f16 widened into wbuf right before its first
 * use. Either way the first row block's micro-kernel calls prefetch the
 * panel that comes next (the next panel of this K block, or the tile's first
 * of the next), so W streams from memory under the FMAs. Before, every panel
 * of a K block was copied first, a phase that waited on memory: with an
 * expert's ~32 rows (MoE at prefill), as long as the FMAs after it. Reading
 * f32 in place without the prefetch was slower still (528 against 636
 * tok/s, 288M f32 prefill, 1 thread). Measured (Zen 5 VM, one process,
 * interleaved), an expert's gate/up/down at 32 experts with 8-70 rows, f32
 * GFLOP/s: 1 thread 122 -> 159, 2 threads 226 -> 311; bf16 1 thread 120 ->
 * 161; the 288M f32 prefill, T = 256: 1 thread 708 -> 790 tok/s, 2 threads
 * 1276 -> 1436. */
VT_AVX512 static void block_panels(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                   const char *next) {
    const int inplace = a->dt == VT_F32;
    const int64_t step = NR * (a->dt == VT_F32 ? 4 : 2);   /* bytes of a panel per k */
    for (int64_t k0 = 0; k0 < a->K; k0 += KC) {
        const int64_t kc = a->K - k0 < KC ? a->K - k0 : KC;
        const int mode = k0 > 0 ? MODE_CONTINUE : a->acc ? MODE_LOAD : MODE_ZERO;
        for (int64_t m0 = r0; m0 < r1; m0 += MC) {
            const int64_t m1 = r1 - m0 < MC ? r1 : m0 + MC;
            const float *xs = x_rows(a, m0, m1, k0, kc);
            for (int64_t p = c0; p < c1; p += NR) {
                float *wb = wbuf[(p - c0) / NR];
                const char *pf = NULL;
                int64_t pfstep = step;
                if (m0 == r0) {   /* the first pass over this K block's panels */
                    if (p + NR < c1) pf = panel_at(a, p + NR, k0);
                    else if (k0 + KC < a->K) pf = panel_at(a, c0, k0 + KC);
                    else pf = next, pfstep = a->pf_step;   /* the next tile's first, or none: without it
                                                                   every expert's first panel (every tile's, for
                                                                   `down`, K = 256) came from memory unprefetched;
                                                                   MoE down 160 -> 171 GFLOP/s */
                    if (!inplace) widen_panel(a, p, k0, kc, wb);
                }
                ukr_rows(m0, m1, kc, xs, inplace ? (const float *)panel_at(a, p, k0) : wb, NR, a->y + p, a->ldy,
                         c1 - p < NR ? c1 - p : NR, mode, pf, pfstep);
            }
        }
    }
}

size_t vt_gemm512_pack_x_floats(int64_t M, int64_t K) { return (size_t)M * (size_t)((K + KC - 1) / KC * KC); }

/* The layout block_cols reads: K block k0 at xp + k0 M, its MC-row block m0
 * at + m0 kc, each as pack_rows lays it out. */
_Static_assert(KC == VT_PACK_KC, "gemm.c cuts the shared packing of x into K blocks of KC");
void vt_gemm512_pack_x(const float *x, int64_t ldx, int64_t M, int64_t K, int64_t k0, float *xp) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    for (int64_t m0 = 0; m0 < M; m0 += MC) pack_rows(x, ldx, m0, M - m0 < MC ? M : m0 + MC, k0, kc, xp + k0 * M + m0 * kc);
}

VT_AVX512 void vt_gemm512_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (a->K == 0) { empty_chain(a, r0, r1, c0, c1); return; }
    for (int64_t c = c0; c < c1; c += TILE_COLS) {
        const int64_t ce = c1 - c < TILE_COLS ? c1 : c + TILE_COLS;
        if (c < a->npanel) block_panels(a, r0, r1, c, ce, ce == c1 ? a->pf_next : NULL);
        else block_cols(a, r0, r1, c, ce);
    }
}

/* --------------------------------------------------------------------- nn */

VT_AVX512 void vt_sgemm512_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                              int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (K == 0) {
        const vt_gemm_args a = {.y = C, .ldy = ldc, .acc = accumulate};
        empty_chain(&a, 0, M, 0, N);
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += KC) {           /* B is already [k][j]: read in place */
        const int64_t kc = K - k0 < KC ? K - k0 : KC;
        const int mode = k0 > 0 ? MODE_CONTINUE : accumulate ? MODE_LOAD : MODE_ZERO;
        for (int64_t m0 = 0; m0 < M; m0 += MC) {
            const int64_t m1 = M - m0 < MC ? M : m0 + MC;
            pack_rows(A, lda, m0, m1, k0, kc, xbuf);
            for (int64_t p = 0; p < N; p += NR)
                ukr_rows(m0, m1, kc, xbuf, B + k0 * ldb + p, ldb, C + p, ldc, N - p < NR ? N - p : NR, mode, NULL, 0);
        }
    }
}

/* ------------------------------------------------------------------- gemv */

/* How the GEMV reads W. A step reads one chunk of every row: 64 bytes of f32
 * (16 k), 32 bytes of f16 or bf16 (16 k), or 64 bytes of bf16 in pairs (32
 * k; see gemv_step). When W is element-aligned and wstride is a multiple of
 * the chunk, every row starts the same s elements past a chunk boundary (a
 * safetensors file puts its data at 8 mod 64: s = 2 f32, 4 bf16), and the
 * steps follow the chunks of memory, not k: step n covers k = kb - s + ks n
 * ... + ks - 1 (ks: k per step), so each load is aligned and never spans two
 * cache lines (an unaligned 64-byte load at +8 always does). Element c of a
 * chunk is k = kb - s + ks n + c, in order, so the FMAs take the transposed
 * vectors in order as before: the chain over k is unchanged. The first step
 * has elements below s outside [kb, ke), the last one elements past ke:
 * masked, they are neither read (a masked-off lane touches no memory) nor
 * multiplied. Otherwise (s = 0) the steps start at kb, unaligned. */
static inline int gemv_chunk(vt_dtype dt, int pair) { return dt == VT_F32 || (dt == VT_BF16 && pair) ? 64 : 32; }

/* 1 on AMD: the GEMV's choices that were measured differently there. The
 * prefetch hint for the next tile's rows: T2 on Intel, T0 on AMD.
 * gemm_bench, W from memory, 1 thread, interleaved: on the 2-core Xeon
 * (Sapphire Rapids) T2 over T1 +2% f32, +5% bf16, T0 and NTA slower; on the
 * 2-core Zen 5 VM T0 over T2 0.69 vs 0.56 of triad (f32), 0.82 vs 0.72-0.78
 * (bf16), NTA between. The bf16 pair step (gemv_step): on AMD only; a
 * pair-transposed bf16 GEMV measured slower on the Xeon (288M bf16 decode 1
 * thread 52 -> 48.5 tok/s). Read once; a race only writes the same value. */
static int gemv_amd(void) {
    static int v = -1;
    int h = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_is("amd") ? 1 : 0;
        __atomic_store_n(&v, h, __ATOMIC_RELAXED);
    }
    return h;
}

/* A line of the next tile, with the hint gemv_amd picks (t0: T0, else T2). */
VT_INLINE void gemv_prefetch(const char *p, int t0) {
    if (t0) _mm_prefetch(p, _MM_HINT_T0);
    else _mm_prefetch(p, _MM_HINT_T2);
}

/* One step of gemv32 over the 16 rows of half h: elements [lo, hi) of the
 * chunk at byte offset off of each row, k = k0 + element. full: all of them
 * (no per-element tests). pf: 16 chunks of the next tile to prefetch, or
 * NULL. pair (bf16 only): 32 k per step as 16 pairs of 32 bits: the
 * transpose (64 shuffles) serves 512 weights instead of 256, and widening a
 * pair is a shift (the first) and a mask (the second) instead of a
 * zero-extending shuffle and a shift per weight: 64 + 32 vector ops per 512
 * weights where the 16-k step takes 160 + 32. Used on AMD (gemv_amd) when
 * the product runs on one thread (vt_gemm_args.solo), where the 16-k step
 * is compute-bound on the Zen 5 VM (30 GB/s with W in L2, triad 36):
 * gemm_bench from memory, 1 thread: 0.70-0.76 -> 0.80-0.90 of triad; 288M
 * bf16 decode 1 thread 115-118 -> 129-134 tok/s. With 2 threads the 16-k step reaches 0.88-0.98
 * of the 2-thread triad and the pair step only 0.78-0.82 (decode 166-192 ->
 * 153-160 tok/s), so a team keeps the 16-k step. Same chains, same bits. */
VT_INLINE void gemv_step(const int mr, const int full, vt_dtype dt, const int pair, const char *const *rows,
                         size_t off, int lo, int hi, const float *x, int64_t ldx, int64_t k0, __m512 *acc,
                         const char *pf, int t0) {
    const uint32_t lanes = full ? 0xFFFFFFFFu
                                : ((hi >= 32 ? 0xFFFFFFFFu : ((uint32_t)1 << hi) - 1) & ~(((uint32_t)1 << lo) - 1));
    __m512 r[16];
    if (dt == VT_BF16 && pair) {   /* 32 k: transposed as 16 pairs, each pair widened by a shift and a mask */
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) {
            if (pf) gemv_prefetch(pf + (size_t)t * (size_t)gemv_chunk(dt, pair), t0);
            r[t] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16((__mmask32)lanes, rows[t] + off));
        }
        tr16(r);
        const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
            const __m512i v = _mm512_castps_si512(r[c]);
            if (full || (2 * c >= lo && 2 * c < hi)) {
                const __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));   /* k0 + 2c: the low half */
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k0 + 2 * c]), w, acc[i]);
            }
            if (full || (2 * c + 1 >= lo && 2 * c + 1 < hi)) {
                const __m512 w = _mm512_castsi512_ps(_mm512_and_si512(v, high));   /* k0 + 2c + 1: the high half */
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++)
                    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k0 + 2 * c + 1]), w, acc[i]);
            }
        }
        return;
    }
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        const char *p = rows[t] + off;
        if (pf) gemv_prefetch(pf + (size_t)t * (size_t)gemv_chunk(dt, pair), t0);
        if (dt == VT_F32) r[t] = _mm512_maskz_loadu_ps((__mmask16)lanes, p);
        else {
            const __m256i v = _mm256_maskz_loadu_epi16((__mmask16)lanes, p);
            r[t] = dt == VT_F16 ? _mm512_cvtph_ps(v) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
        }
    }
    tr16(r);
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
        if (full || (c >= lo && c < hi))
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k0 + c]), r[c], acc[i]);
}

/* Rows [i0, i0+mr) x columns [j0, j0+nc), nc <= 32, k in [kb, ke), the
 * chunk shift s (0: unaligned steps from kb). The two 16-column halves give
 * 2*mr independent chains per k step. */
VT_INLINE void gemv32(const int mr, const vt_gemm_args *a, vt_dtype dt, const int pair, int s, int64_t i0, int64_t j0,
                      int64_t nc, int64_t kb, int64_t ke, int mode, const char *next) {
    const size_t es = dt == VT_F32 ? 4 : 2;
    const int nh = nc > 16 ? 2 : 1;
    const char *rows[32];   /* the first chunk of each row (aligned when s > 0) */
    for (int t = 0; t < 32; t++)
        rows[t] = (const char *)a->w + (size_t)(j0 + (t < nc ? t : nc - 1)) * a->wstride + (size_t)kb * es - (size_t)s * es;
    const __mmask16 m[2] = {mask_n(nc), mask_n(nc - 16)};
    const float *x = a->x + i0 * a->ldx;
    float *y = a->y + i0 * a->ldy + j0;
    /* The 32 rows that come next (next: their first row, or NULL), when W
     * rows are contiguous: one sequential region, prefetched in order over
     * this block's steps, 32 chunks per step, with the hint gemv_amd picks (on
     * the Xeon: 288M bf16 decode T2 over T1 47.1/51.4 -> 52.5/52.9 tok/s; no
     * prefetch 0.56 of triad for bf16). */
    const int pf_next = next && a->wstride == (size_t)a->K * es && kb == 0 && ke == a->K, t0 = gemv_amd();
    __m512 acc[2][VT_GEMV_MAX_ROWS];
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < mr; i++)
            acc[h][i] = mode == MODE_LOAD ? _mm512_maskz_loadu_ps(m[h], y + i * a->ldy + 16 * h) : _mm512_setzero_ps();
    const int ks = gemv_chunk(dt, pair) / (int)es;   /* k per step */
    int64_t k0 = kb - s;   /* k of element 0 of the step */
    for (size_t n = 0; k0 < ke; n++, k0 += ks) {
        const int lo = k0 < kb ? (int)(kb - k0) : 0, hi = ke - k0 < ks ? (int)(ke - k0) : ks;
        const size_t off = n * (size_t)gemv_chunk(dt, pair);
        for (int h = 0; h < nh; h++) {
            const char *pf = pf_next ? next + (n * 32 + (size_t)16 * h) * (size_t)gemv_chunk(dt, pair) : NULL;
            if (lo == 0 && hi == ks) gemv_step(mr, 1, dt, pair, rows + 16 * h, off, 0, ks, x, a->ldx, k0, acc[h], pf, t0);
            else gemv_step(mr, 0, dt, pair, rows + 16 * h, off, lo, hi, x, a->ldx, k0, acc[h], pf, t0);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int h = 0; h < nh; h++) {
            if (mode == MODE_ADD) acc[h][i] = _mm512_add_ps(acc[h][i], _mm512_maskz_loadu_ps(m[h], y + i * a->ldy + 16 * h));
            _mm512_mask_storeu_ps(y + i * a->ldy + 16 * h, m[h], acc[h][i]);
        }
}

/* The chunk shift of W's rows from k = kb on (see gemv_chunk), or 0 when the
 * rows do not all share one. */
static int gemv_shift(const vt_gemm_args *a, int64_t kb, int pair) {
    const size_t es = a->dt == VT_F32 ? 4 : 2, chunk = (size_t)gemv_chunk(a->dt, pair);
    const uintptr_t at = (uintptr_t)a->w + (uintptr_t)kb * es;
    if (a->wstride % chunk != 0 || at % es != 0) return 0;
    return (int)((at % chunk) / es);
}

#define GEMV_FN(n)                                                                                          \
    VT_AVX512 __attribute__((noinline)) static void gemv_##n(const vt_gemm_args *a, int64_t i0, int64_t j0,  \
                                                             int64_t nc, int64_t kb, int64_t ke, int mode,  \
                                                             const char *next) {                           \
        const int pair = a->dt == VT_BF16 && a->solo && gemv_amd(), s = gemv_shift(a, kb, pair);           \
        switch (a->dt) {                                                                                   \
        case VT_BF16:                                                                                      \
            if (pair) gemv32(n, a, VT_BF16, 1, s, i0, j0, nc, kb, ke, mode, next);                         \
            else gemv32(n, a, VT_BF16, 0, s, i0, j0, nc, kb, ke, mode, next);                              \
            break;                                                                                         \
        case VT_F16: gemv32(n, a, VT_F16, 0, s, i0, j0, nc, kb, ke, mode, next); break;                     \
        default: gemv32(n, a, VT_F32, 0, s, i0, j0, nc, kb, ke, mode, next); break;                         \
        }                                                                                                  \
    }
GEMV_FN(1) GEMV_FN(2) GEMV_FN(3) GEMV_FN(4)

typedef void (*gemv_fn)(const vt_gemm_args *, int64_t, int64_t, int64_t, int64_t, int64_t, int, const char *);
static const gemv_fn gemv_by_rows[VT_GEMV_MAX_ROWS + 1] = {NULL, gemv_1, gemv_2, gemv_3, gemv_4};

VT_AVX512 void vt_gemm512_gemv(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                               const void *next) {
    if (a->K == 0) { empty_chain(a, r0, r1, c0, c1); return; }
    const gemv_fn f = gemv_by_rows[r1 - r0];
    for (int64_t j = c0; j < c1; j += 32) {
        const int64_t nc = c1 - j < 32 ? c1 - j : 32;
        const char *pf = j + 32 < c1 ? (const char *)a->w + (size_t)(j + 32) * a->wstride : next;
#ifdef VT_MUTATE_GEMM_SPLIT_K
        f(a, r0, j, nc, 0, a->K / 2, a->acc ? MODE_LOAD : MODE_ZERO, pf);   /* two partial sums: the mutation */
        f(a, r0, j, nc, a->K / 2, a->K, MODE_ADD, pf);
#else
        f(a, r0, j, nc, 0, a->K, a->acc ? MODE_LOAD : MODE_ZERO, pf);
#endif
    }
}

/* ------------------------------------------------------------ panel gemv */

/* How far ahead the panel GEMV prefetches (bytes): bf16/f16 read half the
 * bytes per step, and at 1024 bytes ahead stayed at 0.86-0.94 of triad
 * (gemm_bench, 1 thread); 4096: 288M bf16 decode 1 thread 115/126 -> 129/140
 * tok/s, 2 threads 148/153 -> 169/162 (interleaved). f32: 1024 and 2048 the
 * same within the noise. */
enum { PANEL_PF = 1024, PANEL_PF16 = 4096 };

VT_INLINE __m512 pair_lanes(__m512 a, __m512 b, const int8_t *idx) {   /* lane l: idx[l] < 16 ? a : b */
    __m512i v = _mm512_set_epi32(idx[15], idx[14], idx[13], idx[12], idx[11], idx[10], idx[9], idx[8], idx[7],
                                 idx[6], idx[5], idx[4], idx[3], idx[2], idx[1], idx[0]);
    return _mm512_permutex2var_ps(a, v, b);
}
static const int8_t EVEN[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int8_t ODD[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
static const int8_t LO[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
static const int8_t HI[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/* The GEMV over W in panels (tensor.h), np panels side by side from column
 * j0: per k, a panel's row of 32 weights is contiguous, so the 16x16
 * transposes of gemv32 are gone and the whole of W is one sequential stream,
 * prefetched ahead. 2 np mr chains per k. bf16 takes the row of 32 as one
 * load of 16 pairs: the even columns widened by a shift, the odd ones by a
 * mask (2 vector ops per 32 weights where a widening load takes 4); the two
 * accumulators then hold the even and the odd columns, interleaved back once
 * per panel. Each lane is still one output's chain over k. */
VT_INLINE void gemvp(const int mr, const int np, vt_dtype dt, const vt_gemm_args *a, int64_t i0, int64_t j0,
                     int64_t kb, int64_t ke, int mode) {
    const size_t es = dt == VT_F32 ? 4 : 2, pstride = NR * a->wstride;   /* panel q at pw + q pstride */
    const int pairs = dt == VT_BF16;   /* acc[q][0]: columns 0, 2, ..., 30; acc[q][1]: 1, 3, ..., 31 */
    const char *pw = (const char *)a->w + (size_t)j0 * a->wstride;
    const float *x = a->x + i0 * a->ldx;
    __m512 acc[2][2][VT_GEMV_MAX_ROWS];
#pragma GCC unroll 2
    for (int q = 0; q < np; q++)
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            if (mode != MODE_LOAD) { acc[q][0][i] = acc[q][1][i] = _mm512_setzero_ps(); continue; }
            const float *y = a->y + (i0 + i) * a->ldy + j0 + NR * q;
            const __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
            acc[q][0][i] = pairs ? pair_lanes(y0, y1, EVEN) : y0;
            acc[q][1][i] = pairs ? pair_lanes(y0, y1, ODD) : y1;
        }
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int64_t k = kb; k < ke; k++) {
        __m512 w[2][2];
#pragma GCC unroll 2
        for (int q = 0; q < np; q++) {
            const char *p = pw + q * pstride + (size_t)k * NR * es;
            if (es == 4) _mm_prefetch(p + PANEL_PF, _MM_HINT_T0), _mm_prefetch(p + PANEL_PF + 64, _MM_HINT_T0);
            else _mm_prefetch(p + PANEL_PF16, _MM_HINT_T0);
            if (pairs) {
                const __m512i v = _mm512_loadu_si512(p);
                w[q][0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                w[q][1] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
            } else w[q][0] = wload(p, dt, 0, 0xFFFF), w[q][1] = wload(p, dt, 16, 0xFFFF);
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 xb = _mm512_set1_ps(x[i * a->ldx + k]);
#pragma GCC unroll 2
            for (int q = 0; q < np; q++) {
                acc[q][0][i] = _mm512_fmadd_ps(xb, w[q][0], acc[q][0][i]);
                acc[q][1][i] = _mm512_fmadd_ps(xb, w[q][1], acc[q][1][i]);
            }
        }
    }
#pragma GCC unroll 2
    for (int q = 0; q < np; q++)
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            float *y = a->y + (i0 + i) * a->ldy + j0 + NR * q;
            __m512 o[2] = {acc[q][0][i], acc[q][1][i]};
            if (pairs) o[0] = pair_lanes(acc[q][0][i], acc[q][1][i], LO), o[1] = pair_lanes(acc[q][0][i], acc[q][1][i], HI);
            for (int h = 0; h < 2; h++) {
                if (mode == MODE_ADD) o[h] = _mm512_add_ps(o[h], _mm512_loadu_ps(y + 16 * h));
                _mm512_storeu_ps(y + 16 * h, o[h]);
            }
        }
}

/* np = 2: two panels side by side, 4 mr chains per k (one panel's 2 mr
 * chains left bf16 bound by the FMA latency at 1 thread: 28 G weights/s with
 * W in L2, f32 the same per k at twice the bytes). */
#define GEMVP_FN(n, np)                                                                                        \
    VT_AVX512 __attribute__((noinline)) static void gemvp_##n##_##np(const vt_gemm_args *a, int64_t i0,        \
                                                                     int64_t j0, int64_t kb, int64_t ke,     \
                                                                     int mode) {                             \
        switch (a->dt) {                                                                                      \
        case VT_BF16: gemvp(n, np, VT_BF16, a, i0, j0, kb, ke, mode); break;                                  \
        case VT_F16: gemvp(n, np, VT_F16, a, i0, j0, kb, ke, mode); break;                                    \
        default: gemvp(n, np, VT_F32, a, i0, j0, kb, ke, mode); break;                                        \
        }                                                                                                     \
    }
GEMVP_FN(1, 1) GEMVP_FN(2, 1) GEMVP_FN(3, 1) GEMVP_FN(4, 1)
GEMVP_FN(1, 2) GEMVP_FN(2, 2) GEMVP_FN(3, 2) GEMVP_FN(4, 2)

typedef void (*gemvp_fn)(const vt_gemm_args *, int64_t, int64_t, int64_t, int64_t, int);
static const gemvp_fn gemvp_by_rows[2][VT_GEMV_MAX_ROWS + 1] = {{NULL, gemvp_1_1, gemvp_2_1, gemvp_3_1, gemvp_4_1},
                                                                {NULL, gemvp_1_2, gemvp_2_2, gemvp_3_2, gemvp_4_2}};

VT_AVX512 void vt_gemm512_panel_gemv(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (a->K == 0) { empty_chain(a, r0, r1, c0, c1); return; }
    for (int64_t j = c0; j < c1;) {
        const int np = c1 - j >= 2 * NR ? 2 : 1;
        const gemvp_fn f = gemvp_by_rows[np - 1][r1 - r0];
#ifdef VT_MUTATE_GEMM_SPLIT_K
        f(a, r0, j, 0, a->K / 2, a->acc ? MODE_LOAD : MODE_ZERO);   /* two partial sums: the mutation */
        f(a, r0, j, a->K / 2, a->K, MODE_ADD);
#else
        f(a, r0, j, 0, a->K, a->acc ? MODE_LOAD : MODE_ZERO);
#endif
        j += np * NR;
    }
}

/* ------------------------------------------------------------ small M */

/* y = x·Wᵀ for a tile of 5..VT_BCAST_MAX_ROWS rows with f32 W in rows (a MoE
 * expert's tokens at prefill: 8 to 70 rows), turned around: a vector holds
 * 16 rows i of one column j, and each step broadcasts W[j][k] straight from
 * W's row (no packing) against x transposed, xt[k][16 v + r] = x[r][k] (zero
 * rows past M). The packed kernel reads each W element once per tile too,
 * but first transposes it into a panel (64 shuffles per 256 values): at
 * M ~ 32 that cost as much as the FMAs. Each chain is still x[i][k] * W[j][k]
 * added in k order, one FMA per step: the same bits as every other path.
 *
 * mv vectors of rows (16 mv >= M) x nrw columns: mv * nrw accumulators; per
 * k, mv vector loads and nrw broadcasts feed mv * nrw FMAs. The tile's K is
 * cut into BK blocks so that xt stays in L1/L2; between blocks the
 * accumulators wait in yt[j][16 mv] (a store and reload is exact), and the
 * last block leaves them there too, copied into y once. Each row of W is
 * prefetched BCAST_PF bytes ahead, a line per 16 steps (12 rows read side by
 * side are more streams than the hardware prefetchers follow).
 *
 * Measured (Zen 5 VM, 1 thread, 96 experts' W from memory, N x K = 256 x 1024
 * and 1024 x 256, GFLOP/s packed -> this): M = 8: 47 -> 54, 16: 75 -> 107,
 * 24: 97 -> 128, 32: 108 -> 161, 48: 133 -> 200, 56: 139 -> 157, 64: 150 ->
 * 176; at 65 rows the packed kernel again (151). Not for bf16: broadcasting
 * one needs a shift or a mask per weight (or a widened copy of the rows),
 * and both measured slower than the packed kernel, whose widening rides on
 * the transpose (M = 32: 156 packed, 147 widened copy). */
enum { BK = 256, BCAST_MV_MAX = 4, BCAST_NRW_MAX = 14, BCAST_PF = 512 };

VT_INLINE void bcast_kernel(const int mv, const int nrw, int64_t kc, const float *xt, const char *w, size_t jstep,
                            float *yt, int mode) {
    const int64_t ld = 16 * mv;
    __m512 acc[BCAST_NRW_MAX][BCAST_MV_MAX];
#pragma GCC unroll 14
    for (int j = 0; j < nrw; j++)
#pragma GCC unroll 4
        for (int v = 0; v < mv; v++) acc[j][v] = mode == MODE_LOAD ? _mm512_load_ps(yt + j * ld + 16 * v) : _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        if ((k & 15) == 0)   /* a line of each row per 16 steps, BCAST_PF bytes ahead */
#pragma GCC unroll 14
            for (int j = 0; j < nrw; j++) _mm_prefetch(w + (size_t)j * jstep + 4 * (size_t)k + BCAST_PF, _MM_HINT_T0);
        __m512 xv[BCAST_MV_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < mv; v++) xv[v] = _mm512_load_ps(xt + k * ld + 16 * v);
#pragma GCC unroll 14
        for (int j = 0; j < nrw; j++) {
            float s;
            memcpy(&s, w + (size_t)j * jstep + 4 * (size_t)k, 4);
            const __m512 b = _mm512_set1_ps(s);
#pragma GCC unroll 4
            for (int v = 0; v < mv; v++) acc[j][v] = _mm512_fmadd_ps(b, xv[v], acc[j][v]);
        }
    }
#pragma GCC unroll 14
    for (int j = 0; j < nrw; j++)
#pragma GCC unroll 4
        for (int v = 0; v < mv; v++) {
            if (mode == MODE_ADD) acc[j][v] = _mm512_add_ps(acc[j][v], _mm512_load_ps(yt + j * ld + 16 * v));
            _mm512_store_ps(yt + j * ld + 16 * v, acc[j][v]);
        }
}

/* The column counts of one kernel call: the widest for mv (registers:
 * mv * nrw accumulators + mv x vectors + the broadcast), then 8, 4, 2, 1 for
 * the rest of a tile. */
#define BCAST_FN(mv, nrw)                                                                                  \
    VT_AVX512 __attribute__((noinline)) static void bcast_##mv##_##nrw(int64_t kc, const float *xt, const char *w, \
                                                                     size_t jstep, float *yt, int mode) {     \
        bcast_kernel(mv, nrw, kc, xt, w, jstep, yt, mode);                                                \
    }
BCAST_FN(1, 14) BCAST_FN(1, 8) BCAST_FN(1, 4) BCAST_FN(1, 2) BCAST_FN(1, 1)
BCAST_FN(2, 12) BCAST_FN(2, 8) BCAST_FN(2, 4) BCAST_FN(2, 2) BCAST_FN(2, 1)
BCAST_FN(3, 8) BCAST_FN(3, 4) BCAST_FN(3, 2) BCAST_FN(3, 1)
BCAST_FN(4, 6) BCAST_FN(4, 4) BCAST_FN(4, 2) BCAST_FN(4, 1)

typedef void (*bcast_fn)(int64_t, const float *, const char *, size_t, float *, int);
typedef struct bcast_width { int nrw; bcast_fn fn; } bcast_width;
static const bcast_width bcast_widths[BCAST_MV_MAX + 1][5] = {
    {{0, NULL}},
    {{14, bcast_1_14}, {8, bcast_1_8}, {4, bcast_1_4}, {2, bcast_1_2}, {1, bcast_1_1}},
    {{12, bcast_2_12}, {8, bcast_2_8}, {4, bcast_2_4}, {2, bcast_2_2}, {1, bcast_2_1}},
    {{8, bcast_3_8}, {4, bcast_3_4}, {2, bcast_3_2}, {1, bcast_3_1}, {0, NULL}},
    {{6, bcast_4_6}, {4, bcast_4_4}, {2, bcast_4_2}, {1, bcast_4_1}, {0, NULL}},
};

/* xt[k][16 mv] for rows [r0, r1) and k in [k0, k0 + kc), zeros past r1. */
VT_AVX512 static void pack_xt(const float *x, int64_t ldx, int64_t r0, int64_t r1, int64_t k0, int64_t kc, int mv,
                              float *xt) {
    const int64_t ld = 16 * mv;
    for (int v = 0; v < mv; v++) {
        const int64_t i0 = r0 + 16 * v, nr = r1 - i0;
        for (int64_t kk = 0; kk < kc; kk += 16) {
            __m512 r[16];
            x_block(x, ldx, i0, nr, k0 + kk, kc - kk, r);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                if (kk + t < kc) _mm512_store_ps(xt + (kk + t) * ld + 16 * v, r[t]);
        }
    }
}

VT_AVX512 void vt_gemm512_bcast(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (a->K == 0) { empty_chain(a, r0, r1, c0, c1); return; }
    static _Thread_local _Alignas(64) float xt[BK * 16 * BCAST_MV_MAX];
    static _Thread_local _Alignas(64) float yt[TILE_COLS * 16 * BCAST_MV_MAX];
    const int mv = (int)((r1 - r0 + 15) / 16);
    const int64_t ld = 16 * mv;
    for (int64_t c = c0; c < c1; c += TILE_COLS) {
        const int64_t ce = c1 - c < TILE_COLS ? c1 : c + TILE_COLS;
        for (int64_t k0 = 0; k0 < a->K; k0 += BK) {
            const int64_t kc = a->K - k0 < BK ? a->K - k0 : BK;
            pack_xt(a->x, a->ldx, r0, r1, k0, kc, mv, xt);
            for (int64_t j = c; j < ce;) {
                const bcast_width *bw = bcast_widths[mv];
                while (bw->nrw > ce - j) bw++;
                bw->fn(kc, xt, (const char *)a->w + (size_t)j * a->wstride + 4 * (size_t)k0, a->wstride, yt + (j - c) * ld,
                       k0 == 0 ? MODE_ZERO : MODE_CONTINUE);
                j += bw->nrw;
            }
        }
        for (int64_t i = r0; i < r1; i++)
            for (int64_t j = c; j < ce; j++) a->y[i * a->ldy + j] = yt[(j - c) * ld + (i - r0)];
    }
}
