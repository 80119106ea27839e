/*
 * util.h — small helpers shared by the harness files: error text, owned
 * strings, growable byte buffers, time stamps and file reading.
 *
 * The harness reports errors the way the model library does (vt.h): a
 * function returns 0 or a status and fills a caller's buffer with one line
 * naming the file, the field and what was expected. The statuses are the
 * one status set of vt.h (vt_status), under the harness's short names, so a
 * model error passes through unchanged, and lab_exit_code() is vt_exit_code
 * (2 for bad input or an unsupported request, 1 otherwise); only main turns
 * it into an exit.
 */
#ifndef LAB_UTIL_H
#define LAB_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/vt.h"

#define LAB_OK           VT_STATUS_OK
#define LAB_EINPUT       VT_STATUS_INPUT        /* bad input: experiment file, argument, dataset */
#define LAB_ENOMEM       VT_STATUS_NOMEM
#define LAB_EIO          VT_STATUS_IO           /* an OS or SQLite I/O failure */
#define LAB_EINTERNAL    VT_STATUS_INTERNAL
#define LAB_EUNSUPPORTED VT_STATUS_UNSUPPORTED  /* e.g. VT_BACKEND=cuda without a device */

/* The defaults every command uses, spelled once: the database, the ledger,
 * the experiments a sweep or nightly runs, the report's folder, and where
 * reopen writes the derived experiment. */
#define LAB_DEFAULT_DB          "results.db"
#define LAB_DEFAULT_SPECS       "specs"
#define LAB_DEFAULT_EXPERIMENTS "experiments"
#define LAB_DEFAULT_REPORT      "report"
#define LAB_DEFAULT_REOPEN_DIR  "build/reopen"
/* An engine command (docs/engine-protocol.md): seconds to wait for each
 * response (the hello included), and after closing its stdin before
 * SIGTERM, then SIGKILL. */
#define LAB_ENGINE_TIMEOUT_S    600.0
#define LAB_ENGINE_GRACE_S      5.0

/* Untrusted text (an engine's hello, a name or note read from a results
 * database) shown on a terminal: every control character as '?'.
 * lab_show_controls: in place, newlines too (one line). lab_write_shown: n
 * bytes written to f, newline and tab kept (a listing's own layout), so a
 * planted escape sequence cannot drive the reader's terminal. */
void lab_show_controls(char *s);
void lab_write_shown(FILE *f, const char *text, size_t n);

