/*
 * vmath.h — exp(x) as a fixed sequence of IEEE operations, in a scalar and a
 * 16-lane AVX-512 form that give the same bits, so that a loop can run
 * either way (VTLAB_GEMM_ISA=scalar, a CPU without AVX-512, a tail) and the
 * result never depends on which. libm's expf is a call per element that the
 * compiler cannot vectorise: with the SiLU, sigmoid and gates built on it, it
 * was 9% of a 1-thread prefill of the 288M model (perf: __expf_fma 3.6%,
 * vt_silu 3.1%, __log1pf 1.9%, vt_sigmoid 0.7%).
 *
 * vt_log1pf_pos (log(1 + u), u >= 0) completes softplus the same way.
 *
 * The exp is Cephes' expf (~1 ulp): n = round(x / ln2) (by adding and
 * subtracting 1.5 * 2^23), r = x - n ln2 with ln2 in two parts (n * C1 is
 * exact), a degree-7 polynomial in r, times 2^n built from the exponent
 * bits. Below -87, where 2^n would leave the normal range, 0; above 88, +inf
 * (the true value is finite up to 88.72: the callers divide by 1 + exp(..),
 * where that changes nothing above 1e-37). Written with separate multiplies
 * and adds (the build contracts nothing into FMAs, -std=c11), so both forms
 * round alike. NaN gives NaN (its sign and payload are not kept alike).
 */
#ifndef VT_VMATH_H
#define VT_VMATH_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define VT_EXP_LO (-87.0f)
#define VT_EXP_HI 88.0f

static inline float vt_expf(float x) {
    if (x != x) return x;
    const float xc = x < VT_EXP_LO ? VT_EXP_LO : x > VT_EXP_HI ? VT_EXP_HI : x;
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return x < VT_EXP_LO ? 0.0f : x > VT_EXP_HI ? INFINITY : y * s;
}

/* vt_expf on 16 lanes: the same operations, the same bits. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 vt_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(VT_EXP_LO), hi = _mm512_set1_ps(VT_EXP_HI), magic = _mm512_set1_ps(12582912.0f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512 xc = _mm512_mask_blend_ps(over, _mm512_mask_blend_ps(under, x, lo), hi);
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(y, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 v = _mm512_maskz_mov_ps((__mmask16)~under, _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
    v = _mm512_mask_blend_ps(over, v, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(nan, v, x);
}

/* vt_expf on 8 lanes (AVX2, for a CPU without AVX-512): the same operations,
 * the same bits. A compare's all-ones lanes stand where AVX-512 has a mask. */
static inline __attribute__((always_inline, target("avx2"))) __m256 vt_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(VT_EXP_LO), hi = _mm256_set1_ps(VT_EXP_HI), magic = _mm256_set1_ps(12582912.0f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 xc = _mm256_blendv_ps(_mm256_blendv_ps(x, lo, under), hi, over);
    const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 v = _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
    v = _mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(v, x, nan);
}

/* log(1 + u) for u >= 0 (finite): Cephes' logf on v = 1 + u (v = m 2^e with
 * m in [sqrt(1/2), sqrt(2)), a degree-8 polynomial in m - 1, ln2 in two
 * parts), plus the rounding of 1 + u put back, (u - (v - 1)) / v, which v - 1
 * computes exactly; so a u below 2^-24, where v = 1, still gives u. */
static inline float vt_log1pf_pos(float u) {
    const float v = 1.0f + u;
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    float e = (float)((int32_t)(b >> 23) - 126);
    b = (b & 0x007FFFFFu) | 0x3F000000u;   /* v's mantissa in [0.5, 1) */
    float m;
    memcpy(&m, &b, sizeof m);
    if (m < 0.707106781186547524f) e = e - 1.0f, m = m + m - 1.0f;
    else m = m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m + -1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m + -1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m + -1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m + -2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y = y + e * -2.12194440e-4f;
    y = y + -0.5f * z;
    float r = m + y;
    r = r + e * 0.693359375f;
    return r + (u - (v - 1.0f)) / v;
}

/* vt_log1pf_pos on 16 lanes: the same operations, the same bits. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 vt_log1p16_pos(__m512 u) {
    const __m512 one = _mm512_set1_ps(1.0f), v = _mm512_add_ps(one, u);
    const __m512i b = _mm512_castps_si512(v);
    __m512 e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(126)));
    __m512 m = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x007FFFFF)), _mm512_set1_epi32(0x3F000000)));
    const __mmask16 lo = _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm512_mask_sub_ps(e, lo, e, one);
    m = _mm512_mask_blend_ps(lo, _mm512_sub_ps(m, one), _mm512_sub_ps(_mm512_add_ps(m, m), one));
    const __m512 z = _mm512_mul_ps(m, m);
    __m512 y = _mm512_set1_ps(7.0376836292e-2f);
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(-1.1514610310e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(1.1676998740e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(-1.2420140846e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(1.4249322787e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(-1.6668057665e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(2.0000714765e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(-2.4999993993e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, m), _mm512_set1_ps(3.3333331174e-1f));
    y = _mm512_mul_ps(_mm512_mul_ps(y, m), z);
    y = _mm512_add_ps(y, _mm512_mul_ps(e, _mm512_set1_ps(-2.12194440e-4f)));
    y = _mm512_add_ps(y, _mm512_mul_ps(_mm512_set1_ps(-0.5f), z));
    __m512 r = _mm512_add_ps(m, y);
    r = _mm512_add_ps(r, _mm512_mul_ps(e, _mm512_set1_ps(0.693359375f)));
    return _mm512_add_ps(r, _mm512_div_ps(_mm512_sub_ps(u, _mm512_sub_ps(v, one)), v));
}

/* vt_log1pf_pos on 8 lanes (AVX2): the same operations, the same bits. */
static inline __attribute__((always_inline, target("avx2"))) __m256 vt_log1p8_pos(__m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f), v = _mm256_add_ps(one, u);
    const __m256i b = _mm256_castps_si256(v);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(126)));
    __m256 m = _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F000000)));
    const __m256 lo = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_blendv_ps(e, _mm256_sub_ps(e, one), lo);
    m = _mm256_blendv_ps(_mm256_sub_ps(m, one), _mm256_sub_ps(_mm256_add_ps(m, m), one), lo);
    const __m256 z = _mm256_mul_ps(m, m);
    __m256 y = _mm256_set1_ps(7.0376836292e-2f);
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(-1.1514610310e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(1.1676998740e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(-1.2420140846e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(1.4249322787e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(-1.6668057665e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(2.0000714765e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(-2.4999993993e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, m), _mm256_set1_ps(3.3333331174e-1f));
    y = _mm256_mul_ps(_mm256_mul_ps(y, m), z);
    y = _mm256_add_ps(y, _mm256_mul_ps(e, _mm256_set1_ps(-2.12194440e-4f)));
    y = _mm256_add_ps(y, _mm256_mul_ps(_mm256_set1_ps(-0.5f), z));
    __m256 r = _mm256_add_ps(m, y);
    r = _mm256_add_ps(r, _mm256_mul_ps(e, _mm256_set1_ps(0.693359375f)));
    return _mm256_add_ps(r, _mm256_div_ps(_mm256_sub_ps(u, _mm256_sub_ps(v, one)), v));
}

#endif
