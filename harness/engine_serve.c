/*
 * engine_serve.c — `vtlab engine`: vtlab's own model served over the
 * engine protocol (docs/engine-protocol.md) through vtprobe.h, the same
 * header any other engine uses.
 *
 * Knobs come from the environment as for every model command (VT_*, the
 * builtin registry); the hello declares the whole registry with the values
 * in use. VTP_PROBE (the protocol's probe mode) sets VT_PROBE unless the
 * environment sets VT_PROBE itself. Every response carries the probe
 * records of that forward: the session's records are cleared before each
 * prefill and copied as they are, so a run through this server stores the
 * same records as the builtin engine in process.
 *
 * It declares max_batch (LAB_SERVE_MAX_BATCH) when the session packs
 * sequences (vt_session_batch_rows > 0): a request of several sequences runs
 * as one vt_session_prefill_batch, with the bits and records of one forward
 * per sequence (docs/architecture.md, "Sequences packed into one forward").
 */
#include "engine_serve.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cache.h"
#include "util.h"

extern char **environ;

/* The most sequences `vtlab engine` takes in one request. vtlab sends at
 * most a pipe's worth of tokens (LAB_ENGINE_AHEAD_MAX) per request, which
 * bounds a batch first; this only keeps a request of 1-token sequences from
 * being a header of thousands of numbers. */
#define LAB_SERVE_MAX_BATCH 256

typedef struct serve_ctx {
    vt_session *s;
    int64_t     L, H;
} serve_ctx;

/* The session's records of the request into pr (cleared by the caller). */
static int copy_probes(serve_ctx *c, vtp_probes *pr, char *err, size_t errlen) {
    for (int64_t i = 0; i < vt_session_probe_count(c->s); i++)
        if (vtp_probes_merge(pr, vt_session_probe_at(c->s, i))) return snprintf(err, errlen, "out of memory"), 1;
    if (vt_session_probes_lost(c->s)) pr->lost += vt_session_probes_lost(c->s);
    return 0;
}

static int serve_forward(void *user, const int32_t *tokens, int64_t T, float *logits, float *resid, vtp_probes *pr,
                         char *err, size_t errlen) {
    serve_ctx *c = user;
    vt_session_probes_clear(c->s);
    vt_session_capture(c->s, resid != NULL);
    int rc = vt_session_prefill(c->s, tokens, T, logits, err, errlen);
    if (rc) return rc;
    if (copy_probes(c, pr, err, errlen)) return 1;
    for (int64_t l = 0; resid && l < c->L; l++)
        for (int site = 0; site < 2; site++) {
            int64_t rt = 0;
            const float *r = vt_session_residual(c->s, l, site, &rt);
            if (!r || rt != T) return snprintf(err, errlen, "no residual captured at layer %lld", (long long)l), 1;
            memcpy(resid + (size_t)((l * 2 + site) * T * c->H), r, (size_t)(T * c->H) * sizeof *r);
        }
    return 0;
}

/* n sequences as one vt_session_prefill_batch (vtprobe.h's batch callback):
 * the residuals of sequence i go to resid + L * 2 * H * off[i], as
 * [L][2][T_i][H]. */
static int serve_batch(void *user, int64_t n, const int32_t *tokens, const int64_t *off, float *logits,
                       float *resid, vtp_probes *pr, char *err, size_t errlen) {
    serve_ctx *c = user;
    vt_session_probes_clear(c->s);
    vt_session_capture(c->s, resid != NULL);
    int rc = vt_session_prefill_batch(c->s, n, tokens, off, logits, err, errlen);
    if (rc) return rc;
    if (copy_probes(c, pr, err, errlen)) return 1;
    for (int64_t i = 0; resid && i < n; i++) {
        const int64_t T = off[i + 1] - off[i];
        float *ri = resid + (size_t)(c->L * 2 * c->H * off[i]);
        for (int64_t l = 0; l < c->L; l++)
            for (int site = 0; site < 2; site++) {
                int64_t rt = 0;
                const float *r = vt_session_residual_seq(c->s, i, l, site, &rt);
                if (!r || rt != T)
                    return snprintf(err, errlen, "sequence %lld: no residual captured at layer %lld", (long long)i,
                                    (long long)l), 1;
                memcpy(ri + (size_t)((l * 2 + site) * T * c->H), r, (size_t)(T * c->H) * sizeof *r);
            }
    }
    return 0;
}

static const char *type_name(vt_knob_type t) {
    return t == VT_KNOB_BOOL ? "bool" : t == VT_KNOB_ENUM ? "enum" : t == VT_KNOB_INT ? "int" : "string";
}

/* The hello's knob registry and faults from the builtin tables; the count
 * of knobs. A lever's scope knob (VT_KIMI_BF16_STREAM_LAYERS) is not a knob
 * of the hello: the lever says "scope": "sites" and its scope_value, and the
 * scope is read from LEVER_LAYERS as every scoped engine's is
 * (docs/engine-protocol.md, "Scoped knobs"). */
