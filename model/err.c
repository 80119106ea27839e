/* err.c — error reporting and checked size arithmetic (see err.h). */
#include "err.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int vt_exit_code(int status) {
    if (status == VT_STATUS_OK) return 0;
    return status == VT_STATUS_INPUT || status == VT_STATUS_UNSUPPORTED ? 2 : 1;
}

int vt_errf(vt_err *e, int code, const char *fmt, ...) {
    if (!e) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int vt_err_prefix(vt_err *e, const char *fmt, ...) {
    if (!e) return VT_EINTERNAL;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* "prefix: old", truncated at the end if it does not fit */
    char out[sizeof e->msg];
    size_t lp = strlen(prefix), lo = strlen(e->msg), cap = sizeof out - 1, n = 0;
    for (size_t i = 0; i < lp && n < cap; i++) out[n++] = prefix[i];
    for (size_t i = 0; i < 2 && n < cap; i++) out[n++] = ": "[i];
    for (size_t i = 0; i < lo && n < cap; i++) out[n++] = e->msg[i];
    out[n] = '\0';
    memcpy(e->msg, out, n + 1);
    return e->code;
}

void vt_err_clear(vt_err *e) {
    if (!e) return;
    e->code = VT_OK;
    e->msg[0] = '\0';
}

int vt_size_mul(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int vt_size_add(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}
