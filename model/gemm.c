/*
 * gemm.c — the matrix products of gemm.h: the scalar reference of the
 * per-element FMA chain, the choice of kernel (AVX-512 when the CPU has it,
 * else the scalar loops; VTLAB_GEMM_ISA=scalar forces them), and the split of a
 * batch of products into tiles for OpenMP. The kernels are in gemm_avx512.c;
 * tests/unit/test_gemm.c checks every path bit for bit against vt_gemm_ref_dot.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "gemm_kernels.h"

__attribute__((target("fma"))) float vt_gemm_ref_dot(const float *x, const void *w, vt_dtype wdtype, int64_t K) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) acc = fmaf(x[k], vt_gemm_widen(w, wdtype, k), acc);
    return acc;
}

/* The scalar fallback over a block of y: the reference chain, element by element. */
__attribute__((target("fma"))) static void scalar_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0,
                                                        int64_t c1) {
    const size_t es = vt_dtype_size(a->dt);
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = c0; j < c1; j++) {
            const float *x = a->x + i * a->ldx;
            const int in_panel = j < a->npanel;   /* element k of column j at w + k * kstep (tensor.h) */
            const void *w = (const char *)a->w + (in_panel ? (size_t)(j - j % VT_PANEL) * a->wstride + (size_t)(j % VT_PANEL) * es
                                                           : (size_t)j * a->wstride);
            const int64_t kstep = in_panel ? VT_PANEL : 1;
            float acc = a->acc ? a->y[i * a->ldy + j] : 0.0f;
            for (int64_t k = 0; k < a->K; k++) acc = fmaf(x[k], vt_gemm_widen(w, a->dt, k * kstep), acc);
            a->y[i * a->ldy + j] = acc;
        }
}

/* ------------------------------------------------------------------ dispatch */

enum { ISA_UNSET = -1, ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512 = 2 };
static int g_isa = ISA_UNSET;   /* read and written atomically: vt_sgemm_* run inside parallel regions */

static int cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    unsigned a, b, c, d;   /* F16C from CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c") */
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

static const char *const ISA_NAMES[3] = {"scalar", "avx2", "avx512"};

static int isa_available(int v) {
    return v == ISA_SCALAR || (v == ISA_AVX2 && cpu_has_avx2()) || (v == ISA_AVX512 && cpu_has_avx512());
}

/* The best this CPU has, or VTLAB_GEMM_ISA's (scalar, avx2, avx512) when it has that one. */
static int isa(void) {
    int v = __atomic_load_n(&g_isa, __ATOMIC_RELAXED);
    if (v != ISA_UNSET) return v;
    const char *e = getenv("VTLAB_GEMM_ISA");   /* read once: every racing thread computes the same value */
    v = cpu_has_avx512() ? ISA_AVX512 : cpu_has_avx2() ? ISA_AVX2 : ISA_SCALAR;
    for (int i = 0; e && i < 3; i++)
        if (strcmp(e, ISA_NAMES[i]) == 0 && isa_available(i)) v = i;
    __atomic_store_n(&g_isa, v, __ATOMIC_RELAXED);
    return v;
}

const char *vt_gemm_isa(void) { return ISA_NAMES[isa()]; }

int vt_gemm_force_isa(const char *name) {
    for (int i = 0; name && i < 3; i++)
        if (strcmp(name, ISA_NAMES[i]) == 0 && isa_available(i)) {
            __atomic_store_n(&g_isa, i, __ATOMIC_RELAXED);
            return 0;
        }
    return -1;
}

/* Whether rows of a product go to the broadcast kernel (run_block;
 * plan_packs packs x only for the packed kernel): f32 W in rows only. W in
 * panels goes to the packed kernel, which streams a panel under its FMAs
 * (block_panels): 288M f32 prefill, 1 thread, 708 -> 790 tok/s. */
static int bcast_rows(int64_t rows, vt_dtype dt, int acc, int panels) {
    return rows > VT_GEMV_MAX_ROWS && rows <= VT_BCAST_MAX_ROWS && !acc && dt == VT_F32 && !panels;
}

