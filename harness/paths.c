/*
 * paths.c — shipped data, the model cache, the executable, and paths named
 * inside files (see paths.h for the rules).
 */
#include "paths.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int lab_self_exe(char *out, size_t outlen, char *err, size_t errlen) {
    ssize_t n = readlink("/proc/self/exe", out, outlen - 1);
    if (n <= 0 || (size_t)n >= outlen - 1)
        return lab_errf(err, errlen, LAB_EIO, "cannot read /proc/self/exe (where this vtlab is)");
    out[n] = 0;
    return LAB_OK;
}

/* Which layout dir holds, if any: 0 installed, 1 source tree, -1 neither. A
 * source tree is recognised by model/configs/ and harness/ together, so that
 * a directory that merely has a model/ folder is not taken for one. */
static int layout_of(const char *dir) {
    char p[4200], q[4200];
    snprintf(p, sizeof p, "%s/configs", dir);
    if (is_dir(p)) return 0;
    snprintf(p, sizeof p, "%s/model/configs", dir);
    snprintf(q, sizeof q, "%s/harness", dir);
    return is_dir(p) && is_dir(q) ? 1 : -1;
}

static void set_dir(lab_data_dir *d, const char *path, int source) {
    char real[PATH_MAX];
    if (realpath(path, real)) memcpy(d->path, real, sizeof d->path < sizeof real ? sizeof d->path : sizeof real);
    else snprintf(d->path, sizeof d->path, "%.4000s", path);
    d->path[sizeof d->path - 1] = 0;
    d->source_tree = source;
}

int lab_data_find(lab_data_dir *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    const char *env = getenv("VTLAB_DATA_DIR");
    if (env && *env) {
        int l = layout_of(env);
        if (l < 0)
            return lab_errf(err, errlen, LAB_EINPUT, "VTLAB_DATA_DIR=%s: neither an installed share/vtlab (configs/) "
                            "nor a vtlab source tree (model/configs/, harness/)", env);
        set_dir(d, env, l);
        return LAB_OK;
    }
    char exe[PATH_MAX], dir[PATH_MAX + 64], share[PATH_MAX + 64];
    int rc = lab_self_exe(exe, sizeof exe, err, errlen);
    if (rc) return rc;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    /* installed: PREFIX/bin/vtlab with PREFIX/share/vtlab */
    snprintf(share, sizeof share, "%s/../share/vtlab", exe);
    if (layout_of(share) == 0) {
        set_dir(d, share, 0);
        return LAB_OK;
    }
    /* built in a source tree: ./vtlab, or build/DIR/vtlab two levels down */
    snprintf(dir, sizeof dir, "%s", exe);
    for (int up = 0; up < 3; up++) {
        if (layout_of(dir) == 1) {
            set_dir(d, dir, 1);
            return LAB_OK;
        }
        size_t n = strlen(dir);
        if (n + 3 >= sizeof dir) break;
        memcpy(dir + n, "/..", 4);
    }
    return lab_errf(err, errlen, LAB_EINPUT, "vtlab's shipped data (model configs) is not at %s/../share/vtlab nor in a "
                    "source tree around %s; set VTLAB_DATA_DIR to an installed share/vtlab", exe, exe);
}

void lab_data_item(const lab_data_dir *d, const char *what, char *out, size_t outlen) {
    if (d->source_tree && !strcmp(what, "configs")) snprintf(out, outlen, "%s/model/configs", d->path);
    else snprintf(out, outlen, "%s/%s", d->path, what);
}

int lab_cache_dir(char *out, size_t outlen, char *err, size_t errlen) {
    const char *v = getenv("VTLAB_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (v && *v) n = snprintf(out, outlen, "%s", v);
    else if (x && x[0] == '/') n = snprintf(out, outlen, "%s/vtlab", x);   /* XDG: a relative value is ignored */
    else if (h && *h) n = snprintf(out, outlen, "%s/.cache/vtlab", h);
    else
        return lab_errf(err, errlen, LAB_EINPUT, "no cache directory for synthetic models: set VTLAB_CACHE (or "
                        "--cache DIR), XDG_CACHE_HOME or HOME");
    if (n < 0 || (size_t)n >= outlen) return lab_errf(err, errlen, LAB_EINPUT, "the cache directory's path is too long");
    return LAB_OK;
}

char *lab_path_beside(const char *from, const char *p) {
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (p[0] == '/' || !slash) return lab_strdup(p);
    size_t n = (size_t)(slash - from) + 1 + strlen(p) + 1;
    char *r = malloc(n);
    if (r) snprintf(r, n, "%.*s/%s", (int)(slash - from), from, p);
    return r;
}

char *lab_path_in_ledger(const char *ledger_dir, const char *p) {
    if (p[0] == '/') return lab_strdup(p);
    size_t n = strlen(ledger_dir);
    while (n > 1 && ledger_dir[n - 1] == '/') n--;   /* "specs/" is "specs" */
    size_t cut = n;
    while (cut > 0 && ledger_dir[cut - 1] != '/') cut--;
    const char *last = ledger_dir + cut;
    size_t ll = n - cut;
    lab_buf b = {0};
    if ((ll == 1 && last[0] == '.') || (ll == 2 && !strncmp(last, "..", 2)))
        lab_buf_printf(&b, "%.*s/../%s", (int)n, ledger_dir, p);      /* the parent of "." is ".." */
    else if (cut == 0) lab_buf_printf(&b, "%s", p);                    /* "specs": the current directory */
    else if (cut == 1) lab_buf_printf(&b, "/%s", p);                   /* "/specs" */
    else lab_buf_printf(&b, "%.*s/%s", (int)(cut - 1), ledger_dir, p);
    if (b.oom) { lab_buf_free(&b); return NULL; }
    return b.data;
}

int lab_shipped_config(const char *name, char *out, size_t outlen) {
    static const char prefix[] = "model/configs/";
    const char *base = !strncmp(name, prefix, sizeof prefix - 1) ? name + sizeof prefix - 1 : name;
    if (!*base || strchr(base, '/') || !strcmp(base, "..") || !strcmp(base, ".")) return 0;
    lab_data_dir d;
    char err[8], dir[4200];
    if (lab_data_find(&d, err, sizeof err)) return 0;
    lab_data_item(&d, "configs", dir, sizeof dir);
    int n = snprintf(out, outlen, "%s/%s", dir, base);
    return n > 0 && (size_t)n < outlen && is_file(out);
}
