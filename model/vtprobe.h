/*
 * vtprobe.h — speak vtlab's engine protocol and emit runtime dtype probes.
 *
 * A single header, C99 and C++11, no dependencies beyond the C library.
 * In exactly one translation unit:
 *
 *     #define VTPROBE_IMPLEMENTATION
 *     #include "vtprobe.h"
 *
 * Everything else includes it plainly. The protocol is docs/engine-protocol.md
 * (version VTP_PROTOCOL); this file is its engine side. vtlab's own model
 * keeps its probe records in the same vtp_record through the same
 * vtp_probe_copy/vtp_probe_buffer, so a record means one thing everywhere.
 *
 * Wiring an existing engine (the whole of it):
 *
 *     #define VTPROBE_IMPLEMENTATION
 *     #include "vtprobe.h"
 *
 *     static int fwd(void *user, const int32_t *tok, int64_t T, float *logits,
 *                    float *resid, vtp_probes *pr, char *err, size_t errlen) {
 *         my_engine *m = (my_engine *)user;
 *         // ... run tok[0..T) from an empty state into logits[T * vocab] ...
 *         vtp_probe_buffer(pr, "residual.stream", layer, m->bf16 ? "bf16" : "f32",
 *                          T, m->hidden * (m->bf16 ? 2 : 4));
 *         if (pr->mode == VTP_AUDIT) vtp_sentinel_fill(dst, "f32", rows, row_bytes);
 *         // ... the copy ...
 *         vtp_probe_copy(pr, "moe.scatter", layer, "f32", "f32", rows, copied_bytes,
 *                        src_row_bytes, dst_row_bytes, 0,
 *                        pr->mode == VTP_AUDIT ? vtp_rows_unwritten(dst, "f32", rows, row_bytes) : -1);
 *         (void)resid; (void)err; (void)errlen;
 *         return 0;
 *     }
 *
 *     int main(void) {
 *         int read_bf16 = 0;
 *         const char *bf16 = vtp_knob_env("MY_BF16_STREAM", "0", &read_bf16);
 *         my_engine *m = my_engine_load(getenv("VTP_MODEL"), !strcmp(bf16, "1"));
 *         char sha[65];
 *         vtp_model_sha256(getenv("VTP_MODEL"), sha);
 *         vtp_knob knobs[] = {{"MY_BF16_STREAM", "bool", "0|1", "0", 1, bf16, read_bf16}};
 *         const char *sites[] = {"residual.stream", "moe.scatter"};
 *         vtp_hello h;
 *         memset(&h, 0, sizeof h);
 *         h.engine = "my-engine"; h.version = "1.2"; h.commit = MY_COMMIT;
 *         h.model_sha256 = sha; h.vocab = m->vocab; h.hidden = m->hidden;
 *         h.n_layers = m->n_layers; h.layer_kinds = m->kinds;
 *         h.knobs = knobs; h.n_knobs = 1; h.probe_sites = sites; h.n_probe_sites = 2;
 *         h.deterministic = 1;
 *         return vtp_serve(stdin, stdout, &h, fwd, m);
 *     }
 *
 * Nothing here exits, prints to stderr or keeps global state.
 */
#ifndef VTPROBE_H
#define VTPROBE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VTP_PROTOCOL 1
/* A header line may be this long (bytes, newline excluded). */
#define VTP_MAX_HEADER (1 << 20)
/* The most tokens one forward request may carry. */
#define VTP_MAX_TOKENS (1 << 20)
/* The largest max_batch a hello may declare (sequences in one request). */
#define VTP_MAX_BATCH (1 << 16)

/* Probe modes (VTP_PROBE in the engine's environment). */
enum { VTP_OFF = 0, VTP_ON = 1, VTP_AUDIT = 2 };

/* One probe record: what really happened at a site, aggregated over calls
 * with the same (site, layer, dtype, src_dtype, bytes_per_row, src_row_bytes,
 * dst_row_bytes, converting). docs/engine-protocol.md defines each member. */
typedef struct vtp_record {
    char    site[32];         /* "residual.stream", "moe.scatter", ... */
    int     layer;            /* 0-based; -1 for model-level sites (logits) */
    char    dtype[8];         /* dtype of the buffer written (destination) */
    char    src_dtype[8];     /* dtype of the source of a copy; "" for a buffer */
    int64_t calls;            /* observations aggregated */
    int64_t rows;             /* rows handled, summed */
    int64_t bytes_per_row;    /* bytes copied per row (copies), else the buffer's row bytes */
    int64_t src_row_bytes;    /* bytes one row of the source holds */
    int64_t dst_row_bytes;    /* bytes one row of the destination holds */
    int     converting;       /* 1: an explicit converting copy (dtype change allowed) */
    int64_t violations;       /* calls in which the invariant failed */
    int64_t rows_unwritten;   /* audit mode: destination rows left with the sentinel; -1 if not audited */
    char    detail[192];      /* the first violation, in words; "" when none */
} vtp_record;

/* A set of records. Zero-initialise it (mode VTP_OFF records nothing). */
typedef struct vtp_probes {
    vtp_record *recs;
    int64_t     n, cap;
    int64_t     lost;         /* observations dropped for lack of memory: the set cannot vouch for the run */
    int         mode;         /* VTP_OFF, VTP_ON, VTP_AUDIT */
} vtp_probes;

void vtp_probes_clear(vtp_probes *p);   /* forget the records (keeps mode and memory) */
void vtp_probes_free(vtp_probes *p);    /* releases memory; p is zeroed */
/* The mode named by VTP_PROBE ("off", "on", "audit"); unset or unknown: VTP_OFF. */
int  vtp_probe_mode_env(void);

/* A buffer written at site: rows of row_bytes bytes, of dtype. */
void vtp_probe_buffer(vtp_probes *p, const char *site, int layer, const char *dtype, int64_t rows,
                      int64_t row_bytes);
/* A row copy at site: rows rows, bytes_per_row bytes each, from rows of
 * src_row_bytes (src_dtype) into rows of dst_row_bytes (dst_dtype).
 * The invariant: converting ? bytes_per_row == dst_row_bytes
 *                           : bytes_per_row == src_row_bytes == dst_row_bytes,
 * and no destination row left unwritten. rows_unwritten: from
 * vtp_rows_unwritten in audit mode, else -1. */
void vtp_probe_copy(vtp_probes *p, const char *site, int layer, const char *src_dtype, const char *dst_dtype,
                    int64_t rows, int64_t bytes_per_row, int64_t src_row_bytes, int64_t dst_row_bytes,
                    int converting, int64_t rows_unwritten);
