/*
 * kda_chunk.h — the gated delta-rule core of Kimi Delta Attention, two ways.
 *
 * Per head (i: key channel, j: value column, state S[i][j] in f32), token by token:
 *     S[i][j] *= exp(g_t[i]);  u[j] = sum_i k_t[i] S[i][j];  d[j] = beta_t (v_t[j] - u[j])
 *     S[i][j] += k_t[i] d[j];  o_t[j] = sum_i q_t[i] S[i][j]
 * g <= 0 is the per-key-channel log decay; q and k arrive already normalised
 * (and q scaled) by the caller.
 *
 * Layouts: q, k, v, g and o are [T][H*d] row-major (head h of token t at
 * t*H*d + h*d), beta is [T][H], S is [H][d][d] (S[h][i][j]), read as the
 * initial state and overwritten with the final one.
 *
 * vt_kda_recurrent is the token-by-token loop of kda.c (same loop structure,
 * same bits). vt_kda_chunked computes the same function in chunks of
 * VT_KDA_CHUNK tokens with matrix products (the WY / UT-transform form): it
 * agrees with the recurrent loop to rounding (see tests/unit/test_kda_chunk.c
 * for the measured bounds), not bit for bit. Its result does not depend on
 * the thread count.
 */
#ifndef VT_KDA_CHUNK_H
#define VT_KDA_CHUNK_H

#include <stddef.h>
#include <stdint.h>

/* Tokens per chunk and per sub-chunk (the block size of the intra-chunk
 * products). 32/16 measured fastest on the 2-core Xeon with cblas_sgemm as
 * the products (64/16 ~15% slower, 128/16 ~40%); overridable with -D for
 * experiments (tests/bench/kda_chunk_bench.c). */
#ifndef VT_KDA_CHUNK
#define VT_KDA_CHUNK 32
#endif
#ifndef VT_KDA_SUBCHUNK
#define VT_KDA_SUBCHUNK 16
#endif

/* The recurrence above, parallel over (head, block of value columns). exp(g)
 * goes to `decay` (T*H*d floats of the caller's) first; with decay NULL each
 * column block computes it itself (same values, same bits; a decode's choice,
 * where T = 1 makes that cheaper than a buffer). */
void vt_kda_recurrent(int64_t T, int64_t H, int64_t d, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, float *S, float *o, float *decay);

/* Bytes of workspace vt_kda_chunked needs to run on up to nthreads threads
 * (0 when the arguments are invalid or the size overflows). */
size_t vt_kda_chunked_work_bytes(int64_t T, int64_t H, int64_t d, int nthreads);

/* The chunked form, parallel over heads (OpenMP, at most as many threads as
 * the workspace was sized for). work: any alignment, work_bytes from
 * vt_kda_chunked_work_bytes(T, H, d, n) for some n >= 1; nothing is allocated.
 * Returns 0, or -1 when the arguments are invalid or the workspace is too small
 * (S and o untouched then). Not to be called from inside a parallel region. */
int vt_kda_chunked(int64_t T, int64_t H, int64_t d, const float *q, const float *k, const float *v, const float *g,
                   const float *beta, float *S, float *o, float *work, size_t work_bytes);

#endif
