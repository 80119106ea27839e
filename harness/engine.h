/*
 * engine.h — the seam between the runner and an inference engine.
 *
 * The runner never calls the model directly: every forward pass goes
 * through an ops table. The builtin engine (engine_builtin.c, the model
 * library of model/vt.h, in process) is the first implementation; an
 * external engine (a user's own, driven as a subprocess over a protocol)
 * is meant to be the next, behind the same table.
 *
 * Life cycle, per experiment:
 *
 *   load(model_dir)        -> model handle + lab_engine_info (hello, model
 *                             part: engine name/version, model hash, shape)
 *     open(model, knobs)   -> instance + lab_engine_hello (backend, device);
 *                             one instance per run, under one knob set
 *       forward(tokens[T]) -> logits [T, vocab] f32, repeated per sequence,
 *                             each from an empty state
 *       residual(l, site)  -> the captured residual after forward(capture=1)
 *       probes()           -> the probe records aggregated since open
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

/* Hello, instance part: where this knob set runs. */
typedef struct lab_engine_hello {
    char backend[16];            /* "cpu", "cuda" */
    char device[128];            /* "cpu: <model name>", "cuda: <GPU name>" */
} lab_engine_hello;

typedef struct lab_engine_ops {
    const char *name;
    /* Loads the model of model_dir into *model. */
    int  (*load)(const char *model_dir, void **model, lab_engine_info *info, char *err, size_t errlen);
    void (*unload)(void *model);
    /* Opens an instance of model under knob set ks (copied; the caller may
     * free ks afterwards). An unavailable backend fails here (LAB_EINPUT). */
    int  (*open)(void *model, const vt_knobset *ks, void **inst, lab_engine_hello *hello, char *err, size_t errlen);
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
} lab_engine_ops;

/* A loaded engine: its ops, its model handle and its hello. */
typedef struct lab_engine {
    const lab_engine_ops *ops;
    void                 *model;
    lab_engine_info       info;
} lab_engine;

/* The model library of model/vt.h, in this process. */
extern const lab_engine_ops lab_engine_builtin;

#endif
