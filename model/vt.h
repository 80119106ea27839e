/*
 * vt.h — the one public header of the Kimi-Linear model library.
 *
 * This is all the harness (harness/) sees of the model: opaque handles with
 * create/free pairs, plain-data records, and functions that return 0 (VT_OK)
 * or an error status while filling a caller's error buffer with one line that
 * names the file, the tensor or field, and what was expected. Status values:
 * 2 bad input, 3 out of memory, 4 I/O, 5 internal, 6 unsupported here (e.g. no
 * CUDA device). Nothing in the library exits or prints.
 *
 * The pieces:
 *   knobs     — the declared settings (VT_KIMI_BF16_STREAM, ...), a resolved
 *               set of them (from the environment or an arm), and its hash;
 *   faults    — the registry of replayable defects (VT_FAULT);
 *   model     — a checkpoint dir opened and validated once;
 *   session   — a model run under one knob set: prefill, decode, probes,
 *               residual capture;
 *   synth     — deterministic synthetic checkpoints;
 *   sha256    — content hashes for provenance.
 */
#ifndef VT_H
#define VT_H

#include <stddef.h>
#include <stdint.h>

#include "vtprobe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one status set of vtlab. Every fallible function of the model library
 * (VT_OK, VT_E* in model/err.h) and of the harness (LAB_OK, LAB_E* in
 * harness/util.h) returns one of these; those names are aliases of these
 * values, checked at compile time. vt_exit_code maps them to the process
 * exit status, for main and the harness alike. */
typedef enum vt_status {
    VT_STATUS_OK          = 0,
    VT_STATUS_INPUT       = 2,  /* bad input: a file, a field, an argument, a knob */
    VT_STATUS_NOMEM       = 3,  /* an allocation failed */
    VT_STATUS_IO          = 4,  /* an operating-system or SQLite I/O failure */
    VT_STATUS_INTERNAL    = 5,  /* an invariant of our own code was broken */
    VT_STATUS_UNSUPPORTED = 6,  /* valid input this build or machine cannot run (VT_BACKEND=cuda, no device) */
} vt_status;

/* 0 for VT_STATUS_OK; 2 for VT_STATUS_INPUT and VT_STATUS_UNSUPPORTED (the
 * request cannot be served as given: nothing was run or written); 1 for
 * anything else (a failure while working). */
int vt_exit_code(int status);

/* ------------------------------------------------------------------ knobs */

/* VT_KNOB_LAYERS: a layer set (vtprobe.h's vtp_layer_set: "all", "none",
 * "0-3,7", "5.ffn"), the scope of a scoped knob (docs/localize.md). */
typedef enum vt_knob_type { VT_KNOB_BOOL = 1, VT_KNOB_ENUM, VT_KNOB_INT, VT_KNOB_STRING, VT_KNOB_LAYERS } vt_knob_type;

/* Every knob by its registry index: C code reads a knob through its id
 * (vt_knobset_value), so a misspelt knob is a compile error, not a NULL at
 * run time. The registry (model/knobs.c) is indexed by these ids; its names
 * are the environment variables and what `vtlab knobs` lists. */
