/* vt_test_moe.h — what the MoE-block tests (test_scatter.c, test_cuda.c)
 * share: a deterministic input and an independent f64 expert. */
#ifndef VT_TEST_MOE_H
#define VT_TEST_MOE_H

#include <math.h>

#include "model/model.h"

/* Deterministic normed-looking input x[N, D], values in [-1, 1). */
static inline float *vt_test_moe_input(int64_t N, int64_t D) {
    float *x = malloc(sizeof(float) * (size_t)(N * D));
    uint64_t r = 42;
    for (int64_t i = 0; i < N * D; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    return x;
}

/* Naive f64 SwiGLU of expert w (hidden D, intermediate I) on row x into y[D]:
 * a recomputation that shares no code with the gather/GEMM/scatter path. */
/* The weights are in the checkpoint's dtype, possibly in panels (tensor.h):
 * each row is taken out (vt_tensor_unpanel) and widened first. */
static inline void vt_test_weight_row(const vt_tensor *t, int64_t i, float *dst) {
    char *row = malloc(vt_tensor_row_bytes(t));
    assert_non_null(row);
    vt_tensor_unpanel(t, i, 1, row);
    vt_convert(dst, VT_F32, row, t->dtype, (size_t)vt_tensor_ncols(t));
    free(row);
}

static inline void vt_test_expert_ref(const vt_swiglu_w *w, int64_t D, int64_t I, const float *x, double *y) {
    double *h = malloc(sizeof(double) * (size_t)I);
    float *g = malloc(sizeof(float) * (size_t)(D > I ? D : I)), *u = malloc(sizeof(float) * (size_t)D);
    for (int64_t i = 0; i < I; i++) {
        double a = 0, b = 0;
        vt_test_weight_row(&w->gate, i, g);
        vt_test_weight_row(&w->up, i, u);
        for (int64_t k = 0; k < D; k++) { a += (double)g[k] * x[k]; b += (double)u[k] * x[k]; }
        h[i] = a / (1.0 + exp(-a)) * b;
    }
    for (int64_t j = 0; j < D; j++) {
        vt_test_weight_row(&w->down, j, g);
        double acc = 0;
        for (int64_t i = 0; i < I; i++) acc += (double)g[i] * h[i];
        y[j] = acc;
    }
    free(h); free(g); free(u);
}

#endif
