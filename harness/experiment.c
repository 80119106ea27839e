/*
 * experiment.c — strict parsing of experiment files and loading of datasets.
 *
 * Why strict: an experiment file is the record of what a verdict measured.
 * A misspelt field ("scroe": "last") that is silently ignored changes what
 * was measured without anyone noticing, which is the very failure vtlab
 * exists to prevent. So every object's keys are checked against the fields
 * it may have, every value's type and range is checked, and every message
 * names the file and the JSON path of the field ("arms[1].expect.moe.scatter").
 *
 * The dataset is loaded here too (inline lists, a file of ids, or the
 * splitmix64 generator), because a dataset that cannot be read is bad input
 * of the same kind and must be rejected before the database is opened.
 */
#include "experiment.h"

#include "model/vt.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "paths.h"
#include "util.h"

/* Dataset limits, the same for every source (generate, inline, file) and
 * documented in docs/experiments.md. They bound what parsing may allocate
 * before the model is known; lab_dataset_prepare then bounds what a run will
 * hold for this model's vocabulary (LAB_RUN_MAX_BYTES). */
#define MAX_TOKENS     LAB_DS_MAX_TOKENS
#define MAX_SEQS       LAB_DS_MAX_SEQS
#define MAX_SEQ_LEN    LAB_DS_MAX_SEQ_LEN

/* Parsing context: the file name for messages and the error buffer. */
typedef struct pctx {
    const char *path;
    char       *err;
    size_t      errlen;
} pctx;

#define BAD(c, field, ...) bad_field((c), (field), __VA_ARGS__)

__attribute__((format(printf, 3, 4)))
static int bad_field(pctx *c, const char *field, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lab_errf(c->err, c->errlen, LAB_EINPUT, "%s: %s: %s", c->path, field, msg);
}

static const char *json_type(const cJSON *j) {
    if (!j) return "nothing";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "an unknown value";
}

/* Rejects keys of obj not in the NULL-terminated list allowed. */
static int check_keys(pctx *c, const cJSON *obj, const char *where, const char *const *allowed) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(it->string, *a)) { ok = 1; break; }
        if (ok) continue;
        char list[512] = "", meant[96] = "";
        vt_suggester sg;
        vt_suggest_init(&sg, it->string);
        for (const char *const *a = allowed; *a; a++) {
            strncat(list, *a, sizeof list - strlen(list) - 1);
            if (a[1]) strncat(list, ", ", sizeof list - strlen(list) - 1);
            vt_suggest_offer(&sg, *a);
        }
        if (sg.best) snprintf(meant, sizeof meant, "did you mean %s? ", sg.best);
        char field[256];
        snprintf(field, sizeof field, "%s%s%s", where, *where ? "." : "", it->string);
        return BAD(c, field, "unknown field (%sexpected one of: %s)", meant, list);
    }
    return LAB_OK;
}

/* Duplicate keys are as dangerous as unknown ones: cJSON keeps the first. */
static int check_dupes(pctx *c, const cJSON *obj, const char *where) {
    for (const cJSON *a = obj->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string)) {
                char field[256];
                snprintf(field, sizeof field, "%s%s%s", where, *where ? "." : "", a->string);
                return BAD(c, field, "field given twice");
            }
    return LAB_OK;
}

static int get_string(pctx *c, const cJSON *obj, const char *key, const char *field, int required,
                      char **out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!j) return required ? BAD(c, field, "missing (expected a string)") : LAB_OK;
    if (!cJSON_IsString(j)) return BAD(c, field, "expected a string, got %s", json_type(j));
    if (required && !*j->valuestring) return BAD(c, field, "expected a non-empty string");
    *out = lab_strdup(j->valuestring);
    return *out ? LAB_OK : lab_errf(c->err, c->errlen, LAB_ENOMEM, "%s: out of memory", c->path);
}

/* An integer in [lo, hi]; absent -> def (or an error when required). */
static int get_int(pctx *c, const cJSON *obj, const char *key, const char *field, int required,
                   int64_t lo, int64_t hi, int64_t def, int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = def;
    if (!j) return required ? BAD(c, field, "missing (expected an integer in %lld..%lld)",
                                  (long long)lo, (long long)hi) : LAB_OK;
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || !isfinite(j->valuedouble))
        return BAD(c, field, "expected an integer in %lld..%lld, got %s", (long long)lo,
                   (long long)hi, cJSON_IsNumber(j) ? "a fraction" : json_type(j));
    double v = j->valuedouble;
    if (v < (double)lo || v > (double)hi)
        return BAD(c, field, "expected an integer in %lld..%lld, got %.17g", (long long)lo,
                   (long long)hi, v);
    *out = (int64_t)v;
    return LAB_OK;
}

static int get_bool(pctx *c, const cJSON *obj, const char *key, const char *field, int def, int *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = def;
    if (!j) return LAB_OK;
    if (!cJSON_IsBool(j)) return BAD(c, field, "expected true or false, got %s", json_type(j));
    *out = cJSON_IsTrue(j);
    return LAB_OK;
}

/* ------------------------------------------------------------ datasets */

static int ds_push(lab_dataset *ds, int64_t *cap_tok, int64_t *cap_seq, int32_t tok) {
    int64_t n = ds->offsets[ds->n_seq + 1];
    if (n >= *cap_tok) {
        int64_t cap = *cap_tok ? *cap_tok * 2 : 1024;
        int32_t *t = realloc(ds->tokens, (size_t)cap * sizeof *t);
        if (!t) return LAB_ENOMEM;
        ds->tokens = t;
        *cap_tok = cap;
    }
    (void)cap_seq;
    ds->tokens[n] = tok;
    ds->offsets[ds->n_seq + 1] = n + 1;
    return LAB_OK;
}

/* Starts sequence n_seq (offsets must have room for n_seq + 2 entries). */
static int ds_begin_seq(lab_dataset *ds, int64_t *cap_seq) {
    if (ds->n_seq + 2 > *cap_seq) {
        int64_t cap = *cap_seq ? *cap_seq * 2 : 64;
        int64_t *o = realloc(ds->offsets, (size_t)cap * sizeof *o);
        if (!o) return LAB_ENOMEM;
        if (!ds->offsets) o[0] = 0;
        ds->offsets = o;
        *cap_seq = cap;
    }
    ds->offsets[ds->n_seq + 1] = ds->offsets[ds->n_seq];
    return LAB_OK;
}

static void ds_end_seq(lab_dataset *ds) {
    int64_t len = ds->offsets[ds->n_seq + 1] - ds->offsets[ds->n_seq];
    if (len > ds->max_len) ds->max_len = len;
    ds->n_seq++;
}

/* Generated datasets: token = 3 + splitmix64() % (vocab - 3), sequence by
 * sequence, position by position, from one generator seeded with `seed`.
 * Ids 0..2 are the pad/bos/eos specials of the Kimi configs, so they are
 * never drawn. The modulo bias is below 2^-50 for any real vocabulary. */
