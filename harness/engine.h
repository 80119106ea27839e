/*
 * engine.h — the seam between the runner and an inference engine.
 *
 * The runner never calls the model directly: every forward pass goes
 * through an ops table. The builtin engine (engine_builtin.c, the model
 * library of model/vt.h, in process) is the first implementation; an
 * external engine (a user's own, driven as a subprocess over a protocol)
 * is meant to be the next, behind the same table.
 *
 * Two implementations: lab_engine_builtin (engine_builtin.c, model/vt.h in
 * process) and lab_engine_command (engine_command.c: a child process
 * speaking docs/engine-protocol.md, e.g. examples/engines/devengine or
 * `vtlab engine`).
 *
 * Life cycle, per experiment:
 *
 *   load(spec, model_dir)  -> model handle + lab_engine_info (the builtin
 *                             loads the model; a command only remembers
 *                             how to start it: its info comes with open)
 *     open(model, req)     -> instance + lab_engine_hello (the engine, the
 *                             model, the knobs as the engine applied them,
 *                             backend, device); one instance per knob set
 *       forward(tokens[T]) -> logits [T, vocab] f32, repeated per sequence,
 *                             each from an empty state
 *       batch_forward(n sequences) -> the same for several sequences in one
 *                             call (optional; batch_limits says how many)
 *       residual(l, site)  -> the captured residual after forward(capture=1)
 *       probes()           -> the probe records aggregated since open (or
 *                             since the last probes() call)
 *     close(instance)
 *   unload(model)
 *
 * Buffers and their dtypes (all row-major, native byte order):
 *   tokens    int32  [T]            caller's; read only during forward
 *   logits    f32    [T, vocab]     caller's, T * vocab * sizeof(float)
 *                                   bytes; the engine writes every element
 *   residual  f32    [T, hidden]    engine's; valid until the next forward
 *                                   or close
 *   probes    vt_probe [n]          a malloc'd copy, the caller's to free()
 *
 * Errors: every function that can fail returns a LAB_* status (util.h) and
 * writes one line into err[errlen] without a trailing newline:
 *   LAB_EINPUT  the request cannot be served as asked: a bad model dir, a
 *               bad knob, a backend this machine does not have (VT_BACKEND=
 *               cuda without a device). The runner checks every arm's open
 *               before it touches the database, so these are exit 2 with
 *               nothing written.
 *   LAB_ENOMEM, LAB_EIO, LAB_EINTERNAL: a failure while running (the run is
 *               recorded as FAILED).
 * After a failed forward the instance may only be closed. Nothing exits or
 * prints. close and unload accept NULL.
 */
#ifndef LAB_ENGINE_H
#define LAB_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "experiment.h"
#include "model/vt.h"

/* Hello, model part: what the engine is and what it loaded. */
typedef struct lab_engine_info {
    char    engine[32];          /* engine name, e.g. "vtlab-builtin" */
    char    version[256];        /* engine version (the builtin: vt_build_info()) */
    char    model_sha256[65];    /* content hash of the model (64 hex + NUL) */
    int64_t vocab, hidden, n_layers;
    /* Per layer, the attention kind (K KDA, M MLA), a '/', then the FFN kind
     * (D dense, E MoE): "KKKM/DEEE". Empty when the engine does not say.
     * Stored with each run, so a report never opens a model to draw it. */
    char    layer_kinds[2 * VT_MODEL_MAX_LAYERS + 2];
} lab_engine_info;

/* What an arm asks of an engine. */
typedef struct lab_engine_req {
    const vt_knobset *ks;        /* builtin: the arm's VT_* knobs, resolved (lab_resolve_knobs) */
    int64_t      n_knobs;        /* a command: the arm's knobs as written, put in its environment */
    char *const *knob_names, *const *knob_values;
    const char  *probe;          /* "on" | "audit" (VTP_PROBE) */
    const char  *model_dir;      /* the experiment's model (VTP_MODEL) */
} lab_engine_req;

