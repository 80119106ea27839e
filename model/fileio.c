/* fileio.c — see fileio.h. */
#include "fileio.h"
#include "vt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Makes the rename itself durable: fsync of the directory holding path.
 * Best effort (some file systems refuse to fsync a directory). */
static void sync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int vt_file_write_atomic(const char *path, const void *data, size_t n, vt_err *err) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) return vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, pl + 32, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(tmp);
        return vt_errf(err, VT_EIO, "%s: cannot create: %s", path, strerror(e));
    }
    int e = 0;   /* the errno of the first call that failed */
    if (n && fwrite(data, 1, n, f) != n) e = errno ? errno : EIO;
    if (!e && fflush(f) != 0) e = errno;
    if (!e && fsync(fileno(f)) != 0) e = errno;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (e) {
        remove(tmp);
        free(tmp);
        return vt_errf(err, VT_EIO, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        free(tmp);
        return vt_errf(err, VT_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    free(tmp);
    sync_parent(path);
    return VT_OK;
}

int vt_json_check_text(const char *text, size_t len, const char *fname, vt_err *err) {
    int in_str = 0;
    long long line = 1, col = 1;
    for (size_t i = 0; i < len; i++, col++) {
        char ch = text[i];
        if (ch == 0)
            return vt_errf(err, VT_EINPUT, "%s: line %lld column %lld (byte %zu): a NUL byte; JSON text holds none",
                           fname, line, col, i);
        if (ch == '\n') { line++; col = 0; continue; }
        if (ch == '"') { in_str = !in_str; continue; }
        if (!in_str || ch != '\\') continue;
        if (i + 5 < len && text[i + 1] == 'u' && !memcmp(text + i + 2, "0000", 4))
            return vt_errf(err, VT_EINPUT, "%s: line %lld column %lld: \\u0000 in a string; a NUL would cut the "
                           "string short", fname, line, col);
        i++, col++;   /* the escaped character: \" does not end the string */
    }
    return VT_OK;
}

int vt_json_text_check(const char *text, size_t len, const char *fname, char *err, size_t errlen) {
    vt_err e;
    vt_err_clear(&e);
    int rc = vt_json_check_text(text, len, fname, &e);
    if (rc != VT_OK && err && errlen) snprintf(err, errlen, "%s", e.msg);
    return rc == VT_OK ? VT_STATUS_OK : VT_STATUS_INPUT;
}