static int ds_generate(lab_dataset *ds, int64_t vocab) {
    int64_t cs = 0, ct = 0;
    uint64_t st = ds->gen_seed;
    for (int64_t s = 0; s < ds->gen_n; s++) {
        if (ds_begin_seq(ds, &cs)) return LAB_ENOMEM;
        for (int64_t t = 0; t < ds->gen_len; t++) {
            uint64_t r = lab_splitmix64(&st);
            if (ds_push(ds, &ct, &cs, (int32_t)(3 + (int64_t)(r % (uint64_t)(vocab - 3)))))
                return LAB_ENOMEM;
        }
        ds_end_seq(ds);
    }
    return LAB_OK;
}

static int ds_inline(pctx *c, lab_dataset *ds, const cJSON *arr) {
    int64_t cs = 0, ct = 0, s = 0;
    const cJSON *seq;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return BAD(c, "dataset.inline", "expected a non-empty array of token-id arrays, got %s",
                   json_type(arr));
    cJSON_ArrayForEach(seq, arr) {
        char field[96];
        snprintf(field, sizeof field, "dataset.inline[%lld]", (long long)s);
        if (s >= MAX_SEQS) return BAD(c, field, "more than the limit of %lld sequences", MAX_SEQS);
        if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) == 0)
            return BAD(c, field, "expected a non-empty array of token ids, got %s", json_type(seq));
        if (ds_begin_seq(ds, &cs)) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "%s: out of memory", c->path);
        int64_t p = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, seq) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble > INT32_MAX) {
                snprintf(field, sizeof field, "dataset.inline[%lld][%lld]", (long long)s, (long long)p);
                return BAD(c, field, "expected a token id (integer >= 0), got %s",
                           cJSON_IsNumber(t) ? "an out-of-range number" : json_type(t));
            }
            if (p >= MAX_SEQ_LEN)
                return BAD(c, field, "sequence %lld is longer than the limit of %lld tokens", (long long)s, MAX_SEQ_LEN);
            if (ds->offsets[ds->n_seq + 1] >= MAX_TOKENS)
                return BAD(c, field, "the dataset is over the limit of %lld tokens in all", MAX_TOKENS);
            if (ds_push(ds, &ct, &cs, (int32_t)t->valuedouble))
                return lab_errf(c->err, c->errlen, LAB_ENOMEM, "%s: out of memory", c->path);
            p++;
        }
        ds_end_seq(ds);
        s++;
    }
    return LAB_OK;
}

/* A file of ids: one sequence per line, ids separated by commas and/or
 * blanks; blank lines and lines starting with '#' are skipped. */
static int ds_file(pctx *c, lab_dataset *ds, const char *shown) {
    char *text = NULL;
    size_t len = 0;
    /* Read with its length, and refused when it holds a NUL byte: walked as a
     * C string, the text after a NUL would silently not be part of the
     * dataset (nor of its hash). */
    int rc = lab_read_text(ds->file, "dataset file", LAB_DS_MAX_FILE_BYTES, &text, &len, c->err, c->errlen);
    if (rc) return lab_err_prefix(c->err, c->errlen, rc, "%s: dataset.file", c->path);
    rc = lab_ds_parse_text(ds, text, len, c->path, shown, c->err, c->errlen);
    free(text);
    return rc;
}

int lab_ds_parse_text(lab_dataset *ds, char *text, size_t len, const char *exp_path, const char *shown,
                      char *err, size_t errlen) {
    pctx cc = {exp_path, err, errlen}, *c = &cc;
    int rc = LAB_OK;
    if (memchr(text, 0, len))   /* the reader refuses these; a caller with its own buffer must too */
        return lab_errf(err, errlen, LAB_EINPUT, "%s: dataset.file: %s holds a NUL byte", exp_path, shown);
    int64_t cs = 0, ct = 0, line = 0;
    char *p = text;
    while (*p) {
        line++;
        char *eol = strchr(p, '\n');
        if (eol) *eol = 0;
        char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q && *q != '#') {
            if (ds->n_seq >= MAX_SEQS) {
                rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                              "%s: dataset.file: %s line %lld: more than the limit of %lld sequences",
                              c->path, shown, (long long)line, MAX_SEQS);
                break;
            }
            if (ds_begin_seq(ds, &cs)) { rc = LAB_ENOMEM; break; }
            int64_t pos = 0;
            while (*q) {
                while (*q == ' ' || *q == '\t' || *q == ',' || *q == '\r') q++;
                if (!*q) break;
                if (pos >= MAX_SEQ_LEN) {
                    rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                                  "%s: dataset.file: %s line %lld (sequence %lld): more than the limit of %lld tokens "
                                  "per sequence", c->path, shown, (long long)line, (long long)ds->n_seq, MAX_SEQ_LEN);
                    break;
                }
                if (ds->offsets[ds->n_seq + 1] >= MAX_TOKENS) {
                    rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                                  "%s: dataset.file: %s line %lld: the dataset is over the limit of %lld tokens in all",
                                  c->path, shown, (long long)line, MAX_TOKENS);
                    break;
                }
                if (!isdigit((unsigned char)*q)) {
                    rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                                  "%s: dataset.file: %s line %lld position %lld: expected a token id, got '%c'",
                                  c->path, shown, (long long)line, (long long)pos, *q);
                    break;
                }
                errno = 0;
                char *end;
                long long v = strtoll(q, &end, 10);
                if (errno || v > INT32_MAX) {
                    rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                                  "%s: dataset.file: %s line %lld position %lld: token id out of range",
                                  c->path, shown, (long long)line, (long long)pos);
                    break;
                }
                if (ds_push(ds, &ct, &cs, (int32_t)v)) { rc = LAB_ENOMEM; break; }
                q = end;
                pos++;
            }
            if (rc) break;
            if (pos == 0) {   /* a line of separators only: an empty sequence */
                rc = lab_errf(c->err, c->errlen, LAB_EINPUT, "%s: dataset.file: %s line %lld: no token ids",
                              c->path, shown, (long long)line);
                break;
            }
            ds_end_seq(ds);
        }
        if (!eol) break;
        p = eol + 1;
    }
    if (rc == LAB_ENOMEM) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "%s: out of memory", c->path);
    if (rc) return rc;
    if (ds->n_seq == 0)
        return BAD(c, "dataset.file", "%s holds no sequences (expected one line of token ids per sequence)", shown);
    return LAB_OK;
}

