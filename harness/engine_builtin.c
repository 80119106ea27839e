/*
 * engine_builtin.c — the builtin engine: model/vt.h in process (see
 * engine.h). A model handle is a vt_model; an instance is a vt_session.
 */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cache.h"
#include "util.h"

/* The model library's statuses are the harness's (one set, vt_status): they
 * pass through unchanged; VT_STATUS_UNSUPPORTED (no such device here) exits 2
 * like bad input (vt_exit_code). */

/* The model handle: the model and what load said about it (every
 * instance's hello repeats it). */
typedef struct builtin_model {
    vt_model       *m;
    lab_engine_info info;
} builtin_model;

static int builtin_load(const lab_engine_spec *spec, const char *model_dir, void **model, lab_engine_info *info,
                        char *err, size_t errlen) {
    vt_model *m = NULL;
    char verr[1024] = "";
    (void)spec;
    *model = NULL;
    memset(info, 0, sizeof *info);
    builtin_model *bm = calloc(1, sizeof *bm);
    if (!bm) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    int rc = vt_model_open(&m, model_dir, verr, sizeof verr);
    if (rc) {
        free(bm);
        return lab_errf(err, errlen, rc, "model %s: %s", model_dir, verr);
    }
    vt_model_info mi;
    vt_model_get_info(m, &mi);
    if ((rc = lab_model_sha256(model_dir, info->model_sha256, err, errlen))) {
        vt_model_free(m);
        free(bm);
        return rc;
    }
    snprintf(info->engine, sizeof info->engine, "vtlab-builtin");
    snprintf(info->version, sizeof info->version, "%s", vt_build_info());
    info->vocab = mi.vocab_size;
    info->hidden = mi.hidden_size;
    info->n_layers = mi.n_layers;
    snprintf(info->layer_kinds, sizeof info->layer_kinds, "%s/%s", mi.layer_kind, mi.layer_ffn);
    bm->m = m;
    bm->info = *info;
    *model = bm;
    return LAB_OK;
}

static void builtin_unload(void *model) {
    builtin_model *bm = model;
    if (!bm) return;
    vt_model_free(bm->m);
    free(bm);
}

static int builtin_open(void *model, const lab_engine_req *req, void **inst, lab_engine_hello *hello, char *err,
                        size_t errlen) {
    builtin_model *bm = model;
    const vt_knobset *ks = req->ks;
    vt_session *s = NULL;
    char verr[1024] = "";
    *inst = NULL;
    memset(hello, 0, sizeof *hello);
    hello->info = bm->info;
    hello->deterministic = 1;
    hello->capture = 1;
    int rc = vt_session_new(&s, bm->m, ks, verr, sizeof verr);
    if (rc) return lab_errf(err, errlen, rc, "%s", verr);
    const char *backend = vt_knobset_value(ks, VT_K_BACKEND);
    snprintf(hello->backend, sizeof hello->backend, "%s", backend ? backend : "cpu");
    vt_device_name(backend, hello->device, sizeof hello->device);
    *inst = s;
    return LAB_OK;
}

static int builtin_forward(void *inst, const int32_t *tokens, int64_t T, int capture, float *logits, char *err,
                           size_t errlen) {
    char verr[1024] = "";
    vt_session_capture(inst, capture);
    int rc = vt_session_prefill(inst, tokens, T, logits, verr, sizeof verr);
    return rc ? lab_errf(err, errlen, rc, "%s", verr) : LAB_OK;
}

static const float *builtin_residual(void *inst, int64_t layer, int site, int64_t *T) {
    return vt_session_residual(inst, layer, site, T);
}

/* The batched forward (engine.h): the library packs the sequences into
 * passes of up to VTLAB_BATCH_ROWS rows with the bits of one forward each;
 * any number of sequences per call. */
static void builtin_batch_limits(void *inst, int64_t *max_seqs, int64_t *max_rows) {
    *max_rows = vt_session_batch_rows(inst);
    *max_seqs = *max_rows > 0 ? INT64_MAX : 1;
}

static int builtin_batch_forward(void *inst, int64_t n, const int32_t *tokens, const int64_t *off, int capture,
                                 float *logits, char *err, size_t errlen) {
    char verr[1024] = "";
    vt_session_capture(inst, capture);
    int rc = vt_session_prefill_batch(inst, n, tokens, off, logits, verr, sizeof verr);
    return rc ? lab_errf(err, errlen, rc, "%s", verr) : LAB_OK;
}

static const float *builtin_batch_residual(void *inst, int64_t i, int64_t layer, int site, int64_t *T) {
    return vt_session_residual_seq(inst, i, layer, site, T);
}

static int builtin_probes(void *inst, vt_probe **recs, int64_t *n, int64_t *lost, char *err, size_t errlen) {
    const vt_session *s = inst;
    *recs = NULL;
    *n = vt_session_probe_count(s);
    *lost = vt_session_probes_lost(s);
    if (*n <= 0) return LAB_OK;
    if (!(*recs = malloc((size_t)*n * sizeof **recs))) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int64_t i = 0; i < *n; i++) (*recs)[i] = *vt_session_probe_at(s, i);
    return LAB_OK;
}

static double builtin_forward_seconds(void *inst) { return vt_session_forward_seconds(inst); }

static void builtin_close(void *inst) { vt_session_free(inst); }

const lab_engine_ops lab_engine_builtin = {
    .name = "builtin",
    .load = builtin_load,
    .unload = builtin_unload,
    .open = builtin_open,
    .forward = builtin_forward,
    .residual = builtin_residual,
    .probes = builtin_probes,
    .forward_seconds = builtin_forward_seconds,
    .close = builtin_close,
    /* no submit/collect: in process, a call is the whole forward */
    .batch_limits = builtin_batch_limits,
    .batch_forward = builtin_batch_forward,
    .batch_residual = builtin_batch_residual,
};
