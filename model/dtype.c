/*
 * dtype.c — the dtype traits table and the float conversions.
 *
 * bf16 is the top half of an f32. Converting f32 -> bf16 rounds the low 16
 * bits away with round-to-nearest-even: add 0x7FFF plus the lowest kept bit,
 * then truncate. That trick would turn a NaN with payload only in the low bits
 * into Inf, so NaN is handled first: keep sign and top payload, force the
 * quiet bit. f16 needs real exponent re-biasing, so it is done field by field.
 */
#include "dtype.h"
#include "vt.h"

#include <string.h>

static const vt_dtype_traits TRAITS[VT_DTYPE_COUNT] = {
    [VT_F32]  = {"f32",  4, "F32",  1},
    [VT_BF16] = {"bf16", 2, "BF16", 1},
    [VT_F16]  = {"f16",  2, "F16",  1},
    [VT_I32]  = {"i32",  4, "I32",  0},
    [VT_I64]  = {"i64",  8, "I64",  0},
    [VT_U8]   = {"u8",   1, "U8",   0},
};

int vt_dtype_valid(int t) { return t >= 0 && t < VT_DTYPE_COUNT; }

const vt_dtype_traits *vt_dtype_traits_of(vt_dtype t) {
    return vt_dtype_valid((int)t) ? &TRAITS[t] : NULL;
}

size_t vt_dtype_size(vt_dtype t) {
    return vt_dtype_valid((int)t) ? TRAITS[t].size : 0;
}

const char *vt_dtype_name(vt_dtype t) {
    return vt_dtype_valid((int)t) ? TRAITS[t].name : "?";
}

int vt_dtype_from_st_name(const char *s, vt_dtype *out) {
    for (int i = 0; i < VT_DTYPE_COUNT; i++)
        if (strcmp(s, TRAITS[i].st_name) == 0) { *out = (vt_dtype)i; return 0; }
    return -1;
}

int vt_dtype_from_name(const char *s, vt_dtype *out) {
    for (int i = 0; i < VT_DTYPE_COUNT; i++)
        if (strcmp(s, TRAITS[i].name) == 0) { *out = (vt_dtype)i; return 0; }
    return -1;
}

size_t vt_row_size(vt_dtype t, int64_t n) {
    if (!vt_dtype_valid((int)t) || n < 0) return 0;
    size_t sz = TRAITS[t].size;
    if ((uint64_t)n > SIZE_MAX / sz) return 0;
    return (size_t)n * sz;
}

static uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

vt_bf16 vt_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    vt_bf16 h;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {        /* NaN: keep sign + top payload, make it quiet */
        h.bits = (uint16_t)((u >> 16) | 0x0040u);
        return h;
    }
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb;                            /* RNE; overflow rolls into Inf correctly */
    h.bits = (uint16_t)(u >> 16);
    return h;
}

float vt_bf16_to_f32(vt_bf16 h) { return bits_f32((uint32_t)h.bits << 16); }

float vt_round_bf16(float x) { return vt_bf16_to_f32(vt_f32_to_bf16(x)); }

vt_f16 vt_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t exp = (u >> 23) & 0xFFu;
    uint32_t man = u & 0x7FFFFFu;
    vt_f16 h;
    if (exp == 0xFF) {                             /* Inf or NaN */
        h.bits = (uint16_t)(sign | 0x7C00u | (man ? (0x0200u | (man >> 13)) : 0));
        return h;
    }
    int32_t e = (int32_t)exp - 127 + 15;           /* re-biased exponent */
    if (e >= 31) { h.bits = (uint16_t)(sign | 0x7C00u); return h; }   /* overflow -> Inf */
    if (e <= 0) {                                  /* f16 subnormal or zero */
        if (e < -10) { h.bits = (uint16_t)sign; return h; }           /* below half the smallest subnormal */
        man |= 0x800000u;                          /* implicit leading 1 */
        uint32_t shift = (uint32_t)(14 - e);       /* 24-bit mantissa -> 10-bit subnormal field */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        h.bits = (uint16_t)(sign | q);             /* q may carry into the exponent: still correct */
        return h;
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;          /* carry may reach Inf: correct */
    h.bits = (uint16_t)(sign | q);
    return h;
}

float vt_f16_to_f32(vt_f16 h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1Fu;
    uint32_t man = h.bits & 0x3FFu;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: value = man * 2^-24, exact in f32 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

/* Element access through memcpy: checkpoint data mapped from a file may be
 * unaligned (an F32 tensor after an odd-length BF16 one). */
static float load_float(const void *p, vt_dtype t, size_t i) {
    const unsigned char *b = p;
    switch (t) {
    case VT_F32:  { float v; memcpy(&v, b + 4 * i, 4); return v; }
    case VT_BF16: { vt_bf16 h; memcpy(&h, b + 2 * i, 2); return vt_bf16_to_f32(h); }
    case VT_F16:  { vt_f16 h; memcpy(&h, b + 2 * i, 2); return vt_f16_to_f32(h); }
    default:      return 0.0f;
    }
}

int vt_convert(void *dst, vt_dtype dst_t, const void *src, vt_dtype src_t, size_t n) {
    const vt_dtype_traits *dt = vt_dtype_traits_of(dst_t), *st = vt_dtype_traits_of(src_t);
    if (!dt || !st || !dt->is_float || !st->is_float) return -1;
    if (dst_t == src_t) {
        if (dst != src) memmove(dst, src, vt_row_size(src_t, (int64_t)n));
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        float v = load_float(src, src_t, i);
        unsigned char *d = dst;
        switch (dst_t) {
        case VT_F32:  memcpy(d + 4 * i, &v, 4); break;
        case VT_BF16: { vt_bf16 h = vt_f32_to_bf16(v); memcpy(d + 2 * i, &h, 2); break; }
        case VT_F16:  { vt_f16 h = vt_f32_to_f16(v); memcpy(d + 2 * i, &h, 2); break; }
        default:      return -1;
        }
    }
    return 0;
}

uint16_t vt_f16_bits_from_f32(float x) { return vt_f32_to_f16(x).bits; }

float vt_f32_from_f16_bits(uint16_t h) {
    vt_f16 v = {h};
    return vt_f16_to_f32(v);
}