static int parse_dataset(pctx *c, lab_experiment *e, const cJSON *j) {
    static const char *const keys[] = {"generate", "inline", "file", NULL};
    if (!cJSON_IsObject(j))
        return BAD(c, "dataset", "expected an object with one of generate, inline, file; got %s", json_type(j));
    int rc = check_keys(c, j, "dataset", keys);
    if (rc) return rc;
    if ((rc = check_dupes(c, j, "dataset"))) return rc;
    if (cJSON_GetArraySize(j) != 1)
        return BAD(c, "dataset", "expected exactly one of generate, inline, file");
    lab_dataset *ds = &e->ds;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "generate");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inline");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "file");
    if (g) {
        static const char *const gk[] = {"n_sequences", "length", "seed", NULL};
        if (!cJSON_IsObject(g))
            return BAD(c, "dataset.generate", "expected an object {n_sequences, length, seed}, got %s", json_type(g));
        if ((rc = check_keys(c, g, "dataset.generate", gk))) return rc;
        int64_t seed;
        if ((rc = get_int(c, g, "n_sequences", "dataset.generate.n_sequences", 1, 1, MAX_SEQS, 0, &ds->gen_n))) return rc;
        if ((rc = get_int(c, g, "length", "dataset.generate.length", 1, 1, MAX_SEQ_LEN, 0, &ds->gen_len))) return rc;
        if ((rc = get_int(c, g, "seed", "dataset.generate.seed", 1, 0, INT64_MAX / 2, 0, &seed))) return rc;
        if (ds->gen_n * ds->gen_len > MAX_TOKENS)
            return BAD(c, "dataset.generate", "n_sequences * length is over %lld tokens", MAX_TOKENS);
        ds->gen_seed = (uint64_t)seed;
        ds->kind = LAB_DS_GENERATE;
        ds->n_seq = 0; /* drawn by lab_dataset_prepare once the vocabulary is known */
        return LAB_OK;
    }
    if (in) {
        ds->kind = LAB_DS_INLINE;
        return ds_inline(c, ds, in);
    }
    if (!cJSON_IsString(f) || !*f->valuestring)
        return BAD(c, "dataset.file", "expected a path string, got %s", json_type(f));
    ds->kind = LAB_DS_FILE;
    ds->file = lab_path_beside(e->path, f->valuestring);   /* relative to the experiment file (paths.h) */
    if (!ds->file) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "%s: out of memory", c->path);
    return ds_file(c, ds, ds->file);
}

/* ------------------------------------------------------------ arms */

/* Knob values may be written as strings, integers or booleans; all become
 * the text the model's knob table validates ("1", "biased", "8"). */
static int knob_text(const cJSON *v, char *out, size_t n) {
    if (cJSON_IsString(v)) return snprintf(out, n, "%s", v->valuestring) < (int)n ? 0 : -1;
    if (cJSON_IsBool(v)) { snprintf(out, n, "%s", cJSON_IsTrue(v) ? "1" : "0"); return 0; }
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) {
        snprintf(out, n, "%lld", (long long)v->valuedouble);
        return 0;
    }
    return -1;
}

static int is_dtype_name(const char *s) {
    static const char *const names[] = {"f32", "bf16", "f16", "i32", "i64", "u8", NULL};
    for (const char *const *p = names; *p; p++)
        if (!strcmp(s, *p)) return 1;
    return 0;
}

/* ------------------------------------------------------------ engine */

static int engine_argv(pctx *c, lab_engine_spec *sp, const cJSON *arr, const char *field) {
    char f[448];
    int64_t n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 256) return BAD(c, field, "expected 1..256 argument strings, got %lld", (long long)n);
    if (!(sp->argv = calloc((size_t)n + 1, sizeof *sp->argv))) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        snprintf(f, sizeof f, "%s[%lld]", field, (long long)sp->argc);
        if (!cJSON_IsString(it)) return BAD(c, f, "expected a string, got %s", json_type(it));
        if (sp->argc == 0 && !it->valuestring[0]) return BAD(c, f, "expected the engine's program, got \"\"");
        if (!(sp->argv[sp->argc++] = lab_strdup(it->valuestring)))
            return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    }
    sp->command = 1;
    return LAB_OK;
}

static int engine_env(pctx *c, lab_engine_spec *sp, const cJSON *o, const char *field) {
    char f[448];
    if (!cJSON_IsObject(o)) return BAD(c, field, "expected an object {\"NAME\": \"value\"}, got %s", json_type(o));
    int rc = check_dupes(c, o, field);
    if (rc) return rc;
    int64_t n = cJSON_GetArraySize(o);
    if (!(sp->env = calloc((size_t)n + 1, sizeof *sp->env))) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        char val[1024];
        snprintf(f, sizeof f, "%s.%s", field, it->string);
        if (!lab_env_name_ok(it->string)) return BAD(c, f, "expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        if (knob_text(it, val, sizeof val)) return BAD(c, f, "expected a string, integer or boolean, got %s", json_type(it));
        lab_buf b = {0};
        lab_buf_printf(&b, "%s=%s", it->string, val);
        if (b.oom) { lab_buf_free(&b); return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory"); }
        sp->env[sp->n_env++] = b.data;
    }
    return LAB_OK;
}

static int engine_seconds(pctx *c, const cJSON *o, const char *key, const char *where, double lo, double hi, double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    char f[384];
    snprintf(f, sizeof f, "%s.%s", where, key);
    if (!j) return LAB_OK;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble < lo || j->valuedouble > hi)
        return BAD(c, f, "expected seconds in %g..%g, got %s", lo, hi, json_type(j));
    *out = j->valuedouble;
    return LAB_OK;
}

/* "builtin", an argv array, or {argv, cwd, env, timeout_s, grace_s}. */
static int parse_engine(pctx *c, lab_engine_spec *sp, const cJSON *j, const char *field) {
    static const char *const keys[] = {"argv", "cwd", "env", "timeout_s", "grace_s", "keep_running", NULL};
    char f[384];
    memset(sp, 0, sizeof *sp);
    sp->timeout_s = LAB_ENGINE_TIMEOUT_S;
    sp->grace_s = LAB_ENGINE_GRACE_S;
    sp->keep_running = 1;
    if (!j) return LAB_OK;
    if (cJSON_IsString(j)) {
        if (strcmp(j->valuestring, "builtin"))
            return BAD(c, field, "expected \"builtin\", an argv array or {\"argv\": [...]}, got \"%s\"", j->valuestring);
        return LAB_OK;
    }
    if (cJSON_IsArray(j)) return engine_argv(c, sp, j, field);
    if (!cJSON_IsObject(j))
        return BAD(c, field, "expected \"builtin\", an argv array or {\"argv\": [...]}, got %s", json_type(j));
    int rc = check_keys(c, j, field, keys);
    if (rc || (rc = check_dupes(c, j, field))) return rc;
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(j, "argv");
    snprintf(f, sizeof f, "%s.argv", field);
    if (!cJSON_IsArray(argv)) return BAD(c, f, "expected an array of strings (the engine's command), got %s", json_type(argv));
    if ((rc = engine_argv(c, sp, argv, f))) return rc;
    snprintf(f, sizeof f, "%s.cwd", field);
    if ((rc = get_string(c, j, "cwd", f, 0, &sp->cwd))) return rc;
    if (sp->cwd) {   /* a path: relative to the experiment file, like every path in it */
        char *r = lab_path_beside(c->path, sp->cwd);
        free(sp->cwd);
        if (!(sp->cwd = r)) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    }
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(j, "env");
    snprintf(f, sizeof f, "%s.env", field);
    if (env && (rc = engine_env(c, sp, env, f))) return rc;
    if ((rc = engine_seconds(c, j, "timeout_s", field, 0.1, 86400, &sp->timeout_s))) return rc;
    if ((rc = engine_seconds(c, j, "grace_s", field, 0, 600, &sp->grace_s))) return rc;
    snprintf(f, sizeof f, "%s.keep_running", field);
    return get_bool(c, j, "keep_running", f, 1, &sp->keep_running);
}

