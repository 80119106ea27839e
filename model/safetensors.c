/*
 * safetensors.c — the checkpoint reader (see safetensors.h).
 *
 * The format. A safetensors file is
 *
 *     [8 bytes: N, little-endian u64][N bytes: JSON header][data section]
 *
 * The header maps each tensor name to {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [begin, end]}, the byte range [begin, end) being relative to
 * the start of the data section. An optional "__metadata__" key holds an
 * object of string -> string. A sharded checkpoint is a directory with
 * model.safetensors.index.json, whose "weight_map" says which file holds each
 * tensor; an unsharded one is a directory with model.safetensors.
 *
 * The reader. Files are mapped read-only and tensors point into the mapping,
 * so opening a checkpoint costs a header parse, not a copy. Nothing in a file
 * is trusted, because everything downstream (the forward pass) trusts shapes
 * once the load succeeded. The checks, in order:
 *   - the file holds at least the 8-byte length; the header length is at
 *     least 2 ("{}"), at most VT_ST_MAX_HEADER, and fits in what follows the
 *     length field. These are three separate messages: a huge length means
 *     "not safetensors", a length past the end means a cut or foreign file;
 *   - the header is JSON (parsed by cJSON from a NUL-terminated copy, so a
 *     parser over-read can never leave the buffer) with nothing but
 *     whitespace after it, and is an object;
 *   - "__metadata__", if present, is an object of strings (appears once);
 *   - every other entry is an object with a known "dtype" string, a "shape"
 *     of at most VT_ST_MAX_DIMS non-negative integers and "data_offsets"
 *     [begin, end] with begin <= end <= data section length. JSON numbers are
 *     doubles, so every integer must be exact: at most 2^53;
 *   - product(shape) x element size, overflow-checked, equals end - begin;
 *   - no name appears twice, and no two non-empty byte ranges overlap (gaps
 *     are allowed: a reader only needs its own bytes to be in the file).
 *     Zero-byte tensors are allowed anywhere; they own no bytes.
 * Across shards: every shard named by the index is opened once, a name may
 * not appear in two shards, and the index and the shards must agree exactly
 * (each listed tensor is in its named shard; each shard tensor is listed).
 * Lookups by name use a name-sorted array and bsearch: real checkpoints hold
 * ~10^4 tensors, and a linear scan per lookup would make loading quadratic.
 *
 * The writer is safetensors_write.c; what both need (the metadata key, the
 * exactness bound, the shape helpers) is declared in safetensors_internal.h.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors_internal.h"

#define ST_INDEX_NAME  "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

/* ------------------------------------------------------------------ helpers */

/* Renders a name from a file for a one-line message: printable ASCII as is,
 * every other byte as \xNN, cut with "..." past ~160 characters. Names come
 * from untrusted JSON and may hold newlines or be megabytes long. */
const char *vt_st_show_name(const char *s, char *buf, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!s) s = "(null)";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (o + 8 >= cap || o >= 160) { memcpy(buf + o, "...", 4); return buf; }
        if (ch >= 0x20 && ch < 0x7f) {
            buf[o++] = (char)ch;
        } else {
            buf[o++] = '\\'; buf[o++] = 'x';
            buf[o++] = hex[ch >> 4]; buf[o++] = hex[ch & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}

/* "[2, 3]" for messages (the writer's too). */
const char *vt_st_show_shape(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    o += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* Bytes of a tensor: product(shape) x element size. Returns 0 and sets
 * *bytes, or -1 when the product overflows. Any zero dimension makes the
 * tensor empty whatever the others are, so it is checked first. */
int vt_st_shape_bytes(vt_dtype dt, int ndim, const int64_t *shape, uint64_t *bytes) {
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) { *bytes = 0; return 0; }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || vt_size_mul(count, (size_t)shape[i], &count)) return -1;
    }
    if (count > (size_t)INT64_MAX) return -1;
    size_t b = vt_row_size(dt, (int64_t)count);
    if (b == 0) return -1;   /* count > 0 here, so 0 means overflow */
    *bytes = (uint64_t)b;
    return 0;
}

