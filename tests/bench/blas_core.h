/*
 * blas_core.h — the benches' OpenBLAS peak must be the machine's, not that of
 * a kernel OpenBLAS fell back to.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU
 * model it recognises, or from OPENBLAS_CORETYPE. On the 2-core Zen 5 VM the
 * environment sets OPENBLAS_CORETYPE=Haswell (and Debian 12's 0.3.21 does not
 * know AMD family 26 anyway, where it would fall back to the same): AVX2
 * kernels, sgemm 1024^3 110 GFLOP/s on 1 thread against 210 with SkylakeX's
 * AVX-512 kernels, so every "% of sgemm peak" read about twice too high
 * (prefill showed 114% of "peak"). vtlab's model does not use OpenBLAS; the
 * benches use it only for that reference. So on a CPU with the AVX-512
 * subsets OpenBLAS's SkylakeX kernels need (F, CD, BW, DQ, VL), when the
 * kernels OpenBLAS runs have no AVX-512, the bench sets OPENBLAS_CORETYPE=
 * SkylakeX and execs itself (OpenBLAS reads it only when it loads), and says
 * so in its output: the core type it replaced is kept in
 * VTLAB_BENCH_BLAS_FALLBACK. VTLAB_BENCH_BLAS_KEEP=1 keeps OpenBLAS's own
 * choice; VTLAB_NO_REEXEC=1 turns every exec off. tests/bench/peer.py does
 * the same before it loads torch, so both sides of the peer mode run the same
 * BLAS kernels.
 */
#ifndef VT_BENCH_BLAS_CORE_H
#define VT_BENCH_BLAS_CORE_H

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int blas_core_has_avx512(const char *name) {
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(name, avx512[i]) == 0) return 1;
    return 0;
}

/* Call at the top of main, after vt_openmp_wait_passively. Returns only when
 * no exec happened. */
static void bench_blas_best_core(char **argv) {
    if (getenv("VTLAB_BENCH_BLAS_KEEP") || getenv("VTLAB_NO_REEXEC") || getenv("VTLAB_BENCH_BLAS_FALLBACK")) return;
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vl")))
        return;
    const char *core = openblas_get_corename();
    if (!core || blas_core_has_avx512(core)) return;
    char was[96];
    snprintf(was, sizeof was, "%s%s", core, getenv("OPENBLAS_CORETYPE") ? " (from OPENBLAS_CORETYPE)" : "");
    setenv("VTLAB_BENCH_BLAS_FALLBACK", was, 1);
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);   /* returns only on failure: run as we are */
    unsetenv("VTLAB_BENCH_BLAS_FALLBACK");   /* OpenBLAS has loaded: the variable no longer matters */
}

/* One line for the output: which OpenBLAS kernels the peak was measured with. */
static void bench_blas_describe(char *buf, size_t n) {
    const char *fb = getenv("VTLAB_BENCH_BLAS_FALLBACK"), *core = openblas_get_corename();
    if (fb)
        snprintf(buf, n, "OpenBLAS kernels %s, set by the bench in place of %s, which has no AVX-512 on this "
                         "AVX-512 CPU (tests/bench/blas_core.h; VTLAB_BENCH_BLAS_KEEP=1 keeps it)", core, fb);
    else snprintf(buf, n, "OpenBLAS kernels %s%s", core, getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
}

#endif