/* Adds record r (e.g. one of an engine's responses) into p: counts summed,
 * the first detail kept. 0, or -1 when out of memory (counted in lost). */
int  vtp_probes_merge(vtp_probes *p, const vtp_record *r);

/* The audit sentinel: f32 0x7FA5A5A5, bf16 0x7FA5, f16 0x7DA5 (signalling
 * NaNs no arithmetic produces), other dtypes bytes 0xA5. */
void    vtp_sentinel_fill(void *buf, const char *dtype, int64_t rows, int64_t row_bytes);
/* Rows with any element still holding the sentinel. */
int64_t vtp_rows_unwritten(const void *buf, const char *dtype, int64_t rows, int64_t row_bytes);
/* Bytes per element of a dtype name ("f32" 4, "bf16"/"f16" 2, "i32" 4, "f64"/"i64" 8, "i8"/"u8" 1); 0 unknown. */
int     vtp_dtype_size(const char *dtype);

/* ---------------------------------------------------------------- hello */

/* One knob of the engine's registry, as the hello declares it. */
typedef struct vtp_knob {
    const char *name;         /* environment variable, e.g. "MY_BF16_STREAM" */
    const char *type;         /* "bool", "enum", "int", "string" */
    const char *values;       /* '|'-separated: "0|1", "none|a|b", "MIN..MAX", "" (string) */
    const char *def;          /* default value */
    int         numeric;      /* 1: changes the numbers */
    const char *value;        /* the value in use */
    int         read;         /* 1: the engine read it from its environment */
    /* A scoped knob (docs/engine-protocol.md, "Scoped knobs"): "layers" (the
     * knob can act on a set of whole layers), "sites" (also on one site of a
     * layer: its attention or FFN block), NULL or "": not scoped. Its scope is
     * read from NAME_LAYERS (vtp_scope_env); scope_value is the scope in use,
     * canonical ("all" when unset). Last, so that a registry written before
     * them declares no scope. */
    const char *scope;
    const char *scope_value;
} vtp_knob;

/* A replayable defect: set knob=name to switch it on. */
typedef struct vtp_fault {
    const char *name, *knob, *site, *description;
} vtp_fault;

typedef struct vtp_hello {
    const char *engine, *version, *commit;   /* commit may be "" */
    const char *model_sha256;                /* 64 lowercase hex */
    int64_t     vocab, hidden, n_layers;
    const char *layer_kinds;                 /* "KKKM/DEEE" or "" */
    const vtp_knob *knobs;
    int         n_knobs;
    const char *const *probe_sites;
    int         n_probe_sites;
    const vtp_fault *faults;
    int         n_faults;
    int         deterministic;               /* 1: same request, same logits bit for bit */
    int         capture;                     /* 1: can return residual captures */
    /* The most sequences one forward request may carry (docs/engine-protocol.md,
     * "Several sequences in one request"); 0 or 1: one, and the hello leaves the
     * member out. Last, so that an engine's hello written before it (zeroed, or
     * initialised without it) declares none. At most VTP_MAX_BATCH. */
    int         max_batch;
} vtp_hello;

/* The value of knob name in the environment, or def; *was_read = 1. */
const char *vtp_knob_env(const char *name, const char *def, int *was_read);

/* ---------------------------------------------------------------- scopes */

/* A layer set: where a scoped knob acts. Text: "all" (every site of every
 * layer: the knob unscoped), "none", or items joined by ',' with no blanks,
 * each a layer "7" or a range "0-3" (0-based, a <= b), optionally followed
 * by ".attn" or ".ffn": only that site of each of those layers (the
 * attention block from its input norm through its residual add, or the FFN
 * block from its norm through its add). Canonical text: "all", "none", or
 * the items in layer order with consecutive layers of the same sites merged
 * into ranges ("0-3,5.ffn,7"). */
#define VTP_MAX_LAYERS 256
/* Room for the longest canonical text (every layer a different item). */
#define VTP_LAYER_SET_TEXT 2304
typedef struct vtp_layer_set {
    int           all;                   /* 1: every site of every layer */
    unsigned char site[VTP_MAX_LAYERS];  /* per layer: bit 0 the attention site, bit 1 the FFN site */
} vtp_layer_set;

/* Parses text into *out. n_layers > 0 bounds the layers (0: any below
 * VTP_MAX_LAYERS); sites 0 refuses ".attn"/".ffn" (a knob scoped by whole
 * layers). 0, or -1 with err saying what is wrong (the caller names the knob). */
int vtp_layer_set_parse(const char *text, int n_layers, int sites, vtp_layer_set *out, char *err, size_t errlen);
/* The canonical text of s into out; 0, or -1 when outlen is too small. */
int vtp_layer_set_format(const vtp_layer_set *s, char *out, size_t outlen);
/* 1 when site (0 attention, 1 FFN) of layer is in s. */
int vtp_layer_set_has(const vtp_layer_set *s, int layer, int site);
/* The scope of scoped knob `knob`: environment variable KNOB_LAYERS ("all"
 * when unset or empty), parsed as above into *out, its canonical text into
 * canon (VTP_LAYER_SET_TEXT bytes) for the hello's scope_value. 0, or -1 with
 * err naming the variable (an engine then exits before its hello: bad input). */
int vtp_scope_env(const char *knob, int n_layers, int sites, vtp_layer_set *out, char *canon, char *err,
                  size_t errlen);

/* ---------------------------------------------------------------- serving */

/* Runs tokens[0..T) from an empty state. logits: [T * vocab] f32, every
 * element to be written. residuals: NULL, or [n_layers][2][T][hidden] f32
 * (after the attention add, after the FFN add) when the request asked for a
 * capture and the hello said capture. probes: cleared before each call,
 * mode from VTP_PROBE. Returns 0, or non-zero with err filled: the request
 * gets an error response and serving goes on. */
typedef int (*vtp_forward_fn)(void *user, const int32_t *tokens, int64_t T, float *logits, float *residuals,
                              vtp_probes *probes, char *err, size_t errlen);

/* Runs n sequences of one request, each from an empty state: sequence i is
 * tokens[off[i] .. off[i+1]) (off[0] = 0, each at least one token). logits:
 * [off[n] * vocab] f32, sequence i's rows from logits + off[i] * vocab.
 * residuals: NULL, or each sequence's [n_layers][2][T_i][hidden] f32 one
 * after another (sequence i's from residuals + n_layers * 2 * hidden *
 * off[i]). probes: cleared before the call; the records of all n sequences
 * (what n calls of a vtp_forward_fn would record, summed). An engine that
 * packs sequences into one pass of its own (a GPU's batch) gives each the
 * bits it would have alone, or says deterministic false. Returns 0, or
 * non-zero with err filled (the whole request gets an error response). */