/* One block of one product with the kernel for this CPU and this row count;
 * next: the GEMV's prefetch target after the block (vt_gemm512_gemv). A
 * block across the panels' end (W in panels, tensor.h) runs as two: the
 * panels, then the rows after them. */
static void run_block(const vt_gemm_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const void *next) {
    if (isa() == ISA_AVX2) { vt_gemm256_block(a, r0, r1, c0, c1); return; }
    if (isa() != ISA_AVX512) { scalar_block(a, r0, r1, c0, c1); return; }
    if (c0 < a->npanel && a->npanel < c1) {
        run_block(a, r0, r1, c0, a->npanel, NULL);
        run_block(a, r0, r1, a->npanel, c1, next);
        return;
    }
    if (r1 - r0 <= VT_GEMV_MAX_ROWS) {
        if (c0 < a->npanel) vt_gemm512_panel_gemv(a, r0, r1, c0, c1);
        else vt_gemm512_gemv(a, r0, r1, c0, c1, next);
    } else if (bcast_rows(r1 - r0, a->dt, a->acc, c0 < a->npanel)) vt_gemm512_bcast(a, r0, r1, c0, c1);
    else vt_gemm512_block(a, r0, r1, c0, c1);   /* panels or rows: it reads W as npanel says */
}

/* ---------------------------------------------------------------- the batch */

/* Tiles. A job is cut into blocks of columns (for the packed kernel COLS_WIDE
 * when that still gives TILES_PER_THREAD tiles per thread, else COLS: each
 * tile packs x once, so wider is cheaper; COLS_GEMV for decode, where the
 * work is one pass over W and small tiles balance best). When all the jobs together give fewer than TILES_PER_THREAD tiles
 * per thread, the rows of the packed jobs are cut too (each row block packs
 * its W panels again, so rows are cut only then). Any cut gives the same bits. */
enum { COLS_WIDE = 256, COLS = 128, COLS_GEMV = 64, TILES_PER_THREAD = 4, MIN_TILE_ROWS = 24 };

typedef struct tile_plan {
    int64_t cols;   /* columns per tile */
    int64_t rows;   /* rows per tile */
    int64_t ncb, nrb;
} tile_plan;

static tile_plan plan_job(const vt_gemm_job *g, int64_t row_split, int64_t cols) {
    tile_plan p = {0, 0, 0, 0};
    if (g->M <= 0) return p;
    const int64_t N = g->W->shape[0];
    p.cols = g->M <= VT_GEMV_MAX_ROWS ? COLS_GEMV : cols;
    p.ncb = N > 0 ? (N + p.cols - 1) / p.cols : 0;
    int64_t nrb = g->M <= VT_GEMV_MAX_ROWS ? 1 : row_split;
    if (nrb > g->M / MIN_TILE_ROWS) nrb = g->M / MIN_TILE_ROWS;
    if (nrb < 1) nrb = 1;
    p.rows = (g->M + nrb - 1) / nrb;
    p.nrb = (g->M + p.rows - 1) / p.rows;
    return p;
}

static int64_t count_tiles(const vt_gemm_job *jobs, int64_t njobs, int64_t row_split, int64_t cols) {
    int64_t n = 0;
    for (int64_t j = 0; j < njobs; j++) {
        const tile_plan p = plan_job(&jobs[j], row_split, cols);
        n += p.ncb * p.nrb;
    }
    return n;
}

/* A batch cut into tiles: each job's plan and the index of its first tile
 * (first[njobs] = the tile count), computed once per batch; every thread
 * looks its tiles up there. */
typedef struct batch_plan {
    const vt_gemm_job *jobs;
    int64_t            njobs;
    const tile_plan   *plans;
    const int64_t     *first;
    int                solo;    /* every tile runs on the calling thread */
    const float *const *xp;     /* [njobs]: x packed once for the job's tiles (pack_shared), or NULL */
    void (*task)(void *arg, int64_t i, int thread);   /* a vt_par_for: "tile" i is task(task_arg, i, ...) */
    uint64_t           id;      /* unique per vt_gemm_batch call (vt_gemm_args.batch) */
    void              *task_arg;
} batch_plan;

