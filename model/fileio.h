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

/* Checks len bytes of JSON text before it is parsed: a NUL byte anywhere, or a
 * \u0000 escape inside a string, is VT_EINPUT "FNAME: line L column C: ...".
 * cJSON decodes \u0000 into its C strings, which then end early ("bf16\u0000x"
 * would be read as "bf16"), and a NUL byte makes the text shorter than the
 * file. The harness reaches it through vt.h (vt_json_text_check). */
int vt_json_check_text(const char *text, size_t len, const char *fname, vt_err *err);

#ifdef __cplusplus
}
#endif
#endif
