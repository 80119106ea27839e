/*
 * model_cache.c — checkpoint dirs and the synthetic-model cache (see
 * model_cache.h).
 */
#include "model_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vt.h"
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

/* Builds path/ unless both of its files are already there. */
static int synth_if_missing(const lab_experiment *e, const char *path, char *err, size_t errlen) {
    char probe[600], probe2[600];
    snprintf(probe, sizeof probe, "%s/model.safetensors", path);
    snprintf(probe2, sizeof probe2, "%s/config.json", path);
    if (lab_path_exists(probe) && lab_path_exists(probe2)) return LAB_OK;
    int rc = lab_mkdirs("build/models", err, errlen);
    if (rc) return rc;
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
    char *cfg = NULL;
    size_t n = 0;
    int rc = lab_read_file(e->synth_config, &cfg, &n, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "%s: model.synth", e->path);
    char hex[65], path[512];
    synth_key(e, cfg, n, hex);
    free(cfg);
    snprintf(path, sizeof path, "build/models/%.16s", hex);
    if ((rc = synth_if_missing(e, path, err, errlen))) return rc;
    *dir = lab_strdup(path);
    return *dir ? LAB_OK : LAB_ENOMEM;
}
