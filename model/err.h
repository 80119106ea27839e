/*
 * err.h — how the model library reports failure.
 *
 * Library code never exits and never prints. Every fallible function returns an
 * int status (VT_OK == 0) and, on failure, fills a caller-owned vt_err with a
 * message that names the file, the tensor or field, and what was expected.
 * The status says which kind of failure it was, so that `main` can map bad
 * input to exit status 2 and everything else to 1.
 */
#ifndef VT_ERR_H
#define VT_ERR_H

#include <stddef.h>

#include "vt.h"

/* The library's short names for the one status set (vt_status, model/vt.h). */
enum {
    VT_OK = VT_STATUS_OK,
    VT_EINPUT = VT_STATUS_INPUT,             /* bad input: a malformed file, a wrong field, a bad argument */
    VT_ENOMEM = VT_STATUS_NOMEM,             /* allocation failed */
    VT_EIO = VT_STATUS_IO,                   /* an operating-system call failed (open, mmap, write, rename) */
    VT_EINTERNAL = VT_STATUS_INTERNAL,       /* an invariant of our own code was broken */
    VT_EUNSUPPORTED = VT_STATUS_UNSUPPORTED, /* valid input that this build cannot run (e.g. no CUDA device) */
};

typedef struct vt_err {
    int  code;        /* one of the VT_E* values; VT_OK when nothing failed */
    char msg[1024];   /* NUL-terminated, one line, no trailing newline */
} vt_err;

/* Sets e->code and a printf-formatted message; returns code so that callers can
 * write `return vt_errf(err, VT_EINPUT, "...")`. e may be NULL. */
int vt_errf(vt_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (context added on the way up). */
int vt_err_prefix(vt_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void vt_err_clear(vt_err *e);

/* Overflow-checked size arithmetic: 0 on success, -1 when the result would not
 * fit. Used for every byte count that is derived from file contents. */
int vt_size_mul(size_t a, size_t b, size_t *out);
int vt_size_add(size_t a, size_t b, size_t *out);

#endif