static void engine_spec_free(lab_engine_spec *sp) {
    if (!sp) return;
    for (int64_t i = 0; sp->argv && i < sp->argc; i++) free(sp->argv[i]);
    for (int64_t i = 0; sp->env && i < sp->n_env; i++) free(sp->env[i]);
    free(sp->argv);
    free(sp->env);
    free(sp->cwd);
}

const lab_engine_spec *lab_arm_engine(const lab_experiment *e, int64_t i) {
    return e->arms[i].engine ? e->arms[i].engine : &e->engine;
}

/* arms[i].knobs: VT_* knob values (an engine's own names for a command
 * engine), as canonical text. */
static int parse_arm_knobs(pctx *c, lab_arm *a, const cJSON *k, const char *where, int foreign) {
    char field[320];
    int rc;
    snprintf(field, sizeof field, "%s.knobs", where);
    if (!cJSON_IsObject(k)) return BAD(c, field, "expected an object of VT_* knob values, got %s", json_type(k));
    if ((rc = check_dupes(c, k, field))) return rc;
    int64_t n = cJSON_GetArraySize(k);
    a->knob_names = calloc((size_t)n + 1, sizeof(char *));
    a->knob_values = calloc((size_t)n + 1, sizeof(char *));
    if (!a->knob_names || !a->knob_values) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, k) {
        char val[256];
        snprintf(field, sizeof field, "%s.knobs.%s", where, it->string);
        if (!foreign && strncmp(it->string, "VT_", 3))
            return BAD(c, field, "knob names start with VT_ (see `vtlab knobs`)");
        if (foreign && !lab_env_name_ok(it->string))
            return BAD(c, field, "expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        if (cJSON_IsString(it) && strlen(it->valuestring) >= sizeof val)
            return BAD(c, field, "knob value is %zu characters, more than the limit of %zu",
                       strlen(it->valuestring), sizeof val - 1);
        if (knob_text(it, val, sizeof val))
            return BAD(c, field, "expected a string, integer or boolean knob value, got %s", json_type(it));
        a->knob_names[a->n_knobs] = lab_strdup(it->string);
        a->knob_values[a->n_knobs] = lab_strdup(val);
        if (!a->knob_names[a->n_knobs] || !a->knob_values[a->n_knobs])
            return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
        a->n_knobs++;
    }
    return LAB_OK;
}

/* One entry of arms[i].scope: the scope knob that holds it (the builtin
 * registry's NAME_LAYERS, or a command engine's NAME_LAYERS, which its hello
 * must declare scoped) and the canonical layer set. */
static int scope_entry(pctx *c, const cJSON *it, const char *field, int foreign, char *knob, size_t klen, char *canon) {
    vtp_layer_set set;
    char why[400];
    if (!foreign) {
        const vt_knob_info *k = vt_knob_find(it->string);
        if (!k || !k->scope)
            return BAD(c, field, "%s is not a scoped knob (scoped: VT_KIMI_BF16_STREAM, VT_KIMI_BF16_EXPERT_OUT, "
                                 "VT_KIMI_BF16_ACT; docs/localize.md)", it->string);
        snprintf(knob, klen, "%s", k->scope);
    } else {
        if (!lab_env_name_ok(it->string) || strlen(it->string) > 200)
            return BAD(c, field, "expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        snprintf(knob, klen, "%s_LAYERS", it->string);
    }
    if (!cJSON_IsString(it)) return BAD(c, field, "expected a layer set string such as \"0-3,7\", got %s", json_type(it));
    if (vtp_layer_set_parse(it->valuestring, 0, 1, &set, why, sizeof why))
        return BAD(c, field, "\"%.80s\": %s", it->valuestring, why);
    if (vtp_layer_set_format(&set, canon, VTP_LAYER_SET_TEXT)) return BAD(c, field, "layer set too long");
    return LAB_OK;
}

/* arms[i].scope: {"LEVER": "0-3,7"} is the knob LEVER_LAYERS = "0-3,7"
 * (docs/localize.md), appended to the arm's knobs; the same knob in both is
 * refused (which would win is not obvious). */
static int parse_arm_scope(pctx *c, lab_arm *a, const cJSON *sc, const char *where, int foreign) {
    char field[320];
    int rc;
    snprintf(field, sizeof field, "%s.scope", where);
    if (!cJSON_IsObject(sc)) return BAD(c, field, "expected an object {\"KNOB\": \"0-3,7\"}, got %s", json_type(sc));
    if ((rc = check_dupes(c, sc, field))) return rc;
    int64_t n = a->n_knobs + cJSON_GetArraySize(sc) + 1;
    char **nm = realloc(a->knob_names, (size_t)n * sizeof *nm);
    if (nm) a->knob_names = nm;
    char **vv = nm ? realloc(a->knob_values, (size_t)n * sizeof *vv) : NULL;
    if (vv) a->knob_values = vv;
    if (!nm || !vv) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    a->knob_names[a->n_knobs] = a->knob_values[a->n_knobs] = NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, sc) {
        char knob[256], canon[VTP_LAYER_SET_TEXT];
        snprintf(field, sizeof field, "%s.scope.%s", where, it->string);
        if ((rc = scope_entry(c, it, field, foreign, knob, sizeof knob, canon))) return rc;
        for (int64_t i = 0; i < a->n_knobs; i++)
            if (!strcmp(a->knob_names[i], knob))
                return BAD(c, field, "the arm sets %s in knobs too; give the scope once", knob);
        a->knob_names[a->n_knobs] = lab_strdup(knob);
        a->knob_values[a->n_knobs] = lab_strdup(canon);
        a->knob_names[a->n_knobs + 1] = a->knob_values[a->n_knobs + 1] = NULL;
        if (!a->knob_names[a->n_knobs] || !a->knob_values[a->n_knobs])
            return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
        a->n_knobs++;
    }
    return LAB_OK;
}

/* arms[i].expect: probe site -> dtype (an engine's own sites for a command
 * engine, checked against its hello by the runner). */