typedef int (*vtp_forward_batch_fn)(void *user, int64_t n, const int32_t *tokens, const int64_t *off,
                                    float *logits, float *residuals, vtp_probes *probes, char *err, size_t errlen);

/* Writes the hello to out, then answers forward requests from in until EOF.
 * Malformed requests get error responses. Returns 0 at a clean EOF, 1 when
 * in ended inside a frame, out failed, or memory ran out. A hello with
 * max_batch > 1 takes requests of several sequences: fn runs once per
 * sequence and the probe records are merged (vtp_serve_batch with no batch
 * callback). */
int vtp_serve(FILE *in, FILE *out, const vtp_hello *h, vtp_forward_fn fn, void *user);
/* vtp_serve with an optional batch callback bfn: a request of several
 * sequences goes to bfn in one call (NULL: to fn, once per sequence); one of
 * one sequence to fn (NULL: to bfn with n = 1). */
int vtp_serve_batch(FILE *in, FILE *out, const vtp_hello *h, vtp_forward_fn fn, vtp_forward_batch_fn bfn,
                    void *user);

/* ---------------------------------------------------------------- pieces */

/* The vtlab model hash of a checkpoint directory: sha256 over config.json,
 * then every *.safetensors file in byte order of their names. 0, or -1
 * (out[0] = 0) when a file cannot be read or there is no *.safetensors. */
int  vtp_model_sha256(const char *dir, char out[65]);

typedef struct vtp_sha256 { uint32_t h[8]; uint64_t len; uint8_t buf[64]; size_t nbuf; } vtp_sha256;
void vtp_sha256_init(vtp_sha256 *c);
void vtp_sha256_update(vtp_sha256 *c, const void *data, size_t n);
void vtp_sha256_hex(vtp_sha256 *c, char out[65]);

/* Writes s as a JSON string (quoted, escaped) to f. */
void vtp_json_string(FILE *f, const char *s);
/* Writes one probe record as a JSON object to f. */
void vtp_json_record(FILE *f, const vtp_record *r);

#ifdef __cplusplus
}
#endif
#endif /* VTPROBE_H */

/* ====================================================================== */
#ifdef VTPROBE_IMPLEMENTATION
#ifndef VTPROBE_IMPLEMENTED
#define VTPROBE_IMPLEMENTED

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static void vtp__copy_str(char *dst, size_t cap, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
}

void vtp_probes_clear(vtp_probes *p) {
    p->n = 0;
    p->lost = 0;
}

void vtp_probes_free(vtp_probes *p) {
    free(p->recs);
    memset(p, 0, sizeof *p);
}

int vtp_probe_mode_env(void) {
    const char *v = getenv("VTP_PROBE");
    if (!v) return VTP_OFF;
    if (!strcmp(v, "on")) return VTP_ON;
    if (!strcmp(v, "audit")) return VTP_AUDIT;
    return VTP_OFF;
}

/* The record with this key, added (zero counts) if new; NULL when out of memory. */
static vtp_record *vtp__find_or_add(vtp_probes *p, const char *site, int layer, const char *dtype, const char *src,
                                    int64_t bpr, int64_t srb, int64_t drb, int converting) {
    for (int64_t i = 0; i < p->n; i++) {
        vtp_record *r = &p->recs[i];
        if (r->layer == layer && !strcmp(r->site, site) && !strcmp(r->dtype, dtype) && !strcmp(r->src_dtype, src) &&
            r->bytes_per_row == bpr && r->src_row_bytes == srb && r->dst_row_bytes == drb &&
            r->converting == converting)
            return r;
    }
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 64;
        vtp_record *nr = (vtp_record *)realloc(p->recs, (size_t)cap * sizeof *nr);
#ifndef VT_MUTATE_PROBE_LOST_UNCOUNTED   /* vtlab's `make mutation`: a lost record goes uncounted */
        if (!nr) { p->lost++; return NULL; }
#else
        if (!nr) return NULL;
#endif
        p->recs = nr;
        p->cap = cap;
    }
    vtp_record *r = &p->recs[p->n++];
    memset(r, 0, sizeof *r);
    vtp__copy_str(r->site, sizeof r->site, site);
    r->layer = layer;
    vtp__copy_str(r->dtype, sizeof r->dtype, dtype);
    vtp__copy_str(r->src_dtype, sizeof r->src_dtype, src);
    r->bytes_per_row = bpr;
    r->src_row_bytes = srb;
    r->dst_row_bytes = drb;
    r->converting = converting;
    r->rows_unwritten = -1;
    return r;
}

void vtp_probe_buffer(vtp_probes *p, const char *site, int layer, const char *dtype, int64_t rows,
                      int64_t row_bytes) {
    if (p->mode == VTP_OFF) return;
    vtp_record *r = vtp__find_or_add(p, site, layer, dtype, "", row_bytes, row_bytes, row_bytes, 0);
    if (!r) return;
    r->calls++;
    r->rows += rows;
}

void vtp_probe_copy(vtp_probes *p, const char *site, int layer, const char *src_dtype, const char *dst_dtype,
                    int64_t rows, int64_t bytes_per_row, int64_t src_row_bytes, int64_t dst_row_bytes,
                    int converting, int64_t rows_unwritten) {
    if (p->mode == VTP_OFF) return;
    vtp_record *r = vtp__find_or_add(p, site, layer, dst_dtype, src_dtype, bytes_per_row, src_row_bytes,
                                     dst_row_bytes, converting);
    if (!r) return;
    r->calls++;
    r->rows += rows;
    int bad_bytes = converting ? bytes_per_row != dst_row_bytes
                               : (bytes_per_row != src_row_bytes || bytes_per_row != dst_row_bytes);
    if (rows_unwritten >= 0) r->rows_unwritten = (r->rows_unwritten < 0 ? 0 : r->rows_unwritten) + rows_unwritten;
    if (!bad_bytes && rows_unwritten <= 0) return;
    r->violations++;
    if (r->detail[0]) return;
    if (bad_bytes)
        snprintf(r->detail, sizeof r->detail,
                 "copied %lld bytes per row; source row is %lld bytes (%s), destination row %lld bytes (%s)%s",
                 (long long)bytes_per_row, (long long)src_row_bytes, src_dtype, (long long)dst_row_bytes, dst_dtype,
                 rows_unwritten > 0 ? "; destination rows left unwritten" : "");
    else
        snprintf(r->detail, sizeof r->detail, "%lld destination rows left unwritten", (long long)rows_unwritten);
}

