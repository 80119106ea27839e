/* fileio.c — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    int bad = (n && fwrite(data, 1, n, f) != n) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        remove(tmp);
        free(tmp);
        return vt_errf(err, VT_EIO, "%s: write failed: %s", path, strerror(e ? e : EIO));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        free(tmp);
        return vt_errf(err, VT_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    free(tmp);
    return VT_OK;
}
