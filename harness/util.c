/*
 * util.c — error text, strings, buffers, clocks and files for the harness.
 * Nothing here knows about experiments or SQLite; see util.h.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int lab_errf(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int lab_err_prefix(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (!err || !errlen) return code;
    char pre[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%s", err);
    snprintf(err, errlen, "%s: %s", pre, old);
    return code;
}

int lab_exit_code(int status) {
    if (status == LAB_OK) return 0;
    return status == LAB_EINPUT ? 2 : 1;
}

char *lab_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void lab_buf_append(lab_buf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1) { b->oom = 1; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { b->oom = 1; return; }
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) { b->oom = 1; return; }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void lab_buf_printf(lab_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof small) { lab_buf_append(b, small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    lab_buf_append(b, big, (size_t)n);
    free(big);
}

void lab_buf_free(lab_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

int lab_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    lab_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) lab_buf_append(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) { lab_buf_free(&b); return lab_errf(err, errlen, LAB_EIO, "%s: read failed", path); }
    if (b.oom) { lab_buf_free(&b); return lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", path); }
    if (!b.data) lab_buf_append(&b, "", 0);
    if (b.oom) return lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", path);
    *out = b.data;
    if (len) *len = b.len;
    return LAB_OK;
}

void lab_now_iso(char out[32]) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double lab_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lab_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int lab_mkdirs(const char *path, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: path too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return lab_errf(err, errlen, LAB_EIO, "%s: mkdir: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return lab_errf(err, errlen, LAB_EIO, "%s: mkdir: %s", tmp, strerror(errno));
    return LAB_OK;
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int lab_list_json(const char *dir, int missing_ok, char ***files, int64_t *n, char *err, size_t errlen) {
    *files = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (missing_ok && errno == ENOENT) return LAB_OK;
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot open directory: %s", dir, strerror(errno));
    }
    struct dirent *de;
    int64_t cap = 0;
    int rc = LAB_OK;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **f = realloc(*files, (size_t)cap * sizeof *f);
            if (!f) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
            *files = f;
        }
        size_t len = strlen(dir) + l + 2;
        if (!((*files)[*n] = malloc(len))) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        snprintf((*files)[(*n)++], len, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (rc) { lab_free_list(*files, *n); *files = NULL; *n = 0; return rc; }
    if (*n > 1) qsort(*files, (size_t)*n, sizeof **files, cmp_path);
    return LAB_OK;
}

void lab_free_list(char **files, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(files[i]);
    free(files);
}
