/*
 * util.c — error text, strings, buffers, clocks and files for the harness.
 * Nothing here knows about experiments or SQLite; see util.h.
 */
#include "util.h"

#include "model/vt.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The one rule for untrusted text on a terminal: a control character (and
 * DEL) is shown as '?'. An error is one line: lab_errf shows the control
 * characters that came from the input (a JSON key "a\nb", a name) so. */
static int is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

void lab_show_controls(char *s) {
    for (; *s; s++)
        if (is_control((unsigned char)*s)) *s = '?';
}

void lab_write_shown(FILE *f, const char *text, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        fputc(is_control(c) && c != '\n' && c != '\t' ? '?' : c, f);
    }
}

int lab_errf(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        lab_show_controls(err);
    }
    return code;
}

int lab_err_prefix(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (!err || !errlen) return code;
    char pre[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%s", err);
    snprintf(err, errlen, "%s: %s", pre, old);
    lab_show_controls(err);
    return code;
}

int lab_oom(char *err, size_t errlen) { return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }

int lab_exit_code(int status) { return vt_exit_code(status); }

char *lab_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void lab_buf_append(lab_buf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1) { b->oom = 1; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { b->oom = 1; return; }
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) { b->oom = 1; return; }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void lab_buf_printf(lab_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof small) { lab_buf_append(b, small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    lab_buf_append(b, big, (size_t)n);
    free(big);
}

void lab_buf_free(lab_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* Opens path for reading and checks that it is a regular file; *size is its
 * size when opened. What a path is, when it is not a file, is the user's
 * mistake (LAB_EINPUT), not a failing system. */
static int open_regular(const char *path, const char *what, FILE **f, int64_t *size, char *err, size_t errlen) {
    const char *w = what ? what : "file";
    *f = fopen(path, "rb");
    if (!*f) {
        int e = errno;
        return lab_errf(err, errlen, e == ENOMEM ? LAB_ENOMEM : LAB_EINPUT, "%s: cannot open %s: %s", path, w,
                        strerror(e));
    }
    struct stat st;
    if (fstat(fileno(*f), &st) != 0) {
        int e = errno;
        fclose(*f);
        *f = NULL;
        return lab_errf(err, errlen, LAB_EIO, "%s: cannot stat %s: %s", path, w, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(*f);
        *f = NULL;
        return lab_errf(err, errlen, LAB_EINPUT, "%s: is %s, expected a %s", path,
                        S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", w);
    }
    *size = (int64_t)st.st_size;
    return LAB_OK;
}

/* Reads f to its end, stopping with LAB_EINPUT once more than max bytes
 * (0: no limit) arrived (the file grew after it was measured). */
static int read_all(FILE *f, const char *path, const char *what, size_t max, char **out, size_t *len,
                    char *err, size_t errlen) {
    lab_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        lab_buf_append(&b, chunk, n);
        if (max && b.len > max) {
            lab_buf_free(&b);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: %s is larger than the limit of %zu bytes", path,
                            what ? what : "file", max);
        }
    }
    if (ferror(f)) {
        int e = errno;
        lab_buf_free(&b);
        return lab_errf(err, errlen, LAB_EIO, "%s: read failed: %s", path, strerror(e ? e : EIO));
    }
    if (!b.data) lab_buf_append(&b, "", 0);
    if (b.oom) { lab_buf_free(&b); return lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", path); }
    *out = b.data;
    *len = b.len;
    return LAB_OK;
}

int lab_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    FILE *f;
    int64_t size;
    size_t n = 0;
    int rc = open_regular(path, NULL, &f, &size, err, errlen);
    if (rc) return rc;
    rc = read_all(f, path, NULL, 0, out, &n, err, errlen);
    fclose(f);
    if (!rc && len) *len = n;
    return rc;
}

/* Line (1-based) and column (1-based, in bytes) of offset at in text. */
static void line_col(const char *text, size_t at, int64_t *line, int64_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

int lab_read_text(const char *path, const char *what, size_t max_bytes, char **out, size_t *len,
                  char *err, size_t errlen) {
    *out = NULL;
    const char *w = what ? what : "file";
    FILE *f;
    int64_t size;
    size_t n = 0;
    int rc = open_regular(path, w, &f, &size, err, errlen);
    if (rc) return rc;
    if (max_bytes && (uint64_t)size > max_bytes) {
        fclose(f);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s is %lld bytes, more than the limit of %zu bytes", path, w,
                        (long long)size, max_bytes);
    }
    rc = read_all(f, path, w, max_bytes, out, &n, err, errlen);
    fclose(f);
    if (rc) return rc;
    const char *nul = memchr(*out, 0, n);
    if (nul) {
        int64_t line, col;
        size_t at = (size_t)(nul - *out);
        line_col(*out, at, &line, &col);
        free(*out);
        *out = NULL;
        return lab_errf(err, errlen, LAB_EINPUT,
                        "%s: line %lld column %lld (byte %zu): a NUL byte; a %s is text and holds none", path,
                        (long long)line, (long long)col, at, w);
    }
    if (len) *len = n;
    return LAB_OK;
}

/* Bytes of the UTF-8 byte-order mark at the start of text (0 or 3). Every
 * JSON input is held to one decision (docs/reliability.md): one BOM before
 * the value is accepted and skipped (RFC 8259 section 8.1 lets a parser
 * ignore it; Windows editors write one), here, where every JSON input is
 * checked and parsed. Skipping it before anything else means that positions
 * in messages count from the first character a person sees, and that nothing
 * computed from the value (a spec hash is of the canonical re-print) depends
 * on it. A second BOM is not skipped: it is a syntax error. */
static size_t bom_len(const char *text, size_t len) {
    return len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

int lab_json_check_text(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    size_t skip = bom_len(text, len);
    text += skip;
    len -= skip;
    /* the model's rule (vt.h), so that a config and an experiment are held to
     * the same one */
    int rc = vt_json_text_check(text, len, path, err, errlen);
    if (rc != VT_STATUS_OK) lab_show_controls(err);
    return rc == VT_STATUS_OK ? LAB_OK : LAB_EINPUT;
}

int lab_read_json(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    size_t n = 0;
    int rc = lab_read_text(path, "JSON file", LAB_MAX_JSON_BYTES, out, &n, err, errlen);
    if (rc) return rc;
    if ((rc = lab_json_check_text(path, *out, n, err, errlen))) {
        free(*out);
        *out = NULL;
        return rc;
    }
    if (len) *len = n;
    return LAB_OK;
}

int lab_json_parse(const char *path, const char *text, size_t len, void **out, char *err, size_t errlen) {
    *out = NULL;
    int rc = lab_json_check_text(path, text, len, err, errlen);
    if (rc) return rc;
    size_t skip = bom_len(text, len);
    text += skip;
    len -= skip;
    /* cJSON would skip a BOM of its own: a second one is refused here, so
     * that exactly one is ever accepted */
    if (bom_len(text, len))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: not valid JSON at line 1 column 1: a second byte-order mark", path);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (root) {
        *out = root;
        return LAB_OK;
    }
    if (!end || end < text || end > text + len) end = text;
    int64_t line = 1, col = 1;
    for (const char *p = text; p < end; p++) {
        if (*p == '\n') { line++; col = 1; } else col++;
    }
    /* cJSON stops at the end of the first value when the rest is not
     * whitespace: that is not a syntax error inside the value */
    const char *after = end;
    cJSON *first = cJSON_ParseWithOpts(text, &after, 0);
    while (first && after && (*after == ' ' || *after == '\t' || *after == '\n' || *after == '\r')) after++;
    int trailing = first && after == end;
    cJSON_Delete(first);
    char near[24];
    size_t k = 0;
    for (const char *p = end; *p && *p != '\n' && k + 1 < sizeof near; p++) near[k++] = isprint((unsigned char)*p) ? *p : '?';
    near[k] = 0;
    return lab_errf(err, errlen, LAB_EINPUT, "%s: not valid JSON at line %lld column %lld: %s%s%s%s", path,
                    (long long)line, (long long)col, trailing ? "text after the JSON value" : "syntax error",
                    k ? " (near \"" : "", near, k ? "\")" : (*end ? "" : " (the text ends too early)"));
}

int lab_check_name(const char *path, const char *field, const char *what, const char *name,
                   char *err, size_t errlen) {
    size_t n = strlen(name);
    if (n == 0) return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: expected a non-empty %s", path, field, what);
    if (n > LAB_NAME_MAX)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: \"%.24s...\" is %zu characters; %s is at most %d",
                        path, field, name, n, what, LAB_NAME_MAX);
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: \"%.*s\" may use only letters, digits, '.', '_' and '-'",
                            path, field, LAB_NAME_MAX, name);
    return LAB_OK;
}

static int utf8_len(const unsigned char *s);

int lab_check_line(const char *path, const char *field, const char *what, const char *text, size_t max,
                   char *err, size_t errlen) {
    const unsigned char *p = (const unsigned char *)(text ? text : "");
    size_t n = strlen((const char *)p);
    if (n > max)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: \"%.24s...\" is %zu bytes; %s is at most %zu", path, field,
                        (const char *)p, n, what, max);
    for (size_t i = 0; i < n;) {
        int k = utf8_len(p + i);
        if (k == 0 || p[i] < 0x20 || p[i] == 0x7f)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: byte %zu of \"%.48s\" is %s; %s is one line of UTF-8 text",
                            path, field, i, (const char *)p, k ? "a control character" : "not UTF-8", what);
        i += (size_t)k;
    }
    return LAB_OK;
}

