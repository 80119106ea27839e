/*
 * gemm.h — the CPU matrix products of the forward pass (issue 14).
 *
 * One numeric contract for every path, so that no result depends on the
 * thread count, the split of the work, the instruction set, the number of
 * rows, or whether the call was a prefill GEMM or a decode GEMV:
 *
 *     y[i][j] = chain over k = 0, 1, ..., K-1 of  acc = fmaf(x[i][k], w[j][k], acc),  acc starting at 0
 *
 * where w[j][k] is the weight widened to f32 exactly (bf16 and f16 widen
 * without rounding). Every kernel — the AVX-512 micro-kernel, the decode
 * GEMV, the scalar fallback — computes exactly this chain for each output
 * element; blocking over K continues the same accumulator. A fast kernel is
 * therefore checked bit-for-bit against the scalar one (tests/unit/test_gemm.c).
 *
 * Weights are read in the dtype they have in the checkpoint (f32, bf16 or
 * f16) and widened inside the kernel, as rows or, for a W with W->panel set,
 * in the panel layout of tensor.h (the model's default: no transposes); a
 * W's layout never changes a result.
 */
#ifndef VT_GEMM_H
#define VT_GEMM_H

#include <stdint.h>

#include "dtype.h"
#include "tensor.h"

/* Work (multiply-adds, plus weight elements read) below which a parallel
 * loop runs on the calling thread: a fork-join would cost more than the work,
 * and on a busy host every parallel region waits for its slowest, possibly
 * descheduled, thread (the tiny model's nightly throughput swung 3.7x under
 * load). Used by the products here, the KDA token loop and attention; no
 * result depends on it. */
#define VT_PAR_MIN_WORK ((int64_t)1 << 20)

/* The same inside a decode step's team (vt_gemm_step), whose threads are
 * spinning on the next batch already: there a batch costs a post and a
 * count (a microsecond or two), not a fork-join, and the products and loops
 * between 2^16 and 2^20 (a decode step's low-rank up-projections, its KDA
 * recurrence and attention) ran on the calling thread while the team waited. */
#define VT_STEP_MIN_WORK ((int64_t)1 << 16)

/* One product y[M, N] = x[M, K] · W[N, K]ᵀ. W is [N, K] row-major in
 * W->dtype (f32, bf16 or f16); N = W->shape[0], K = W->shape[1]. Row i of x
 * is x + i*ldx, row i of y is y + i*ldy (ldx >= K, ldy >= N). */
typedef struct vt_gemm_job {
    const float     *x;
    int64_t          ldx;
    int64_t          M;
    const vt_tensor *W;
    float           *y;
    int64_t          ldy;
} vt_gemm_job;

/* Runs the jobs together in one parallel region over OpenMP's current thread
 * count (jobs sharing x, like q/k/v or gate/up, are one call; so are the
 * experts of a MoE layer). Jobs with M == 0 are skipped. Must not be called
 * from inside a parallel region (but for vt_gemm_step's calling thread).
 * Returns the batch's multiply-adds when it is big enough to run in parallel
 * in a decode step (VT_STEP_MIN_WORK; whatever the thread count, one
 * included), else 0: the thread governor (team.h) judges only decode steps
 * that have such a product. */
int64_t vt_gemm_batch(const vt_gemm_job *jobs, int64_t njobs);

/* Runs fn(arg) on the calling thread as one step of nthreads threads: the
 * other nthreads - 1 wait for the products fn runs, spinning (then yielding,
 * see gemm.c), and every vt_gemm_batch that fn calls on this thread runs its
 * tiles on all of them, without a parallel region of its own. A decode step
 * has ~30 products with short serial stretches between them: a team that
 * sleeps in between (OMP_WAIT_POLICY=PASSIVE, model/omp_wait.c) pays a
 * wake-up per product. Parallel regions fn opens itself run on its thread
 * alone (nested). Returns fn's value; nthreads <= 1 or a call from inside a
 * step: fn(arg) as it is. Same bits whatever the threads. */
int vt_gemm_step(int nthreads, int (*fn)(void *), void *arg);

/* Runs fn(arg, i, thread) once for every i in [0, n), in any order and on
 * any thread; thread (< max_threads, < the thread count) names the caller's
 * scratch slot, and no two calls running at once get the same one. Inside a
 * vt_gemm_step on its calling thread: on the step's team (a batch, no
 * parallel region) when work >= VT_STEP_MIN_WORK. Elsewhere: an OpenMP loop
 * (dynamic, 1) over min(max_threads, omp_get_max_threads()) threads when
 * work >= VT_PAR_MIN_WORK. Else on the calling thread as thread 0; so is a
 * vt_par_for called from inside fn (its own numbering: a nested fn must not
 * use the outer loop's slots). work: the loop's multiply-adds (or
 * elements), as VT_PAR_MIN_WORK counts them. fn must give the same result on
 * any thread (no result depends on the split). */
void vt_par_for(int64_t n, int64_t work, int max_threads, void (*fn)(void *arg, int64_t i, int thread), void *arg);

/* Single-threaded products of plain f32 matrices for use inside a parallel
 * region (attention scores, chunked KDA), same per-element chain:
 *   nt: C[i][j] (+)= sum_k A[i*lda + k] * B[j*ldb + k]    (B is [N][K])
 *   nn: C[i][j] (+)= sum_k A[i*lda + k] * B[k*ldb + j]    (B is [K][N])
 * accumulate = 0: the chain starts at 0; 1: it starts at C's value. */
void vt_sgemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, int accumulate);
void vt_sgemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, int accumulate);

/* The scalar reference of the contract (tests and fallbacks): one output element. */
float vt_gemm_ref_dot(const float *x, const void *w, vt_dtype wdtype, int64_t K);

/* Which kernels this CPU runs ("avx512", "avx2" or "scalar"), for the bench.
 * The choice is made once, from the CPU (__builtin_cpu_supports: AVX-512
 * F/BW/VL, else AVX2 + FMA + F16C, else none) and the environment:
 * VTLAB_GEMM_ISA=scalar forces the scalar reference loops, =avx2 the AVX2
 * kernels where the CPU has them (VTLAB_, not VT_: vtlab refuses unknown VT_
 * knobs in the environment; the bits are the same either way). The other
 * AVX-512 code (the KDA token loop, attention's row pass, vmath) runs only
 * under "avx512". */
const char *vt_gemm_isa(void);

/* Tests and the bench: switch every later call to the kernels named
 * ("avx512", "avx2" or "scalar"). Returns 0, or -1 when this CPU cannot run them (the
 * choice is then unchanged). Not to be called while a product is running. */
int vt_gemm_force_isa(const char *name);

#endif
