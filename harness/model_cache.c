/*
 * model_cache.c — checkpoint dirs, the synthetic-model cache and the
 * model's content hash, kept in a sidecar beside a cache entry (see
 * model_cache.h).
 */
#include "model_cache.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/vt.h"
#include "paths.h"
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

/* A cache entry's recorded hash: the last line of its model.sha256 sidecar
 * (lab_model_sha256 writes it), or "" when there is none. */
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