/* Tile t of the batch: its product and block. 0 when t is past the end. */
typedef struct tile { const vt_gemm_job *g; int64_t r0, r1, c0, c1; } tile;

static int tile_at(const batch_plan *b, int64_t t, tile *out) {
    if (t < 0 || t >= b->first[b->njobs]) return 0;
    int64_t j = 0;
    while (t >= b->first[j + 1]) j++;
    const tile_plan *p = &b->plans[j];
    const vt_gemm_job *g = &b->jobs[j];
    const int64_t N = g->W->shape[0], cb = (t - b->first[j]) % p->ncb, rb = (t - b->first[j]) / p->ncb;
    out->g = g;
    out->c0 = cb * p->cols, out->c1 = out->c0 + p->cols < N ? out->c0 + p->cols : N;
    out->r0 = rb * p->rows, out->r1 = out->r0 + p->rows < g->M ? out->r0 + p->rows : g->M;
    return 1;
}

/* Runs tile t; next (or -1): the tile this thread expects to run after it,
 * whose first W rows the GEMV prefetches during t's last block (the tiles of
 * a decode MoE batch are a few per expert: without it every expert's first
 * rows came from memory unprefetched; bf16 gate/up batch 9.5 GB/s). */
static _Thread_local int t_in_task;   /* this thread runs a vt_par_for's fn */

static void run_task(void (*fn)(void *, int64_t, int), void *arg, int64_t i, int thread) {
    t_in_task++;
    fn(arg, i, thread);
    t_in_task--;
}

static void run_tile(const batch_plan *b, int64_t t, int64_t next) {
    if (b->task) { run_task(b->task, b->task_arg, t, omp_get_thread_num()); return; }
    tile c, n = {0};
    if (!tile_at(b, t, &c)) return;
    const vt_gemm_job *g = c.g;
#ifdef VT_MUTATE_PANEL_BOUNDARY
    /* Mutation (make mutation): the panel/row boundary one panel too low, so
     * the last full panel is read as rows (every read stays inside W; a
     * boundary too high read past it, corrupted the heap, and once hung the
     * mutant); test_gemm must go red. */
    const int64_t npanel = vt_tensor_panel_rows(g->W) >= VT_PANEL ? vt_tensor_panel_rows(g->W) - VT_PANEL : 0;
#else
    const int64_t npanel = vt_tensor_panel_rows(g->W);
#endif
    const float *xp = b->xp && c.r0 == 0 && c.r1 == g->M ? b->xp[g - b->jobs] : NULL;
    vt_gemm_args a = {g->x, g->ldx, g->W->data, vt_row_size(g->W->dtype, g->W->shape[1]), g->W->dtype,
                      g->W->shape[1], g->y, g->ldy, 0, b->solo, npanel, xp, g->M, NULL, 0, b->id};
    const void *nrows = NULL;
    if (tile_at(b, next, &n) && n.r1 - n.r0 <= VT_GEMV_MAX_ROWS)
        nrows = (const char *)n.g->W->data + (size_t)n.c0 * vt_row_size(n.g->W->dtype, n.g->W->shape[1]);
    else if (n.g && n.c0 < vt_tensor_panel_rows(n.g->W)) {   /* the packed kernel on panels: its first panel */
        a.pf_next = (const char *)n.g->W->data + (size_t)n.c0 * vt_row_size(n.g->W->dtype, n.g->W->shape[1]);
        a.pf_step = VT_PANEL * (int64_t)vt_dtype_size(n.g->W->dtype);
    }
    run_block(&a, c.r0, c.r1, c.c0, c.c1, nrows);
}