int vtp_probes_merge(vtp_probes *p, const vtp_record *in) {
    vtp_record *r = vtp__find_or_add(p, in->site, in->layer, in->dtype, in->src_dtype, in->bytes_per_row,
                                     in->src_row_bytes, in->dst_row_bytes, in->converting);
    if (!r) return -1;
    r->calls += in->calls;
    r->rows += in->rows;
    r->violations += in->violations;
    if (in->rows_unwritten >= 0)
        r->rows_unwritten = (r->rows_unwritten < 0 ? 0 : r->rows_unwritten) + in->rows_unwritten;
    if (!r->detail[0] && in->detail[0]) vtp__copy_str(r->detail, sizeof r->detail, in->detail);
    return 0;
}

int vtp_dtype_size(const char *d) {
    if (!strcmp(d, "f32") || !strcmp(d, "i32") || !strcmp(d, "u32")) return 4;
    if (!strcmp(d, "bf16") || !strcmp(d, "f16") || !strcmp(d, "i16")) return 2;
    if (!strcmp(d, "f64") || !strcmp(d, "i64")) return 8;
    if (!strcmp(d, "i8") || !strcmp(d, "u8") || !strcmp(d, "bool")) return 1;
    return 0;
}

/* The sentinel element of dtype into pat; its size. */
static int vtp__sentinel(const char *dtype, unsigned char pat[8]) {
    int es = vtp_dtype_size(dtype);
    if (es == 0) es = 1;
    memset(pat, 0xA5, 8);
    if (!strcmp(dtype, "f32")) { uint32_t v = 0x7FA5A5A5u; memcpy(pat, &v, 4); }
    else if (!strcmp(dtype, "bf16")) { uint16_t v = 0x7FA5u; memcpy(pat, &v, 2); }
    else if (!strcmp(dtype, "f16")) { uint16_t v = 0x7DA5u; memcpy(pat, &v, 2); }
    return es;
}

void vtp_sentinel_fill(void *buf, const char *dtype, int64_t rows, int64_t row_bytes) {
    unsigned char pat[8];
    size_t es = (size_t)vtp__sentinel(dtype, pat), n = (size_t)(rows * row_bytes);
    unsigned char *b = (unsigned char *)buf;
    for (size_t off = 0; off + es <= n; off += es) memcpy(b + off, pat, es);
}

int64_t vtp_rows_unwritten(const void *buf, const char *dtype, int64_t rows, int64_t row_bytes) {
    unsigned char pat[8];
    size_t es = (size_t)vtp__sentinel(dtype, pat);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *row = (const unsigned char *)buf + (size_t)(r * row_bytes);
        for (size_t off = 0; off + es <= (size_t)row_bytes; off += es)
            if (!memcmp(row + off, pat, es)) { bad++; break; }
    }
    return bad;
}

const char *vtp_knob_env(const char *name, const char *def, int *was_read) {
    const char *v = getenv(name);
    if (was_read) *was_read = 1;
    return v ? v : def;
}

/* ---------------------------------------------------------------- sha256 */

static const uint32_t vtp__K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define VTP__ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void vtp__sha_block(vtp_sha256 *c, const uint8_t *p) {
    uint32_t w[64], s[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = VTP__ROR(w[i - 15], 7) ^ VTP__ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = VTP__ROR(w[i - 2], 17) ^ VTP__ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(s, c->h, sizeof s);
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = VTP__ROR(s[4], 6) ^ VTP__ROR(s[4], 11) ^ VTP__ROR(s[4], 25);
        uint32_t ch = (s[4] & s[5]) ^ (~s[4] & s[6]);
        uint32_t t1 = s[7] + S1 + ch + vtp__K[i] + w[i];
        uint32_t S0 = VTP__ROR(s[0], 2) ^ VTP__ROR(s[0], 13) ^ VTP__ROR(s[0], 22);
        uint32_t mj = (s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]);
        memmove(s + 1, s, 7 * sizeof s[0]);
        s[4] += t1;
        s[0] = t1 + S0 + mj;
    }
    for (int i = 0; i < 8; i++) c->h[i] += s[i];
}

void vtp_sha256_init(vtp_sha256 *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->len = 0;
    c->nbuf = 0;
}

void vtp_sha256_update(vtp_sha256 *c, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    c->len += n;
    while (n > 0) {
        size_t take = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take;
        p += take;
        n -= take;
        if (c->nbuf == 64) {
            vtp__sha_block(c, c->buf);
            c->nbuf = 0;
        }
    }
}

void vtp_sha256_hex(vtp_sha256 *c, char out[65]) {
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    vtp_sha256_update(c, &pad, 1);
    while (c->nbuf != 56) vtp_sha256_update(c, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    vtp_sha256_update(c, len, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", (unsigned)c->h[i]);
    out[64] = 0;
}

static int vtp__hash_file(vtp_sha256 *c, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) vtp_sha256_update(c, buf, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}

static int vtp__cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int vtp_model_sha256(const char *dir, char out[65]) {
    vtp_sha256 c;
    char path[4096];
    char *names[1024];
    int n = 0, rc = 0;
    out[0] = 0;
    vtp_sha256_init(&c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (vtp__hash_file(&c, path)) return -1;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 1024) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
            names[n] = (char *)malloc(l + 1);
            if (!names[n]) { rc = -1; break; }
            memcpy(names[n++], de->d_name, l + 1);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], vtp__cmp_str);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!rc && vtp__hash_file(&c, path)) rc = -1;
        free(names[i]);
    }
    if (rc || n == 0) return -1;
    vtp_sha256_hex(&c, out);
    return 0;
}

/* ---------------------------------------------------------------- JSON out */

void vtp_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void vtp_json_record(FILE *f, const vtp_record *r) {
    fputs("{\"site\":", f);
    vtp_json_string(f, r->site);
    fprintf(f, ",\"layer\":%d,\"dtype\":", r->layer);
    vtp_json_string(f, r->dtype);
    fputs(",\"src_dtype\":", f);
    vtp_json_string(f, r->src_dtype);
    fprintf(f,
            ",\"calls\":%lld,\"rows\":%lld,\"bytes_per_row\":%lld,\"src_row_bytes\":%lld,\"dst_row_bytes\":%lld,"
            "\"converting\":%d,\"violations\":%lld,\"rows_unwritten\":%lld,\"detail\":",
            (long long)r->calls, (long long)r->rows, (long long)r->bytes_per_row, (long long)r->src_row_bytes,
            (long long)r->dst_row_bytes, r->converting, (long long)r->violations, (long long)r->rows_unwritten);
    vtp_json_string(f, r->detail);
    fputc('}', f);
}