/* An integer in [0, 2^53] held by a JSON number: 0, or -1 when the item is
 * not a number, negative, fractional or too large to be exact. */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (!(d >= 0.0) || d > (double)ST_MAX_EXACT || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Parses buf[0..len) as JSON from a NUL-terminated copy (cJSON's length-bound
 * parser has had over-read bugs; a terminator makes any over-read harmless).
 * Trailing bytes other than whitespace are an error: a header padded with
 * anything else is not one we wrote or one the reference library accepts.
 * what/fname are for messages. */
static int parse_json(const char *buf, size_t len, const char *fname, const char *what,
                      cJSON **out, vt_err *err) {
    *out = NULL;
    char *copy = malloc(len + 1);
    if (!copy) return vt_errf(err, VT_ENOMEM, "%s: out of memory copying the %zu-byte %s",
                              fname, len, what);
    memcpy(copy, buf, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    size_t pos = (end >= copy && end <= copy + len) ? (size_t)(end - copy) : len;
    if (!root) {
        free(copy);
        return vt_errf(err, VT_EINPUT, "%s: %s is not valid JSON (parse error at byte %zu of %zu)",
                       fname, what, pos, len);
    }
    for (size_t i = pos; i < len; i++) {
        char ch = copy[i];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
            free(copy);
            cJSON_Delete(root);
            return vt_errf(err, VT_EINPUT,
                           "%s: %s is not valid JSON: unexpected byte 0x%02x at %zu after the "
                           "value ends (expected only whitespace padding)",
                           fname, what, (unsigned)(unsigned char)ch, i);
        }
    }
    free(copy);
    *out = root;
    return VT_OK;
}

/* ------------------------------------------------------------------ header */

void vt_st_header_free(vt_st_header *h) {
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) free(h->entries[i].name);
    free(h->entries);
    memset(h, 0, sizeof *h);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const vt_st_entry *)a)->name, ((const vt_st_entry *)b)->name);
}

/* File order: by begin, then end; the name breaks ties between zero-byte
 * tensors so that the order never depends on qsort's instability. */
static int cmp_entry_offset(const void *a, const void *b) {
    const vt_st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_metadata(const cJSON *meta, const char *fname, size_t *n, vt_err *err) {
    char nb[200];
    if (!cJSON_IsObject(meta))
        return vt_errf(err, VT_EINPUT, "%s: \"" ST_META_KEY "\" must be an object of string "
                       "values", fname);
    size_t k = 0;
    for (const cJSON *c = meta->child; c; c = c->next, k++) {
        if (!cJSON_IsString(c) || !c->valuestring)
            return vt_errf(err, VT_EINPUT, "%s: \"" ST_META_KEY "\" key '%s' must have a string "
                           "value", fname, vt_st_show_name(c->string, nb, sizeof nb));
    }
    *n = k;
    return VT_OK;
}

/* Fills e (name excluded) from one header entry; every message names the
 * file and the tensor. */
static int parse_entry(const cJSON *item, const char *name, uint64_t data_len, const char *fname,
                       vt_st_entry *e, vt_err *err) {
    char nb[200], db[200], sb[200];
    const char *tn = vt_st_show_name(name, nb, sizeof nb);
    if (name[0] == '\0')
        return vt_errf(err, VT_EINPUT, "%s: a tensor has an empty name (expected a non-empty key)",
                       fname);
    if (!cJSON_IsObject(item))
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': expected an object with \"dtype\", "
                       "\"shape\" and \"data_offsets\"", fname, tn);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': \"dtype\" is missing or not a string",
                       fname, tn);
    if (vt_dtype_from_st_name(dt->valuestring, &e->dtype) != 0)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': unknown dtype \"%s\" (expected one of "
                       "F32, BF16, F16, I32, I64, U8)", fname, tn,
                       vt_st_show_name(dt->valuestring, db, sizeof db));

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape))
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': \"shape\" is missing or not an array",
                       fname, tn);
    int nd = 0;
    for (const cJSON *d = shape->child; d; d = d->next, nd++) {
        if (nd == VT_ST_MAX_DIMS)
            return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape has more than %d dimensions",
                           fname, tn, VT_ST_MAX_DIMS);
        uint64_t v;
        if (json_uint(d, &v) != 0) {
            if (cJSON_IsNumber(d) && d->valuedouble < 0)
                return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape[%d] is %.17g, expected a "
                               "non-negative integer", fname, tn, nd, d->valuedouble);
            if (cJSON_IsNumber(d))
                return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape[%d] is %.17g, expected an "
                               "integer no larger than 2^53", fname, tn, nd, d->valuedouble);
            return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape[%d] is not a number, expected "
                           "a non-negative integer", fname, tn, nd);
        }
        e->shape[nd] = (int64_t)v;
    }
    e->ndim = nd;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    const cJSON *b0 = cJSON_IsArray(off) ? off->child : NULL;
    const cJSON *b1 = b0 ? b0->next : NULL;
    if (!b1 || b1->next || json_uint(b0, &e->begin) != 0 || json_uint(b1, &e->end) != 0)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': \"data_offsets\" is missing or not "
                       "[begin, end], two non-negative integers no larger than 2^53", fname, tn);
    if (e->begin > e->end)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] have begin > end", fname, tn, e->begin, e->end);
    if (e->end > data_len)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] run past the end of the data section (%" PRIu64 " bytes): the file is "
                       "truncated or the offsets are out of range", fname, tn, e->begin, e->end,
                       data_len);

    uint64_t need;
    if (vt_st_shape_bytes(e->dtype, e->ndim, e->shape, &need) != 0)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape %s of %s overflows a byte count",
                       fname, tn, vt_st_show_shape(e->ndim, e->shape, sb, sizeof sb), dt->valuestring);
    if (need != e->end - e->begin)
        return vt_errf(err, VT_EINPUT, "%s: tensor '%s': shape %s of %s needs %" PRIu64 " bytes "
                       "but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64, fname, tn,
                       vt_st_show_shape(e->ndim, e->shape, sb, sizeof sb), dt->valuestring, need,
                       e->begin, e->end, e->end - e->begin);
    return VT_OK;
}