/* The tiles are dealt out as contiguous ranges, one per thread, each run
 * front to back; a thread whose range is done takes tiles from the back of
 * the fullest other range (a thread on a busy core falls behind and the other
 * takes its work). So each thread walks neighbouring tiles, i.e. neighbouring
 * W rows: at decode, where a tile is one pass over 64 rows of W, each thread
 * streams one long region that the hardware prefetchers follow, where
 * dynamic,1 interleaved the two threads' 64-row tiles (288M model, 2-thread
 * decode 35 -> 43 tok/s). Which thread runs a tile never changes its bits.
 * A range is front << 32 | back, changed by compare-and-swap only. */
typedef struct tile_range { _Alignas(64) uint64_t fb; } tile_range;

/* Tiles left in a range (v: its word), and the first of them (-1: none). */
static uint64_t range_left(uint64_t v) { return (v >> 32) < (v & 0xFFFFFFFFu) ? (v & 0xFFFFFFFFu) - (v >> 32) : 0; }
static int64_t range_front(uint64_t v) { return range_left(v) ? (int64_t)(v >> 32) : -1; }

static int64_t range_take(tile_range *r, int from_back) {
    uint64_t v = __atomic_load_n(&r->fb, __ATOMIC_RELAXED);
    for (;;) {
        const uint64_t f = v >> 32, e = v & 0xFFFFFFFFu;
        if (f >= e) return -1;
        const uint64_t nv = from_back ? (f << 32 | (e - 1)) : ((f + 1) << 32 | e);
        if (__atomic_compare_exchange_n(&r->fb, &v, nv, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return (int64_t)(from_back ? e - 1 : f);
    }
}

/* Tiles [0, ntiles) cut into n contiguous ranges, as equal as can be. */
static void ranges_init(tile_range *ranges, int n, int64_t ntiles) {
    for (int i = 0; i < n; i++) {
        const uint64_t f = (uint64_t)(ntiles * i / n), e = (uint64_t)(ntiles * (i + 1) / n);
        ranges[i].fb = f << 32 | e;
    }
}

static void run_ranges(const batch_plan *b, tile_range *ranges, int nr) {
    const int me = omp_get_thread_num() % nr;
    for (;;) {
        int64_t t = range_take(&ranges[me], 0);
        if (t < 0) {                                 /* own range done: the back of the fullest other */
            int victim = -1;
            uint64_t most = 0;
            for (int i = 0; i < nr; i++) {
                const uint64_t left = range_left(__atomic_load_n(&ranges[i].fb, __ATOMIC_RELAXED));
                if (left > most) most = left, victim = i;
            }
            if (victim < 0) return;
            if ((t = range_take(&ranges[victim], 1)) < 0) continue;
            run_tile(b, t, -1);
            continue;
        }
        run_tile(b, t, range_front(__atomic_load_n(&ranges[me].fb, __ATOMIC_RELAXED)));   /* most likely mine next */
    }
}

/* ------------------------------------------------------------ step pool */

/* vt_gemm_step's team: the calling thread runs the step and posts each batch
 * (gen += 1); the other threads spin on gen, run their ranges of its tiles and
 * count themselves done. */
typedef struct step_pool {
    _Alignas(64) uint64_t gen;    /* batches posted so far */
    _Alignas(64) int64_t  done;   /* threads other than the caller done with the current batch */
    _Alignas(64) int      quit;   /* the step has returned */
    int                   n;      /* threads in the team */
    const batch_plan     *plan;   /* the current batch (the caller's stack, valid until done == n - 1) */
    tile_range           *ranges;
} step_pool;

static _Thread_local step_pool *t_pool;   /* the step this thread runs, or NULL */

/* Spins before each sched_yield while waiting (~50 us of `pause`): a step's
 * serial stretches between products are mostly shorter; a longer wait (or a
 * core taken by another process) yields the core. */
enum { SPINS_BEFORE_YIELD = 4096 };

static void pool_relax(unsigned spins) {
    if (spins < SPINS_BEFORE_YIELD) _mm_pause();
    else sched_yield();
}

static void pool_wait_gen(const step_pool *p, uint64_t seen, uint64_t *g, int *quit) {
    for (unsigned spins = 0;; spins++) {
        if ((*g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE)) != seen) { *quit = 0; return; }
        if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE)) { *quit = 1; return; }
        pool_relax(spins);
    }
}