static int fill_registry(const vt_knobset *ks, vtp_knob *kn, vtp_fault *fl) {
    int n = 0;
    for (int i = 0; i < vt_knob_count(); i++) {
        const vt_knob_info *k = vt_knob_at(i);
        if (vt_knob_scope_of(k->name)) continue;
        kn[n].name = k->name;
        kn[n].type = type_name(k->type);
        kn[n].values = k->type == VT_KNOB_STRING || k->type == VT_KNOB_LAYERS ? "" : k->allowed;
        kn[n].def = k->def;
        kn[n].numeric = k->numeric;
        kn[n].value = vt_knobset_value(ks, (vt_knob_id)i);
        /* the test-only knob is declared and never read: it exists to show R3 */
        kn[n].read = i != VT_K_TEST_IGNORED;
        kn[n].scope = k->scope ? k->scope_kind : NULL;
        kn[n].scope_value = k->scope ? vt_knobset_get(ks, k->scope) : NULL;
        n++;
    }
    for (int i = 0; i < vt_fault_count(); i++) {
        const vt_fault_info *f = vt_fault_at(i);
        fl[i].name = f->name;
        fl[i].knob = "VT_FAULT";
        fl[i].site = f->site;
        fl[i].description = f->doc;
    }
    return n;
}

int lab_engine_serve(const char *model_dir, FILE *in, FILE *out, char *err, size_t errlen) {
    /* A server does the same forward over and over: keep freed memory in the
     * process instead of returning it to the kernel after every request
     * (brk and page faults were the protocol path's largest extra cost). */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    const char *dir = model_dir ? model_dir : getenv("VTP_MODEL");
    if (!dir || !*dir) return lab_errf(err, errlen, LAB_EINPUT, "--model DIR (or VTP_MODEL) is required");
    const char *vtp = getenv("VTP_PROBE");
    if (vtp && !getenv("VT_PROBE") && setenv("VT_PROBE", vtp, 1))
        return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    vt_knobset *ks = NULL;
    vt_model *m = NULL;
    serve_ctx c = {0};
    char sha[65], kinds[2 * VT_MODEL_MAX_LAYERS + 2], verr[1024];
    vtp_knob kn[VT_K_COUNT];
    memset(kn, 0, sizeof kn);   /* members fill_registry does not set (a knob's scope) are "none" */
    vtp_fault *fl = calloc((size_t)vt_fault_count() + 1, sizeof *fl);
    const char **sites = calloc((size_t)vt_probe_site_count() + 1, sizeof *sites);
    int rc = !fl || !sites ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : LAB_OK;
    if (!rc && (rc = vt_knobset_new(&ks))) lab_errf(err, errlen, rc, "out of memory");
    if (!rc && (rc = vt_knobset_from_env(ks, environ, verr, sizeof verr))) lab_errf(err, errlen, rc, "%s", verr);
    if (!rc && (rc = vt_model_open(&m, dir, verr, sizeof verr))) lab_errf(err, errlen, rc, "model %s: %s", dir, verr);
    if (!rc) rc = lab_model_sha256(dir, sha, err, errlen);
    if (!rc && (rc = vt_session_new(&c.s, m, ks, verr, sizeof verr))) lab_errf(err, errlen, rc, "%s", verr);
    if (!rc) {
        vt_model_info mi;
        vt_model_get_info(m, &mi);
        c.L = mi.n_layers;
        c.H = mi.hidden_size;
        snprintf(kinds, sizeof kinds, "%s/%s", mi.layer_kind, mi.layer_ffn);
        const int n_knobs = fill_registry(ks, kn, fl);
        for (int i = 0; i < vt_probe_site_count(); i++) sites[i] = vt_probe_site_at(i);
        vtp_hello h;
        memset(&h, 0, sizeof h);
        h.engine = "vtlab-builtin";
        h.version = vt_build_info();
        h.commit = vt_build_commit();
        h.model_sha256 = sha;
        h.vocab = mi.vocab_size;
        h.hidden = mi.hidden_size;
        h.n_layers = mi.n_layers;
        h.layer_kinds = kinds;
        h.knobs = kn;
        h.n_knobs = n_knobs;
        h.probe_sites = sites;
        h.n_probe_sites = vt_probe_site_count();
        h.faults = fl;
        h.n_faults = vt_fault_count();
        h.deterministic = 1;   /* results do not depend on VT_THREADS */
        h.capture = 1;
        h.max_batch = vt_session_batch_rows(c.s) > 0 ? LAB_SERVE_MAX_BATCH : 1;
        if (vtp_serve_batch(in, out, &h, serve_forward, serve_batch, &c))
            rc = lab_errf(err, errlen, LAB_EIO, "the protocol stream ended inside a frame, or writing failed");
    }
    vt_session_free(c.s);
    vt_model_free(m);
    vt_knobset_free(ks);
    free(fl);
    free(sites);
    return rc;
}
