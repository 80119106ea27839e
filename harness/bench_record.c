/*
 * bench_record.c — `vtlab record-bench REPORT.json`: a benchmark report
 * (model/bench_report.h: written by `make bench` and by bench_cuda) becomes
 * runs in results.db, one per phase, like any other run: experiment
 * "bench-<model>", arm = the phase's name, backend and device as measured,
 * the knobs resolved through the knob registry, and the phase's numbers as
 * metrics (docs/schema.md, "Benchmark runs").
 *
 * The whole report is validated before the database is opened: a malformed
 * report or an unknown knob is exit 2 with nothing written. The runs are
 * then written in one transaction (a store batch): a failure midway leaves
 * none of them. The runs carry
 * the code version that *measured* them (the report's code_version,
 * "commit|dirty=N|compiler|flags", split into the provenance columns), not
 * that of the vtlab recording them.
 */
#include "bench_record.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/vt.h"
#include "store.h"
#include "util.h"

#define MAX_PHASES 64
#define MAX_METRICS 12

typedef struct phase {
    const char *name;
    int64_t     batch, context, threads, tokens;
    double      seconds, flops, bytes, peak_flops, peak_bytes, gemm_share;   /* gemm_share NAN: not measured */
    /* derived once (what is stored and printed); NAN: not measurable (no bytes counted, no peak) */
    double      tokens_per_s, flops_per_s, bytes_per_s, flops_frac, bytes_frac;
    vt_knobset *ks;
} phase;

typedef struct report {
    cJSON      *root;
    vt_knobset *knobs;   /* the report's knobs; each phase's set is a copy plus its threads */
    const char *backend, *device, *model, *model_sha, *tokens_sha, *code;
    char        commit[128], compiler[512], flags[2048];   /* the parts of code */
    int         dirty;
    char        experiment[LAB_NAME_BUF];
    int64_t     n;
    phase       ph[MAX_PHASES];
} report;

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A number field: integral when `integral`, and >= min (> min when strict). */
static int num_field(const cJSON *o, const char *key, double min, int strict, int integral, double *out,
                     const char *path, const char *where, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || (strict ? !(v->valuedouble > min) : !(v->valuedouble >= min)) ||
        (integral && (v->valuedouble != floor(v->valuedouble) || v->valuedouble > 9e15)))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: \"%s\" must be a%s number %s %g", path, where, key,
                        integral ? "n integral" : "", strict ? ">" : ">=", min);
    *out = v->valuedouble;
    return LAB_OK;
}

/* "bench-" + the model's last path component without ".json", in [A-Za-z0-9._-].
 * -1 when that is longer than outlen - 1 (never truncated: it is the runs'
 * experiment id). */
