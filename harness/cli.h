/* cli.h — small helpers shared by the command implementations. */
#ifndef LAB_CLI_H
#define LAB_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Prints "vtlab CMD: WHAT" and the hint to run `vtlab CMD --help`; returns 2. */
int lab_cli_usage_error(const char *cmd, const char *what);
/* Non-negative decimal integer; 0 on success. */
int lab_cli_parse_u64(const char *s, uint64_t *out);
/* "5,17,3" -> malloc'd int32 array; 0 on success. Ids are decimal digits
 * only (no sign), each at most INT32_MAX; they are separated by one comma
 * and/or blanks ("5, 17 3"). An empty id ("5,,17", ",5", "5,"), a sign
 * ("+5") and more than max_n ids are refused with a message naming the
 * position. */
int lab_cli_parse_tokens(const char *s, int64_t max_n, int32_t **out, int64_t *n, char *err, size_t errlen);

/* An output file written whole or not at all, in two steps so that a command
 * with several outputs can check that it can create every one of them before
 * any is written, and put none in place when one fails:
 *   lab_cli_out_open (each: creates PATH.<pid>.tmp; fails for a missing
 *   directory, a directory at PATH, ...) ... lab_cli_out_write (each) ...
 *   lab_cli_out_commit (each: rename onto PATH); lab_cli_out_abort on any error
 *   removes what is left. Statuses are VT_STATUS_*: INPUT when the path
 *   cannot be created for a reason the user controls (no such directory, a
 *   directory there, permission), IO otherwise. */
typedef struct lab_cli_out {
    const char *path;
    char       *tmp;      /* NULL when nothing is pending */
    int         fd;
} lab_cli_out;
int  lab_cli_out_open(lab_cli_out *o, const char *path, char *err, size_t errlen);
int  lab_cli_out_write(lab_cli_out *o, const void *data, size_t n, char *err, size_t errlen);
int  lab_cli_out_commit(lab_cli_out *o, char *err, size_t errlen);
void lab_cli_out_abort(lab_cli_out *o);
/* Writes path via path.<pid>.tmp + rename: the file appears whole or not at all.
 * Returns a VT_STATUS_* value. */
int lab_cli_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

#endif