/* One knob of a command engine's registry, as its hello declares it. A
 * scoped knob (its hello record says "scope": "layers" or "sites") gets its
 * scope knob NAME_LAYERS added after the declared ones (docs/engine-protocol.md,
 * "Scoped knobs"): type "layers", default "all", the value the engine reports
 * in scope_value (else, unreported, the value the arm set: trusted). */
typedef struct lab_engine_knob {
    char *name, *type, *values, *def, *value;   /* values: '|'-separated */
    int   numeric, read;
    int   scope;                  /* a scoped knob: 1 "layers", 2 "sites"; 0 not scoped */
    int64_t scope_of;             /* a scope knob: the index of the knob it scopes; -1 otherwise */
    int   reported;               /* a scope knob: the hello reported scope_value */
} lab_engine_knob;

/* Hello, instance part: the engine, its model and knobs, where it runs. */
typedef struct lab_engine_hello {
    lab_engine_info  info;       /* the model as this instance reports it */
    char  backend[16];           /* "cpu", "cuda", or "engine" for a command */
    char  device[128];           /* "cpu: <model name>", "cuda: <GPU name>", "engine: NAME VERSION" */
    char  engine_id[320];        /* "" builtin; a command: "NAME VERSION COMMIT" */
    char *json;                  /* a command: the hello as received (malloc'd); NULL builtin */
    int   deterministic, capture;
    int64_t max_batch;           /* a command: the most sequences one request may carry (its hello's
                                  * max_batch; 1 when it declares none); 0 builtin */
    int64_t n_knobs;             /* a command: its knob registry (malloc'd) */
    lab_engine_knob *knobs;
    int64_t n_sites;             /* a command: its probe sites */
    char  **sites;
    int64_t n_faults;            /* a command: its replayable faults */
    char  **fault_name, **fault_knob, **fault_site;
} lab_engine_hello;

/* The knob of a command engine's registry named name (the first, should a
 * hello declare it twice), or NULL. */
const lab_engine_knob *lab_engine_hello_knob(const lab_engine_hello *h, const char *name);

/* Frees what a hello holds (not h itself); h is zeroed. Accepts a zeroed h. */
void lab_engine_hello_free(lab_engine_hello *h);