typedef enum vt_knob_id {
    VT_K_BF16_STREAM,          /* VT_KIMI_BF16_STREAM */
    VT_K_BF16_EXPERT_OUT,      /* VT_KIMI_BF16_EXPERT_OUT */
    VT_K_BF16_ACT,             /* VT_KIMI_BF16_ACT */
    VT_K_ROUTER_WEIGHTS,       /* VT_KIMI_ROUTER_WEIGHTS */
    VT_K_ROUTER_RENORM,        /* VT_KIMI_ROUTER_RENORM */
    VT_K_MLA_KV_NORM_EPS,      /* VT_KIMI_MLA_KV_NORM_EPS */
    VT_K_BACKEND,              /* VT_BACKEND */
    VT_K_FAULT,                /* VT_FAULT */
    VT_K_THREADS,              /* VT_THREADS */
    VT_K_PROBE,                /* VT_PROBE */
    VT_K_TEST_IGNORED,         /* VT_TEST_IGNORED_KNOB: test-only (audit rule R3's fixture) */
    VT_K_BF16_STREAM_LAYERS,   /* VT_KIMI_BF16_STREAM_LAYERS: where VT_KIMI_BF16_STREAM acts */
    VT_K_BF16_EXPERT_OUT_LAYERS, /* VT_KIMI_BF16_EXPERT_OUT_LAYERS */
    VT_K_BF16_ACT_LAYERS,      /* VT_KIMI_BF16_ACT_LAYERS */
    VT_K_TEST_LOSSY_LAYERS,    /* VT_TEST_LOSSY_LAYERS: test-only, a planted per-site fault (docs/localize.md) */
    VT_K_COUNT
} vt_knob_id;

typedef struct vt_knob_info {
    const char  *name;        /* "VT_KIMI_BF16_STREAM" */
    vt_knob_type type;
    const char  *def;         /* default value, canonical text */
    const char  *allowed;     /* "0|1", "unbiased|biased", "1..256", ... */
    const char  *doc;         /* one line */
    int          numeric;     /* 1 when the knob changes the model's numbers */
    int          hash_omits_default; /* 1: hashed only when set away from its default, so that a
                                        knob added later leaves every recorded identity unchanged */
    const char  *scope;       /* a scoped knob: the VT_KNOB_LAYERS knob holding its scope (NAME_LAYERS),
                                 and "sites" in scope_kind; NULL otherwise */
    const char  *scope_kind;  /* "sites" (layers and their .attn/.ffn sites) or "layers" */
} vt_knob_info;

/* "Did you mean" (suggest.c, the one helper for knobs, commands, options
 * and option values). vt_edit_distance: edits between two names, a swap of
 * neighbours counting one and case ignored (99 when either is over 63 bytes).
 * vt_suggest: the candidate word is taken for, or NULL when none is close
 * enough (suggest.c says what is). vt_suggest_list: the same over the
 * '|'-separated words of list ("json|csv"), copied into out. The suggester
 * is the same for candidates that are not in an array: init, offer each,
 * then .best (NULL: none). */
int                 vt_edit_distance(const char *a, const char *b);
typedef struct vt_suggester {
    const char *word;
    const char *best;   /* the candidate to suggest so far (a pointer offered), or NULL */
    int         rank;
} vt_suggester;
void                vt_suggest_init(vt_suggester *s, const char *word);
void                vt_suggest_offer(vt_suggester *s, const char *candidate);
const char         *vt_suggest(const char *word, const char *const *candidates, size_t n);
const char         *vt_suggest_list(const char *word, const char *list, char *out, size_t outlen);
int                 vt_knob_count(void);
const vt_knob_info *vt_knob_at(int i);
const vt_knob_info *vt_knob_find(const char *name);
/* The scoped knob whose scope knob is name (VT_KIMI_BF16_STREAM for
 * VT_KIMI_BF16_STREAM_LAYERS), or NULL. */
const vt_knob_info *vt_knob_scope_of(const char *name);

/* A resolved knob set: every declared knob with a value (defaults filled in). */
typedef struct vt_knobset vt_knobset;

int  vt_knobset_new(vt_knobset **out);
void vt_knobset_free(vt_knobset *ks);
int  vt_knobset_copy(vt_knobset **out, const vt_knobset *src);
/* Sets one knob; the value is validated (a bool is 0 or 1) and canonicalised ("08" -> "8").
 * An unknown name is VT_STATUS_INPUT with a did-you-mean. */
int  vt_knobset_set(vt_knobset *ks, const char *name, const char *value, char *err, size_t errlen);
/* Applies every VT_* variable of envp (NULL-terminated "NAME=VALUE" strings,
 * e.g. `environ`). Any VT_* name that no knob declares is an error. */