static int experiment_id(const char *model, char *out, size_t outlen) {
    size_t len = strlen(model);
    while (len > 1 && model[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && model[start - 1] != '/') start--;
    size_t n = len - start;
    if (n > 5 && !strncmp(model + start + n - 5, ".json", 5)) n -= 5;
    if (6 + n >= outlen) return -1;
    size_t o = (size_t)snprintf(out, outlen, "bench-");
    for (size_t i = 0; i < n && o + 1 < outlen; i++) {
        char c = model[start + i];
        out[o++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                           c == '_' ? c : '_';
    }
    out[o] = 0;
    /* "/", "." or "..": nothing that names a model */
    if (n == 0 || (n == 1 && model[start] == '.') || (n == 2 && !strncmp(model + start, "..", 2)))
        snprintf(out, outlen, "bench-model");
    return 0;
}

/* "COMMIT|dirty=N|COMPILER|FLAGS" (vt_build_info) into r's provenance parts. */
static int split_code_version(report *r) {
    const char *a = r->code, *b = strchr(a, '|'), *c = b ? strchr(b + 1, '|') : NULL, *d = c ? strchr(c + 1, '|') : NULL;
    if (!d || b == a || c + 1 == d || !d[1] || (size_t)(b - a) >= sizeof r->commit ||
        (size_t)(d - c - 1) >= sizeof r->compiler ||
        strlen(d + 1) >= sizeof r->flags || strncmp(b + 1, "dirty=", 6) || (c - b - 7) != 1 || (b[7] != '0' && b[7] != '1'))
        return -1;
    snprintf(r->commit, sizeof r->commit, "%.*s", (int)(b - a), a);
    r->dirty = b[7] - '0';
    snprintf(r->compiler, sizeof r->compiler, "%.*s", (int)(d - c - 1), c + 1);
    snprintf(r->flags, sizeof r->flags, "%s", d + 1);
    return 0;
}

/* The first key that appears twice in one object, anywhere in the tree; NULL
 * when none. cJSON keeps both and finds the first, other readers the last. */
static const char *duplicate_key(const cJSON *o) {
    for (const cJSON *a = o ? o->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(o) && a->string)
            for (const cJSON *b = a->next; b; b = b->next)
                if (b->string && !strcmp(a->string, b->string)) return a->string;
        const char *d = duplicate_key(a);
        if (d) return d;
    }
    return NULL;
}

static void report_free(report *r) {
    for (int64_t i = 0; i < r->n; i++) vt_knobset_free(r->ph[i].ks);
    vt_knobset_free(r->knobs);
    cJSON_Delete(r->root);
}

/* The report's top-level fields: format and version, the code version (split
 * into r's provenance parts), backend, device, model and the two hashes;
 * the experiment id is made from the model. */
static int parse_header(const char *path, report *r, char *err, size_t errlen) {
    const cJSON *o = r->root;
    const char *fmt = str_field(o, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "version");
    if (!cJSON_IsObject(o) || !fmt || strcmp(fmt, VT_BENCH_FORMAT))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: not a benchmark report (\"format\" must be \"%s\")", path,
                        VT_BENCH_FORMAT);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != VT_BENCH_VERSION)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"version\" must be %d", path, VT_BENCH_VERSION);
    r->code = str_field(o, "code_version");
    if (!r->code || split_code_version(r) != 0)
        return lab_errf(err, errlen, LAB_EINPUT,
                        "%s: \"code_version\" must be \"COMMIT|dirty=N|COMPILER|FLAGS\" as vt_build_info() writes it", path);
    r->backend = str_field(o, "backend");
    if (!r->backend || (strcmp(r->backend, "cpu") && strcmp(r->backend, "cuda")))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"backend\" must be \"cpu\" or \"cuda\"", path);
    r->device = str_field(o, "device");
    r->model = str_field(o, "model");
    if (!r->device || !*r->device || !r->model || !*r->model)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"device\" and \"model\" must be non-empty strings", path);
    r->model_sha = str_field(o, "model_sha256");
    r->tokens_sha = str_field(o, "tokens_sha256");
    if (!vt_sha256_hex_ok(r->model_sha) || !vt_sha256_hex_ok(r->tokens_sha))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"model_sha256\" and \"tokens_sha256\" must be 64 lowercase hex digits",
                        path);
    if (experiment_id(r->model, r->experiment, sizeof r->experiment) != 0)
        return lab_errf(err, errlen, LAB_EINPUT,
                        "%s: \"model\": its last path component makes an experiment id \"bench-...\" longer than the "
                        "limit of %d characters", path, LAB_NAME_MAX);
    return LAB_OK;
}

/* The report's "knobs" into r->knobs, through the knob registry; VT_BACKEND
 * must agree with "backend". */
static int parse_knobs(const char *path, report *r, char *err, size_t errlen) {
    const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(r->root, "knobs"), *kv;
    if (!cJSON_IsObject(knobs)) return lab_errf(err, errlen, LAB_EINPUT, "%s: \"knobs\" must be an object", path);
    char kerr[512];
    if (vt_knobset_new(&r->knobs)) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    cJSON_ArrayForEach(kv, knobs) {
        if (!cJSON_IsString(kv))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: knobs: \"%s\" must be a string", path, kv->string);
        if (vt_knobset_set(r->knobs, kv->string, kv->valuestring, kerr, sizeof kerr))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: knobs: %s", path, kerr);
    }
    if (strcmp(vt_knobset_value(r->knobs, VT_K_BACKEND), r->backend))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: knobs: VT_BACKEND is \"%s\" but \"backend\" is \"%s\"", path,
                        vt_knobset_value(r->knobs, VT_K_BACKEND), r->backend);
    return LAB_OK;
}