/* A '|'-separated list as a JSON array of strings. */
static void vtp__json_list(FILE *f, const char *list) {
    fputc('[', f);
    const char *p = list ? list : "";
    int first = 1;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char item[256];
        if (n >= sizeof item) n = sizeof item - 1;
        memcpy(item, p, n);
        item[n] = 0;
        if (!first) fputc(',', f);
        vtp_json_string(f, item);
        first = 0;
        p += n;
        if (*p == '|') p++;
    }
    fputc(']', f);
}

static void vtp__write_hello(FILE *f, const vtp_hello *h) {
    fprintf(f, "{\"type\":\"hello\",\"protocol\":%d,\"engine\":{\"name\":", VTP_PROTOCOL);
    vtp_json_string(f, h->engine);
    fputs(",\"version\":", f);
    vtp_json_string(f, h->version);
    fputs(",\"commit\":", f);
    vtp_json_string(f, h->commit);
    fputs("},\"model\":{\"sha256\":", f);
    vtp_json_string(f, h->model_sha256);
    fprintf(f, ",\"vocab\":%lld,\"hidden\":%lld,\"n_layers\":%lld,\"layer_kinds\":", (long long)h->vocab,
            (long long)h->hidden, (long long)h->n_layers);
    vtp_json_string(f, h->layer_kinds);
    fputs("},\"knobs\":[", f);
    for (int i = 0; i < h->n_knobs; i++) {
        const vtp_knob *k = &h->knobs[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        vtp_json_string(f, k->name);
        fputs(",\"type\":", f);
        vtp_json_string(f, k->type);
        fputs(",\"values\":", f);
        vtp__json_list(f, k->values);
        fputs(",\"default\":", f);
        vtp_json_string(f, k->def);
        fprintf(f, ",\"numeric\":%s,\"value\":", k->numeric ? "true" : "false");
        vtp_json_string(f, k->value);
        fprintf(f, ",\"read\":%s", k->read ? "true" : "false");
        if (k->scope && k->scope[0]) {
            fputs(",\"scope\":", f);
            vtp_json_string(f, k->scope);
            fputs(",\"scope_value\":", f);
            vtp_json_string(f, k->scope_value ? k->scope_value : "all");
        }
        fputc('}', f);
    }
    fputs("],\"probe_sites\":[", f);
    for (int i = 0; i < h->n_probe_sites; i++) {
        if (i) fputc(',', f);
        vtp_json_string(f, h->probe_sites[i]);
    }
    fputs("],\"faults\":[", f);
    for (int i = 0; i < h->n_faults; i++) {
        const vtp_fault *x = &h->faults[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        vtp_json_string(f, x->name);
        fputs(",\"knob\":", f);
        vtp_json_string(f, x->knob);
        fputs(",\"site\":", f);
        vtp_json_string(f, x->site);
        fputs(",\"description\":", f);
        vtp_json_string(f, x->description);
        fputc('}', f);
    }
    fprintf(f, "],\"deterministic\":%s,\"capture\":%s", h->deterministic ? "true" : "false",
            h->capture ? "true" : "false");
    if (h->max_batch > 1) fprintf(f, ",\"max_batch\":%d", h->max_batch);
    fputs("}\n", f);
}

/* ---------------------------------------------------------------- JSON in */

/* The members of a forward request; *_set says whether each was present
 * with the right type. */
typedef struct vtp__req {
    char    type[32];
    int64_t id, tokens, payload;
    int     capture;
    int     type_set, id_set, tokens_set, payload_set;
    /* "sequences": the lengths, the first seq_cap of them kept in seq (the
     * caller's); n_seq counts them all; seq_bad: one was not an integer in
     * 1..VTP_MAX_TOKENS, or the member was not an array */
    int64_t *seq, seq_cap, n_seq;
    int     seq_set, seq_bad;
} vtp__req;

typedef struct vtp__in { const char *p, *end; } vtp__in;

static void vtp__ws(vtp__in *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n')) s->p++;
}

/* A JSON string; its unescaped text (truncated) into out when out. 0 ok, -1 bad. */
static int vtp__str(vtp__in *s, char *out, size_t cap) {
    size_t n = 0;
    if (s->p >= s->end || *s->p != '"') return -1;
    s->p++;
    while (s->p < s->end && *s->p != '"') {
        char c = *s->p++;
        if ((unsigned char)c < 0x20) return -1;
        if (c == '\\') {
            if (s->p >= s->end) return -1;
            c = *s->p++;
            if (c == 'u') {
                if (s->end - s->p < 4) return -1;
                s->p += 4;
                c = '?';
            } else if (!strchr("\"\\/bfnrt", c)) return -1;
        }
        if (out && n + 1 < cap) out[n++] = c;
    }
    if (s->p >= s->end) return -1;
    s->p++;
    if (out) out[n] = 0;
    return 0;
}

static int vtp__value(vtp__in *s, int depth);

static int vtp__number(vtp__in *s, int64_t *v, int *is_int) {
    const char *start = s->p;
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return -1;
    while (s->p < s->end && strchr("0123456789+-.eE", *s->p)) s->p++;
    char buf[64];
    size_t n = (size_t)(s->p - start);
    if (n >= sizeof buf) { *is_int = 0; return 0; }
    memcpy(buf, start, n);
    buf[n] = 0;
    char *end = NULL;
    long long x = strtoll(buf, &end, 10);
    *is_int = *end == 0;
    if (v) *v = (int64_t)x;
    return 0;
}

static int vtp__value(vtp__in *s, int depth) {
    vtp__ws(s);
    if (s->p >= s->end || depth > 64) return -1;
    char c = *s->p;
    if (c == '"') return vtp__str(s, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        vtp__ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return 0; }
        for (;;) {
            if (c == '{') {
                vtp__ws(s);
                if (vtp__str(s, NULL, 0)) return -1;
                vtp__ws(s);
                if (s->p >= s->end || *s->p++ != ':') return -1;
            }
            if (vtp__value(s, depth + 1)) return -1;
            vtp__ws(s);
            if (s->p >= s->end) return -1;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == close) { s->p++; return 0; }
            return -1;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int is_int;
        return vtp__number(s, NULL, &is_int);
    }
    static const char *const lit[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lit[i]);
        if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, lit[i], n)) { s->p += n; return 0; }
    }
    return -1;
}