/* Duplicates, then overlaps; entries end sorted by offset. A duplicate is
 * reported first because two copies of one entry would otherwise read as an
 * overlap and hide the real mistake. */
static int check_entries(vt_st_header *h, const char *fname, vt_err *err) {
    char na[200], nb[200];
    qsort(h->entries, h->n, sizeof *h->entries, cmp_entry_name);
    for (size_t i = 1; i < h->n; i++)
        if (strcmp(h->entries[i - 1].name, h->entries[i].name) == 0)
            return vt_errf(err, VT_EINPUT, "%s: tensor '%s' appears more than once in the header",
                           fname, vt_st_show_name(h->entries[i].name, na, sizeof na));
    qsort(h->entries, h->n, sizeof *h->entries, cmp_entry_offset);
    const vt_st_entry *prev = NULL;   /* the non-empty range reaching furthest so far */
    for (size_t i = 0; i < h->n; i++) {
        const vt_st_entry *e = &h->entries[i];
        if (e->begin == e->end) continue;
        if (prev && e->begin < prev->end)
            return vt_errf(err, VT_EINPUT, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' "
                           "[%" PRIu64 ", %" PRIu64 "] overlap (expected disjoint byte ranges)",
                           fname, vt_st_show_name(prev->name, na, sizeof na), prev->begin, prev->end,
                           vt_st_show_name(e->name, nb, sizeof nb), e->begin, e->end);
        if (!prev || e->end > prev->end) prev = e;
    }
    return VT_OK;
}