/* Phase q's numbers into p (where: "phases[i]", for the messages), and the
 * rates derived from them, which are what gets stored. */
static int phase_numbers(const cJSON *q, phase *p, const char *path, const char *where, char *err, size_t errlen) {
    double b, c, t, k;
    int rc;
    if ((rc = num_field(q, "batch", 1, 0, 1, &b, path, where, err, errlen)) ||
        (rc = num_field(q, "context", 0, 0, 1, &c, path, where, err, errlen)) ||
        (rc = num_field(q, "threads", 0, 0, 1, &t, path, where, err, errlen)) ||
        (rc = num_field(q, "tokens", 1, 0, 1, &k, path, where, err, errlen)) ||
        (rc = num_field(q, "seconds", 0, 1, 0, &p->seconds, path, where, err, errlen)) ||
        (rc = num_field(q, "flops", 0, 0, 0, &p->flops, path, where, err, errlen)) ||
        (rc = num_field(q, "bytes", 0, 0, 0, &p->bytes, path, where, err, errlen)) ||
        (rc = num_field(q, "peak_flops", 0, 0, 0, &p->peak_flops, path, where, err, errlen)) ||
        (rc = num_field(q, "peak_bytes", 0, 0, 0, &p->peak_bytes, path, where, err, errlen)))
        return rc;
    p->batch = (int64_t)b, p->context = (int64_t)c, p->threads = (int64_t)t, p->tokens = (int64_t)k;
    /* what gets stored is derived: tokens/s, FLOP/s, bytes/s and the fractions of the peaks */
    p->tokens_per_s = k / p->seconds;
    p->flops_per_s = p->flops / p->seconds;
    p->bytes_per_s = p->bytes > 0 ? p->bytes / p->seconds : NAN;
    p->flops_frac = p->peak_flops > 0 ? p->flops_per_s / p->peak_flops : NAN;
    p->bytes_frac = p->bytes > 0 && p->peak_bytes > 0 ? p->bytes_per_s / p->peak_bytes : NAN;
    if (isinf(p->tokens_per_s) || isinf(p->flops_per_s) || isinf(p->bytes_per_s) || isinf(p->flops_frac) ||
        isinf(p->bytes_frac))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: the rates derived from these numbers overflow (seconds %g)",
                        path, where, p->seconds);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(q, "gemm_share");
    p->gemm_share = NAN;
    if (g && !cJSON_IsNull(g) && (rc = num_field(q, "gemm_share", 0, 0, 0, &p->gemm_share, path, where, err, errlen)))
        return rc;
    return LAB_OK;
}

/* Phase i (q) into r->ph[i]: its name (unique in the report), its numbers,
 * and its knob set; r->n counts it once that set exists (report_free frees
 * it). */
static int parse_phase(const char *path, report *r, const cJSON *q, int64_t i, char *err, size_t errlen) {
    phase *p = &r->ph[i];
    char where[64], kerr[512];
    snprintf(where, sizeof where, "phases[%lld]", (long long)i);
    if (!cJSON_IsObject(q)) return lab_errf(err, errlen, LAB_EINPUT, "%s: %s must be an object", path, where);
    p->name = str_field(q, "name");
    if (!vt_bench_name_ok(p->name))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: \"name\" must be 1-31 of [a-z0-9_-]", path, where);
    for (int64_t j = 0; j < i; j++)
        if (!strcmp(p->name, r->ph[j].name))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: phase name \"%s\" appears twice", path, p->name);
    int rc = phase_numbers(q, p, path, where, err, errlen);
    if (rc) return rc;

    /* the knobs: the report's, then the phase's thread count (CPU) */
    if (vt_knobset_copy(&p->ks, r->knobs)) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    r->n = i + 1;
    if (p->threads > 0) {
        char th[32];
        snprintf(th, sizeof th, "%lld", (long long)p->threads);
        if (vt_knobset_set(p->ks, "VT_THREADS", th, kerr, sizeof kerr))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: threads: %s", path, where, kerr);
    }
    return LAB_OK;
}

