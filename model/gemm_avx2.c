/*
 * gemm_avx2.c — the products of gemm.h on a CPU with AVX2, FMA and F16C but
 * no AVX-512 (gemm.c's dispatch; VTLAB_GEMM_ISA=avx2 forces it where AVX-512
 * is present too). Before it such a CPU ran the scalar loops: the 288M
 * model's prefill took 94 ms per token against 0.96 with AVX-512.
 *
 * One kernel: a block of mr rows (1..6) of x against 16 or 32 columns of W
 * whose elements for one k lie side by side, W(k, c) at w + k kstride + c es:
 *   - a weight in panels (tensor.h): a panel's 32 columns per k, read in place;
 *   - B of vt_sgemm_nn ([K][N] row-major): N's columns per k, read in place;
 *   - a weight in rows (and B of vt_sgemm_nt, and a ragged last column
 *     group of either above): KB k at a time copied (widened, exactly) into
 *     a [KB][32] f32 buffer on the stack, zero past the last column.
 * Per k it loads the columns once (bf16 widened by a shift, f16 by
 * vcvtph2ps: both exact), broadcasts x[i][k] for each row and adds one FMA
 * per accumulator: every output element is the chain of gemm.h, k in order
 * from 0 (or from y), one fmaf per step. A chain cut at a K block goes
 * through y (a store and a reload are exact). So the bits are those of the
 * scalar loops and of the AVX-512 kernels (tests/unit/test_gemm.c).
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_kernels.h"

#define VT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define VT_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

enum {
    MR = 6,    /* rows per block: 12 accumulators, 2 W vectors, 1 broadcast (16 ymm) */
    KB = 128,  /* k per copied block: [KB][32] f32 = 16 KB on the stack */
    WIDE = 32, /* columns of a block of at most 2 rows (4 chains per k, not 2) */
};