int  vt_knobset_from_env(vt_knobset *ks, char *const *envp, char *err, size_t errlen);
const char *vt_knobset_get(const vt_knobset *ks, const char *name);   /* NULL if undeclared */
/* The canonical value of knob id (never NULL for an id < VT_K_COUNT). */
const char *vt_knobset_value(const vt_knobset *ks, vt_knob_id id);
/* Canonical hash of the knobs that change numerics (sorted NAME=VALUE lines,
 * sha256, hex, 64 chars + NUL): those whose registry entry says `numeric`.
 * Threads and probe mode are excluded: they must not change the numbers.
 * The backend is included: the CPU and CUDA backends round differently, so a
 * run on each is a different identity. A knob added after runs were recorded
 * is hashed only away from its default (hash_omits_default), so recorded
 * identities keep their hashes. */
void vt_knobset_hash(const vt_knobset *ks, char out[65]);

/* ------------------------------------------------------------------ faults */

typedef struct vt_fault_info {
    const char *name;         /* the VT_FAULT value, e.g. "moe_scatter_row_bytes_from_stream" */
    const char *site;         /* probe site where it acts, e.g. "moe.scatter" */
    const char *doc;          /* what it reproduces */
} vt_fault_info;

int                  vt_fault_count(void);
const vt_fault_info *vt_fault_at(int i);

/* ------------------------------------------------------------------ model */

typedef struct vt_model vt_model;

/* The most layers a config may declare (num_hidden_layers); a config with
 * more is refused as bad input, never clamped. */
#define VT_MODEL_MAX_LAYERS 256

typedef struct vt_model_info {
    int64_t vocab_size, hidden_size, n_layers;
    int64_t n_moe_layers;
    char    layer_kind[VT_MODEL_MAX_LAYERS + 1];  /* 'K' (KDA) or 'M' (MLA) per layer, NUL-terminated */
    char    layer_ffn[VT_MODEL_MAX_LAYERS + 1];   /* 'D' (dense MLP) or 'E' (MoE) per layer, NUL-terminated */
    char    weight_dtype[8];     /* dtype of most weights: "f32", "bf16", "f16" */
} vt_model_info;

/* Opens a checkpoint directory (config.json + safetensors), validates the
 * config and every tensor's presence, shape and dtype. */
int  vt_model_open(vt_model **out, const char *dir, char *err, size_t errlen);
void vt_model_free(vt_model *m);
void vt_model_get_info(const vt_model *m, vt_model_info *out);
/* Validates a checkpoint directory as vt_model_open does (config, every
 * tensor's presence, shape and dtype) from the headers alone, loading no
 * weight: flat memory whatever the checkpoint's size. */
int  vt_model_validate(const char *dir, vt_model_info *out, char *err, size_t errlen);

/* For a program's main, before anything else: unless OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is set (or VTLAB_NO_REEXEC), sets OMP_WAIT_POLICY=PASSIVE
 * GOMP_SPINCOUNT=3000 and execs the program again with argv, so idle OpenMP
 * threads spin ~35 us and then sleep (libgomp reads both only when it loads;
 * model/omp_wait.c says why). Returns only when no exec happened. */
void vt_openmp_wait_passively(char **argv);
/* The thread count a session uses when VT_THREADS is 0: the CPUs of the
 * process's affinity, lowered to a cgroup CPU quota rounded up (a
 * container's `--cpus`; model/cpu_quota.c), read once a process.
 * VTLAB_CPU_QUOTA=0 in the environment: the quota is not read. */
int  vt_team_default_threads(void);

/* The host's speed for the forward pass's kernels now: the best of 5 timings
 * of 4 products 256x256x256 (f32, OpenMP's current threads), in GFLOP/s; NaN
 * when out of memory. */
double vt_host_gemm_gflops(void);

/* ------------------------------------------------------------------ session */