static int parse_arm_expect(pctx *c, lab_arm *a, const cJSON *x, const char *where, int foreign) {
    char field[320];
    int rc;
    snprintf(field, sizeof field, "%s.expect", where);
    if (!cJSON_IsObject(x))
        return BAD(c, field, "expected an object {\"probe.site\": \"dtype\"}, got %s", json_type(x));
    if ((rc = check_dupes(c, x, field))) return rc;
    int64_t n = cJSON_GetArraySize(x);
    a->expect_sites = calloc((size_t)n + 1, sizeof(char *));
    a->expect_dtypes = calloc((size_t)n + 1, sizeof(char *));
    if (!a->expect_sites || !a->expect_dtypes) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, x) {
        snprintf(field, sizeof field, "%s.expect.%s", where, it->string);
        if (!foreign && !vt_probe_site_known(it->string))
            return BAD(c, field, "\"%s\" is not a probe site (residual.stream, kda.state, moe.gather, "
                                 "moe.expert.y, moe.scatter, moe.combine, logits)", it->string);
        if (!cJSON_IsString(it) || !is_dtype_name(it->valuestring))
            return BAD(c, field, "expected a dtype name (f32, bf16, f16, i32, i64, u8), got %s%s%s",
                       cJSON_IsString(it) ? "\"" : "", cJSON_IsString(it) ? it->valuestring : json_type(it),
                       cJSON_IsString(it) ? "\"" : "");
        a->expect_sites[a->n_expect] = lab_strdup(it->string);
        a->expect_dtypes[a->n_expect] = lab_strdup(it->valuestring);
        if (!a->expect_sites[a->n_expect] || !a->expect_dtypes[a->n_expect])
            return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
        a->n_expect++;
    }
    return LAB_OK;
}

static int parse_arm(pctx *c, lab_arm *a, const cJSON *j, int64_t idx, const lab_engine_spec *inherited) {
    static const char *const keys[] = {"name", "description", "knobs", "scope", "expect", "expect_assertions",
                                       "engine", NULL};
    char where[64], field[320];
    snprintf(where, sizeof where, "arms[%lld]", (long long)idx);
    if (!cJSON_IsObject(j)) return BAD(c, where, "expected an object {name, knobs, expect}, got %s", json_type(j));
    int rc = check_keys(c, j, where, keys);
    if (rc || (rc = check_dupes(c, j, where))) return rc;
    snprintf(field, sizeof field, "%s.name", where);
    if ((rc = get_string(c, j, "name", field, 1, &a->name))) return rc;
    if ((rc = lab_check_name(c->path, field, "an arm name", a->name, c->err, c->errlen))) return rc;
    snprintf(field, sizeof field, "%s.description", where);
    if ((rc = get_string(c, j, "description", field, 0, &a->description))) return rc;
    const cJSON *ej = cJSON_GetObjectItemCaseSensitive(j, "engine");
    if (ej) {
        snprintf(field, sizeof field, "%s.engine", where);
        if (!(a->engine = calloc(1, sizeof *a->engine))) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
        if ((rc = parse_engine(c, a->engine, ej, field))) return rc;
    }
    /* A command engine's knobs and sites are its own: checked against its hello. */
    int foreign = (a->engine ? a->engine : inherited)->command;

    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "knobs");
    if (k && (rc = parse_arm_knobs(c, a, k, where, foreign))) return rc;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(j, "scope");
    if (sc && (rc = parse_arm_scope(c, a, sc, where, foreign))) return rc;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "expect");
    if (x && (rc = parse_arm_expect(c, a, x, where, foreign))) return rc;
    char *ea = NULL;
    snprintf(field, sizeof field, "%s.expect_assertions", where);
    if ((rc = get_string(c, j, "expect_assertions", field, 0, &ea))) return rc;
    if (ea) {
        if (!strcmp(ea, "fail")) a->expect_fail = 1;
        else if (strcmp(ea, "pass")) { free(ea); return BAD(c, field, "expected \"pass\" or \"fail\""); }
        free(ea);
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ top level */

/* model.synth: next to the experiment file; else, when the name is one vtlab
 * ships a config under ("model/configs/NAME.json", "NAME.json"), that shipped
 * config, so that the shipped experiments and `vtlab init`'s run wherever
 * they are copied. Neither: the path next to the experiment, which
 * lab_model_dir reports as missing. Which file it is does not enter a run's
 * identity; its bytes do (the synthetic model's hash). */
static int resolve_synth(pctx *c, lab_experiment *e) {
    char shipped[4400];
    e->synth_config = lab_path_beside(c->path, e->synth_name);
    if (!e->synth_config) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    if (e->synth_name[0] == '/' || lab_path_exists(e->synth_config)) return LAB_OK;
    if (lab_shipped_config(e->synth_name, shipped, sizeof shipped)) {
        free(e->synth_config);
        if (!(e->synth_config = lab_strdup(shipped))) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    }
    return LAB_OK;
}

static int parse_model(pctx *c, lab_experiment *e, const cJSON *m) {
    int rc;
    if (!m) return BAD(c, "model", "missing (expected a checkpoint dir or {\"synth\": CONFIG, \"seed\": N})");
    if (cJSON_IsString(m)) {
        if (!*m->valuestring) return BAD(c, "model", "expected a non-empty checkpoint path");
        e->model_dir = lab_path_beside(c->path, m->valuestring);
        return e->model_dir ? LAB_OK : LAB_ENOMEM;
    }
    if (!cJSON_IsObject(m))
        return BAD(c, "model", "expected a checkpoint dir string or {\"synth\": CONFIG, \"seed\": N}, got %s", json_type(m));
    static const char *const keys[] = {"synth", "seed", "dtype", NULL};
    if ((rc = check_keys(c, m, "model", keys)) || (rc = check_dupes(c, m, "model"))) return rc;
    e->model_synth = 1;
    if ((rc = get_string(c, m, "synth", "model.synth", 1, &e->synth_name))) return rc;
    if ((rc = resolve_synth(c, e))) return rc;
    int64_t seed;
    if ((rc = get_int(c, m, "seed", "model.seed", 1, 0, INT64_MAX / 2, 0, &seed))) return rc;
    e->synth_seed = (uint64_t)seed;
    char *dt = NULL;
    if ((rc = get_string(c, m, "dtype", "model.dtype", 0, &dt))) return rc;
    snprintf(e->synth_dtype, sizeof e->synth_dtype, "%s", dt ? dt : "f32");
    int okdt = !dt || !strcmp(dt, "f32") || !strcmp(dt, "bf16") || !strcmp(dt, "f16");
    free(dt);
    if (!okdt) return BAD(c, "model.dtype", "expected \"f32\", \"bf16\" or \"f16\"");
    return LAB_OK;
}

static const struct { const char *name; unsigned bit; } metric_names[] = {
    {"top1_agreement", LAB_M_TOP1}, {"kl", LAB_M_KL}, {"max_abs_dlogit", LAB_M_MAXDIFF},
    {"rms_dp", LAB_M_RMSDP}, {"perplexity", LAB_M_PPL}, {"mcnemar", LAB_M_MCNEMAR},
    {"layer_divergence", LAB_M_LAYERDIV},
};

static int parse_metrics(pctx *c, lab_experiment *e, const cJSON *m) {
    e->metrics = LAB_M_ALL;
    if (!m) return LAB_OK;
    if (!cJSON_IsArray(m)) return BAD(c, "metrics", "expected an array of metric names, got %s", json_type(m));
    e->metrics = 0;
    int64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        char field[64];
        snprintf(field, sizeof field, "metrics[%lld]", (long long)i++);
        unsigned bit = 0;
        if (cJSON_IsString(it))
            for (size_t k = 0; k < sizeof metric_names / sizeof metric_names[0]; k++)
                if (!strcmp(it->valuestring, metric_names[k].name)) bit = metric_names[k].bit;
        if (!bit) {
            char meant[160] = "";
            vt_suggester sg;
            vt_suggest_init(&sg, cJSON_IsString(it) ? it->valuestring : "");
            for (size_t k = 0; cJSON_IsString(it) && k < sizeof metric_names / sizeof metric_names[0]; k++)
                vt_suggest_offer(&sg, metric_names[k].name);
            if (sg.best) snprintf(meant, sizeof meant, "\"%.64s\" (did you mean %s?): ", it->valuestring, sg.best);
            return BAD(c, field, "%sexpected one of top1_agreement, kl, max_abs_dlogit, rms_dp, "
                                 "perplexity, mcnemar, layer_divergence", meant);
        }
        e->metrics |= bit;
    }
    /* Agreement is what the verdict and McNemar rest on: always computed. */
    e->metrics |= LAB_M_TOP1;
    return LAB_OK;
}