void lab_now_iso(char out[32]) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double lab_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lab_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int lab_mkdirs(const char *path, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: path too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return lab_errf(err, errlen, LAB_EIO, "%s: mkdir: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return lab_errf(err, errlen, LAB_EIO, "%s: mkdir: %s", tmp, strerror(errno));
    return LAB_OK;
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int lab_list_json(const char *dir, int missing_ok, char ***files, int64_t *n, char *err, size_t errlen) {
    *files = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (missing_ok && errno == ENOENT) return LAB_OK;
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot open directory: %s", dir, strerror(errno));
    }
    struct dirent *de;
    int64_t cap = 0;
    int rc = LAB_OK;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **f = realloc(*files, (size_t)cap * sizeof *f);
            if (!f) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
            *files = f;
        }
        size_t len = strlen(dir) + l + 2;
        if (!((*files)[*n] = malloc(len))) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        snprintf((*files)[(*n)++], len, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (rc) { lab_free_list(*files, *n); *files = NULL; *n = 0; return rc; }
    if (*n > 1) qsort(*files, (size_t)*n, sizeof **files, cmp_path);
    return LAB_OK;
}

void lab_free_list(char **files, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(files[i]);
    free(files);
}

/* ------------------------------------------------------------ escaping (HTML/XML, markdown) */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static int utf8_len(const unsigned char *s) {
    unsigned char c = s[0];
    int n;
    unsigned cp;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF)
        return 0;
    return n;
}

