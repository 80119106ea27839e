/*
 * dtype.h — element types and the one table every byte count comes from.
 *
 * The defect that started vtlab was a row size computed from one dtype (the
 * residual stream's bf16) while copying buffers of another (f32). The rule that
 * makes that hard to write: a byte count is never `n * sizeof(float)` at a call
 * site. It is vt_row_size(dtype, n), where dtype is the tag of the buffer being
 * touched. bf16 and f16 are distinct struct types so that they cannot be mixed
 * with each other or with uint16_t by accident.
 */
#ifndef VT_DTYPE_H
#define VT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum vt_dtype {
    VT_F32 = 0,
    VT_BF16,
    VT_F16,
    VT_I32,
    VT_I64,
    VT_U8,
    VT_DTYPE_COUNT
} vt_dtype;

typedef struct vt_dtype_traits {
    const char *name;      /* our name: "f32", "bf16", ... (knobs, probes, CLI) */
    size_t      size;      /* bytes per element */
    const char *st_name;   /* safetensors dtype string: "F32", "BF16", ... */
    int         is_float;  /* 1 when vt_convert can read/write it as a number */
} vt_dtype_traits;

typedef struct vt_bf16 { uint16_t bits; } vt_bf16;
typedef struct vt_f16  { uint16_t bits; } vt_f16;

/* NULL for an out-of-range value. */
const vt_dtype_traits *vt_dtype_traits_of(vt_dtype t);
int         vt_dtype_valid(int t);
size_t      vt_dtype_size(vt_dtype t);     /* 0 for an invalid dtype */
const char *vt_dtype_name(vt_dtype t);     /* "?" for an invalid dtype */

/* Lookups: 0 on success, -1 when the string names no dtype. */
int vt_dtype_from_st_name(const char *s, vt_dtype *out);
int vt_dtype_from_name(const char *s, vt_dtype *out);

/* Bytes in a row of n elements of dtype t: n * size. Returns 0 when n < 0, the
 * dtype is invalid or the product overflows; callers treat 0 for n > 0 as an
 * error. This is the only place a row size is computed. */
size_t vt_row_size(vt_dtype t, int64_t n);

/* f32 <-> bf16: round to nearest, ties to even; NaN stays NaN (quiet bit set,
 * sign and top payload bits kept); +-Inf and subnormals are exact in the
 * sense of RNE on the f32 bit pattern (bf16 has f32's exponent range). */
vt_bf16 vt_f32_to_bf16(float x);
float   vt_bf16_to_f32(vt_bf16 h);
/* Rounds an f32 to the nearest bf16 value and back: the "store in bf16" step. */
float   vt_round_bf16(float x);

/* f32 <-> IEEE binary16: RNE, overflow to Inf, gradual underflow to f16
 * subnormals, NaN stays NaN. */
vt_f16 vt_f32_to_f16(float x);
float  vt_f16_to_f32(vt_f16 h);

/* Element-wise converting copy of n elements between float dtypes (f32, bf16,
 * f16). Returns 0, or -1 when either dtype is not a float type. src and dst
 * must not overlap unless they are the same dtype and identical. */
int vt_convert(void *dst, vt_dtype dst_t, const void *src, vt_dtype src_t, size_t n);

#endif