VT_AVX2_INLINE __m256 load8(const char *p, vt_dtype dt) {
    if (dt == VT_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == VT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* y[i][0 .. 8 nv) for i < mr: the chains over k < nk of x[i][k] * W(k, ·),
 * from 0 (load 0) or from y (load 1). x and w point at k = 0 of the block. */
VT_AVX2_INLINE void block(const int mr, const int nv, vt_dtype dt, const float *x, int64_t ldx, const char *w,
                          size_t kstride, int64_t nk, float *y, int64_t ldy, int load) {
    const size_t es = dt == VT_F32 ? 4 : 2;
    __m256 acc[MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = load ? _mm256_loadu_ps(y + i * ldy + 8 * v) : _mm256_setzero_ps();
    for (int64_t k = 0; k < nk; k++) {
        const char *p = w + (size_t)k * kstride;
        __m256 wv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) wv[v] = load8(p + (size_t)(8 * v) * es, dt);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256 xb = _mm256_broadcast_ss(x + i * ldx + k);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[i][v] = _mm256_fmadd_ps(xb, wv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(y + i * ldy + 8 * v, acc[i][v]);
}

typedef void (*block_fn)(const float *, int64_t, const char *, size_t, int64_t, float *, int64_t, int);

#define BLOCK_FN(mr, nv, tag, dt)                                                                               \
    VT_AVX2 __attribute__((noinline)) static void block_##mr##_##nv##_##tag(                                   \
        const float *x, int64_t ldx, const char *w, size_t kstride, int64_t nk, float *y, int64_t ldy, int load) { \
        block(mr, nv, dt, x, ldx, w, kstride, nk, y, ldy, load);                                                \
    }
#define BLOCK_FNS(tag, dt)                                                                                      \
    BLOCK_FN(1, 2, tag, dt) BLOCK_FN(2, 2, tag, dt) BLOCK_FN(3, 2, tag, dt) BLOCK_FN(4, 2, tag, dt)              \
    BLOCK_FN(5, 2, tag, dt) BLOCK_FN(6, 2, tag, dt) BLOCK_FN(1, 4, tag, dt) BLOCK_FN(2, 4, tag, dt)
BLOCK_FNS(f32, VT_F32)
BLOCK_FNS(bf16, VT_BF16)
BLOCK_FNS(f16, VT_F16)

/* [dtype][nv == 4][mr] */
#define BLOCK_ROW(tag)                                                                                          \
    {{NULL, block_1_2_##tag, block_2_2_##tag, block_3_2_##tag, block_4_2_##tag, block_5_2_##tag,                 \
      block_6_2_##tag},                                                                                         \
     {NULL, block_1_4_##tag, block_2_4_##tag, NULL, NULL, NULL, NULL}}
static const block_fn BLOCKS[3][2][MR + 1] = {BLOCK_ROW(f32), BLOCK_ROW(bf16), BLOCK_ROW(f16)};

static int dt_index(vt_dtype dt) { return dt == VT_F32 ? 0 : dt == VT_BF16 ? 1 : 2; }

/* Rows [r0, r1) of y, columns [0, n) (n <= 32), from nk k of W at w (16
 * readable columns per started 16, kstride apart) and of x (x and w at the
 * same k). Columns of a ragged group past n are computed into a side buffer
 * and dropped. */
static void run_cols(const float *x, int64_t ldx, int64_t r0, int64_t r1, const char *w, size_t kstride,
                     vt_dtype dt, int64_t nk, float *y, int64_t ldy, int64_t n, int load) {
    const size_t es = vt_dtype_size(dt);
    for (int64_t i = r0; i < r1;) {
        const int64_t left = r1 - i;
        const int wide = left <= 2 && n > 16;   /* few rows: all 32 columns at once, 4 chains per k */
        const int mr = (int)(wide ? left : left < MR ? left : MR);
        const int64_t gw = wide ? WIDE : 16;    /* columns per group (8 per vector) */
        const block_fn f = BLOCKS[dt_index(dt)][wide][mr];
        for (int64_t c = 0; c < n; c += gw) {
            const int64_t nc = n - c < gw ? n - c : gw;
            const char *wc = w + (size_t)c * es;
            if (nc == gw) {
                f(x + i * ldx, ldx, wc, kstride, nk, y + i * ldy + c, ldy, load);
                continue;
            }
            float side[MR][WIDE];   /* a ragged group: its chains in full width here */
            for (int r = 0; r < mr; r++)
                for (int64_t j = 0; j < gw; j++) side[r][j] = load && j < nc ? y[(i + r) * ldy + c + j] : 0.0f;
            f(x + i * ldx, ldx, wc, kstride, nk, &side[0][0], WIDE, load);
            for (int r = 0; r < mr; r++) memcpy(y + (i + r) * ldy + c, side[r], (size_t)nc * sizeof(float));
        }
        i += mr;
    }
}

/* W(k, j) for j in [j0, j0 + n), k in [k0, k1): column j's element k at
 * w + j cstride + k kstride (bytes), widened into buf[k - k0][0 .. 32), zero
 * past n. */
static void copy_cols(const char *w, size_t cstride, size_t kstride, vt_dtype dt, int64_t j0, int64_t n, int64_t k0,
                      int64_t k1, float *buf) {
    for (int64_t k = k0; k < k1; k++) {
        float *b = buf + (k - k0) * WIDE;
        for (int64_t c = 0; c < WIDE; c++)
            b[c] = c < n ? vt_gemm_widen(w + (size_t)(j0 + c) * cstride + (size_t)k * kstride, dt, 0) : 0.0f;
    }
}

/* Columns [c0, c1) whose elements are at w + j cstride + k kstride, through
 * copied [KB][32] blocks (any layout, any ragged end). */
static void run_copied(const float *x, int64_t ldx, int64_t r0, int64_t r1, const char *w, size_t cstride,
                       size_t kstride, vt_dtype dt, int64_t K, float *y, int64_t ldy, int64_t c0, int64_t c1,
                       int acc) {
    _Alignas(64) float buf[KB * WIDE];
    for (int64_t j = c0; j < c1; j += WIDE) {
        const int64_t n = c1 - j < WIDE ? c1 - j : WIDE;
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
            const int64_t k1 = K - k0 < KB ? K : k0 + KB;
            copy_cols(w, cstride, kstride, dt, j, n, k0, k1, buf);
            run_cols(x + k0, ldx, r0, r1, (const char *)buf, WIDE * sizeof(float), VT_F32, k1 - k0, y + j, ldy, n,
                     k0 > 0 || acc);
        }
    }
}

VT_AVX2 void vt_gemm256_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (r0 >= r1 || c0 >= c1) return;
    if (c0 < a->npanel && a->npanel < c1) {
        vt_gemm256_block(a, r0, r1, c0, a->npanel);
        vt_gemm256_block(a, r0, r1, a->npanel, c1);
        return;
    }
    if (a->K == 0) {   /* no steps: the chain is its start */
        for (int64_t i = r0; i < r1; i++)
            for (int64_t j = c0; j < c1; j++) a->y[i * a->ldy + j] = a->acc ? a->y[i * a->ldy + j] : 0.0f;
        return;
    }
    const size_t es = vt_dtype_size(a->dt);
    if (c0 >= a->npanel) {   /* rows: column j's element k at w + j wstride + k es */
        run_copied(a->x, a->ldx, r0, r1, (const char *)a->w, a->wstride, es, a->dt, a->K, a->y, a->ldy, c0, c1, a->acc);
        return;
    }
    /* panels (tensor.h): column j's element k at w + (j - j % 32) wstride + (32 k + j % 32) es; a
     * panel holds its 32 columns per k, so a part of one still reads inside it */
    for (int64_t j = c0; j < c1;) {
        const int64_t jp = j - j % VT_PANEL, end = jp + VT_PANEL < c1 ? jp + VT_PANEL : c1;
        const char *w = (const char *)a->w + (size_t)jp * a->wstride + (size_t)(j - jp) * es;
        const int64_t n = end - j;
        if ((j - jp) + ((n + 15) / 16) * 16 <= VT_PANEL)
            run_cols(a->x, a->ldx, r0, r1, w, VT_PANEL * es, a->dt, a->K, a->y + j, a->ldy, n, a->acc);
        else   /* a part whose 16-column groups would pass the panel's end: columns jp + [j - jp, end - jp) */
            run_copied(a->x, a->ldx, r0, r1, (const char *)a->w + (size_t)jp * a->wstride, es, VT_PANEL * es, a->dt,
                       a->K, a->y + jp, a->ldy, j - jp, end - jp, a->acc);
        j = end;
    }
}

VT_AVX2 void vt_sgemm256_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                            int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    const size_t kstride = (size_t)ldb * sizeof(float);
    const int64_t nfull = N / 16 * 16;   /* whole 16-column groups read B in place; the rest through a copy */
    for (int64_t j = 0; j < nfull; j += WIDE) {
        const int64_t n = nfull - j < WIDE ? nfull - j : WIDE;
        run_cols(A, lda, 0, M, (const char *)(B + j), kstride, VT_F32, K, C + j, ldc, n, accumulate);
    }
    if (nfull < N)
        run_copied(A, lda, 0, M, (const char *)B, sizeof(float), kstride, VT_F32, K, C, ldc, nfull, N, accumulate);
}