void lab_esc_html(lab_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        int n = utf8_len(p);
        if (n == 0) { lab_buf_append(b, "\xEF\xBF\xBD", 3); p++; continue; }
        if (n > 1) { lab_buf_append(b, p, (size_t)n); p += n; continue; }
        switch (*p) {
        case '&': lab_buf_append(b, "&amp;", 5); break;
        case '<': lab_buf_append(b, "&lt;", 4); break;
        case '>': lab_buf_append(b, "&gt;", 4); break;
        case '"': lab_buf_append(b, "&quot;", 6); break;
        case '\'': lab_buf_append(b, "&#39;", 5); break;
        default:
            /* XML 1.0 allows no control characters but tab, LF and CR. */
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') lab_buf_append(b, "\xEF\xBF\xBD", 3);
            else lab_buf_append(b, p, 1);
        }
        p++;
    }
}

void lab_esc_md_code(lab_buf *b, const char *s) {
    for (const char *p = s ? s : ""; *p; p++) {
        char c = *p == '`' ? '\'' : (*p == '\n' || *p == '\r') ? ' ' : *p;
        lab_buf_append(b, &c, 1);
    }
}

void lab_esc_md(lab_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        int n = utf8_len(p);
        if (n == 0) { lab_buf_append(b, "\xEF\xBF\xBD", 3); p++; continue; }
        if (n > 1) { lab_buf_append(b, p, (size_t)n); p += n; continue; }
        if (*p == '&') lab_buf_append(b, "&amp;", 5);
        else if (*p == '<') lab_buf_append(b, "&lt;", 4);
        else if (*p == '>') lab_buf_append(b, "&gt;", 4);
        else if (*p == '\n' || *p == '\r') lab_buf_append(b, " ", 1);
        else if (*p < 0x20) lab_buf_append(b, "\xEF\xBF\xBD", 3);
        else {
            if (strchr("\\`*_[]#+|~", *p)) lab_buf_append(b, "\\", 1);
            lab_buf_append(b, p, 1);
        }
        p++;
    }
}

int lab_env_name_ok(const char *s) {
    if (!*s || (!isalpha((unsigned char)*s) && *s != '_')) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return 0;
    return 1;
}

int lab_env_off(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "0");
}
