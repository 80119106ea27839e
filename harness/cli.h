/* cli.h — small helpers shared by the command implementations. */
#ifndef VT_CLI_H
#define VT_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Prints "vtlab CMD: WHAT" and the hint to run `vtlab --help`; returns 2. */
int vt_cli_usage_error(const char *cmd, const char *what);
/* Non-negative decimal integer; 0 on success. */
int vt_cli_parse_u64(const char *s, uint64_t *out);
/* "5,17,3" (commas and/or spaces) -> malloc'd int32 array; 0 on success. */
int vt_cli_parse_tokens(const char *s, int32_t **out, int64_t *n, char *err, size_t errlen);
/* Writes path via path.<pid>.tmp + rename: the file appears whole or not at all.
 * Returns a VT_STATUS_* value. */
int vt_cli_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

#endif