static void pool_worker(step_pool *p) {
    uint64_t seen = 0, g;
    int quit;
    for (;;) {
        pool_wait_gen(p, seen, &g, &quit);
        if (quit) return;
        seen = g;
        run_ranges(p->plan, p->ranges, p->n);
        __atomic_add_fetch(&p->done, 1, __ATOMIC_ACQ_REL);
    }
}

/* The caller's side of a batch in a step: post it, run range 0, wait. While
 * it runs, the caller is not in the step (t_pool NULL): a task of the batch
 * that calls vt_par_for or vt_gemm_batch runs that on its own thread. */
static void pool_batch(step_pool *p, const batch_plan *b, int64_t ntiles) {
    tile_range ranges[p->n];
    ranges_init(ranges, p->n, ntiles);
    p->plan = b, p->ranges = ranges;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
    t_pool = NULL;
    run_ranges(b, ranges, p->n);
    t_pool = p;
    for (unsigned spins = 0; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) < p->n - 1; spins++) pool_relax(spins);
}

void vt_par_for(int64_t n, int64_t work, int max_threads, void (*fn)(void *arg, int64_t i, int thread), void *arg) {
    step_pool *pool = t_pool;
    const int par = n > 1 && !t_in_task && n <= 0xFFFFFFFFLL;
    if (pool && par && work >= VT_STEP_MIN_WORK && pool->n <= max_threads) {
        const batch_plan b = {.task = fn, .task_arg = arg};
        pool_batch(pool, &b, n);
        return;
    }
    int nthr = omp_get_max_threads();
    if (nthr > max_threads) nthr = max_threads;
    if (pool || !par || work < VT_PAR_MIN_WORK) nthr = 1;
    if (nthr <= 1) {
        for (int64_t i = 0; i < n; i++) run_task(fn, arg, i, 0);
        return;
    }
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
    for (int64_t i = 0; i < n; i++) run_task(fn, arg, i, omp_get_thread_num());
}

int vt_gemm_step(int nthreads, int (*fn)(void *), void *arg) {
    if (nthreads <= 1 || t_pool) return fn(arg);
    step_pool p = {0};
    int rc = 0;
    #pragma omp parallel num_threads(nthreads)
    {
        if (omp_get_thread_num() == 0) {
            p.n = omp_get_num_threads();   /* read by the others only after a post (release/acquire on gen) */
            t_pool = &p;
            rc = fn(arg);
            t_pool = NULL;
            __atomic_store_n(&p.quit, 1, __ATOMIC_RELEASE);
        } else pool_worker(&p);
    }
    return rc;
}

/* x packed once per batch for the packed kernel. A job cut into several
 * column tiles over all its rows packed its x once per tile (each of the 125
 * tiles of the lm_head, say), and jobs that share x (KDA's q/k/v/f/b/g, MLA's
 * q and kv_a) packed it again per job: here it is packed once, before the
 * tiles run (by K block, in parallel when the batch is), into a buffer of the
 * calling thread (it grows, never shrinks). Only for jobs the packed kernel
 * runs (run_block) with one row block, several column blocks and more than
 * VT_XMEMO_MAX_ROWS rows: fewer rows (a MoE expert's) are packed by their
 * first tile into the tiles' memo (gemm_avx512.c), while in cache. Same
 * packing, same bits. Without memory for it, the tiles pack as before.
 * 288M f32 prefill, interleaved: 1 thread 674/670 -> 691/694 tok/s,
 * 2 threads 1157/1259 -> 1225/1308. */
static _Thread_local float *t_xpack;
static _Thread_local size_t t_xpack_cap;

