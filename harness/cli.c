/* cli.c — command-line helpers (see cli.h). */
#include "harness/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/vt.h"

int vt_cli_usage_error(const char *cmd, const char *what) {
    fprintf(stderr, "vtlab %s: %s (see `vtlab --help`)\n", cmd, what);
    return 2;
}

int vt_cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return -1;
    for (const char *p = s; *p; p++) if (*p < '0' || *p > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return -1;
    *out = v;
    return 0;
}

int vt_cli_parse_tokens(const char *s, int32_t **out, int64_t *n, char *err, size_t errlen) {
    int64_t cap = 16, cnt = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) { snprintf(err, errlen, "out of memory"); return -1; }
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',' && *end != ' ')) {
            snprintf(err, errlen, "token %lld (\"%.20s\"): expected a non-negative integer", (long long)cnt, p);
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) { free(v); snprintf(err, errlen, "out of memory"); return -1; }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (cnt == 0) { free(v); snprintf(err, errlen, "no tokens, expected e.g. 5,17,3"); return -1; }
    *out = v;
    *n = cnt;
    return 0;
}

int vt_cli_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
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
