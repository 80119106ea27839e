/*
 * safetensors_internal.h — what the checkpoint reader (safetensors.c) and
 * writer (safetensors_write.c) share and nobody else needs: the metadata key,
 * the exactness bound of JSON integers, and the two shape helpers. The writer
 * refuses what the reader would refuse with the same rules, so the rules live
 * once, in safetensors.c.
 */
#ifndef VT_SAFETENSORS_INTERNAL_H
#define VT_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

#define ST_META_KEY    "__metadata__"
/* The largest integer a JSON number (an IEEE double) holds exactly. */
#define ST_MAX_EXACT   ((uint64_t)1 << 53)

/* "[2, 3]" for messages; returns buf. */
const char *vt_st_show_shape(int ndim, const int64_t *shape, char *buf, size_t cap);

/* Bytes of a tensor: product(shape) x element size. Returns 0 and sets
 * *bytes, or -1 when the product overflows (or a dimension is negative). */
int vt_st_shape_bytes(vt_dtype dt, int ndim, const int64_t *shape, uint64_t *bytes);

#endif