static int parse_decision(pctx *c, lab_experiment *e, const cJSON *d) {
    int rc;
    if (!d) return LAB_OK;
    if (!cJSON_IsObject(d))
        return BAD(c, "decision", "expected {\"metric\": ..., \"threshold\": ..., \"direction\": \">=\"}, got %s", json_type(d));
    static const char *const keys[] = {"metric", "threshold", "direction", NULL};
    if ((rc = check_keys(c, d, "decision", keys)) || (rc = check_dupes(c, d, "decision"))) return rc;
    char *metric = NULL, *dir = NULL;
    if ((rc = get_string(c, d, "metric", "decision.metric", 1, &metric))) return rc;
    int okm = !strcmp(metric, "top1_agreement");
    snprintf(e->decision_metric, sizeof e->decision_metric, "%s", metric);
    free(metric);
    if (!okm)
        return BAD(c, "decision.metric", "expected \"top1_agreement\" (a proportion with a Wilson interval)");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "threshold");
    if (!cJSON_IsNumber(t) || t->valuedouble < 0.0 || t->valuedouble > 1.0)
        return BAD(c, "decision.threshold", "expected a number in [0, 1], got %s", json_type(t));
    e->decision_threshold = t->valuedouble;
    if ((rc = get_string(c, d, "direction", "decision.direction", 1, &dir))) return rc;
    int ge = !strcmp(dir, ">="), le = !strcmp(dir, "<=");
    free(dir);
    if (!ge && !le) return BAD(c, "decision.direction", "expected \">=\" or \"<=\"");
    e->decision_ge = ge;
    e->has_decision = 1;
    return LAB_OK;
}

/* "slurm": {"partition": "gpu", "time": "02:00:00", "gpus_per_task": 1,
 * "account": "inference"} — defaults for `vtlab submit`; not part of any
 * run's identity. Strings may not hold a quote, a newline or a tab: they
 * go into a batch script. */
static int parse_slurm(pctx *c, lab_experiment *e, const cJSON *j) {
    if (!j) return LAB_OK;
    static const char *const keys[] = {"partition", "time", "gpus_per_task", "account", NULL};
    int rc;
    if (!cJSON_IsObject(j))
        return BAD(c, "slurm", "expected {\"partition\": ..., \"time\": ..., \"gpus_per_task\": N, \"account\": ...}, "
                   "got %s", json_type(j));
    if ((rc = check_keys(c, j, "slurm", keys)) || (rc = check_dupes(c, j, "slurm"))) return rc;
    if ((rc = get_string(c, j, "partition", "slurm.partition", 0, &e->slurm_partition))) return rc;
    if ((rc = get_string(c, j, "time", "slurm.time", 0, &e->slurm_time))) return rc;
    if ((rc = get_string(c, j, "account", "slurm.account", 0, &e->slurm_account))) return rc;
    if ((rc = get_int(c, j, "gpus_per_task", "slurm.gpus_per_task", 0, 0, 64, 0, &e->slurm_gpus_per_task))) return rc;
    const char *v[] = {e->slurm_partition, e->slurm_time, e->slurm_account};
    const char *f[] = {"slurm.partition", "slurm.time", "slurm.account"};
    for (int i = 0; i < 3; i++)
        if (v[i] && (!*v[i] || strpbrk(v[i], "'\"\n\t\\ $`")))
            return BAD(c, f[i], "expected a non-empty value without quotes, blanks, '$', '`' or backslashes");
    return LAB_OK;
}

/* How runs are scored and probed: "score", "top_k", "store_full_logits",
 * "allow_model_mismatch" and "probe". */
static int parse_scoring(pctx *c, lab_experiment *e, const cJSON *root) {
    int rc;
    char *score = NULL;
    if ((rc = get_string(c, root, "score", "score", 0, &score))) return rc;
    if (score && strcmp(score, "all") && strcmp(score, "last")) {
        free(score);
        return BAD(c, "score", "expected \"all\" (every position) or \"last\" (each sequence's last position)");
    }
    e->score_last = score && !strcmp(score, "last");
    free(score);
    if ((rc = get_int(c, root, "top_k", "top_k", 0, 1, 1000, 20, &e->top_k))) return rc;
    if ((rc = get_bool(c, root, "store_full_logits", "store_full_logits", 0, &e->store_full_logits))) return rc;
    if ((rc = get_bool(c, root, "allow_model_mismatch", "allow_model_mismatch", 0, &e->allow_model_mismatch)))
        return rc;
    char *probe = NULL;
    if ((rc = get_string(c, root, "probe", "probe", 0, &probe))) return rc;
    if (probe && strcmp(probe, "on") && strcmp(probe, "audit")) {
        free(probe);
        return BAD(c, "probe", "expected \"on\" or \"audit\" (expectations need probes)");
    }
    snprintf(e->probe, sizeof e->probe, "%s", probe ? probe : "on");
    free(probe);
    return LAB_OK;
}

/* "arms" (each parsed against the experiment's engine, names unique) and
 * "reference", the name of one of them. */