typedef struct vt_session vt_session;

/* A probe record: what really happened at one site of one layer, aggregated
 * over every call since the last vt_session_probes_clear. One definition for vtlab's model and every engine that
 * speaks the protocol (model/vtprobe.h, docs/engine-protocol.md). */
typedef vtp_record vt_probe;

/* Creates a session for model m under knob set ks (copied). Resolves the
 * backend: VT_BACKEND=cuda without a device is VT_STATUS_UNSUPPORTED
 * "no CUDA device". */
int  vt_session_new(vt_session **out, vt_model *m, const vt_knobset *ks, char *err, size_t errlen);
void vt_session_free(vt_session *s);

/* Runs tokens[0..T) from an empty state (caches reset), leaving the caches
 * ready for decode. logits: [T, vocab] f32 row-major, or NULL. */
int  vt_session_prefill(vt_session *s, const int32_t *tokens, int64_t T, float *logits,
                        char *err, size_t errlen);
/* Runs n sequences, each as vt_session_prefill would run it alone (from an
 * empty state) and with the same bits: sequence i is tokens[off[i] ..
 * off[i+1]) (off[0] = 0, each at least one token) and its logits go to
 * logits + off[i] * vocab ([off[n], vocab] f32, or NULL). Consecutive
 * sequences are packed into one pass of up to vt_session_batch_rows rows
 * (VTLAB_BATCH_ROWS; 0: one pass each), each with its own KDA and attention
 * state and positions; probe records are those of n prefills. With capture
 * on, vt_session_residual_seq gives each sequence's residuals. A decode after
 * a batch of n > 1 is refused until the next prefill. The CUDA backend runs
 * the sequences one by one (n > 1 with capture on: VT_STATUS_UNSUPPORTED). */
int  vt_session_prefill_batch(vt_session *s, int64_t n, const int32_t *tokens, const int64_t *off, float *logits,
                              char *err, size_t errlen);
/* The most rows the session packs into one pass (0: none packed; a CUDA session). */
int64_t vt_session_batch_rows(const vt_session *s);
/* Appends one token to the cached state. logits: [vocab] f32, or NULL. */
int  vt_session_decode(vt_session *s, int32_t token, float *logits, char *err, size_t errlen);

/* The probe sites the model records, and whether a name is one of them. */
int         vt_probe_site_count(void);
const char *vt_probe_site_at(int i);
int         vt_probe_site_known(const char *site);

int64_t         vt_session_probe_count(const vt_session *s);
const vt_probe *vt_session_probe_at(const vt_session *s, int64_t i);
void            vt_session_probes_clear(vt_session *s);
/* Observations the session could not record (out of memory). Non-zero means
 * the probes cannot vouch for the run: treat it as a failed assertion. */
int64_t         vt_session_probes_lost(const vt_session *s);

/* Residual capture for "where did it go wrong": when on, every prefill keeps
 * the residual stream (as f32) after each sublayer. site 0: after the
 * attention (KDA/MLA) add; site 1: after the FFN (MLP/MoE) add. Returns a
 * pointer to [T, hidden] f32 valid until the next prefill, or NULL. */
void         vt_session_capture(vt_session *s, int on);
const float *vt_session_residual(const vt_session *s, int64_t layer, int site, int64_t *T);
/* Sequence i's rows of the capture of the last vt_session_prefill_batch
 * ([T, hidden] f32, *T its tokens); after a vt_session_prefill, i = 0 is
 * vt_session_residual. NULL when not captured or i is out of range. */
const float *vt_session_residual_seq(const vt_session *s, int64_t i, int64_t layer, int site, int64_t *T);

/* Seconds spent inside the forward pass since creation (for overhead
 * accounting) and the share of that spent in GEMM calls. */
double vt_session_forward_seconds(const vt_session *s);
double vt_session_gemm_seconds(const vt_session *s);