/* Above the memo's rows, a job runs on the packed kernel (not the GEMV's
 * rows, not the broadcast kernel's). */
_Static_assert(VT_XMEMO_MAX_ROWS >= VT_GEMV_MAX_ROWS && VT_XMEMO_MAX_ROWS >= VT_BCAST_MAX_ROWS,
               "packs_x: more rows than the memo takes go to the packed kernel");
static int packs_x(const vt_gemm_job *g, const tile_plan *p) {
    return p->nrb == 1 && p->ncb > 1 && g->M > VT_XMEMO_MAX_ROWS && g->W->shape[1] > 0;
}

/* The packings a batch needs: xp[j] for each job (NULL: its tiles pack), and
 * the jobs whose x is packed (own[0..*nown), the others share one of them).
 * 0, or -1 when there is no memory for them (all xp NULL). */
static int plan_packs(const vt_gemm_job *jobs, int64_t njobs, const tile_plan *plans, const float **xp,
                      int64_t *own, int64_t *nown) {
    size_t need = 0, used = 0;
    *nown = 0;
    for (int64_t j = 0; j < njobs; j++) {
        xp[j] = NULL;
        if (packs_x(&jobs[j], &plans[j])) need += vt_gemm512_pack_x_floats(jobs[j].M, jobs[j].W->shape[1]);
    }
    if (need == 0) return 0;
    if (need > t_xpack_cap) {
        float *nb = aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64);
        if (!nb) return -1;
        free(t_xpack);
        t_xpack = nb, t_xpack_cap = need;
    }
    for (int64_t j = 0; j < njobs; j++) {
        const vt_gemm_job *g = &jobs[j];
        if (!packs_x(g, &plans[j])) continue;
        for (int64_t i = 0; i < j && !xp[j]; i++)   /* the same x packed for an earlier job */
            if (xp[i] && jobs[i].x == g->x && jobs[i].ldx == g->ldx && jobs[i].M == g->M &&
#ifdef VT_MUTATE_XPACK_ANY_K
                1)   /* mutation (make mutation): a packing shared whatever the K; test_gemm must go red */
#else
                jobs[i].W->shape[1] == g->W->shape[1])
#endif
                xp[j] = xp[i];
        if (xp[j]) continue;
        xp[j] = t_xpack + used;
        used += vt_gemm512_pack_x_floats(g->M, g->W->shape[1]);
        own[(*nown)++] = j;
    }
    return 0;
}

/* Packing unit u of the batch: one K block of one of the packings. */
static int64_t pack_units(const vt_gemm_job *jobs, const int64_t *own, int64_t nown) {
    int64_t n = 0;
    for (int64_t d = 0; d < nown; d++) n += (jobs[own[d]].W->shape[1] + VT_PACK_KC - 1) / VT_PACK_KC;
    return n;
}

static void pack_unit(const vt_gemm_job *jobs, const float **xp, const int64_t *own, int64_t nown, int64_t u) {
    for (int64_t d = 0; d < nown; d++) {
        const vt_gemm_job *g = &jobs[own[d]];
        const int64_t nb = (g->W->shape[1] + VT_PACK_KC - 1) / VT_PACK_KC;
        if (u < nb) {
            vt_gemm512_pack_x(g->x, g->ldx, g->M, g->W->shape[1], u * VT_PACK_KC, (float *)xp[own[d]]);
            return;
        }
        u -= nb;
    }
}