typedef struct lab_engine_ops {
    const char *name;
    /* Loads the model of model_dir into *model (spec: how to start a command). */
    int  (*load)(const lab_engine_spec *spec, const char *model_dir, void **model, lab_engine_info *info,
                 char *err, size_t errlen);
    void (*unload)(void *model);
    /* Opens an instance of model for req (copied; the caller may free it
     * afterwards). An unavailable backend, or a command that does not start
     * or says a bad hello, fails here (LAB_EINPUT). hello: zeroed first;
     * the caller frees it with lab_engine_hello_free. */
    int  (*open)(void *model, const lab_engine_req *req, void **inst, lab_engine_hello *hello, char *err,
                 size_t errlen);
    /* Runs tokens[0..T) from an empty state into logits (see above).
     * capture 1: keep the residual stream of this sequence for residual(). */
    int  (*forward)(void *inst, const int32_t *tokens, int64_t T, int capture, float *logits,
                    char *err, size_t errlen);
    /* The residual after layer's sublayer site (0 attention, 1 FFN) of the
     * last forward with capture on, *T its rows; NULL when not captured. */
    const float *(*residual)(void *inst, int64_t layer, int site, int64_t *T);
    /* Copies the probe records into *recs (malloc'd, caller frees; NULL when
     * *n is 0) and the count of observations lost for lack of memory. */
    int  (*probes)(void *inst, vt_probe **recs, int64_t *n, int64_t *lost, char *err, size_t errlen);
    /* Seconds spent inside forward since open (for overhead accounting). */
    double (*forward_seconds)(void *inst);
    void (*close)(void *inst);
    /* Optional (NULL for the builtin): a forward split in two, so that the
     * caller can score one group of sequences while the engine computes the
     * next. submit writes a request for sequences [0, n) of tokens (off as
     * batch_forward's); collect reads the oldest one's logits [off[n], vocab]
     * (and residuals, for batch_residual) as batch_forward would. At most 2
     * requests in flight; the caller submits ahead only while a request fits
     * a pipe (LAB_ENGINE_AHEAD_MAX tokens), so neither side can block the other. */
    int  (*submit)(void *inst, int64_t n, const int32_t *tokens, const int64_t *off, int capture, char *err,
                   size_t errlen);
    int  (*collect)(void *inst, float *logits, char *err, size_t errlen);
    /* Optional (NULL: one sequence per call): several sequences in one call
     * (issue 32), each from an empty state, with the logits (and captures)
     * of one forward each.
     *   batch_limits    the most sequences (*max_seqs) and tokens (*max_rows)
     *                   one call may carry; *max_rows 0: no batches now (the
     *                   builtin with VTLAB_BATCH_ROWS=0; a command engine that
     *                   declared no max_batch, or VTLAB_ENGINE_BATCH=0)
     *   batch_forward   sequences [0, n): tokens[off[i] .. off[i+1]) (off[0] = 0)
     *                   -> logits [off[n], vocab] f32 (caller's); capture 1:
     *                   keep every sequence's residual stream
     *   batch_residual  sequence i's rows of the last call's capture (a
     *                   forward's, a batch_forward's or a collect's), as
     *                   residual gives one sequence's (*T its tokens), or NULL */
    void (*batch_limits)(void *inst, int64_t *max_seqs, int64_t *max_rows);
    int  (*batch_forward)(void *inst, int64_t n, const int32_t *tokens, const int64_t *off, int capture,
                          float *logits, char *err, size_t errlen);
    const float *(*batch_residual)(void *inst, int64_t i, int64_t layer, int site, int64_t *T);
} lab_engine_ops;

/* The longest sequence submitted ahead of a pending response: its request
 * (4 bytes a token) must fit the 64 KiB pipe while the engine writes. */
#define LAB_ENGINE_AHEAD_MAX 8192

/* A loaded engine: its ops, its model handle and its hello. inst: an
 * instance kept open between passes (a command engine loads its model once
 * per arm), or NULL. */
typedef struct lab_engine {
    const lab_engine_ops *ops;
    void                 *model;
    lab_engine_info       info;
    void                 *inst;
} lab_engine;

/* The model library of model/vt.h, in this process. */
extern const lab_engine_ops lab_engine_builtin;
/* A command speaking docs/engine-protocol.md, in a child process. */
extern const lab_engine_ops lab_engine_command;

/* Parses and checks a hello header line into h (zeroed first; h->json a
 * copy of line). LAB_EINPUT with "hello: MEMBER: what was expected", or
 * LAB_ENOMEM; h is then freed. Fuzz target (tests/fuzz/fuzz_engine_hello.c). */
int lab_engine_hello_parse(const char *line, lab_engine_hello *h, char *err, size_t errlen);

/* For conformance checks (engine_check.c): writes header (a whole line,
 * '\n' included) and n payload bytes to a command instance, reads one
 * response header into *reply (malloc'd) and discards its payload. A dead
 * or silent engine is an error, as in forward. */
int lab_engine_command_raw(void *inst, const char *header, const void *payload, size_t n, char **reply, char *err,
                           size_t errlen);

/* Checks arm `arm` of e against a command engine's hello: every knob the
 * arm sets is in the engine's registry (else LAB_EINPUT with a did-you-mean)
 * with an allowed value, every expected probe site is one it declares. */
int lab_engine_check_arm(const lab_engine_hello *h, const lab_experiment *e, int64_t arm, char *err, size_t errlen);
/* The identity of a command engine's knob set: sha256 over
 * "engine NAME VERSION COMMIT\n" and the sorted "NAME=VALUE\n" lines of
 * its numeric knobs, values as the engine reports them. LAB_ENOMEM or OK. */
int lab_engine_knob_hash(const lab_engine_hello *h, char out[65]);

#endif