static int parse_arms(pctx *c, lab_experiment *e, const cJSON *root) {
    int rc;
    const cJSON *arms = cJSON_GetObjectItemCaseSensitive(root, "arms");
    if (!cJSON_IsArray(arms) || cJSON_GetArraySize(arms) < 1)
        return BAD(c, "arms", "expected a non-empty array of arms, got %s", json_type(arms));
    e->n_arms = cJSON_GetArraySize(arms);
    e->arms = calloc((size_t)e->n_arms, sizeof *e->arms);
    if (!e->arms) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    int64_t i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, arms) {
        if ((rc = parse_arm(c, &e->arms[i], a, i, &e->engine))) return rc;
        for (int64_t k = 0; k < i; k++)
            if (!strcmp(e->arms[k].name, e->arms[i].name)) {
                char field[64];
                snprintf(field, sizeof field, "arms[%lld].name", (long long)i);
                return BAD(c, field, "arm name \"%s\" is already used by arms[%lld]", e->arms[i].name, (long long)k);
            }
        i++;
    }
    char *ref = NULL;
    if ((rc = get_string(c, root, "reference", "reference", 1, &ref))) return rc;
    e->ref_index = lab_experiment_arm(e, ref);
    if (e->ref_index < 0) {
        vt_suggester sg;
        vt_suggest_init(&sg, ref);
        for (int64_t k = 0; k < e->n_arms; k++) vt_suggest_offer(&sg, e->arms[k].name);
        char meant[96];
        snprintf(meant, sizeof meant, sg.best ? "did you mean %s?" : "expected the name of one of the arms", sg.best);
        rc = BAD(c, "reference", "\"%s\" names no arm (%s)", ref, meant);
        free(ref);
        return rc;
    }
    free(ref);
    if (e->arms[e->ref_index].expect_fail)
        return BAD(c, "reference", "the reference arm cannot expect its assertions to fail");
    return LAB_OK;
}

/* "divergence": {"sequences": N, "tolerance": X}, both optional (4, 1e-3). */
static int parse_divergence(pctx *c, lab_experiment *e, const cJSON *dv) {
    int rc;
    e->div_sequences = 4;
    e->div_tolerance = 1e-3;
    if (!dv) return LAB_OK;
    static const char *const dk[] = {"sequences", "tolerance", NULL};
    if (!cJSON_IsObject(dv))
        return BAD(c, "divergence", "expected {\"sequences\": N, \"tolerance\": X}, got %s", json_type(dv));
    if ((rc = check_keys(c, dv, "divergence", dk)) || (rc = check_dupes(c, dv, "divergence"))) return rc;
    if ((rc = get_int(c, dv, "sequences", "divergence.sequences", 0, 1, 1024, 4, &e->div_sequences))) return rc;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(dv, "tolerance");
    if (t) {
        if (!cJSON_IsNumber(t) || !(t->valuedouble > 0.0) || !isfinite(t->valuedouble))
            return BAD(c, "divergence.tolerance", "expected a positive number, got %s", json_type(t));
        e->div_tolerance = t->valuedouble;
    }
    return LAB_OK;
}

/* The whole experiment, field by field in a fixed order (the first error
 * found is the one reported). */
static int parse_root(pctx *c, lab_experiment *e, const cJSON *root) {
    static const char *const keys[] = {"id", "description", "hypothesis", "notes", "model", "dataset",
                                       "score", "top_k", "store_full_logits", "probe", "reference",
                                       "arms", "metrics", "decision", "divergence", "repeats", "engine", "slurm",
                                       "allow_model_mismatch", NULL};
    int rc;
    if (!cJSON_IsObject(root)) return BAD(c, "(top level)", "expected a JSON object, got %s", json_type(root));
    if ((rc = check_keys(c, root, "", keys)) || (rc = check_dupes(c, root, ""))) return rc;
    if ((rc = get_string(c, root, "id", "id", 1, &e->id))) return rc;
    if ((rc = lab_check_name(c->path, "id", "an experiment id", e->id, c->err, c->errlen))) return rc;
    if ((rc = get_string(c, root, "description", "description", 0, &e->description))) return rc;
    if ((rc = get_string(c, root, "hypothesis", "hypothesis", 0, &e->hypothesis))) return rc;
    const cJSON *notes = cJSON_GetObjectItemCaseSensitive(root, "notes");
    if (notes && !cJSON_IsString(notes)) return BAD(c, "notes", "expected a string, got %s", json_type(notes));
    if ((rc = parse_model(c, e, cJSON_GetObjectItemCaseSensitive(root, "model")))) return rc;
    if ((rc = parse_scoring(c, e, root))) return rc;
    if ((rc = parse_engine(c, &e->engine, cJSON_GetObjectItemCaseSensitive(root, "engine"), "engine"))) return rc;
    if ((rc = parse_arms(c, e, root))) return rc;
    if ((rc = parse_metrics(c, e, cJSON_GetObjectItemCaseSensitive(root, "metrics")))) return rc;
    if ((rc = parse_decision(c, e, cJSON_GetObjectItemCaseSensitive(root, "decision")))) return rc;
    if ((rc = parse_divergence(c, e, cJSON_GetObjectItemCaseSensitive(root, "divergence")))) return rc;
    if ((rc = get_int(c, root, "repeats", "repeats", 0, 1, 100, 1, &e->repeats))) return rc;
    if ((rc = parse_slurm(c, e, cJSON_GetObjectItemCaseSensitive(root, "slurm")))) return rc;

    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "dataset");
    if (!ds) return BAD(c, "dataset", "missing (expected one of generate, inline, file)");
    return parse_dataset(c, e, ds);
}

int lab_experiment_parse(lab_experiment **out, const char *path, const char *text, char *err, size_t errlen) {
    *out = NULL;
    return lab_experiment_parse_n(out, path, text, strlen(text), err, errlen);
}