/* Formats into err (may be NULL) and returns code. */
int lab_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* LAB_ENOMEM with "out of memory" in err. */
int lab_oom(char *err, size_t errlen);
/* Prepends "prefix: " to err in place; returns code. */
int lab_err_prefix(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* vt_exit_code: 0 -> 0, LAB_EINPUT and LAB_EUNSUPPORTED -> 2, else 1. */
int lab_exit_code(int status);

/* strdup that returns NULL for NULL. */
char *lab_strdup(const char *s);

/* A growable byte buffer (text or binary). data is always NUL-terminated. */
typedef struct lab_buf {
    char  *data;
    size_t len, cap;
    int    oom;      /* set once an append failed; later appends are no-ops */
} lab_buf;
void lab_buf_append(lab_buf *b, const void *p, size_t n);
void lab_buf_printf(lab_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lab_buf_free(lab_buf *b);

/* Reads a whole file (NUL-terminated); *len may be NULL. Binary-safe: the
 * bytes may hold NULs, so use *len, never strlen. A path that is not a
 * regular file (a directory, a FIFO) or cannot be opened is LAB_EINPUT naming
 * the path and what it is; a failing read is LAB_EIO. */
int lab_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen);

/* Reads a text input (an experiment, a dataset, a claim, a report): as
 * lab_read_file, and also LAB_EINPUT when the file is larger than max_bytes
 * (checked before reading; 0: no limit) or holds a NUL byte (text walked as a
 * C string would silently stop there). Errors name the path and, for a NUL,
 * its line and byte offset. `what` names the input in messages ("dataset
 * file"); may be NULL. */
int lab_read_text(const char *path, const char *what, size_t max_bytes, char **out, size_t *len,
                  char *err, size_t errlen);

/* Checks JSON text of len bytes before it is parsed: a NUL byte anywhere, or a
 * \u0000 escape inside a string (cJSON decodes it into a C string that then
 * ends early: "ab\u0000cd" would be read as "ab"), is LAB_EINPUT with
 * "PATH: line L column C: ...". Every JSON input of the harness goes through
 * this (lab_read_json does both). One UTF-8 byte-order mark at the start is
 * skipped, here and by lab_json_parse (docs/reliability.md, "Byte-order
 * mark"): positions count from the character after it, and the parsed value
 * is the same with and without it; a second one is a syntax error. */
int lab_json_check_text(const char *path, const char *text, size_t len, char *err, size_t errlen);

/* lab_read_text (limit LAB_MAX_JSON_BYTES) + lab_json_check_text. */
int lab_read_json(const char *path, char **out, size_t *len, char *err, size_t errlen);

/* Parses JSON text of len bytes (text[len] == 0) into *out (the caller
 * cJSON_Deletes it): lab_json_check_text first, then one JSON value and
 * nothing after it but whitespace. A syntax error is LAB_EINPUT with
 * "PATH: not valid JSON at line L column C (near "...")"; text after the
 * value says so. The root is returned as void * so that callers that do not
 * include cJSON need not. */
int lab_json_parse(const char *path, const char *text, size_t len, void **out, char *err, size_t errlen);

/* The largest JSON input read (experiment, claim, defect, bench report): these
 * are hand-written files of a few KiB; an inline dataset of 10^6 tokens is
 * about 7 MiB. */
#define LAB_MAX_JSON_BYTES ((size_t)64 << 20)

/* Names that are identities (experiment ids, arm names, claim and defect ids,
 * bench phase names): at most LAB_NAME_MAX characters, checked where they are
 * parsed, so that no fixed-size buffer downstream (report, nightly, audit,
 * `vtlab runs`) ever truncates one. A buffer for a name is LAB_NAME_BUF. */
#define LAB_NAME_MAX 48
#define LAB_NAME_BUF (LAB_NAME_MAX + 1)

/* LAB_EINPUT naming path and field when name is longer than LAB_NAME_MAX or
 * uses a character other than [A-Za-z0-9._-]; what says which name ("arm
 * name"). Empty is an error too. */
int lab_check_name(const char *path, const char *field, const char *what, const char *name,
                   char *err, size_t errlen);

/* LAB_EINPUT naming path and field when text (recorded provenance that no
 * parser reads: a code version, a compiler, a host, a probe site) is longer
 * than max bytes, holds a control character (a newline, ESC, DEL) or is not
 * valid UTF-8; what says which text ("a code version"). NULL is "". */
int lab_check_line(const char *path, const char *field, const char *what, const char *text, size_t max,
                   char *err, size_t errlen);

/* Current UTC time as "YYYY-MM-DDTHH:MM:SSZ" into out[32]. */
void lab_now_iso(char out[32]);
/* Whether environment variable name is set to "0" (a switch turned off). */
int  lab_env_off(const char *name);
/* Whether s is an environment variable name: [A-Za-z_][A-Za-z0-9_]*. */
int  lab_env_name_ok(const char *s);
/* Monotonic seconds. */
double lab_mono(void);

/* The *.json files of dir (not starting with '.'), sorted by name, as
 * "dir/name" strings. A missing directory is LAB_EINPUT, or an empty list
 * when missing_ok. Free with lab_free_list. */
int  lab_list_json(const char *dir, int missing_ok, char ***files, int64_t *n, char *err, size_t errlen);
void lab_free_list(char **files, int64_t n);

/* 1 when the path exists (any kind). */
int lab_path_exists(const char *path);
/* mkdir -p. */
int lab_mkdirs(const char *path, char *err, size_t errlen);

/* Appends s escaped for HTML/XML text and attribute values (& < > " '). */
void lab_esc_html(lab_buf *b, const char *s);
/* Appends s escaped for markdown (also safe where markdown passes HTML). */
void lab_esc_md(lab_buf *b, const char *s);

/* Appends s for the inside of a markdown `code span` (backticks and line
 * breaks replaced; markdown shows the rest literally). */
void lab_esc_md_code(lab_buf *b, const char *s);

#endif