int vt_st_parse_header(const char *json, size_t json_len, uint64_t data_len, const char *fname,
                       vt_st_header *out, vt_err *err) {
    if (!out) return vt_errf(err, VT_EINTERNAL, "vt_st_parse_header: out is NULL");
    memset(out, 0, sizeof *out);
    if (!fname) fname = "(header)";
    if (!json && json_len) return vt_errf(err, VT_EINTERNAL, "%s: header buffer is NULL", fname);
    if (json_len < 2)
        return vt_errf(err, VT_EINPUT, "%s: header is %zu bytes, expected at least 2 (\"{}\")",
                       fname, json_len);
    if ((uint64_t)json_len > VT_ST_MAX_HEADER)
        return vt_errf(err, VT_EINPUT, "%s: header is %zu bytes, more than the limit of %" PRIu64,
                       fname, json_len, VT_ST_MAX_HEADER);

    cJSON *root;
    int rc = parse_json(json, json_len, fname, "header", &root, err);
    if (rc) return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return vt_errf(err, VT_EINPUT, "%s: header is JSON but not an object (expected "
                       "{\"tensor name\": {\"dtype\", \"shape\", \"data_offsets\"}, ...})", fname);
    }

    size_t n = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        if (!c->string || strcmp(c->string, ST_META_KEY) != 0) n++;
    vt_st_header h = {0};
    h.entries = calloc(n ? n : 1, sizeof *h.entries);
    if (!h.entries) {
        cJSON_Delete(root);
        return vt_errf(err, VT_ENOMEM, "%s: out of memory for %zu header entries", fname, n);
    }

    int seen_meta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        if (strcmp(key, ST_META_KEY) == 0) {
            if (seen_meta) {
                rc = vt_errf(err, VT_EINPUT, "%s: \"" ST_META_KEY "\" appears more than once",
                             fname);
                goto fail;
            }
            seen_meta = 1;
            if ((rc = parse_metadata(c, fname, &h.n_metadata, err))) goto fail;
            continue;
        }
        vt_st_entry *e = &h.entries[h.n];
        if ((rc = parse_entry(c, key, data_len, fname, e, err))) goto fail;
        if (!(e->name = strdup(key))) {
            rc = vt_errf(err, VT_ENOMEM, "%s: out of memory", fname);
            goto fail;
        }
        h.n++;
    }
    cJSON_Delete(root);
    root = NULL;
    if ((rc = check_entries(&h, fname, err))) goto fail;
    *out = h;
    return VT_OK;

fail:
    cJSON_Delete(root);
    vt_st_header_free(&h);
    return rc;
}

/* --------------------------------------------------------------- checkpoint */

typedef struct st_file {
    char        *path;       /* as opened: DIR/shard or the path given */
    void        *map;        /* read-only mapping of the whole file */
    size_t       map_len;
    int          loaded;     /* 1: map is anonymous memory holding the file (vt_ckpt_load) */
    vt_st_header h;
} st_file;

struct vt_ckpt {
    char               *source;     /* what lists the tensors: the index file, or the single file */
    st_file            *files;
    int                 nfiles;
    size_t              n;          /* tensors over all files */
    const vt_st_entry **order;      /* [n] file by file, by offset within a file */
    const vt_st_entry **by_name;    /* [n] sorted by name, for bsearch */
};

/* An open failure that is the user's path being wrong is bad input; any other
 * is the operating system's. */
static int open_status(int e) {
    return (e == ENOENT || e == ENOTDIR || e == EISDIR) ? VT_EINPUT : VT_EIO;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
    return p;
}

/* Maps one file and validates its header; f->path must be set. Entries get
 * data pointers into the mapping and file index `idx`. */
