/*
 * bench_report.h — the one file format of every benchmark (`make bench` on
 * the CPU, bench_cuda on a GPU), which `vtlab record-bench` turns into runs
 * in results.db (docs/schema.md, "Benchmark runs").
 *
 * A report is what one benchmark process measured: the backend and device,
 * the code version that measured it, the model and token identities, the
 * knobs, and one entry per phase (e.g. prefill at T=2048, decode at batch 32)
 * with its measured seconds, the FLOPs and bytes it had to do, and the peaks
 * it is measured against (OpenBLAS sgemm peak measured in the same process on
 * the CPU; the device's datasheet peak on the GPU). The writer derives the
 * ratios; the file is written whole (fileio.h) or not at all.
 */
#ifndef VT_BENCH_REPORT_H
#define VT_BENCH_REPORT_H

#include <stdint.h>

#include "vt.h"   /* VT_BENCH_FORMAT, VT_BENCH_VERSION */

#ifdef __cplusplus
extern "C" {   /* err.h has no guard of its own: included from C++, it must be inside */
#endif

#include "err.h"

typedef struct vt_bench_phase {
    const char *name;        /* [a-z0-9_-], unique in the report: the run's arm */
    int64_t     batch;       /* sequences stepped together */
    int64_t     context;     /* tokens in each sequence's cache when the phase starts (0 for a prefill) */
    int64_t     threads;     /* CPU threads (0 on a GPU) */
    int64_t     tokens;      /* tokens processed in `seconds` */
    double      seconds;     /* measured, > 0 */
    double      flops;       /* floating-point operations the phase had to do (see flops_counted) */
    double      bytes;       /* bytes it had to move (see bytes_counted; 0 = not counted) */
    double      peak_flops;  /* FLOP/s it is measured against (0 = unknown) */
    double      peak_bytes;  /* bytes/s it is measured against (0 = unknown) */
    double      gemm_seconds;/* seconds inside GEMM calls, < 0 when not measured */
} vt_bench_phase;

typedef struct vt_bench_report {
    const char *backend;         /* "cpu" | "cuda" */
    const char *device;          /* vt_device_name() */
    const char *model;           /* what was run: a model directory or a config file */
    const char *model_sha256;    /* identity of the weights (64 hex) */
    const char *tokens_sha256;   /* identity of the input tokens (64 hex) */
    const char *weights;         /* how the weights were made, in words */
    const char *peak_what;       /* what peak_flops is, in words */
    const char *flops_counted, *bytes_counted;
    int64_t     n_knobs;
    const char *const *knob_names, *const *knob_values;
    int64_t     n_phases;
    const vt_bench_phase *phases;
    /* Memory of the measuring process, bytes; 0 = not measured. When any is
     * set the report gets a "memory" object (kept verbatim in results.db with
     * the report; record-bench does not read it). */
    int64_t     rss_open_bytes;     /* resident after the model was opened */
    int64_t     rss_peak_bytes;     /* peak resident (getrusage ru_maxrss) over the forward phases */
    int64_t     checkpoint_bytes;   /* the checkpoint's safetensors files on disk */
} vt_bench_report;

/* Writes r as JSON to path (atomically). Adds "format", "version",
 * "code_version" (vt_build_info()), "measured_at" (UTC), "host", and per phase tokens_per_s, flops_per_s,
 * bytes_per_s and their fractions of the peaks, and "memory" when measured. Refuses (VT_EINPUT) a phase
 * with seconds <= 0, tokens < 1, a bad name or a duplicate name. */
int vt_bench_write(const char *path, const vt_bench_report *r, vt_err *err);

/* The sha256 (hex) of an int32 token array in little-endian bytes. */
void vt_bench_tokens_sha256(const int32_t *tok, int64_t n, char out[65]);

#ifdef __cplusplus
}
#endif
#endif