int64_t vt_gemm_batch(const vt_gemm_job *jobs, int64_t njobs) {
    step_pool *pool = t_pool;
    const int nthreads = pool ? pool->n : omp_get_max_threads();
    const int64_t want = (int64_t)TILES_PER_THREAD * nthreads;
    const int64_t cols = count_tiles(jobs, njobs, 1, COLS_WIDE) >= want ? COLS_WIDE : COLS;
    const int64_t cols_only = count_tiles(jobs, njobs, 1, cols);
    const int64_t row_split = cols_only > 0 && cols_only < want ? (want + cols_only - 1) / cols_only : 1;
    tile_plan plans[njobs > 0 ? njobs : 1];
    int64_t first[njobs + 1];
    first[0] = 0;
    for (int64_t j = 0; j < njobs; j++) {
        plans[j] = plan_job(&jobs[j], row_split, cols);
        first[j + 1] = first[j] + plans[j].ncb * plans[j].nrb;
    }
    const int64_t ntiles = first[njobs];
    const float *xp[njobs > 0 ? njobs : 1];
    int64_t own[njobs > 0 ? njobs : 1], nown = 0;
    static uint64_t batches;
    batch_plan b = {.jobs = jobs, .njobs = njobs, .plans = plans, .first = first,
                    .id = __atomic_add_fetch(&batches, 1, __ATOMIC_RELAXED)};
    if (isa() == ISA_AVX512 && plan_packs(jobs, njobs, plans, xp, own, &nown) == 0) b.xp = xp;
    const int64_t nunits = pack_units(jobs, own, nown);
    /* a small batch runs on the calling thread (VT_PAR_MIN_WORK, gemm.h) */
    int64_t work = 0, madds = 0;
    for (int64_t j = 0; j < njobs; j++)
        if (jobs[j].M > 0) {
            work += (jobs[j].M + 1) * jobs[j].W->shape[0] * jobs[j].W->shape[1];
            madds += jobs[j].M * jobs[j].W->shape[0] * jobs[j].W->shape[1];
        }
    /* in a step the team is waiting already: a batch costs it a post, not a fork-join */
    const int solo = ntiles <= 1 || work < (pool ? VT_STEP_MIN_WORK : VT_PAR_MIN_WORK) || nthreads <= 1 ||
                     ntiles > 0xFFFFFFFFLL;
    if (solo || pool)   /* x packed here; in the batch's own region, by the team (below) */
        for (int64_t u = 0; u < nunits; u++) pack_unit(jobs, xp, own, nown, u);
    if (solo) {
        b.solo = 1;
        for (int64_t t = 0; t < ntiles; t++) run_tile(&b, t, t + 1 < ntiles ? t + 1 : -1);
    } else if (pool) {
        pool_batch(pool, &b, ntiles);
    } else {
        tile_range ranges[nthreads];
        ranges_init(ranges, nthreads, ntiles);
        #pragma omp parallel
        {
            #pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < nunits; u++) pack_unit(jobs, xp, own, nown, u);   /* then a barrier */
            run_ranges(&b, ranges, nthreads);
        }
    }
    return work >= VT_STEP_MIN_WORK ? madds : 0;   /* on a step's team it runs in parallel (gemm.h) */
}

/* ------------------------------------------------------- single-threaded */

void vt_sgemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    const vt_gemm_args a = {A, lda, B, (size_t)ldb * sizeof(float), VT_F32, K, C, ldc, accumulate, 1, 0, NULL, 0, NULL, 0, 0};
    if (isa() == ISA_AVX2) { vt_gemm256_block(&a, 0, M, 0, N); return; }
    if (isa() != ISA_AVX512) { scalar_block(&a, 0, M, 0, N); return; }
    for (int64_t i = 0; i < M; i += 256) {   /* rows by 256 keep the x block of a K panel in L2 */
        const int64_t i1 = i + 256 < M ? i + 256 : M;
        if (i1 - i <= VT_GEMV_MAX_ROWS) vt_gemm512_gemv(&a, i, i1, 0, N, NULL);
        else vt_gemm512_block(&a, i, i1, 0, N);
    }
}

__attribute__((target("fma"))) static void scalar_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                                     const float *B, int64_t ldb, float *C, int64_t ldc,
                                                     int accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(A[i * lda + k], B[k * ldb + j], acc);
            C[i * ldc + j] = acc;
        }
}

void vt_sgemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (isa() == ISA_AVX2) vt_sgemm256_nn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    else if (isa() != ISA_AVX512) scalar_nn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    else vt_sgemm512_nn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