/* The array of a "sequences" member into q (any other value: seq_bad). 0, or -1 not JSON. */
static int vtp__seq_array(vtp__in *s, vtp__req *q) {
    q->seq_set = 1;
    q->n_seq = 0;
    q->seq_bad = 0;
    if (s->p >= s->end || *s->p != '[') {
        q->seq_bad = 1;
        return vtp__value(s, 1);
    }
    s->p++;
    vtp__ws(s);
    if (s->p < s->end && *s->p == ']') { s->p++; return 0; }
    for (;;) {
        vtp__ws(s);
        int64_t v = 0;
        int is_int = 0;
        if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
            if (vtp__number(s, &v, &is_int)) return -1;
        } else if (vtp__value(s, 2)) {
            return -1;
        }
        if (!is_int || v < 1 || v > VTP_MAX_TOKENS) q->seq_bad = 1;
        else if (q->n_seq < q->seq_cap) q->seq[q->n_seq] = v;
        q->n_seq++;
        vtp__ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p++ == ']') return 0;
        return -1;
    }
}

/* Parses a request header; 0 ok (members that were present are set), -1 not
 * a JSON object. seq: room for seq_cap sequence lengths. */
static int vtp__parse_req(const char *text, size_t len, vtp__req *q, int64_t *seq, int64_t seq_cap) {
    vtp__in s = {text, text + len};
    memset(q, 0, sizeof *q);
    q->seq = seq;
    q->seq_cap = seq_cap;
    vtp__ws(&s);
    if (s.p >= s.end || *s.p++ != '{') return -1;
    vtp__ws(&s);
    if (s.p < s.end && *s.p == '}') { s.p++; goto tail; }
    for (;;) {
        char key[32];
        vtp__ws(&s);
        if (vtp__str(&s, key, sizeof key)) return -1;
        vtp__ws(&s);
        if (s.p >= s.end || *s.p++ != ':') return -1;
        vtp__ws(&s);
        int64_t v = 0;
        int is_int = 0;
        int64_t *num = !strcmp(key, "id") ? &q->id : !strcmp(key, "tokens") ? &q->tokens
                     : !strcmp(key, "payload_bytes") ? &q->payload : NULL;
        int *num_set = !strcmp(key, "id") ? &q->id_set : !strcmp(key, "tokens") ? &q->tokens_set
                     : !strcmp(key, "payload_bytes") ? &q->payload_set : NULL;
        if (!strcmp(key, "type") && s.p < s.end && *s.p == '"') {
            if (vtp__str(&s, q->type, sizeof q->type)) return -1;
            q->type_set = 1;
        } else if (num && s.p < s.end && (*s.p == '-' || (*s.p >= '0' && *s.p <= '9'))) {
            if (vtp__number(&s, &v, &is_int)) return -1;
            if (is_int) { *num = v; *num_set = 1; }
        } else if (!strcmp(key, "capture") && (size_t)(s.end - s.p) >= 4 && !memcmp(s.p, "true", 4)) {
            s.p += 4;
            q->capture = 1;
        } else if (!strcmp(key, "sequences")) {
            if (vtp__seq_array(&s, q)) return -1;
        } else if (vtp__value(&s, 1)) {
            return -1;
        }
        vtp__ws(&s);
        if (s.p >= s.end) return -1;
        if (*s.p == ',') { s.p++; continue; }
        if (*s.p++ == '}') break;
        return -1;
    }
tail:
    vtp__ws(&s);
    return s.p == s.end ? 0 : -1;
}

/* ---------------------------------------------------------------- serving */

static int vtp__error(FILE *out, int64_t id, int id_known, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (id_known) fprintf(out, "{\"type\":\"error\",\"id\":%lld,\"message\":", (long long)id);
    else fputs("{\"type\":\"error\",\"id\":null,\"message\":", out);
    vtp_json_string(out, msg);
    fputs("}\n", out);
    return fflush(out) == 0 ? 0 : 1;
}

/* Reads one header line into *buf (grown). 1 line read, 0 EOF before any
 * byte, -1 line too long (consumed), -2 EOF inside the line, -3 no memory. */