/* The device a backend ("cpu" or "cuda") runs on, for provenance:
 * "cpu: <model name>" or "cuda: <GPU name>". VT_STATUS_UNSUPPORTED (and
 * "cuda: (no device)") when there is no CUDA device. */
int vt_device_name(const char *backend, char *out, size_t outlen);

/* ------------------------------------------------------------------ synth */

/* Writes out_dir/config.json and out_dir/model.safetensors for the config at
 * config_path, deterministic in (config, seed, dtype). dtype: "f32", "bf16"
 * or "f16". The directory is created if needed; files appear whole or not at all. */
int vt_synth(const char *config_path, uint64_t seed, const char *dtype, const char *out_dir,
             char *err, size_t errlen);
/* The synth algorithm's version: bumped whenever vt_synth's output for the
 * same (config, seed, dtype) changes, so that caches of synthetic models can
 * tell an old model from a new one. */
int vt_synth_version(void);

/* ------------------------------------------------------------------ benchmark reports */

/* The format name and version of a benchmark report (model/bench_report.h
 * writes it; `vtlab record-bench` reads it). */
#define VT_BENCH_FORMAT "vtlab-bench"
#define VT_BENCH_VERSION 1
/* 1 when s can name a phase of a report: 1 to 31 of [a-z0-9_-] (the writer
 * and the reader hold reports to the same rule). */
int vt_bench_name_ok(const char *s);

/* ------------------------------------------------------------------ JSON text */

/* Checks len bytes of JSON text before it is parsed: a NUL byte anywhere, or
 * a \u0000 escape inside a string, is VT_STATUS_INPUT with
 * "FNAME: line L column C: ..." in err. cJSON decodes \u0000 into C strings
 * that then end early ("ab\u0000cd" reads as "ab"), and a NUL byte makes the
 * text shorter than the file. The model's config reader and every JSON input
 * of the harness apply this one rule. */
int vt_json_text_check(const char *text, size_t len, const char *fname, char *err, size_t errlen);

/* ------------------------------------------------------------------ f16 */

/* IEEE binary16 <-> f32 on raw bits, by the model's own conversion (dtype.c:
 * round to nearest even, overflow to Inf, gradual underflow, NaN stays NaN).
 * The harness stores full logits in f16 with these. */
uint16_t vt_f16_bits_from_f32(float x);
float    vt_f32_from_f16_bits(uint16_t h);

/* ------------------------------------------------------------------ sha256 */

void vt_sha256(const void *data, size_t n, uint8_t out[32]);
void vt_sha256_hex(const void *data, size_t n, char out[65]);
/* Hash of a file's bytes. */
int  vt_sha256_file(const char *path, char out[65], char *err, size_t errlen);

typedef struct vt_sha256_ctx { uint32_t h[8]; uint64_t len; uint8_t buf[64]; size_t nbuf; } vt_sha256_ctx;
void vt_sha256_init(vt_sha256_ctx *c);
void vt_sha256_update(vt_sha256_ctx *c, const void *data, size_t n);
void vt_sha256_final(vt_sha256_ctx *c, uint8_t out[32]);
/* 1 when s is a sha256 as these functions write it: 64 lowercase hex digits. */
int  vt_sha256_hex_ok(const char *s);
/* vt_sha256_final, as lowercase hex (64 chars + NUL). */
void vt_sha256_final_hex(vt_sha256_ctx *c, char out[65]);
/* Tests: 1 pins the portable implementation; 0 lets the CPU's SHA
 * instructions be used where present (the default). */
void vt_sha256_force_portable(int on);

/* The code version baked in at build time: "commit|dirty=0|compiler|flags",
 * and its parts. The commit is the one checked out when the library was built. */
const char *vt_build_info(void);
const char *vt_build_commit(void);
int         vt_build_dirty(void);
const char *vt_build_compiler(void);
const char *vt_build_flags(void);

#ifdef __cplusplus
}
#endif
#endif
