/*
 * attn.h — causal softmax attention over a key/value cache (the core of
 * mla.c after its projections), as blocked matrix products.
 *
 * Layout (all f32, row strides in floats):
 *   q   T new queries:   row t, head h at  q + t*ldq + h*dqk      (dqk floats)
 *   kc  p0+T keys:       position j, head h at kc + j*ldk + h*dqk (dqk floats)
 *   vc  p0+T values:     position j, head h at vc + j*ldv + h*dv  (dv floats)
 *   o   T outputs:       row t, head h at  o + t*ldo + h*dv       (dv floats)
 * Query t (absolute position p0+t) attends to positions 0 .. p0+t:
 *   o[t,h] = sum_j softmax_j(scale * q[t,h]·kc[j,h]) vc[j,h].
 *
 * vt_attn_causal is the blocked form (flash-attention style): blocks of
 * queries × blocks of keys, S = Q·Kᵀ with vt_sgemm_nt, an online softmax
 * (running max in f32, running sum in f64), O += P·V with vt_sgemm_nn, the
 * causal mask only on blocks that cross the diagonal, blocks above it never
 * computed. OpenMP over (head, query block[, key split]); the partition of
 * the work depends on the shapes only, never on the thread count, and each
 * piece is computed in a fixed order by one thread, so the result is
 * bit-identical for any thread count. No allocation: the caller passes
 * `work` of at least vt_attn_causal_work_bytes(...) bytes (its per-thread
 * part is sized for omp_get_max_threads(); a smaller buffer only lowers the
 * number of threads used, down to the minimum the shapes need).
 *
 * vt_attn_causal_ref is the loop mla.c has used so far, moved verbatim (same
 * bits): per (token, head) a row of f32 scores, max-subtracted expf, an f64
 * normaliser, then the weighted sum of values. `scores` must hold
 * omp_get_max_threads() * (p0+T) floats (vt_attn_causal_ref_work_bytes).
 */
#ifndef VT_ATTN_H
#define VT_ATTN_H

#include <stddef.h>
#include <stdint.h>

void vt_attn_causal_ref(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float scale, const float *q,
                        int64_t ldq, const float *kc, int64_t ldk, const float *vc, int64_t ldv, float *o, int64_t ldo,
                        float *scores);
size_t vt_attn_causal_ref_work_bytes(int64_t T, int64_t p0);

/* 0 on success; -1 when an argument is out of range (T < 1, p0 < 0, a
 * dimension < 1, a stride too small) or work_bytes is too small. */
int vt_attn_causal(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float scale, const float *q,
                   int64_t ldq, const float *kc, int64_t ldk, const float *vc, int64_t ldv, float *o, int64_t ldo,
                   float *work, size_t work_bytes);
size_t vt_attn_causal_work_bytes(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv);

/* A prefill may run as pieces of consecutive calls (forward.c); the pieces
 * give the bits of one call when each starts at a multiple of the query block
 * (64) and has at least vt_attn_piece_quantum(Nh) rows: whole query blocks at
 * the same absolute positions, and never a split over keys (a split's merge
 * rounds differently). The quantum is a multiple of the query block. The one
 * call must not be split either: it is not when it has at least the quantum
 * rows. 0 when Nh < 1. */
int64_t vt_attn_piece_quantum(int64_t Nh);

/* The softmax row pass of vt_attn_causal has an AVX-512 form and a scalar one
 * of the same bits (the CPU decides). on = 1 / 0 selects one (1 only where the
 * CPU has AVX-512F), -1 only asks; returns the setting before the call. For
 * tests and benchmarks; not to be changed while vt_attn_causal runs. */
int vt_attn_use_avx512(int on);

#endif