static int vtp__read_line(FILE *in, char **buf, size_t *cap, size_t *len) {
    size_t n = 0;
    int c, too_long = 0;
    while ((c = fgetc(in)) != EOF && c != '\n') {
        if (n >= VTP_MAX_HEADER) { too_long = 1; continue; }
        if (n + 1 >= *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            char *nb = (char *)realloc(*buf, nc);
            if (!nb) return -3;
            *buf = nb;
            *cap = nc;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF) return n || too_long ? -2 : 0;
    if (too_long) return -1;
    if (!*buf) {   /* an empty line: nothing was stored yet */
        if (!(*buf = (char *)malloc(64))) return -3;
        *cap = 64;
    }
    (*buf)[n] = 0;
    *len = n;
    return 1;
}

/* Discards n payload bytes; 0, or -1 at EOF. */
static int vtp__skip(FILE *in, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (fgetc(in) == EOF) return -1;
    return 0;
}

/* The response to a request: header, logits, residuals. seq: the request's
 * sequence lengths when it named them (echoed), else NULL. */
static int vtp__respond(FILE *out, const vtp_hello *h, int64_t id, int64_t T, const float *logits,
                        const float *resid, const vtp_probes *pr, const int64_t *seq, int64_t n_seq) {
    int64_t lbytes = T * h->vocab * 4, rbytes = resid ? h->n_layers * 2 * T * h->hidden * 4 : 0;
    fprintf(out, "{\"type\":\"logits\",\"id\":%lld,\"tokens\":%lld,", (long long)id, (long long)T);
    if (seq) {
        fputs("\"sequences\":[", out);
        for (int64_t i = 0; i < n_seq; i++) fprintf(out, i ? ",%lld" : "%lld", (long long)seq[i]);
        fputs("],", out);
    }
    fprintf(out, "\"vocab\":%lld,\"residuals\":%s,\"payload_bytes\":%lld,\"probes\":[", (long long)h->vocab,
            resid ? "true" : "false", (long long)(lbytes + rbytes));
    for (int64_t i = 0; i < pr->n; i++) {
        if (i) fputc(',', out);
        vtp_json_record(out, &pr->recs[i]);
    }
    fputs("]}\n", out);
    /* Little-endian on the wire: every platform vtlab builds on is. */
    if (fwrite(logits, 1, (size_t)lbytes, out) != (size_t)lbytes) return 1;
    if (rbytes && fwrite(resid, 1, (size_t)rbytes, out) != (size_t)rbytes) return 1;
    return fflush(out) == 0 ? 0 : 1;
}

/* What a request's header gets wrong (msg holds a formatted message), or NULL. */
static const char *vtp__bad_req(const vtp__req *q, int64_t max_batch, char *msg, size_t cap) {
    const char *bad = !q->id_set ? "id: expected an integer"
                    : !q->type_set || strcmp(q->type, "forward") ? "type: expected \"forward\""
                    : !q->tokens_set || q->tokens < 1 || q->tokens > VTP_MAX_TOKENS ? "tokens: expected 1..1048576"
                    : !q->payload_set || q->payload != 4 * q->tokens ? "payload_bytes: expected 4 * tokens"
                    : NULL;
    if (bad || !q->seq_set) return bad;
    if (q->n_seq == 0) return "sequences: expected an array of positive lengths";
    if (q->n_seq > max_batch) {
        snprintf(msg, cap, "sequences: %lld sequences, more than max_batch %lld", (long long)q->n_seq,
                 (long long)max_batch);
        return msg;
    }
    if (q->seq_bad) return "sequences: expected an array of positive lengths";
    int64_t sum = 0;
    for (int64_t i = 0; i < q->n_seq; i++) sum += q->seq[i];
    if (sum == q->tokens) return NULL;
    snprintf(msg, cap, "sequences: lengths sum to %lld, expected tokens %lld", (long long)sum, (long long)q->tokens);
    return msg;
}

/* A serve loop's state: the engine's callbacks and the buffers it reuses. */
typedef struct vtp__srv {
    FILE *in, *out;
    const vtp_hello *h;
    vtp_forward_fn fn;
    vtp_forward_batch_fn bfn;
    void *user;
    int32_t *tok;
    float *logits, *resid;
    int64_t tcap;
    int64_t max_batch, *seq, *off;   /* seq [max_batch] lengths; off [max_batch + 1] */
    vtp_probes pr, one;              /* the request's records; one sequence's (fn per sequence) */
    char err[512];
} vtp__srv;

/* Buffers for T tokens; 0, or -1 out of memory (then none). */
static int vtp__grow(vtp__srv *v, int64_t T) {
    const vtp_hello *h = v->h;
    free(v->tok); free(v->logits); free(v->resid);
    v->tok = (int32_t *)malloc((size_t)T * sizeof *v->tok);
    v->logits = (float *)malloc((size_t)(T * h->vocab) * sizeof *v->logits);
    v->resid = h->capture ? (float *)malloc((size_t)(h->n_layers * 2 * T * h->hidden) * sizeof *v->resid) : NULL;
    v->tcap = T;
    if (v->tok && v->logits && (!h->capture || v->resid)) return 0;
    v->tcap = 0;
    return -1;
}

/* Runs the n sequences at v->off: through bfn in one call, or through fn
 * once per sequence with the records merged in order. 0, or 1 (v->err). */
static int vtp__run(vtp__srv *v, int64_t n, float *resid) {
    const vtp_hello *h = v->h;
    if (v->bfn && (n > 1 || !v->fn)) return v->bfn(v->user, n, v->tok, v->off, v->logits, resid, &v->pr, v->err,
                                                    sizeof v->err) != 0;
    for (int64_t i = 0; i < n; i++) {
        vtp_probes *p = n == 1 ? &v->pr : &v->one;
        const int64_t a = v->off[i], T = v->off[i + 1] - a;
        vtp_probes_clear(p);
        if (v->fn(v->user, v->tok + a, T, v->logits + a * h->vocab,
                  resid ? resid + h->n_layers * 2 * h->hidden * a : NULL, p, v->err, sizeof v->err)) {
            if (n > 1) {
                char e[sizeof v->err];
                snprintf(e, sizeof e, "sequence %lld: %.480s", (long long)i, v->err[0] ? v->err : "forward failed");
                memcpy(v->err, e, sizeof e);
            }
            return 1;
        }
        if (n == 1) break;
        for (int64_t r = 0; r < v->one.n; r++) vtp_probes_merge(&v->pr, &v->one.recs[r]);   /* counts what it loses */
        v->pr.lost += v->one.lost;
    }
    return 0;
}

/* A request whose header is good: reads its tokens, runs it, responds.
 * 0, or 1 when in ended or out failed. */
static int vtp__forward(vtp__srv *v, const vtp__req *q) {
    const vtp_hello *h = v->h;
    const int64_t T = q->tokens, n = q->seq_set ? q->n_seq : 1;
    if (T > v->tcap && vtp__grow(v, T))
        return vtp__skip(v->in, q->payload) || vtp__error(v->out, q->id, 1, "out of memory for %lld tokens", (long long)T);
    if (fread(v->tok, 4, (size_t)T, v->in) != (size_t)T) return 1;
    for (int64_t at = 0; at < T; at++)
        if (v->tok[at] < 0 || v->tok[at] >= h->vocab)
            return vtp__error(v->out, q->id, 1, "tokens[%lld]: id %d not in [0, %lld)", (long long)at, (int)v->tok[at],
                              (long long)h->vocab);
    v->off[0] = 0;
    for (int64_t i = 0; i < n; i++) v->off[i + 1] = v->off[i] + (q->seq_set ? q->seq[i] : T);
    vtp_probes_clear(&v->pr);
    v->err[0] = 0;
    float *want = q->capture && h->capture ? v->resid : NULL;
    if (vtp__run(v, n, want)) return vtp__error(v->out, q->id, 1, "%s", v->err[0] ? v->err : "forward failed");
    if (v->pr.lost)
        return vtp__error(v->out, q->id, 1, "%lld probe observations lost (out of memory)", (long long)v->pr.lost);
    return vtp__respond(v->out, h, q->id, T, v->logits, want, &v->pr, q->seq_set ? q->seq : NULL, n);
}

/* One frame from in, answered. 0 go on; 1 in ended inside a frame, out
 * failed or memory ran out; 2 a clean EOF. */
static int vtp__serve_one(vtp__srv *v, char **line, size_t *cap) {
    size_t len = 0;
    int got = vtp__read_line(v->in, line, cap, &len);
    if (got == 0) return 2;
    if (got == -2 || got == -3) return 1;
    if (got == -1) return vtp__error(v->out, 0, 0, "header longer than %d bytes", VTP_MAX_HEADER);
    vtp__req q;
    if (vtp__parse_req(*line, len, &q, v->seq, v->max_batch)) return vtp__error(v->out, 0, 0, "header is not a JSON object");
    char msg[160];
    const char *bad = vtp__bad_req(&q, v->max_batch, msg, sizeof msg);
    if (!bad) return vtp__forward(v, &q);
    int64_t skip = q.payload_set && q.payload > 0 ? q.payload : 0;
    if (skip > (int64_t)1 << 32 || vtp__skip(v->in, skip)) return 1;
    return vtp__error(v->out, q.id, q.id_set, "%s", bad);
}

int vtp_serve_batch(FILE *in, FILE *out, const vtp_hello *h, vtp_forward_fn fn, vtp_forward_batch_fn bfn,
                    void *user) {
    vtp__srv v;
    memset(&v, 0, sizeof v);
    v.in = in;
    v.out = out;
    v.h = h;
    v.fn = fn;
    v.bfn = bfn;
    v.user = user;
    v.max_batch = h->max_batch <= 1 ? 1 : h->max_batch < VTP_MAX_BATCH ? h->max_batch : VTP_MAX_BATCH;
    v.seq = (int64_t *)malloc((size_t)v.max_batch * sizeof *v.seq);
    v.off = (int64_t *)malloc((size_t)(v.max_batch + 1) * sizeof *v.off);
    v.pr.mode = v.one.mode = vtp_probe_mode_env();
    int rc = !v.seq || !v.off || (!fn && !bfn);
    if (!rc) {
        /* One write per frame instead of one per stdio block (a pipe's is 4 KiB):
         * the hello is the first byte on out, so the buffer can still be set. */
        setvbuf(out, NULL, _IOFBF, 1 << 20);
        vtp__write_hello(out, h);
        rc = fflush(out) != 0;
    }
    char *line = NULL;
    size_t cap = 0;
    while (!rc) rc = vtp__serve_one(&v, &line, &cap);
    free(line);
    free(v.tok);
    free(v.logits);
    free(v.resid);
    free(v.seq);
    free(v.off);
    vtp_probes_free(&v.pr);
    vtp_probes_free(&v.one);
    return rc == 2 ? 0 : rc;
}

int vtp_serve(FILE *in, FILE *out, const vtp_hello *h, vtp_forward_fn fn, void *user) {
    return vtp_serve_batch(in, out, h, fn, NULL, user);
}

/* ---------------------------------------------------------------- scopes */

static int vtp__set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#define VTP__SET_FORM "expected \"all\", \"none\" or layers like \"0-3,7\" (0-based layers and ranges a-b, " \
                      "each optionally .attn or .ffn)"

/* A layer number of 1 to 3 digits at *p; -1 when there is none. */
static int vtp__layer_num(const char **p) {
    int v = 0, n = 0;
    while (**p >= '0' && **p <= '9' && n < 4) v = v * 10 + (*(*p)++ - '0'), n++;
    return n == 0 || n > 3 ? -1 : v;
}

/* One item [a, b] with its site mask from *p up to ',' or the end. */
static int vtp__set_item(const char **p, int n_layers, int sites, vtp_layer_set *out, char *err, size_t errlen) {
    const char *start = *p;
    int a = vtp__layer_num(p), b = a, mask = 3;
    if (a >= 0 && **p == '-') { (*p)++; b = vtp__layer_num(p); }
    if (a >= 0 && b >= 0 && **p == '.') {
        if (!strncmp(*p, ".attn", 5)) mask = 1, *p += 5;
        else if (!strncmp(*p, ".ffn", 4)) mask = 2, *p += 4;
        else b = -1;
    }
    size_t len = strcspn(start, ",");
    if (a < 0 || b < 0 || (**p && **p != ','))
        return vtp__set_err(err, errlen, "%s; \"%.*s\" is none of them", VTP__SET_FORM, (int)(len < 40 ? len : 40), start);
    if (b < a) return vtp__set_err(err, errlen, "%s; the range %d-%d ends before it starts", VTP__SET_FORM, a, b);
    int limit = n_layers > 0 ? n_layers : VTP_MAX_LAYERS;
    if (b >= limit) {
        if (n_layers > 0)
            return vtp__set_err(err, errlen, "layer %d is beyond the model's %d layers (0-%d)", b, n_layers, n_layers - 1);
        return vtp__set_err(err, errlen, "layer %d is beyond the largest model's %d layers", b, VTP_MAX_LAYERS);
    }
    if (mask != 3 && !sites)
        return vtp__set_err(err, errlen, "\"%.*s\": this knob is scoped by whole layers (no .attn or .ffn)",
                            (int)(len < 40 ? len : 40), start);
    for (int l = a; l <= b; l++) out->site[l] |= (unsigned char)mask;
    return 0;
}

int vtp_layer_set_parse(const char *text, int n_layers, int sites, vtp_layer_set *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!text || !*text) return vtp__set_err(err, errlen, "%s; got an empty value", VTP__SET_FORM);
    if (!strcmp(text, "all")) { out->all = 1; return 0; }
    if (!strcmp(text, "none")) return 0;
    for (const char *p = text;;) {
        if (vtp__set_item(&p, n_layers, sites, out, err, errlen)) return -1;
        if (!*p) return 0;
        if (!*++p) return vtp__set_err(err, errlen, "%s; the value ends with ','", VTP__SET_FORM);
    }
}