static int open_file(st_file *f, int idx, vt_err *err) {
    const char *path = f->path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return vt_errf(err, open_status(e), "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return vt_errf(err, VT_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return vt_errf(err, VT_EINPUT, "%s: not a regular file (expected a .safetensors file)",
                       path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        close(fd);
        return vt_errf(err, VT_EINPUT, "%s: file is %" PRIu64 " bytes, too short to hold the "
                       "8-byte header length (truncated, or not safetensors)", path, size);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return vt_errf(err, VT_EINPUT, "%s: file of %" PRIu64 " bytes cannot be mapped here",
                       path, size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);   /* the mapping keeps the file open */
    if (map == MAP_FAILED)
        return vt_errf(err, VT_EIO, "%s: cannot map %" PRIu64 " bytes: %s", path, size,
                       strerror(map_errno));
    f->map = map;
    f->map_len = (size_t)size;
    /* A hint: a checkpoint not yet cached is read ahead into 2 MiB folios and
     * mapped in 2 MiB pages (see WRITE_CHUNK in safetensors_write.c for why that matters). */
    (void)madvise(map, (size_t)size, MADV_HUGEPAGE);

    const unsigned char *base = map;
    uint64_t hlen = load_le64(base);
    if (hlen < 2)
        return vt_errf(err, VT_EINPUT, "%s: header length %" PRIu64 " is too small (expected at "
                       "least 2, the size of \"{}\")", path, hlen);
    if (hlen > VT_ST_MAX_HEADER)
        return vt_errf(err, VT_EINPUT, "%s: header length %" PRIu64 " exceeds the limit of %"
                       PRIu64 " bytes (100 MiB): not a safetensors file, or a corrupt one", path,
                       hlen, VT_ST_MAX_HEADER);
    if (hlen > size - 8)
        return vt_errf(err, VT_EINPUT, "%s: header length %" PRIu64 " runs past the end of the "
                       "file (only %" PRIu64 " bytes follow the 8-byte length field): the file "
                       "is truncated or not safetensors", path, hlen, size - 8);

    int rc = vt_st_parse_header((const char *)base + 8, (size_t)hlen, size - 8 - hlen, path,
                                &f->h, err);
    if (rc) return rc;
    const unsigned char *data = base + 8 + hlen;
    for (size_t i = 0; i < f->h.n; i++) {
        f->h.entries[i].data = data + f->h.entries[i].begin;
        f->h.entries[i].file = idx;
    }
    return VT_OK;
}

/* Reads file f into anonymous memory (huge pages where the kernel gives them)
 * and moves its entries' data pointers there; the file's mapping is dropped. */
static int load_file(st_file *f, vt_err *err) {
    enum { HUGE = 2 << 20, CHUNK = 64 << 20 };
    const size_t len = (f->map_len + HUGE - 1) / HUGE * HUGE;
    unsigned char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return vt_errf(err, VT_ENOMEM, "%s: cannot allocate %zu bytes to load the weights: %s", f->path, len,
                       strerror(errno));
    (void)madvise(mem, len, MADV_HUGEPAGE);   /* a hint: 4 KiB pages if refused */
    int fd = open(f->path, O_RDONLY | O_CLOEXEC), rc = VT_OK;
    if (fd < 0) rc = vt_errf(err, VT_EIO, "%s: cannot open to load: %s", f->path, strerror(errno));
    for (size_t done = 0; !rc && done < f->map_len;) {
        const size_t want = f->map_len - done < CHUNK ? f->map_len - done : CHUNK;
        const ssize_t got = pread(fd, mem + done, want, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            rc = vt_errf(err, VT_EIO, "%s: cannot read bytes %zu..%zu to load the weights: %s", f->path, done,
                         done + want, got < 0 ? strerror(errno) : "the file got shorter");
        else done += (size_t)got;
    }
    if (fd >= 0) close(fd);
    if (!rc && memcmp(mem, f->map, 8) != 0)   /* the header length: the file changed under us */
        rc = vt_errf(err, VT_EIO, "%s: changed while it was being loaded", f->path);
    if (rc) {
        munmap(mem, len);
        return rc;
    }
    (void)mprotect(mem, len, PROT_READ);
    for (size_t i = 0; i < f->h.n; i++)
        f->h.entries[i].data = mem + ((const unsigned char *)f->h.entries[i].data - (const unsigned char *)f->map);
    munmap(f->map, f->map_len);
    f->map = mem;
    f->map_len = len;
    f->loaded = 1;
    return VT_OK;
}

int vt_ckpt_set_writable(vt_ckpt *c, int on, vt_err *err) {
    for (int i = 0; i < c->nfiles; i++) {
        st_file *f = &c->files[i];
        if (!f->loaded) return vt_errf(err, VT_EINTERNAL, "%s: not loaded: a file's mapping stays read-only", f->path);
        if (mprotect(f->map, f->map_len, on ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
            return vt_errf(err, VT_EIO, "%s: cannot change the loaded weights' protection: %s", f->path, strerror(errno));
    }
    return VT_OK;
}

int vt_ckpt_load(vt_ckpt *c, vt_err *err) {
    for (int i = 0; i < c->nfiles; i++) {
        int rc = load_file(&c->files[i], err);
        if (rc) return rc;
    }
    return VT_OK;
}

void vt_ckpt_close(vt_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->nfiles; i++) {
        if (c->files[i].map) munmap(c->files[i].map, c->files[i].map_len);
        vt_st_header_free(&c->files[i].h);
        free(c->files[i].path);
    }
    free(c->files);
    free(c->order);
    free(c->by_name);
    free(c->source);
    free(c);
}

static int cmp_entry_ptr_name(const void *a, const void *b) {
    const vt_st_entry *x = *(const vt_st_entry *const *)a, *y = *(const vt_st_entry *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_key_entry_ptr(const void *key, const void *elem) {
    return strcmp((const char *)key, (*(const vt_st_entry *const *)elem)->name);
}

/* Builds order and by_name over every opened file; a name in two files is an
 * error that names both. */
static int build_index(vt_ckpt *c, vt_err *err) {
    size_t n = 0;
    for (int i = 0; i < c->nfiles; i++) n += c->files[i].h.n;
    c->order = malloc((n ? n : 1) * sizeof *c->order);
    c->by_name = malloc((n ? n : 1) * sizeof *c->by_name);
    if (!c->order || !c->by_name)
        return vt_errf(err, VT_ENOMEM, "out of memory indexing %zu tensors", n);
    size_t k = 0;
    for (int i = 0; i < c->nfiles; i++)
        for (size_t j = 0; j < c->files[i].h.n; j++) c->order[k++] = &c->files[i].h.entries[j];
    c->n = n;
    memcpy(c->by_name, c->order, n * sizeof *c->order);
    qsort(c->by_name, n, sizeof *c->by_name, cmp_entry_ptr_name);
    char nb[200];
    for (size_t i = 1; i < n; i++) {
        const vt_st_entry *a = c->by_name[i - 1], *b = c->by_name[i];
        if (strcmp(a->name, b->name) == 0) {
            if (a->file > b->file) { const vt_st_entry *t = a; a = b; b = t; }
            return vt_errf(err, VT_EINPUT, "tensor '%s' is in both %s and %s (expected each "
                           "tensor in exactly one shard)", vt_st_show_name(a->name, nb, sizeof nb),
                           c->files[a->file].path, c->files[b->file].path);
        }
    }
    return VT_OK;
}

/* One weight_map row: tensor name -> shard (index into the shard list). */
typedef struct wm_row {
    const char *name;    /* into the cJSON tree */
    const char *shard;
    int         file;
} wm_row;

static int cmp_row_name(const void *a, const void *b) {
    return strcmp(((const wm_row *)a)->name, ((const wm_row *)b)->name);
}

static int cmp_key_row(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const wm_row *)elem)->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name must be a plain file name in the checkpoint directory: an
 * index must not be able to point the reader at arbitrary paths. */
static int shard_name_ok(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Reads a whole (small) file, refusing more than VT_ST_MAX_HEADER bytes. */
static int read_small_file(const char *path, char **buf, size_t *len, vt_err *err) {
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        return vt_errf(err, open_status(e), "%s: cannot open: %s", path, strerror(e));
    }
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    int rc = p ? VT_OK : vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
    while (rc == VT_OK) {
        if (n == cap) {
            if ((uint64_t)cap >= VT_ST_MAX_HEADER) {
                rc = vt_errf(err, VT_EINPUT, "%s: larger than the limit of %" PRIu64 " bytes",
                             path, VT_ST_MAX_HEADER);
                break;
            }
            char *q = realloc(p, cap * 2);
            if (!q) {
                rc = vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
                break;
            }
            p = q;
            cap *= 2;
        }
        size_t got = fread(p + n, 1, cap - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) rc = vt_errf(err, VT_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(fp);
    if (rc) {
        free(p);
        return rc;
    }
    *buf = p;
    *len = n;
    return VT_OK;
}

/* An index file's weight_map: its rows sorted by tensor name (no name twice)
 * and its distinct shard names, sorted, so that each shard is mapped once and
 * the order of the files is fixed. Names point into the cJSON tree. */
typedef struct wmap {
    cJSON       *root;
    wm_row      *rows;
    size_t       nrows;
    const char **shards;
    size_t       ns;
} wmap;

static void wmap_free(wmap *m) {
    free(m->rows);
    free(m->shards);
    cJSON_Delete(m->root);
}

static int read_weight_map(const char *index_path, wmap *m, vt_err *err) {
    char nb[200];
    char *text = NULL;
    size_t len = 0;
    int rc = read_small_file(index_path, &text, &len, err);
    if (rc) return rc;
    rc = parse_json(text, len, index_path, "index", &m->root, err);
    free(text);
    if (rc) return rc;

    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(m->root, "weight_map");
    if (!cJSON_IsObject(m->root) || !cJSON_IsObject(wm))
        return vt_errf(err, VT_EINPUT, "%s: expected an object with a \"weight_map\" object "
                       "(tensor name -> shard file)", index_path);
    size_t nrows = 0;
    for (const cJSON *r = wm->child; r; r = r->next) nrows++;
    wm_row *rows = m->rows = calloc(nrows ? nrows : 1, sizeof *rows);
    const char **shards = m->shards = calloc(nrows ? nrows : 1, sizeof *shards);
    if (!rows || !shards)
        return vt_errf(err, VT_ENOMEM, "%s: out of memory for %zu weight_map rows", index_path, nrows);
    m->nrows = nrows;
    size_t k = 0;
    for (const cJSON *r = wm->child; r; r = r->next, k++) {
        const char *name = r->string ? r->string : "";
        if (!cJSON_IsString(r) || !r->valuestring || !shard_name_ok(r->valuestring))
            return vt_errf(err, VT_EINPUT, "%s: weight_map entry for tensor '%s' must be a shard "
                           "file name in the same directory", index_path, vt_st_show_name(name, nb, sizeof nb));
        rows[k].name = name;
        rows[k].shard = r->valuestring;
        shards[k] = r->valuestring;
    }
    qsort(rows, nrows, sizeof *rows, cmp_row_name);
    for (size_t i = 1; i < nrows; i++)
        if (strcmp(rows[i - 1].name, rows[i].name) == 0)
            return vt_errf(err, VT_EINPUT, "%s: weight_map lists tensor '%s' more than once",
                           index_path, vt_st_show_name(rows[i].name, nb, sizeof nb));

    /* Distinct shards, sorted, so each is mapped once and the order is fixed. */
    qsort(shards, nrows, sizeof *shards, cmp_str_ptr);
    size_t ns = 0;
    for (size_t i = 0; i < nrows; i++)
        if (ns == 0 || strcmp(shards[ns - 1], shards[i]) != 0) shards[ns++] = shards[i];
    m->ns = ns;
    if (ns > (size_t)INT32_MAX) return vt_errf(err, VT_EINPUT, "%s: too many shards (%zu)", index_path, ns);
    return VT_OK;
}

/* Maps every shard of m into c->files (in m's shard order) and tells each row
 * its file; a shard that fails is named with a tensor the index puts in it. */
static int open_shards(vt_ckpt *c, const char *dir, const char *index_path, wmap *m, vt_err *err) {
    char nb[200], sb[200];
    const size_t ns = m->ns;
    c->files = calloc(ns ? ns : 1, sizeof *c->files);
    if (!c->files) return vt_errf(err, VT_ENOMEM, "%s: out of memory", index_path);
    for (size_t i = 0; i < m->nrows; i++) {
        const char **s = bsearch(&m->rows[i].shard, m->shards, ns, sizeof *m->shards, cmp_str_ptr);
        m->rows[i].file = (int)(s - m->shards);
    }
    for (size_t s = 0; s < ns; s++) {
        c->nfiles = (int)s + 1;
        if (!(c->files[s].path = join_path(dir, m->shards[s])))
            return vt_errf(err, VT_ENOMEM, "%s: out of memory", index_path);
        int rc = open_file(&c->files[s], (int)s, err);
        if (rc) {
            const char *example = "";
            for (size_t i = 0; i < m->nrows; i++)
                if (m->rows[i].file == (int)s) { example = m->rows[i].name; break; }
            vt_err_prefix(err, "%s: shard '%s' (holding tensor '%s')", index_path,
                          vt_st_show_name(m->shards[s], sb, sizeof sb), vt_st_show_name(example, nb, sizeof nb));
            return rc;
        }
    }
    return VT_OK;
}

/* The index and the shards must agree both ways: every tensor of a shard is
 * listed, in that shard, and every listed tensor is in its shard. */
static int check_index_agrees(const vt_ckpt *c, const char *index_path, const wmap *m, vt_err *err) {
    char nb[200];
    for (size_t i = 0; i < c->n; i++) {
        const vt_st_entry *e = c->by_name[i];
        const wm_row *r = bsearch(e->name, m->rows, m->nrows, sizeof *m->rows, cmp_key_row);
        if (!r)
            return vt_errf(err, VT_EINPUT, "%s: tensor '%s' is not listed in %s's weight_map",
                           c->files[e->file].path, vt_st_show_name(e->name, nb, sizeof nb), index_path);
        if (r->file != e->file)
            return vt_errf(err, VT_EINPUT, "%s: weight_map puts tensor '%s' in %s, but it is in %s",
                           index_path, vt_st_show_name(e->name, nb, sizeof nb), c->files[r->file].path,
                           c->files[e->file].path);
    }
    for (size_t i = 0; i < m->nrows; i++) {
        if (!bsearch(m->rows[i].name, c->by_name, c->n, sizeof *c->by_name, cmp_key_entry_ptr))
            return vt_errf(err, VT_EINPUT, "%s: weight_map lists tensor '%s' in %s, but that file "
                           "has no tensor '%s'", index_path, vt_st_show_name(m->rows[i].name, nb, sizeof nb),
                           c->files[m->rows[i].file].path, nb);
    }
    return VT_OK;
}

static int open_sharded(vt_ckpt *c, const char *dir, const char *index_path, vt_err *err) {
    wmap m = {0};
    int rc = read_weight_map(index_path, &m, err);
    if (!rc) rc = open_shards(c, dir, index_path, &m, err);
    if (!rc) rc = build_index(c, err);
    if (!rc) rc = check_index_agrees(c, index_path, &m, err);
    wmap_free(&m);
    return rc;
}

static int open_single(vt_ckpt *c, const char *path, vt_err *err) {
    c->files = calloc(1, sizeof *c->files);
    if (!c->files || !(c->files[0].path = strdup(path)))
        return vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
    c->nfiles = 1;
    int rc = open_file(&c->files[0], 0, err);
    if (rc) return rc;
    return build_index(c, err);
}

int vt_ckpt_open(const char *path, vt_ckpt **out, vt_err *err) {
    if (!out) return vt_errf(err, VT_EINTERNAL, "vt_ckpt_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return vt_errf(err, VT_EINPUT, "checkpoint path is empty");
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return vt_errf(err, open_status(e), "%s: %s (expected a checkpoint directory or a "
                       ".safetensors file)", path, strerror(e));
    }
    vt_ckpt *c = calloc(1, sizeof *c);
    if (!c) return vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
    int rc;
    if (S_ISDIR(st.st_mode)) {
        char *index = join_path(path, ST_INDEX_NAME);
        char *single = join_path(path, ST_SINGLE_NAME);
        struct stat ist;
        if (!index || !single) {
            rc = vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
        } else if (stat(index, &ist) == 0) {
            rc = open_sharded(c, path, index, err);
            if (!rc) c->source = index, index = NULL;
        } else if (stat(single, &ist) == 0) {
            rc = open_single(c, single, err);
        } else {
            rc = vt_errf(err, VT_EINPUT, "%s: found neither " ST_INDEX_NAME " nor " ST_SINGLE_NAME
                         " (expected a checkpoint directory)", path);
        }
        free(index);
        free(single);
    } else if (S_ISREG(st.st_mode)) {
        rc = open_single(c, path, err);
    } else {
        rc = vt_errf(err, VT_EINPUT, "%s: neither a directory nor a regular file", path);
    }
    if (rc) {
        vt_ckpt_close(c);
        return rc;
    }
    *out = c;
    return VT_OK;
}

size_t vt_ckpt_count(const vt_ckpt *c) { return c ? c->n : 0; }

const char *vt_ckpt_source(const vt_ckpt *c) {
    if (!c) return NULL;
    if (c->source) return c->source;
    return c->nfiles > 0 ? c->files[0].path : NULL;
}

const vt_st_entry *vt_ckpt_entry(const vt_ckpt *c, size_t i) {
    return (c && i < c->n) ? c->order[i] : NULL;
}

const vt_st_entry *vt_ckpt_find(const vt_ckpt *c, const char *name) {
    if (!c || !name || c->n == 0) return NULL;
    const vt_st_entry *const *p =
        bsearch(name, c->by_name, c->n, sizeof *c->by_name, cmp_key_entry_ptr);
    return p ? *p : NULL;
}

const char *vt_ckpt_file_name(const vt_ckpt *c, int file) {
    return (c && file >= 0 && file < c->nfiles) ? c->files[file].path : NULL;
}

size_t vt_ckpt_nbytes(const vt_ckpt *c, const vt_st_entry *e) {
    (void)c;
    return e ? (size_t)(e->end - e->begin) : 0;
}