/* text: len bytes, text[len] == 0. */
static int parse(const char *path, const char *text, size_t len, report *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    /* a NUL byte or a \u0000 escape would silently shorten a name or the
     * code version: refused before cJSON sees the text */
    void *root = NULL;
    int rc = lab_json_parse(path, text, len, &root, err, errlen);
    if (rc) return rc;
    r->root = root;
    const char *dup = duplicate_key(r->root);
    if (dup)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: key \"%s\" appears twice in one object (which one was meant?)",
                        path, dup);
    if ((rc = parse_header(path, r, err, errlen)) || (rc = parse_knobs(path, r, err, errlen))) return rc;
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(r->root, "phases");
    int64_t n = cJSON_IsArray(phases) ? cJSON_GetArraySize(phases) : 0;
    if (n < 1 || n > MAX_PHASES)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"phases\" must be an array of 1 to %d phases", path, MAX_PHASES);
    for (int64_t i = 0; i < n; i++)
        if ((rc = parse_phase(path, r, cJSON_GetArrayItem(phases, (int)i), i, err, errlen))) return rc;
    return LAB_OK;
}

/* One phase's metrics: what it did per second and against the peaks. A
 * ratio with nothing to compare against is left out (not measurable). */
static int64_t metrics(const phase *p, const char **mn, double *mv) {
    int64_t n = 0;
    mn[n] = "tokens_per_s", mv[n++] = p->tokens_per_s;
    mn[n] = "seconds", mv[n++] = p->seconds;
    mn[n] = "batch", mv[n++] = (double)p->batch;
    mn[n] = "context", mv[n++] = (double)p->context;
    mn[n] = "flops_per_s", mv[n++] = p->flops_per_s;
    if (!isnan(p->flops_frac)) mn[n] = "flops_frac_of_peak", mv[n++] = p->flops_frac;
    if (!isnan(p->bytes_per_s)) mn[n] = "bytes_per_s", mv[n++] = p->bytes_per_s;
    if (!isnan(p->bytes_frac)) mn[n] = "bytes_frac_of_peak", mv[n++] = p->bytes_frac;
    if (!isnan(p->gemm_share)) mn[n] = "gemm_share", mv[n++] = p->gemm_share;
    return n;
}

/* Validates a report from len bytes of text (text[len] == 0) without
 * recording anything: what lab_record_bench checks before it opens the
 * database. Fuzz target (declared there; bench_record.h has only the command). */
int lab_bench_report_check(const char *path, const char *text, size_t len, char *err, size_t errlen);
int lab_bench_report_check(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    if (text[len]) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: report text not NUL-terminated", path);
    report r;
    int rc = parse(path, text, len, &r, err, errlen);
    report_free(&r);
    return rc;
}

/* The provenance every phase's run shares: the code that measured them (the
 * report's), its backend and device, this host and process. */
static void bench_provenance(const report *r, const char *spec_sha, const char *host, lab_provenance *pv) {
    memset(pv, 0, sizeof *pv);
    pv->experiment_sha256 = spec_sha;
    pv->git_commit = r->commit;
    pv->git_dirty = r->dirty;
    pv->build_flags = r->flags;
    pv->compiler = r->compiler;
    pv->backend = r->backend;
    pv->device = r->device;
    pv->host = host;
    pv->pid = getpid();
    pv->pid_start = lab_pid_start(pv->pid);
    pv->score = "all";
    pv->expected_assertions = "pass";
}

/* The knob columns of a run: every registry knob (kn, kv, knum: [nk]) with
 * its value in ks. */
static void knob_columns(const vt_knobset *ks, int nk, const char **kn, const char **kv, int *knum) {
    for (int k = 0; k < nk; k++) {
        const vt_knob_info *ki = vt_knob_at(k);
        kn[k] = ki->name, kv[k] = vt_knobset_get(ks, ki->name), knum[k] = ki->numeric;
    }
}

/* Phase p of r as a new FINISHED run (inside the caller's batch): leased
 * (forced), its knobs and metrics written; its id into *run_id. kn, kv and
 * knum ([vt_knob_count()]) are the caller's scratch. */
