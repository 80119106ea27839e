/*
 * provenance.c — identity, hashes, provenance and knob resolution (see
 * provenance.h).
 */
#include "provenance.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_cache.h"
#include "util.h"

/* ------------------------------------------------------------ model hash */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int hash_file_into(vt_sha256_ctx *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return lab_errf(err, errlen, LAB_EIO, "%s: cannot open for hashing", path);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) vt_sha256_update(c, buf, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? lab_errf(err, errlen, LAB_EIO, "%s: read failed", path) : LAB_OK;
}

static int model_sha256_uncached(const char *dir, char out[65], char *err, size_t errlen) {
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = hash_file_into(&c, path, err, errlen);
    if (rc) return rc;
    DIR *d = opendir(dir);
    if (!d) return lab_errf(err, errlen, LAB_EIO, "%s: cannot list", dir);
    char *names[1024];
    int64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) names[n++] = lab_strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int64_t i = 0; i < n; i++) {
        if (!rc && names[i]) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            rc = hash_file_into(&c, path, err, errlen);
        }
        free(names[i]);
    }
    if (rc) return rc;
    if (n == 0) return lab_errf(err, errlen, LAB_EINPUT, "%s: no *.safetensors file", dir);
    vt_sha256_final_hex(&c, out);
    return LAB_OK;
}

/* The model hash is ~0.2 s per 32 MB, paid by every experiment of a sweep.
 * It is cached next to synthetic models only (CACHE/models/, which vtlab
 * owns; a user's checkpoint dir is never written): the sidecar
 * model.sha256 holds the size and mtime of every hashed file and is
 * trusted only while they are unchanged. */
static void stamp_files(const char *dir, lab_buf *b) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[1024];
    int64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024) {
        size_t l = strlen(de->d_name);
        if ((l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) || !strcmp(de->d_name, "config.json"))
            names[n++] = lab_strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int64_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i] ? names[i] : "");
        if (names[i] && stat(path, &st) == 0)
            lab_buf_printf(b, "%s %lld %lld.%09ld\n", names[i], (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                           st.st_mtim.tv_nsec);
        free(names[i]);
    }
}

int lab_model_sha256(const char *dir, char out[65], char *err, size_t errlen) {
    int cacheable = lab_model_cache_owns(dir);
    lab_buf stamp = {0};
    char side[4096];
    snprintf(side, sizeof side, "%s/model.sha256", dir);
    if (cacheable) {
        stamp_files(dir, &stamp);
        char *text = NULL;
        if (!stamp.oom && lab_read_file(side, &text, NULL, NULL, 0) == LAB_OK) {
            /* sidecar: the stamp lines, then the hash on the last line */
            size_t sl = stamp.len;
            if (strlen(text) == sl + 65 && !memcmp(text, stamp.data, sl) && text[sl + 64] == '\n') {
                memcpy(out, text + sl, 64);
                out[64] = 0;
                free(text);
                lab_buf_free(&stamp);
                return LAB_OK;
            }
        }
        free(text);
    }
    int rc = model_sha256_uncached(dir, out, err, errlen);
    if (!rc && cacheable && !stamp.oom) {
        /* Written whole via rename, so a concurrent reader never sees half. */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", side, (int)getpid());
        FILE *f = fopen(tmp, "w");
        if (f) {
            int bad = fprintf(f, "%s%s\n", stamp.data ? stamp.data : "", out) < 0;
            bad |= fclose(f) != 0;
            if (bad || rename(tmp, side) != 0) unlink(tmp);
        }
    }
    lab_buf_free(&stamp);
    return rc;
}

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
