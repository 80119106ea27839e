/*
 * fileio.h — whole-file writes that never leave a truncated file behind.
 *
 * The data goes to PATH.<pid>.tmp, is flushed and fsynced, and is renamed onto
 * PATH; on any failure the temp file is removed and PATH is untouched. The
 * pid-specific temp name lets two processes write the same file at once (two
 * sweeps building one cached model): each renames a whole file of its own.
 * The harness has its own (vt_cli_write_file_atomic) because it reports
 * errors in its own type; both follow this contract.
 */
#ifndef VT_FILEIO_H
#define VT_FILEIO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {   /* err.h has no guard of its own: included from C++, it must be inside */
#endif

#include "err.h"

int vt_file_write_atomic(const char *path, const void *data, size_t n, vt_err *err);

#ifdef __cplusplus
}
#endif
#endif