static int record_phase(lab_store *st, const report *r, const phase *p, const lab_provenance *pv, const char **kn,
                        const char **kv, int *knum, int64_t *run_id, char *err, size_t errlen) {
    char knob_hash[65];
    vt_knobset_hash(p->ks, knob_hash);
    lab_identity id = {r->experiment, p->name, 0, knob_hash, r->model_sha, r->tokens_sha, r->code, NULL};
    int kind = 0, nk = vt_knob_count();
    int64_t stale = 0;
    /* forced: every report is a new measurement, never "already finished" */
    int rc = lab_store_lease(st, &id, pv, 1, &kind, run_id, &stale, err, errlen);
    if (rc) return rc;
    if (kind != LAB_LEASED)
        return lab_errf(err, errlen, LAB_EIO, "run %s/%s is held by another process (run %lld)", r->experiment, p->name,
                        (long long)*run_id);
    knob_columns(p->ks, nk, kn, kv, knum);
    const char *mn[MAX_METRICS];
    double mv[MAX_METRICS];
    lab_run_result res = {0};
    res.n_tokens = p->tokens;
    res.wall_s = res.forward_s = p->seconds;
    res.assertions_ok = -1;   /* a benchmark runs with probes off: nothing is asserted */
    res.n_knobs = nk, res.knob_names = kn, res.knob_values = kv, res.knob_numeric = knum;
    res.n_metrics = metrics(p, mn, mv), res.metric_names = mn, res.metric_values = mv;
    return lab_store_finish(st, *run_id, &res, err, errlen);
}

/* One line per recorded run: its id, phase, tokens/s and fractions of peak. */
static void print_runs(FILE *out, const report *r, const int64_t *run_ids) {
    for (int64_t i = 0; out && i < r->n; i++) {
        const phase *p = &r->ph[i];
        fprintf(out, "run %lld: %s %s (%s, %s): %.1f tokens/s", (long long)run_ids[i], r->experiment, p->name, r->backend,
                r->device, p->tokens_per_s);
        if (!isnan(p->flops_frac)) fprintf(out, ", %.1f%% of peak FLOP/s", 100 * p->flops_frac);
        if (!isnan(p->bytes_frac)) fprintf(out, ", %.1f%% of peak bytes/s", 100 * p->bytes_frac);
        fputc('\n', out);
    }
}

int lab_record_bench(const char *path, const char *db, FILE *out, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = lab_read_json(path, &text, &len, err, errlen);
    if (rc) return rc;
    report r;
    rc = parse(path, text, len, &r, err, errlen);
    free(text);
    if (rc) { report_free(&r); return rc; }

    /* The report itself is the run's "experiment spec": what was measured, verbatim. */
    char *canon = cJSON_PrintUnformatted(r.root), spec_sha[65], host[256];
    if (!canon) { report_free(&r); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    vt_sha256_hex(canon, strlen(canon), spec_sha);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;

    lab_store *st = NULL;
    int64_t run_ids[MAX_PHASES] = {0};
    int nk = vt_knob_count();
    const char **kn = calloc((size_t)nk, sizeof *kn), **kv = calloc((size_t)nk, sizeof *kv);
    int *knum = calloc((size_t)nk, sizeof *knum);
    if (!kn || !kv || !knum) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    if ((rc = lab_store_open(&st, db, err, errlen))) goto done;
    /* one transaction for the spec and every phase's run: all of the report or none of it */
    if ((rc = lab_store_batch_begin(st, err, errlen))) goto done;
    if ((rc = lab_store_put_spec(st, spec_sha, r.experiment, path, canon, err, errlen))) goto done;
    lab_provenance pv;   /* the same for every phase */
    bench_provenance(&r, spec_sha, host, &pv);
    for (int64_t i = 0; i < r.n && !rc; i++) rc = record_phase(st, &r, &r.ph[i], &pv, kn, kv, knum, &run_ids[i], err, errlen);
    if (!rc) rc = lab_store_batch_commit(st, err, errlen);
    if (!rc) print_runs(out, &r, run_ids);   /* only what is now in the database */
done:
    if (rc && st) lab_store_batch_rollback(st);
    lab_store_close(st);
    free(kn);
    free(kv);
    free(knum);
    cJSON_free(canon);
    report_free(&r);
    return rc;
}