int lab_experiment_parse_n(lab_experiment **out, const char *path, const char *text, size_t len, char *err,
                           size_t errlen) {
    *out = NULL;
    /* NUL bytes and \u0000 escapes first: either would make a string (an id,
     * a name) or the document itself shorter than the file says. After this,
     * strlen(text) == len and text ends at its NUL. */
    if (text[len] != 0)
        return lab_errf(err, errlen, LAB_EINTERNAL, "%s: lab_experiment_parse_n: text not NUL-terminated", path);
    pctx c = {path, err, errlen};
    lab_experiment *e = calloc(1, sizeof *e);
    if (!e) return lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", path);
    e->path = lab_strdup(path);
    void *parsed = NULL;
    int rc = lab_json_parse(path, text, len, &parsed, err, errlen);
    cJSON *root = parsed;
    if (rc) goto fail;
    if ((rc = parse_root(&c, e, root))) goto fail;
    e->spec_json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    root = NULL;
    if (!e->spec_json || !e->path) { rc = lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", path); goto fail; }
    *out = e;
    return LAB_OK;
fail:
    cJSON_Delete(root);
    lab_experiment_free(e);
    return rc;
}

int lab_experiment_load(lab_experiment **out, const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = lab_read_json(path, &text, &len, err, errlen);
    if (rc) return rc;
    rc = lab_experiment_parse_n(out, path, text, len, err, errlen);
    free(text);
    return rc;
}

static void free_strv(char **v, int64_t n) {
    if (!v) return;
    for (int64_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

void lab_experiment_free(lab_experiment *e) {
    if (!e) return;
    for (int64_t i = 0; e->arms && i < e->n_arms; i++) {
        lab_arm *a = &e->arms[i];
        free(a->name);
        free(a->description);
        free_strv(a->knob_names, a->n_knobs + 1);
        free_strv(a->knob_values, a->n_knobs + 1);
        free_strv(a->expect_sites, a->n_expect + 1);
        free_strv(a->expect_dtypes, a->n_expect + 1);
        engine_spec_free(a->engine);
        free(a->engine);
    }
    engine_spec_free(&e->engine);
    free(e->arms);
    free(e->path);
    free(e->id);
    free(e->description);
    free(e->hypothesis);
    free(e->slurm_partition);
    free(e->slurm_time);
    free(e->slurm_account);
    free(e->model_dir);
    free(e->synth_config);
    free(e->synth_name);
    free(e->ds.file);
    free(e->ds.offsets);
    free(e->ds.tokens);
    free(e->spec_json);
    free(e);
}

/* What a run of e holds for its dataset, in bytes, for vocabulary V (see
 * LAB_RUN_MAX_BYTES); saturates instead of overflowing. */
static double run_bytes(const lab_experiment *e, int64_t n_seq, int64_t n_tok, int64_t max_len, int64_t V) {
    double scored = e->score_last ? (double)n_seq : (double)n_tok;
    double k = (double)(e->top_k < V ? e->top_k : V);
    double b = 4.0 * (double)V * ((double)max_len + scored) + 8.0 * k * (double)n_tok;
    if (e->store_full_logits) b += 2.0 * (double)V * (double)n_tok;
    return b;
}

int lab_dataset_prepare(lab_experiment *e, int64_t vocab, char *err, size_t errlen) {
    lab_dataset *ds = &e->ds;
    {
        int gen = ds->kind == LAB_DS_GENERATE && ds->n_seq == 0;
        int64_t n_seq = gen ? ds->gen_n : ds->n_seq, n_tok = gen ? ds->gen_n * ds->gen_len : ds->offsets[ds->n_seq];
        int64_t max_len = gen ? ds->gen_len : ds->max_len;
        double b = run_bytes(e, n_seq, n_tok, max_len, vocab);
        if (b > (double)LAB_RUN_MAX_BYTES)
            return lab_errf(err, errlen, LAB_EINPUT,
                            "%s: dataset: a run would hold %.1f GiB for %lld tokens (longest sequence %lld) with the "
                            "model's vocab_size %lld, more than the limit of %lld GiB (docs/experiments.md, Limits); "
                            "use fewer or shorter sequences, \"score\": \"last\", or a smaller top_k",
                            e->path, b / (1024.0 * 1024 * 1024), (long long)n_tok, (long long)max_len, (long long)vocab,
                            (long long)(LAB_RUN_MAX_BYTES >> 30));
    }
    if (ds->kind == LAB_DS_GENERATE) {
        if (vocab <= 3)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: dataset.generate: the model's vocab_size %lld "
                            "leaves no ids above the specials 0..2", e->path, (long long)vocab);
        if (ds->n_seq > 0) return LAB_OK;
        if (ds_generate(ds, vocab)) return lab_errf(err, errlen, LAB_ENOMEM, "%s: out of memory", e->path);
        return LAB_OK;
    }
    for (int64_t s = 0; s < ds->n_seq; s++)
        for (int64_t i = ds->offsets[s]; i < ds->offsets[s + 1]; i++)
            if (ds->tokens[i] < 0 || ds->tokens[i] >= vocab) {
                if (ds->kind == LAB_DS_INLINE)
                    return lab_errf(err, errlen, LAB_EINPUT,
                                    "%s: dataset.inline[%lld][%lld]: token %d is not below the model's vocab_size %lld",
                                    e->path, (long long)s, (long long)(i - ds->offsets[s]), ds->tokens[i], (long long)vocab);
                return lab_errf(err, errlen, LAB_EINPUT,
                                "%s: dataset.file: %s sequence %lld (line of ids %lld) position %lld: token %d is not below the model's vocab_size %lld",
                                e->path, ds->file, (long long)s, (long long)s + 1, (long long)(i - ds->offsets[s]), ds->tokens[i],
                                (long long)vocab);
            }
    return LAB_OK;
}

char *lab_dataset_canonical(const lab_dataset *ds, size_t *len) {
    lab_buf b = {0};
    for (int64_t s = 0; s < ds->n_seq; s++) {
        for (int64_t i = ds->offsets[s]; i < ds->offsets[s + 1]; i++)
            lab_buf_printf(&b, i > ds->offsets[s] ? ",%d" : "%d", ds->tokens[i]);
        lab_buf_append(&b, "\n", 1);
    }
    if (b.oom) { lab_buf_free(&b); return NULL; }
    if (len) *len = b.len;
    return b.data;
}

int64_t lab_experiment_arm(const lab_experiment *e, const char *name) {
    for (int64_t i = 0; i < e->n_arms; i++)
        if (e->arms[i].name && !strcmp(e->arms[i].name, name)) return i;
    return -1;
}

/* One path field of obj, rebased (see lab_experiment_rebase): a relative
 * path that names an existing file or directory next to from_file (or, with
 * from_cwd, from the current directory) becomes that file's absolute path;
 * anything else is left as written. */
static int rebase_field(cJSON *obj, const char *key, const char *from_file, int from_cwd) {
    cJSON *j = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!cJSON_IsString(j) || !j->valuestring[0] || j->valuestring[0] == '/') return LAB_OK;
    char *beside = lab_path_beside(from_file, j->valuestring), real[PATH_MAX];
    if (!beside) return LAB_ENOMEM;
    int found = lab_path_exists(beside) && realpath(beside, real);
    if (!found && from_cwd) found = lab_path_exists(j->valuestring) && realpath(j->valuestring, real);
    free(beside);
    if (found && !cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateString(real))) return LAB_ENOMEM;
    return LAB_OK;
}

int lab_experiment_rebase(void *root, const char *from_file, int from_cwd, char *err, size_t errlen) {
    cJSON *j = root, *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    int rc = cJSON_IsString(m) ? rebase_field(j, "model", from_file, from_cwd)
                               : rebase_field(m, "synth", from_file, from_cwd);
    if (!rc) rc = rebase_field(cJSON_GetObjectItemCaseSensitive(j, "dataset"), "file", from_file, from_cwd);
    cJSON *eng = cJSON_GetObjectItemCaseSensitive(j, "engine");
    if (!rc && cJSON_IsObject(eng)) rc = rebase_field(eng, "cwd", from_file, from_cwd);
    cJSON *arms = cJSON_GetObjectItemCaseSensitive(j, "arms"), *a;
    cJSON_ArrayForEach(a, arms) {
        cJSON *ae = cJSON_GetObjectItemCaseSensitive(a, "engine");
        if (!rc && cJSON_IsObject(ae)) rc = rebase_field(ae, "cwd", from_file, from_cwd);
    }
    return rc ? lab_errf(err, errlen, rc, "%s: out of memory", from_file) : LAB_OK;
}
