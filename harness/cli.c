/* cli.c — command-line helpers (see cli.h). */
#include "harness/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/vt.h"

int lab_cli_usage_error(const char *cmd, const char *what) {
    fprintf(stderr, "vtlab %s: %s (see `vtlab %s --help`)\n", cmd, what, cmd);
    return 2;
}

int lab_cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return -1;
    for (const char *p = s; *p; p++) if (*p < '0' || *p > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return -1;
    *out = v;
    return 0;
}

int lab_cli_parse_tokens(const char *s, int64_t max_n, int32_t **out, int64_t *n, char *err, size_t errlen) {
    int64_t cap = 16, cnt = 0;
    *out = NULL;
    *n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) { snprintf(err, errlen, "out of memory"); return -1; }
    const char *p = s;
    while (*p == ' ') p++;
    if (!*p) { free(v); snprintf(err, errlen, "no tokens, expected e.g. 5,17,3"); return -1; }
    for (;;) {
        /* an id: digits only */
        const char *start = p;
        unsigned long long x = 0;
        while (*p >= '0' && *p <= '9') {
            x = x * 10 + (unsigned long long)(*p - '0');
            if (x > INT32_MAX) break;
            p++;
        }
        if (p == start || (*p >= '0' && *p <= '9')) {
            if (p != start) snprintf(err, errlen, "token %lld (\"%.20s\"): more than %d", (long long)cnt, start, INT32_MAX);
            else if (!*p || *p == ',') snprintf(err, errlen, "token %lld is empty (at \"%.20s\"); expected e.g. 5,17,3",
                                                (long long)cnt, start);
            else snprintf(err, errlen, "token %lld (\"%.20s\"): expected a non-negative integer (digits only)",
                          (long long)cnt, start);
            free(v);
            return -1;
        }
        if (cnt >= max_n) {
            snprintf(err, errlen, "more than the limit of %lld tokens", (long long)max_n);
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) { free(v); snprintf(err, errlen, "out of memory"); return -1; }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        /* a separator: blanks, at most one comma, blanks; or the end */
        const char *sep = p;
        while (*p == ' ') p++;
        int comma = *p == ',';
        if (comma) p++;
        while (*p == ' ') p++;
        if (!*p) {
            if (comma) {
                snprintf(err, errlen, "token %lld is empty (the list ends with ','); expected e.g. 5,17,3", (long long)cnt);
                free(v);
                return -1;
            }
            break;
        }
        if (p == sep) {
            snprintf(err, errlen, "token %lld (\"%.20s\"): expected a non-negative integer (digits only)",
                     (long long)(cnt - 1), start);
            free(v);
            return -1;
        }
    }
    *out = v;
    *n = cnt;
    return 0;
}

int lab_cli_out_open(lab_cli_out *o, const char *path, char *err, size_t errlen) {
    o->path = path;
    o->fd = -1;
    size_t n = strlen(path) + 32;
    if (!(o->tmp = malloc(n))) { snprintf(err, errlen, "%s: out of memory", path); return VT_STATUS_NOMEM; }
    snprintf(o->tmp, n, "%s.%ld.tmp", path, (long)getpid());
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, expected a file to write", path);
        free(o->tmp);
        o->tmp = NULL;
        return VT_STATUS_INPUT;
    }
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (o->fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(e));
        free(o->tmp);
        o->tmp = NULL;
        return e == ENOENT || e == ENOTDIR || e == EACCES || e == EISDIR || e == EROFS ? VT_STATUS_INPUT : VT_STATUS_IO;
    }
    return VT_STATUS_OK;
}

int lab_cli_out_write(lab_cli_out *o, const void *data, size_t n, char *err, size_t errlen) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(o->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errlen, "%s: write failed: %s", o->path, strerror(w < 0 ? errno : EIO));
            return VT_STATUS_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    if (fsync(o->fd) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", o->path, strerror(errno));
        return VT_STATUS_IO;
    }
    return VT_STATUS_OK;
}

int lab_cli_out_commit(lab_cli_out *o, char *err, size_t errlen) {
    int bad = close(o->fd) != 0;
    o->fd = -1;
    if (bad || rename(o->tmp, o->path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", o->path, strerror(errno));
        lab_cli_out_abort(o);
        return VT_STATUS_IO;
    }
    free(o->tmp);
    o->tmp = NULL;
    return VT_STATUS_OK;
}

void lab_cli_out_abort(lab_cli_out *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp) remove(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
}

int lab_cli_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());   /* per process: concurrent writers never share it */
    FILE *f = fopen(tmp, "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno)); return VT_STATUS_IO; }
    size_t w = fwrite(data, 1, n, f);
    int bad = w != n;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return VT_STATUS_IO;
    }
    return VT_STATUS_OK;
}