int vtp_layer_set_format(const vtp_layer_set *s, char *out, size_t outlen) {
    size_t used = 0;
    if (outlen < 5) return -1;
    if (s->all) { snprintf(out, outlen, "all"); return 0; }
    out[0] = 0;
    for (int l = 0; l < VTP_MAX_LAYERS;) {
        int m = s->site[l] & 3, e = l;
        if (!m) { l++; continue; }
        while (e + 1 < VTP_MAX_LAYERS && (s->site[e + 1] & 3) == m) e++;
        char item[32];
        const char *suf = m == 1 ? ".attn" : m == 2 ? ".ffn" : "";
        int n = e > l ? snprintf(item, sizeof item, "%s%d-%d%s", used ? "," : "", l, e, suf)
                      : snprintf(item, sizeof item, "%s%d%s", used ? "," : "", l, suf);
        if (used + (size_t)n + 1 > outlen) return -1;
        memcpy(out + used, item, (size_t)n + 1);
        used += (size_t)n;
        l = e + 1;
    }
    if (!used) snprintf(out, outlen, "none");
    return 0;
}

int vtp_layer_set_has(const vtp_layer_set *s, int layer, int site) {
    if (s->all) return 1;
    if (layer < 0 || layer >= VTP_MAX_LAYERS || site < 0 || site > 1) return 0;
    return (s->site[layer] >> site) & 1;
}

int vtp_scope_env(const char *knob, int n_layers, int sites, vtp_layer_set *out, char *canon, char *err,
                  size_t errlen) {
    char name[256], why[512];
    snprintf(name, sizeof name, "%s_LAYERS", knob);
    const char *v = getenv(name);
    if (!v || !*v) v = "all";
    if (vtp_layer_set_parse(v, n_layers, sites, out, why, sizeof why))
        return vtp__set_err(err, errlen, "%s=%s: %s", name, v, why);
    return vtp_layer_set_format(out, canon, VTP_LAYER_SET_TEXT);
}

#ifdef __cplusplus
}
#endif
#endif /* VTPROBE_IMPLEMENTED */
#endif /* VTPROBE_IMPLEMENTATION */
