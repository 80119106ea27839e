/*
 * model_cache.c — checkpoint dirs and the synthetic-model cache (see
 * model_cache.h).
 */
#include "model_cache.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vt.h"
#include "paths.h"
#include "provenance.h"
#include "util.h"

/* Cache key: the config's bytes, the seed, the dtype and the synth
 * algorithm's version — everything vt_synth's output is a function of.
 * Without the version a cache made by an older synth would be reused, and
 * an old checkout would measure another model than a fresh clone. */
static void synth_key(const lab_experiment *e, const char *cfg, size_t n, char hex[65]) {
    vt_sha256_ctx c;
    char tail[96];
    vt_sha256_init(&c);
    vt_sha256_update(&c, cfg, n);
    snprintf(tail, sizeof tail, "\nseed=%llu\ndtype=%s\nsynth=%d\n", (unsigned long long)e->synth_seed,
             e->synth_dtype, vt_synth_version());
    vt_sha256_update(&c, tail, strlen(tail));
    vt_sha256_final_hex(&c, hex);
}

int lab_model_cache_root(char *out, size_t outlen, char *err, size_t errlen) {
    char dir[4096];
    int rc = lab_cache_dir(dir, sizeof dir, err, errlen);
    if (rc) return rc;
    int n = snprintf(out, outlen, "%s/models", dir);
    if (n < 0 || (size_t)n >= outlen) return lab_errf(err, errlen, LAB_EINPUT, "%s: path too long", dir);
    return LAB_OK;
}

int lab_model_cache_owns(const char *dir) {
    char root[4200];
    if (lab_model_cache_root(root, sizeof root, NULL, 0)) return 0;
    size_t n = strlen(root);
    return !strncmp(dir, root, n) && dir[n] == '/';
}

/* Builds path/ (in the cache root) unless both of its files are already there. */
static int synth_if_missing(const lab_experiment *e, const char *root, const char *path, char *err, size_t errlen) {
    char probe[4500], probe2[4500];
    snprintf(probe, sizeof probe, "%s/model.safetensors", path);
    snprintf(probe2, sizeof probe2, "%s/config.json", path);
    if (lab_path_exists(probe) && lab_path_exists(probe2)) return LAB_OK;
    int rc = lab_mkdirs(root, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, rc, "the synthetic-model cache (VTLAB_CACHE or --cache DIR)");
    char verr[1024] = "";
    rc = vt_synth(e->synth_config, e->synth_seed, e->synth_dtype, path, verr, sizeof verr);
    if (rc)
        return lab_errf(err, errlen, rc, "%s: model.synth: %s", e->path, verr);
    return LAB_OK;
}

int lab_model_dir(const lab_experiment *e, char **dir, char *err, size_t errlen) {
    *dir = NULL;
    if (!e->model_synth) {
        if (!lab_path_exists(e->model_dir))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: model: checkpoint dir %s does not exist", e->path,
                            e->model_dir);
        *dir = lab_strdup(e->model_dir);
        return *dir ? LAB_OK : LAB_ENOMEM;
    }
    char *cfg = NULL, root[4200], path[4400];
    size_t n = 0;
    int rc;
    if (!lab_path_exists(e->synth_config))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: model.synth: %s: no such file next to the experiment (%s), nor "
                        "a config vtlab ships under that name", e->path, e->synth_name, e->synth_config);
    rc = lab_read_file(e->synth_config, &cfg, &n, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "%s: model.synth", e->path);
    char hex[65];
    synth_key(e, cfg, n, hex);
    free(cfg);
    if ((rc = lab_model_cache_root(root, sizeof root, err, errlen))) return rc;
    snprintf(path, sizeof path, "%s/%.16s", root, hex);
    if ((rc = synth_if_missing(e, root, path, err, errlen))) return rc;
    *dir = lab_strdup(path);
    return *dir ? LAB_OK : LAB_ENOMEM;
}

/* A cache entry's recorded hash: the last line of its model.sha256 sidecar
 * (provenance.c writes it), or "" when there is none. */
static void sidecar_hash(const char *dir, char out[65]) {
    char side[4600], *text = NULL;
    size_t n = 0;
    out[0] = 0;
    snprintf(side, sizeof side, "%s/model.sha256", dir);
    if (lab_read_file(side, &text, &n, NULL, 0)) return;
    if (n >= 65 && text[n - 1] == '\n') snprintf(out, 65, "%.64s", text + n - 65);
    free(text);
}

int lab_model_cache_find(const char *sha256, char **dir, char *err, size_t errlen) {
    char root[4200];
    *dir = NULL;
    int rc = lab_model_cache_root(root, sizeof root, err, errlen);
    if (rc) return rc;
    DIR *d = opendir(root);
    if (!d) return LAB_OK;
    struct dirent *de;
    while (!*dir && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[4500], rec[65], now[65];
        snprintf(path, sizeof path, "%s/%.255s", root, de->d_name);
        sidecar_hash(path, rec);
        /* the sidecar is a hint; the hash is confirmed (its stamps checked, or recomputed) */
        if (strcmp(rec, sha256) || lab_model_sha256(path, now, NULL, 0) || strcmp(now, sha256)) continue;
        if (!(*dir = lab_strdup(path))) rc = lab_oom(err, errlen);
    }
    closedir(d);
    return rc;
}
