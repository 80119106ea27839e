/*
 * provenance.c — identity, provenance and knob resolution (see
 * provenance.h).
 */
#include "provenance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* ------------------------------------------------------------ knobs */

int lab_resolve_knobs(const lab_experiment *e, int64_t i, char *const *envp, vt_knobset **out,
                      char *err, size_t errlen) {
    *out = NULL;
    const lab_arm *a = &e->arms[i];
    vt_knobset *ks = NULL;
    char verr[1024] = "";
    int rc = vt_knobset_new(&ks);
    if (rc) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (envp && (rc = vt_knobset_from_env(ks, envp, verr, sizeof verr))) {
        vt_knobset_free(ks);
        return lab_errf(err, errlen, rc, "environment: %s", verr);
    }
    int probe_set = 0;
    for (int64_t k = 0; k < a->n_knobs; k++) {
        if ((rc = vt_knobset_set(ks, a->knob_names[k], a->knob_values[k], verr, sizeof verr))) {
            vt_knobset_free(ks);
            return lab_errf(err, errlen, rc, "%s: arms[%lld].knobs.%s: %s",
                            e->path, (long long)i, a->knob_names[k], verr);
        }
        if (!strcmp(a->knob_names[k], "VT_PROBE")) probe_set = 1;
    }
    /* Expectations and invariants need probes: on unless the arm says otherwise. */
    if (!probe_set && (rc = vt_knobset_set(ks, "VT_PROBE", e->probe, verr, sizeof verr))) {
        vt_knobset_free(ks);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: probe: %s", e->path, verr);
    }
    *out = ks;
    return LAB_OK;
}

/* ------------------------------------------------------------ identity */

int lab_exp_ident_init(lab_exp_ident *x, const lab_experiment *e, vt_knobset *const *ks, const char *model_sha256,
                       const char *device, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->knob_hash = calloc((size_t)e->n_arms, sizeof *x->knob_hash);
    x->arm_model = calloc((size_t)e->n_arms, sizeof *x->arm_model);
    if (!x->knob_hash || !x->arm_model) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    snprintf(x->model_sha, sizeof x->model_sha, "%s", model_sha256);
    for (int64_t i = 0; i < e->n_arms; i++) {
        if (ks[i]) vt_knobset_hash(ks[i], x->knob_hash[i]);
        memcpy(x->arm_model[i], x->model_sha, sizeof x->model_sha);
    }
    size_t clen = 0;
    char *canon = lab_dataset_canonical(&e->ds, &clen);
    if (!canon) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    vt_sha256_hex(canon, clen, x->dataset_sha);
    free(canon);
    vt_sha256_hex(e->spec_json, strlen(e->spec_json), x->spec_sha);
    /* `vtlab bisect --build` runs candidates of another tree (an engine's)
     * with this vtlab: that tree's commit leads the code version, in the
     * form bisect looks runs up by ("SHA|dirty=0|..."). */
    const char *tree = getenv("VTLAB_TREE_REVISION");
    int hex = tree && *tree && strlen(tree) <= 40 && strspn(tree, "0123456789abcdef") == strlen(tree);
    if (hex) {
        snprintf(x->code_buf, sizeof x->code_buf, "%s|dirty=0|tree run by vtlab %s", tree, vt_build_info());
        x->code_version = x->code_buf;
    } else {
        x->code_version = vt_build_info();
    }
    snprintf(x->commit, sizeof x->commit, "%s", vt_build_commit());
    if (gethostname(x->host, sizeof x->host) != 0) snprintf(x->host, sizeof x->host, "unknown");
    x->host[sizeof x->host - 1] = 0;
    snprintf(x->device, sizeof x->device, "%s", device);
    return LAB_OK;
}

void lab_exp_ident_free(lab_exp_ident *x) {
    free(x->knob_hash);
    free(x->arm_model);
    memset(x, 0, sizeof *x);
}

void lab_exp_identity(const lab_exp_ident *x, const lab_experiment *e, int64_t arm, int64_t rep, lab_identity *id) {
    id->experiment = e->id;
    id->arm = e->arms[arm].name;
    id->repeat = rep;
    id->knob_hash = x->knob_hash[arm];
    id->model_sha256 = x->arm_model[arm];
    id->dataset_sha256 = x->dataset_sha;
    id->code_version = x->code_version;
    id->shard = x->shard;
}

void lab_exp_provenance(const lab_exp_ident *x, const lab_experiment *e, lab_provenance *pv) {
    memset(pv, 0, sizeof *pv);
    pv->experiment_sha256 = x->spec_sha;
    pv->git_commit = x->commit;
    pv->git_dirty = vt_build_dirty();
    pv->build_flags = vt_build_flags();
    pv->compiler = vt_build_compiler();
    pv->host = x->host;
    pv->pid = getpid();
    pv->pid_start = lab_pid_start(pv->pid);
    pv->score = e->score_last ? "last" : "all";
    pv->top_k = e->top_k;
    pv->device = x->device;
}
