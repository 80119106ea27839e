/*
 * engine_check.c — `vtlab engine-check CMD...`: the conformance checks an
 * engine should pass before its numbers are trusted (docs/engine-protocol.md,
 * "Conformance"). One line per check; any failure makes the exit status 1.
 *
 *   hello        the first message is a valid hello; its faults name
 *                declared knobs and values
 *   determinism  the same request twice gives bit-identical logits (unless
 *                the hello says the engine is not deterministic)
 *   prefix       the logits of a prefix equal the longer request's at the
 *                same positions, within prefix_tol of the largest |logit|
 *   probes       probe records are well-formed, at declared sites, with
 *                violations <= calls, and present when sites are declared
 *   bad request  a header that is not JSON, a payload of the wrong size and
 *                a token out of range each get an error response, and the
 *                engine keeps serving
 *   batch        (max_batch > 1) requests of several sequences, two in
 *                flight, give each sequence bit-identical logits and the same
 *                probe records as the sequence sent alone; more sequences
 *                than max_batch, or lengths that do not sum to the tokens,
 *                get an error. Skipped, saying so, without max_batch.
 *   knobs        each declared knob set to another allowed value (one engine
 *                start each) is reported with that value; a numeric knob
 *                changes the logits, a non-numeric one does not (else runs
 *                under different values would share an identity)
 *   audit mode   the engine started with VTP_PROBE=audit: finite logits,
 *                bit-identical to those under VTP_PROBE=on (a sentinel never
 *                reaches a number), unwritten rows counted as violations
 *   fault NAME   each declared fault replayed (KNOB=NAME, VTP_PROBE=audit)
 *                gives a violation or an unwritten row at its declared site
 *
 * Every engine start gets the --env variables (opts.env), then the knobs
 * the check sets.
 */
#include "engine_check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "util.h"

#define CHECK_T      12   /* tokens of the checks' request */
#define CHECK_PREFIX 5    /* tokens of its prefix */

typedef struct checker {
    const lab_engine_check_opts *o;
    FILE            *out;
    lab_engine_spec  spec;
    void            *model;
    int              n_ok, n_fail, n_skip;
    int              nondeterministic;   /* the same request gave other logits */
    int32_t          tok[CHECK_T];
} checker;

static void line(checker *k, const char *tag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(checker *k, const char *tag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(k->out, "%-4s  ", tag);
    vfprintf(k->out, fmt, ap);
    fputc('\n', k->out);
    fflush(k->out);
    va_end(ap);
    if (!strcmp(tag, "ok")) k->n_ok++;
    else if (!strcmp(tag, "FAIL")) k->n_fail++;
    else k->n_skip++;
}

/* Starts the engine with n knobs set, in probe mode probe ("on", "audit"). */
static int start(checker *k, int n, char *const *names, char *const *values, const char *probe, void **inst,
                 lab_engine_hello *h, char *err, size_t errlen) {
    lab_engine_req req = {0};
    req.n_knobs = n;
    req.knob_names = names;
    req.knob_values = values;
    req.probe = probe;
    return lab_engine_command.open(k->model, &req, inst, h, err, errlen);
}

static int forward(void *inst, const int32_t *tok, int64_t T, float *logits, char *err, size_t errlen) {
    return lab_engine_command.forward(inst, tok, T, 0, logits, err, errlen);
}

/* Fault f of h cannot be switched on: its knob is not declared (1), or its
 * name is not one of the knob's values (2); 0 when it can. */
static int fault_problem(const lab_engine_hello *h, int64_t f) {
    const lab_engine_knob *kn = lab_engine_hello_knob(h, h->fault_knob[f]);
    if (!kn) return 1;
    if (!strcmp(kn->type, "string")) return 0;
    char bar[300], want[300];
    snprintf(bar, sizeof bar, "|%s|", kn->values);
    snprintf(want, sizeof want, "|%s|", h->fault_name[f]);
    return strstr(bar, want) ? 0 : 2;
}

static void check_faults(checker *k, const lab_engine_hello *h) {
    for (int64_t f = 0; f < h->n_faults; f++) {
        int p = fault_problem(h, f);
        if (p == 1) line(k, "FAIL", "hello: faults[%lld] %s: its knob %s is not declared", (long long)f, h->fault_name[f],
                         h->fault_knob[f]);
        else if (p == 2)
            line(k, "FAIL", "hello: faults[%lld] %s: not one of knob %s's values (%s)", (long long)f, h->fault_name[f],
                 h->fault_knob[f], lab_engine_hello_knob(h, h->fault_knob[f])->values);
    }
}

static double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static void check_probes(checker *k, void *inst, const lab_engine_hello *h) {
    vt_probe *recs = NULL;
    int64_t n = 0, lost = 0;
    char err[1024];
    if (lab_engine_command.probes(inst, &recs, &n, &lost, err, sizeof err)) {
        line(k, "FAIL", "probes: %s", err);
        return;
    }
    const char *bad = NULL;
    int64_t at = -1;
    for (int64_t i = 0; i < n && !bad; i++) {
        int64_t s = 0;
        while (s < h->n_sites && strcmp(h->sites[s], recs[i].site)) s++;
        at = i;
        if (s == h->n_sites) bad = "a site the hello does not declare";
        else if (recs[i].calls < 1) bad = "calls < 1";
        else if (recs[i].violations > recs[i].calls) bad = "more violations than calls";
        else if (recs[i].violations && !recs[i].detail[0]) bad = "a violation without a detail";
    }
    if (bad) line(k, "FAIL", "probes: record %lld (site %s, layer %d): %s", (long long)at, recs[at].site,
                  recs[at].layer, bad);
    else if (n == 0 && h->n_sites > 0)
        line(k, "FAIL", "probes: no record in VTP_PROBE=on although the hello declares %lld site(s)",
             (long long)h->n_sites);
    else line(k, "ok", "probes: %lld well-formed record(s) at declared sites", (long long)n);
    free(recs);
}

/* One bad request: it must get an error response, then a good one must work.
 * check: the check's name in a FAIL line ("bad request", "batch limits"). */
static int bad_request(checker *k, void *inst, const char *check, const char *what, const char *header, const void *pl,
                       size_t n, int64_t V) {
    char *reply = NULL, err[1024];
    int rc = lab_engine_command_raw(inst, header, pl, n, &reply, err, sizeof err);
    cJSON *j = rc ? NULL : cJSON_Parse(reply);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    int is_error = cJSON_IsString(t) && !strcmp(t->valuestring, "error");
    cJSON_Delete(j);
    if (rc) line(k, "FAIL", "%s (%s): %s", check, what, err);
    else if (!is_error) line(k, "FAIL", "%s (%s): the answer is not an error: %.200s", check, what, reply);
    free(reply);
    if (rc || !is_error) return -1;
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) return -1;
    rc = forward(inst, k->tok, 1, lg, err, sizeof err);
    free(lg);
    if (rc) {
        line(k, "FAIL", "%s (%s): a good request afterwards failed: %s", check, what, err);
        return -1;
    }
    return 0;
}

static void check_bad_requests(checker *k, void *inst, int64_t V) {
    int32_t big[2] = {(int32_t)V, 3};
    int bad = 0;
    bad |= bad_request(k, inst, "bad request", "header not JSON", "this is not a header\n", NULL, 0, V);
    if (!bad)
        bad |= bad_request(k, inst, "bad request", "payload of the wrong size",
                           "{\"type\":\"forward\",\"id\":900,\"tokens\":2,\"capture\":false,\"payload_bytes\":4}\n",
                           big, 4, V);
    if (!bad)
        bad |= bad_request(k, inst, "bad request", "token id = vocab",
                           "{\"type\":\"forward\",\"id\":901,\"tokens\":2,\"capture\":false,\"payload_bytes\":8}\n",
                           big, 8, V);
    if (!bad) line(k, "ok", "bad requests: three malformed requests answered with errors, serving went on");
}

/* A value of knob kn other than the one in use (its default, unless --env
 * set it: then the default is the other value worth trying), or NULL
 * (strings, or none). */
static const char *other_value(const lab_engine_knob *kn, char *buf, size_t n) {
    const char *cur = kn->value ? kn->value : kn->def;
    if (!strcmp(kn->type, "string")) return NULL;
    if (!strcmp(kn->type, "int")) {
        long long lo = 0, hi = 0, d = atoll(cur);
        if (sscanf(kn->values, "%lld..%lld", &lo, &hi) != 2 || lo == hi) return NULL;
        snprintf(buf, n, "%lld", d == lo ? lo + 1 : lo);
        return buf;
    }
    for (const char *p = kn->values; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l < n && (strlen(cur) != l || memcmp(p, cur, l))) {
            memcpy(buf, p, l);
            buf[l] = 0;
            return buf;
        }
        p += l + (bar ? 1 : 0);
    }
    return NULL;
}

static int is_fault_knob(const lab_engine_hello *h, const char *name) {
    for (int64_t f = 0; f < h->n_faults; f++)
        if (!strcmp(h->fault_knob[f], name)) return 1;
    return 0;
}

/* What one engine start and one forward of the check's request gave. */
enum { RUN_OK, RUN_NOSTART, RUN_KNOB, RUN_FORWARD };
typedef struct run_out {
    int       status;     /* RUN_*: RUN_KNOB a knob set is not reported as set (or *unread) */
    int       unread;     /* RUN_KNOB: the engine declares a knob set as not read */
    float    *logits;     /* [CHECK_T, V], calloc'd: RUN_OK, and RUN_FORWARD (what came back) */
    vt_probe *recs;       /* the forward's probe records, also after a failed forward */
    int64_t   n_recs;
    char      err[1024];  /* why, unless RUN_OK */
} run_out;

static void run_free(run_out *r) {
    free(r->logits);
    free(r->recs);
    r->logits = NULL;
    r->recs = NULL;
}

/* Starts the engine with n knobs set in probe mode probe, checks that the
 * hello reports each knob with its value, runs the check's request, keeps
 * its logits and probe records (a failed forward's too: which record went
 * wrong explains it), stops the engine. */
static void run_once(checker *k, int n, char *const *names, char *const *values, const char *probe, int64_t V,
                     run_out *r) {
    void *inst = NULL;
    lab_engine_hello h;
    memset(r, 0, sizeof *r);
    r->status = RUN_NOSTART;
    if (start(k, n, names, values, probe, &inst, &h, r->err, sizeof r->err)) return;
    r->status = RUN_KNOB;
    for (int i = 0; i < n; i++) {
        const lab_engine_knob *got = lab_engine_hello_knob(&h, names[i]);
        if (!got) { snprintf(r->err, sizeof r->err, "the hello no longer declares %s", names[i]); goto done; }
        if (!got->read) { r->unread = 1; snprintf(r->err, sizeof r->err, "%s is declared as not read", names[i]); goto done; }
        if (strcmp(got->value, values[i])) {
            snprintf(r->err, sizeof r->err, "the hello reports %s=\"%s\"", names[i], got->value);
            goto done;
        }
    }
    r->status = RUN_FORWARD;
    if (!(r->logits = calloc((size_t)(CHECK_T * V), sizeof *r->logits))) { snprintf(r->err, sizeof r->err, "out of memory"); goto done; }
    if (!forward(inst, k->tok, CHECK_T, r->logits, r->err, sizeof r->err)) r->status = RUN_OK;
    int64_t lost = 0;
    char perr[256];
    if (lab_engine_command.probes(inst, &r->recs, &r->n_recs, &lost, perr, sizeof perr) && r->status == RUN_OK) {
        r->status = RUN_FORWARD;
        snprintf(r->err, sizeof r->err, "probes: %s", perr);
    }
done:
    lab_engine_command.close(inst);
    lab_engine_hello_free(&h);
}

/* The logits of the check's request with n knobs set (VTP_PROBE=on), or
 * NULL; *status: RUN_*, the reason in err; *unread: see run_out. */
static float *knob_logits(checker *k, int n, char *const *names, char *const *values, int64_t V, int *status,
                          int *unread, char *err, size_t errlen) {
    run_out r;
    run_once(k, n, names, values, "on", V, &r);
    *status = r.status;
    *unread = r.unread;
    snprintf(err, errlen, "%s", r.err);
    float *lg = r.status == RUN_OK ? r.logits : NULL;
    if (!lg) free(r.logits);
    free(r.recs);
    return lg;
}

static int allowed_noop(const checker *k, const char *name) {
    for (int64_t i = 0; i < k->o->n_allow_noop; i++)
        if (!strcmp(k->o->allow_noop[i], name)) return 1;
    return 0;
}

/* Every knob at another allowed value (one engine start each): reported as
 * set; numeric <=> the logits change. A numeric knob that changes nothing
 * alone is tried together with each knob that does (its effect may depend
 * on it, as a bf16 expert output needs a bf16 stream). */
static void check_knobs(checker *k, const lab_engine_hello *h, const float *base, int64_t V) {
    if (k->nondeterministic) {
        line(k, "skip", "knobs: not compared (the same request gives other logits: a knob's effect cannot be told from noise)");
        return;
    }
    int64_t n = h->n_knobs;
    float **lg = calloc((size_t)n + 1, sizeof *lg);
    char (*alt)[256] = calloc((size_t)n + 1, sizeof *alt);
    int *noop = calloc((size_t)n + 1, sizeof *noop);
    size_t bytes = (size_t)(CHECK_T * V) * sizeof(float);
    if (!lg || !alt || !noop) { line(k, "FAIL", "knobs: out of memory"); goto done; }
    for (int64_t i = 0; i < n; i++) {
        const lab_engine_knob *kn = &h->knobs[i];
        char err[1024] = "", *nm = kn->name, *val = alt[i];
        int st = 0, unread = 0;
        if (kn->scope_of >= 0) continue;   /* a scope: check_scopes */
        if (is_fault_knob(h, kn->name)) { line(k, "skip", "knob %s: selects faults (each is replayed below, under audit)", kn->name); continue; }
        if (!other_value(kn, alt[i], sizeof alt[i])) { line(k, "skip", "knob %s: no other value to try (%s %s)", kn->name, kn->type, kn->values); continue; }
        lg[i] = knob_logits(k, 1, &nm, &val, V, &st, &unread, err, sizeof err);
        int same = lg[i] && !memcmp(lg[i], base, bytes);
        if (st == RUN_NOSTART) line(k, "skip", "knob %s=%s: the engine did not start with it: %.300s", nm, val, err);
        else if (unread) line(k, "ok", "knob %s: declared as not read (setting it takes no effect; R3 flags arms that set it)", nm);
        else if (st) line(k, "FAIL", "knob %s=%s: %s", nm, val, err);
        else if (!kn->numeric && !same)
            line(k, "FAIL", "knob %s=%s: declared non-numeric but the logits change (runs would share an identity)", nm, val);
        else if (kn->numeric && same) noop[i] = 1;
        else line(k, "ok", "knob %s=%s: reported as set; logits %s", nm, val, same ? "unchanged (non-numeric)" : "change (numeric)");
    }
    for (int64_t i = 0; i < n; i++) {
        if (!noop[i]) continue;
        const char *with = NULL;
        for (int64_t j = 0; j < n && !with; j++) {
            if (j == i || !lg[j] || noop[j] || !h->knobs[j].numeric || !memcmp(lg[j], base, bytes)) continue;
            char err[1024], *nm[2] = {h->knobs[i].name, h->knobs[j].name}, *val[2] = {alt[i], alt[j]};
            int st = 0, unread = 0;
            float *both = knob_logits(k, 2, nm, val, V, &st, &unread, err, sizeof err);
            if (both && memcmp(both, lg[j], bytes)) with = h->knobs[j].name;
            free(both);
        }
        if (with) line(k, "ok", "knob %s=%s: reported as set; logits change together with %s (not alone)", h->knobs[i].name, alt[i], with);
        else if (allowed_noop(k, h->knobs[i].name))
            line(k, "skip", "knob %s=%s: the logits are bit-identical to the default's, alone and with every other knob (allowed by --allow-noop)", h->knobs[i].name, alt[i]);
        else line(k, "FAIL", "knob %s=%s: declared numeric but the logits are bit-identical to the default's, alone and with every other knob (on this model; --allow-noop %s if that is expected)", h->knobs[i].name, alt[i], h->knobs[i].name);
    }
done:
    for (int64_t i = 0; lg && i < n; i++) free(lg[i]);
    free(lg);
    free(alt);
    free(noop);
}

/* The logits with lever p at value v and its scope knob sk at scope; NULL
 * (and a FAIL line) when the engine did not run them or did not report the
 * scope as set. */
static float *scoped_logits(checker *k, const lab_engine_knob *p, const char *v, const lab_engine_knob *sk,
                            const char *scope, int64_t V) {
    char err[1024], *nm[2] = {p->name, sk->name}, *val[2] = {(char *)v, (char *)scope};
    int st = 0, unread = 0;
    float *lg = knob_logits(k, scope ? 2 : 1, nm, val, V, &st, &unread, err, sizeof err);
    if (!lg) line(k, "FAIL", "scope of %s: %s=%s %s=%s: %s", p->name, p->name, v, sk->name, scope ? scope : "(unset)", err);
    return lg;
}

/* One scoped knob's scope (docs/engine-protocol.md, "Scoped knobs"), with
 * the knob at a value that changes the logits: "none" gives the default's
 * logits, every layer the unscoped knob's, and the two halves of the layers
 * not both the unscoped knob's (the scope ignored) nor both the default's
 * (any scope switching it off). */
static void check_scope(checker *k, const lab_engine_hello *h, const lab_engine_knob *sk, const float *base, int64_t V) {
    const lab_engine_knob *p = &h->knobs[sk->scope_of];
    const size_t bytes = (size_t)(CHECK_T * V) * sizeof(float);
    const int64_t L = h->info.n_layers;
    char alt[256], every[32], lo[32], hi[32];
    if (!p->numeric || !other_value(p, alt, sizeof alt)) { line(k, "skip", "scope of %s: no numeric value to try", p->name); return; }
    snprintf(every, sizeof every, L > 1 ? "0-%lld" : "0", (long long)(L - 1));
    snprintf(lo, sizeof lo, L > 2 ? "0-%lld" : "0", (long long)(L / 2 - 1));
    snprintf(hi, sizeof hi, L / 2 < L - 1 ? "%lld-%lld" : "%lld", (long long)(L / 2), (long long)(L - 1));
    float *full = scoped_logits(k, p, alt, sk, NULL, V), *none = NULL, *all = NULL, *a = NULL, *b = NULL;
    if (full && !memcmp(full, base, bytes)) {
        line(k, "skip", "scope of %s: %s=%s alone leaves the logits as they are (nothing to scope)", p->name, p->name, alt);
        goto done;
    }
    if (!full || !(none = scoped_logits(k, p, alt, sk, "none", V)) || !(all = scoped_logits(k, p, alt, sk, every, V)))
        goto done;
    if (memcmp(none, base, bytes)) { line(k, "FAIL", "scope of %s: %s=none changes the logits (the knob acts outside its scope)", p->name, sk->name); goto done; }
    if (memcmp(all, full, bytes)) { line(k, "FAIL", "scope of %s: %s=%s (every layer) is not the unscoped %s=%s", p->name, sk->name, every, p->name, alt); goto done; }
    if (L < 2) { line(k, "ok", "scope of %s: none = the default, every layer = unscoped (one layer: no halves)", p->name); goto done; }
    if (!(a = scoped_logits(k, p, alt, sk, lo, V)) || !(b = scoped_logits(k, p, alt, sk, hi, V))) goto done;
    if (!memcmp(a, full, bytes) && !memcmp(b, full, bytes))
        line(k, "FAIL", "scope of %s: %s=%s and =%s both give the unscoped logits (the scope is ignored)", p->name, sk->name, lo, hi);
    else if (!memcmp(a, base, bytes) && !memcmp(b, base, bytes))
        line(k, "FAIL", "scope of %s: %s=%s and =%s both give the default's logits (a scope switches the knob off)", p->name, sk->name, lo, hi);
    else line(k, "ok", "scope of %s=%s: none = the default, %s = unscoped, %s and %s change the logits apart", p->name, alt, every, lo, hi);
done:
    free(full); free(none); free(all); free(a); free(b);
}

static void check_scopes(checker *k, const lab_engine_hello *h, const float *base, int64_t V) {
    for (int64_t i = 0; i < h->n_knobs; i++) {
        if (h->knobs[i].scope_of < 0) continue;
        if (k->nondeterministic) { line(k, "skip", "scope of %s: not compared (nondeterministic)", h->knobs[h->knobs[i].scope_of].name); continue; }
        check_scope(k, h, &h->knobs[i], base, V);
    }
}

/* The first record whose unwritten rows are counted inconsistently, in why:
 * rows_unwritten > 0 without a violation (an unwritten row is one: the
 * protocol's `violations`), or more unwritten rows than rows. -1 (not
 * audited) and 0 are always right. 1 when found. */
static int unwritten_problem(const vt_probe *recs, int64_t n, char *why, size_t wl) {
    for (int64_t i = 0; i < n; i++) {
        const vt_probe *p = &recs[i];
        if (p->rows_unwritten > 0 && p->violations == 0)
            snprintf(why, wl, "record %lld (site %s, layer %d): rows_unwritten %lld without a violation "
                     "(an unwritten row is a violation)", (long long)i, p->site, p->layer, (long long)p->rows_unwritten);
        else if (p->rows_unwritten > p->rows)
            snprintf(why, wl, "record %lld (site %s, layer %d): rows_unwritten %lld of %lld rows", (long long)i, p->site,
                     p->layer, (long long)p->rows_unwritten, (long long)p->rows);
        else continue;
        return 1;
    }
    return 0;
}

/* Logits bits that hold the audit sentinel's NaN (f32 0x7FA5A5A5, or the
 * same with the quiet bit set, as arithmetic on it leaves it): the index of
 * the first, or -1. A NaN with that payload is a sentinel that reached the
 * numbers, not a NaN the model computed. */
static int64_t sentinel_at(const float *lg, int64_t n) {
    for (int64_t i = 0; lg && i < n; i++) {
        uint32_t b;
        memcpy(&b, &lg[i], sizeof b);
        if ((b & ~UINT32_C(0x00400000)) == UINT32_C(0x7FA5A5A5)) return i;
    }
    return -1;
}

/* The engine started with VTP_PROBE=audit: the check's request must give
 * finite logits, bit-identical to base (VTP_PROBE=on's) when the engine is
 * deterministic, and records whose unwritten rows are counted as violations. */
static void check_audit(checker *k, const lab_engine_hello *h, const float *base, int64_t V) {
    run_out r;
    char why[512];
    run_once(k, 0, NULL, NULL, "audit", V, &r);
    int64_t audited = 0, unwritten = 0, n = (int64_t)CHECK_T * V, s = sentinel_at(r.logits, n);
    for (int64_t i = 0; i < r.n_recs; i++) {
        audited += r.recs[i].rows_unwritten >= 0;
        unwritten += r.recs[i].rows_unwritten > 0 ? r.recs[i].rows_unwritten : 0;
    }
    if (r.status == RUN_NOSTART) line(k, "FAIL", "audit mode: the engine did not start with VTP_PROBE=audit: %.400s", r.err);
    else if (r.status && s >= 0)
        line(k, "FAIL", "audit mode: %.400s; its payload is the audit sentinel's (0x7FA5A5A5): the sentinel reached the numbers",
             r.err);
    else if (r.status) line(k, "FAIL", "audit mode: the check's request under VTP_PROBE=audit: %.400s", r.err);
    else if (unwritten_problem(r.recs, r.n_recs, why, sizeof why)) line(k, "FAIL", "audit mode: %s", why);
    else if (!h->deterministic || k->nondeterministic)
        line(k, "ok", "audit mode: logits finite (not compared with VTP_PROBE=on's: the engine is not deterministic); "
             "%lld record(s), %lld audited, %lld rows unwritten", (long long)r.n_recs, (long long)audited, (long long)unwritten);
    else if (memcmp(r.logits, base, (size_t)n * sizeof *base)) {
        int64_t i = 0;
        while (i < n && !memcmp(&r.logits[i], &base[i], sizeof *base)) i++;
        line(k, "FAIL", "audit mode: the logits differ from those under VTP_PROBE=on, first at [%lld][%lld] (%.9g vs %.9g): "
             "the sentinel reached the numbers", (long long)(i / V), (long long)(i % V), r.logits[i], base[i]);
    } else
        line(k, "ok", "audit mode: logits finite and bit-identical to VTP_PROBE=on's; %lld record(s), %lld audited, "
             "%lld rows unwritten", (long long)r.n_recs, (long long)audited, (long long)unwritten);
    run_free(&r);
}

/* A fault's replay: the knobs it sets (the fault's, then any others), and
 * what it found at the fault's site. */
typedef struct replay {
    int64_t n;
    char  **names, **values;
    int64_t viol, unwritten, audited;   /* at the site: violations, rows unwritten, records audited */
    run_out r;
} replay;

/* Runs rp's knobs under VTP_PROBE=audit and counts what the records at site show. */
static void replay_run(checker *k, replay *rp, const char *site, int64_t V) {
    run_once(k, (int)rp->n, rp->names, rp->values, "audit", V, &rp->r);
    rp->viol = rp->unwritten = rp->audited = 0;
    for (int64_t i = 0; i < rp->r.n_recs; i++) {
        const vt_probe *p = &rp->r.recs[i];
        if (strcmp(p->site, site)) continue;
        rp->viol += p->violations;
        rp->unwritten += p->rows_unwritten > 0 ? p->rows_unwritten : 0;
        rp->audited += p->rows_unwritten >= 0;
    }
}

/* "A=1, B=1": the knobs of rp after the fault's. */
static void others(const replay *rp, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int64_t i = 1; i < rp->n && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s=%s", i > 1 ? ", " : "", rp->names[i], rp->values[i]);
}

/* Runs rp and writes its line when it found something (ok) or counted it
 * wrong (FAIL): 1 then, else 0. A replay that did not run is a FAIL for
 * the fault alone (set NULL: the fault breaks the engine); for a retry
 * (set: its other knobs, "A=1") it is noted in noted and the next one
 * tried, as the knob check skips a value the engine does not start with. */
static int replay_try(checker *k, const lab_engine_hello *h, int64_t f, replay *rp, int64_t V, const char *set,
                      char *noted, size_t nl) {
    const char *name = h->fault_name[f], *knob = h->fault_knob[f], *site = h->fault_site[f];
    char why[512], more[64];
    int wrote = 1;
    replay_run(k, rp, site, V);
    if (rp->r.status && !set)
        line(k, "FAIL", "fault %s (%s): the replay (%s=%s, VTP_PROBE=audit) did not run: %.400s", name, knob, knob, name,
             rp->r.err);
    else if (rp->r.status) {
        if (!*noted) snprintf(noted, nl, "; with %s the replay did not run: %.300s", set, rp->r.err);
        wrote = 0;
    } else if (unwritten_problem(rp->r.recs, rp->r.n_recs, why, sizeof why)) line(k, "FAIL", "fault %s (%s): %s", name, knob, why);
    else if (!rp->viol && !rp->unwritten) wrote = 0;
    else {
        if (rp->audited) snprintf(more, sizeof more, " (%lld rows unwritten)", (long long)rp->unwritten);
        else snprintf(more, sizeof more, " (unwritten rows not counted)");
        line(k, "ok", "fault %s (%s): %lld violation(s) at %s%s%s%s%s", name, knob, (long long)rp->viol, site, more,
             set ? " with " : "", set ? set : "", set ? "; none alone" : "");
    }
    run_free(&rp->r);
    return wrote;
}

/* Sets rp's knobs after the fault's: bool knob b alone, or (b == nb) all nb. */
static void retry_knobs(replay *rp, char **bools, int64_t nb, int64_t b) {
    rp->n = 1;
    for (int64_t j = b == nb ? 0 : b; j < (b == nb ? nb : b + 1); j++) {
        rp->names[rp->n] = bools[j];
        rp->values[rp->n++] = "1";
    }
}

/* Fault f replayed: KNOB=NAME under VTP_PROBE=audit must give a violation
 * (or an unwritten row) at its declared site. The hello does not say what
 * else a fault needs: devengine's scatter_row_bytes copies whole rows (right
 * by coincidence) unless DEV_BF16_STREAM=1. So when the fault alone shows
 * nothing it is replayed with each bool knob the engine reads set to 1 (the
 * usual form of such a trigger, a dtype switch), one at a time, then all
 * together. One at a time first because two switches can cancel: vtlab's
 * own fault acts with VT_KIMI_BF16_STREAM=1, not when
 * VT_KIMI_BF16_EXPERT_OUT=1 makes the copied rows bf16 too. Any other
 * trigger is for --env. */
static void check_fault_replay(checker *k, const lab_engine_hello *h, int64_t f, int64_t V) {
    const char *name = h->fault_name[f], *knob = h->fault_knob[f], *site = h->fault_site[f];
    if (fault_problem(h, f)) { line(k, "skip", "fault %s (%s): not replayed (its hello entry is wrong, above)", name, knob); return; }
    replay rp;
    memset(&rp, 0, sizeof rp);
    char **bools = calloc((size_t)h->n_knobs + 1, sizeof *bools), set[1024], noted[512] = "", list[1024] = "";
    rp.names = calloc((size_t)h->n_knobs + 1, sizeof *rp.names);
    rp.values = calloc((size_t)h->n_knobs + 1, sizeof *rp.values);
    if (!bools || !rp.names || !rp.values) { line(k, "FAIL", "fault %s (%s): out of memory", name, knob); goto done; }
    rp.names[0] = h->fault_knob[f];
    rp.values[0] = h->fault_name[f];
    rp.n = 1;
    if (replay_try(k, h, f, &rp, V, NULL, noted, sizeof noted)) goto done;
    int64_t nb = 0;
    size_t at = 0;
    for (int64_t i = 0; i < h->n_knobs; i++) {
        const lab_engine_knob *kn = &h->knobs[i];
        if (strcmp(kn->type, "bool") || !kn->read || !strcmp(kn->name, knob)) continue;
        if (at < sizeof list) at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", nb ? ", " : "", kn->name);
        bools[nb++] = kn->name;
    }
    for (int64_t b = 0; b < nb + (nb > 1); b++) {    /* all together (b == nb) only when that is another set */
        retry_knobs(&rp, bools, nb, b);
        others(&rp, set, sizeof set);
        if (replay_try(k, h, f, &rp, V, set, noted, sizeof noted)) goto done;
    }
    if (nb == 0) line(k, "FAIL", "fault %s (%s): no violation at %s (alone; no bool knob to retry with)", name, knob, site);
    else if (nb == 1) line(k, "FAIL", "fault %s (%s): no violation at %s (alone, nor with %s=1%s)", name, knob, site, list, noted);
    else line(k, "FAIL", "fault %s (%s): no violation at %s (alone, nor with each bool knob set to 1, one at a time and all "
              "together: %s%s)", name, knob, site, list, noted);
done:
    free(bools);
    free(rp.names);
    free(rp.values);
}

/* ---------------------------------------------------------------- batch */

/* The check of max_batch (docs/engine-protocol.md, "Several sequences in one
 * request"): the sequences of a request must come back as each would alone.
 * Its largest request is what vtlab can send: at most max_batch sequences
 * and LAB_ENGINE_BATCH_ROWS (2048) tokens; at most 256 sequences (`vtlab
 * engine`'s max_batch: each is also sent alone, one round trip each), and
 * at most 256 MiB of logits for a large vocab. */
#define BATCH_SEQS     256
#define BATCH_TOKENS   2048
#define BATCH_LOGITS   ((int64_t)256 << 20)
#define BATCH_PAIR_T   5     /* tokens of each sequence of the request of two: equal, so a swap keeps the shapes */

/* Odd lengths, unordered and 1 among them: an engine that pads to a
 * multiple of 2 or 4, or sorts by length, shows it. */
static const int64_t batch_len[8] = {3, 1, 7, 5, 13, 9, 15, 11};

/* One request of several sequences and what came back. */
typedef struct batch_req {
    int64_t    n, *off;      /* sequence i: tok[off[i] .. off[i + 1]) */
    int32_t   *tok;
    float     *logits;       /* [off[n], V]: the request's */
    vtp_probes got, want;    /* its records; its sequences' sent alone, merged in order */
} batch_req;

static void batch_free(batch_req *b) {
    free(b->off);
    free(b->tok);
    free(b->logits);
    vtp_probes_free(&b->got);
    vtp_probes_free(&b->want);
    memset(b, 0, sizeof *b);
}

/* n sequences numbered from g0 (every sequence of the check has tokens of
 * its own), each of len tokens, or of batch_len's when len is 0. 0, or -1
 * out of memory. */
static int batch_make(batch_req *b, int64_t n, int64_t g0, int64_t len, int64_t V) {
    memset(b, 0, sizeof *b);
    b->n = n;
    if (!(b->off = malloc((size_t)(n + 1) * sizeof *b->off))) return -1;
    b->off[0] = 0;
    for (int64_t i = 0; i < n; i++) b->off[i + 1] = b->off[i] + (len ? len : batch_len[i % 8]);
    const int64_t T = b->off[n];
    b->tok = malloc((size_t)T * sizeof *b->tok);
    b->logits = malloc((size_t)(T * V) * sizeof *b->logits);
    if (!b->tok || !b->logits) return -1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = b->off[i]; t < b->off[i + 1]; t++)
            b->tok[t] = (int32_t)((uint64_t)((g0 + i + 1) * 7919 + (t - b->off[i]) * 104729 + (g0 + i) * t * 31) %
                                  (uint64_t)V);
    return 0;
}

/* The sequences of the largest request: up to max_batch (and BATCH_SEQS),
 * as long as their tokens stay within BATCH_TOKENS and BATCH_LOGITS. */
static int64_t batch_size(int64_t max_batch, int64_t V) {
    int64_t budget = BATCH_LOGITS / (4 * V), n = 0, T = 0;
    if (budget > BATCH_TOKENS) budget = BATCH_TOKENS;
    while (n < max_batch && n < BATCH_SEQS && (n < 2 || T + batch_len[n % 8] <= budget)) T += batch_len[n++ % 8];
    return n;
}

/* The records of what inst answered since the last call, merged into p. */
static int take_probes(void *inst, vtp_probes *p, char *err, size_t errlen) {
    vt_probe *recs = NULL;
    int64_t n = 0, lost = 0;
    int rc = lab_engine_command.probes(inst, &recs, &n, &lost, err, errlen);
    for (int64_t i = 0; !rc && i < n; i++)
        if (vtp_probes_merge(p, &recs[i])) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    free(recs);
    return rc;
}

/* Writes the nb requests of b one after another (two in flight, as vtlab
 * does: an engine that answers them out of order or mixes them up shows
 * it), then reads each answer and its records. 0, or -1 after a FAIL line. */
static int batch_send(checker *k, void *inst, batch_req *b, int nb) {
    char err[1024];
    for (int i = 0; i < nb; i++)
        if (lab_engine_command.submit(inst, b[i].n, b[i].tok, b[i].off, 0, err, sizeof err)) {
            line(k, "FAIL", "batch: writing a request of %lld sequences: %s", (long long)b[i].n, err);
            return -1;
        }
    for (int i = 0; i < nb; i++)
        if (lab_engine_command.collect(inst, b[i].logits, err, sizeof err) || take_probes(inst, &b[i].got, err, sizeof err)) {
            line(k, "FAIL", "batch: the request of %lld sequences (%lld tokens): %s", (long long)b[i].n,
                 (long long)b[i].off[b[i].n], err);
            return -1;
        }
    return 0;
}

/* The first element where got and want differ (bit for bit, or by more than
 * tol when tol >= 0), or -1. */
static int64_t first_diff(const float *got, const float *want, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (tol < 0 ? memcmp(&got[i], &want[i], sizeof *got) != 0 : fabs((double)got[i] - want[i]) > tol) return i;
    return -1;
}

/* Whether a batch check compares bit for bit: the hello says deterministic
 * and the same request twice gave the same bits. */
static int batch_exact(const checker *k, const lab_engine_hello *h) {
    return h->deterministic && !k->nondeterministic;
}

/* The first element of n where a request's got and the same sequence's want
 * sent alone differ: bit for bit when exact, else by more than --prefix-tol
 * of want's largest |value| (at least 1); -1 when none. */
static int64_t batch_diff(const checker *k, int exact, const float *got, const float *want, int64_t n) {
    double scale = exact ? 0 : max_abs(want, n);
    return first_diff(got, want, n, exact ? -1 : k->o->prefix_tol * (scale > 1 ? scale : 1));
}

/* The first way two record sets differ, in why; 1 when they do. Records are
 * matched by key: their order is the engine's business. */
static int probes_differ(const vtp_probes *got, const vtp_probes *want, char *why, size_t wl) {
    for (int64_t i = 0; i < want->n + got->n; i++) {
        const vt_probe *r = i < want->n ? &want->recs[i] : &got->recs[i - want->n];
        const vtp_probes *other = i < want->n ? got : want;
        const vt_probe *o = NULL;
        for (int64_t j = 0; j < other->n && !o; j++) {
            const vt_probe *c = &other->recs[j];
            if (c->layer == r->layer && !strcmp(c->site, r->site) && !strcmp(c->dtype, r->dtype) &&
                !strcmp(c->src_dtype, r->src_dtype) && c->bytes_per_row == r->bytes_per_row &&
                c->src_row_bytes == r->src_row_bytes && c->dst_row_bytes == r->dst_row_bytes &&
                c->converting == r->converting)
                o = c;
        }
        const vt_probe *g = i < want->n ? o : r, *w = i < want->n ? r : o;
        if (!o) snprintf(why, wl, "a record at site %s layer %d (%s) %s", r->site, r->layer, r->dtype,
                         i < want->n ? "only alone" : "only batched");
        else if (g->calls != w->calls || g->rows != w->rows || g->violations != w->violations ||
                 g->rows_unwritten != w->rows_unwritten)
            snprintf(why, wl, "site %s layer %d (%s): calls %lld, rows %lld, violations %lld, rows_unwritten %lld batched; "
                     "%lld, %lld, %lld, %lld alone", r->site, r->layer, r->dtype, (long long)g->calls, (long long)g->rows,
                     (long long)g->violations, (long long)g->rows_unwritten, (long long)w->calls, (long long)w->rows,
                     (long long)w->violations, (long long)w->rows_unwritten);
        else if (strcmp(g->detail, w->detail))
            snprintf(why, wl, "site %s layer %d (%s): detail \"%.60s\" batched, \"%.60s\" alone", r->site, r->layer,
                     r->dtype, g->detail, w->detail);
        else continue;
        return 1;
    }
    return 0;
}

/* Each sequence of b sent alone: its logits must be b's rows for it (bit
 * for bit; within prefix_tol when the engine is not deterministic), and the
 * records of all of them, merged in order, b's. 0, or -1 after a FAIL line. */
static int batch_compare(checker *k, void *inst, const lab_engine_hello *h, batch_req *b, float *alone, int64_t V) {
    char err[1024], why[512];
    const int exact = batch_exact(k, h);
    for (int64_t i = 0; i < b->n; i++) {
        const int64_t T = b->off[i + 1] - b->off[i];
        const float *got = b->logits + b->off[i] * V;
        if (forward(inst, b->tok + b->off[i], T, alone, err, sizeof err) || take_probes(inst, &b->want, err, sizeof err)) {
            line(k, "FAIL", "batch: sequence %lld of the request of %lld, sent alone (%lld tokens): %s", (long long)i,
                 (long long)b->n, (long long)T, err);
            return -1;
        }
        int64_t d = batch_diff(k, exact, got, alone, T * V);
        if (d >= 0) {
            line(k, "FAIL", "batch: sequence %lld of the request of %lld sequences (%lld tokens) differs from the same "
                 "sequence sent alone%s, first at position %lld, vocab index %lld: %.9g batched, %.9g alone", (long long)i,
                 (long long)b->n, (long long)T, exact ? "" : " (beyond --prefix-tol)", (long long)(d / V),
                 (long long)(d % V), got[d], alone[d]);
            return -1;
        }
    }
    if (probes_differ(&b->got, &b->want, why, sizeof why)) {
        line(k, "FAIL", "batch: the probe records of the request of %lld sequences are not those of its sequences sent "
             "alone (summed): %s", (long long)b->n, why);
        return -1;
    }
    return 0;
}

/* The residual captures of a request of several sequences (capture on):
 * a run's per-layer divergence is read from them (run_forward.c), so each
 * sequence's must be what it captures alone, as its logits must. The first
 * BATCH_CAP_SEQS sequences of batch_len's lengths (at most 64 tokens),
 * kept as sequence after sequence of [L][2][T_i][H] floats (cap_at).
 * 0 ok; -1 after a FAIL line. */
#define BATCH_CAP_SEQS 8
static int64_t cap_at(const batch_req *b, int64_t i, int64_t l, int site, int64_t L, int64_t H) {
    return (b->off[i] * L * 2 + (l * 2 + site) * (b->off[i + 1] - b->off[i])) * H;
}

static int cap_compare(checker *k, void *inst, const lab_engine_hello *h, const batch_req *b, const float *kept,
                       float *alone) {
    const int64_t L = h->info.n_layers, H = h->info.hidden;
    const int exact = batch_exact(k, h);
    char err[1024];
    for (int64_t i = 0; i < b->n; i++) {
        const int64_t T = b->off[i + 1] - b->off[i];
        if (lab_engine_command.forward(inst, b->tok + b->off[i], T, 1, alone, err, sizeof err)) {
            line(k, "FAIL", "batch capture: sequence %lld sent alone with capture: %s", (long long)i, err);
            return -1;
        }
        for (int64_t l = 0; l < L; l++)
            for (int site = 0; site < 2; site++) {
                int64_t Tr = 0;
                const float *want = lab_engine_command.residual(inst, l, site, &Tr);
                const float *got = kept + cap_at(b, i, l, site, L, H);
                if (!want || Tr != T) {
                    line(k, "FAIL", "batch capture: sequence %lld sent alone with capture: no residual of layer %lld "
                         "after %s", (long long)i, (long long)l, site ? "FFN" : "attention");
                    return -1;
                }
                int64_t d = batch_diff(k, exact, got, want, T * H);
                if (d >= 0) {
                    line(k, "FAIL", "batch capture: sequence %lld of the request of %lld sequences: the residual after "
                         "layer %lld's %s differs from the same sequence's captured alone%s, first at position %lld, "
                         "index %lld: %.9g batched, %.9g alone", (long long)i, (long long)b->n, (long long)l,
                         site ? "FFN" : "attention", exact ? "" : " (beyond --prefix-tol)", (long long)(d / H),
                         (long long)(d % H), got[d], want[d]);
                    return -1;
                }
            }
    }
    return 0;
}

static void check_batch_capture(checker *k, void *inst, const lab_engine_hello *h) {
    if (!h->capture) {
        line(k, "skip", "batch capture: the hello says the engine cannot capture the residual stream");
        return;
    }
    const int64_t L = h->info.n_layers, H = h->info.hidden, V = h->info.vocab;
    const int64_t n = h->max_batch < BATCH_CAP_SEQS ? h->max_batch : BATCH_CAP_SEQS;
    batch_req b;
    vtp_probes drop = {0};
    char err[1024];
    float *kept = NULL, *alone = malloc((size_t)(15 * V) * sizeof *alone);
    if (batch_make(&b, n, 1000, 0, V) || !alone ||
        !(kept = malloc((size_t)(b.off[n] * L * 2 * H) * sizeof *kept))) {
        line(k, "FAIL", "batch capture: out of memory");
        goto done;
    }
    if (lab_engine_command.batch_forward(inst, n, b.tok, b.off, 1, b.logits, err, sizeof err)) {
        line(k, "FAIL", "batch capture: a request of %lld sequences with capture: %s", (long long)n, err);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t T = b.off[i + 1] - b.off[i];
        for (int64_t l = 0; l < L; l++)
            for (int site = 0; site < 2; site++) {
                int64_t Tr = 0;
                const float *r = lab_engine_command.batch_residual(inst, i, l, site, &Tr);
                if (!r || Tr != T) {
                    line(k, "FAIL", "batch capture: a request of %lld sequences with capture: no residual of sequence "
                         "%lld, layer %lld after %s", (long long)n, (long long)i, (long long)l,
                         site ? "FFN" : "attention");
                    goto done;
                }
                memcpy(kept + cap_at(&b, i, l, site, L, H), r, (size_t)(T * H) * sizeof *r);
            }
    }
    if (!cap_compare(k, inst, h, &b, kept, alone))
        line(k, "ok", "batch capture: a request of %lld sequences with capture gave each sequence the residual stream "
             "it captures alone (%lld layers, after attention and FFN)%s", (long long)n, (long long)L,
             batch_exact(k, h) ? ", bit for bit" : " (within --prefix-tol)");
done:
    if (take_probes(inst, &drop, err, sizeof err)) line(k, "FAIL", "batch capture: %s", err);
    vtp_probes_free(&drop);
    free(alone);
    free(kept);
    batch_free(&b);
}

/* More sequences than max_batch, and lengths that do not sum to tokens:
 * each must get an error, and serving go on. */
static void check_batch_limits(checker *k, void *inst, int64_t M, int64_t V) {
    lab_buf head = {0};
    int32_t *ids = calloc((size_t)M + 1, sizeof *ids), three[3] = {1, 2, 3};
    lab_buf_printf(&head, "{\"type\":\"forward\",\"id\":902,\"tokens\":%lld,\"sequences\":[", (long long)(M + 1));
    for (int64_t i = 0; i <= M; i++) lab_buf_printf(&head, i ? ",1" : "1");
    lab_buf_printf(&head, "],\"capture\":false,\"payload_bytes\":%lld}\n", (long long)(4 * (M + 1)));
    char what[96];
    snprintf(what, sizeof what, "%lld sequences, max_batch %lld", (long long)(M + 1), (long long)M);
    if (!ids || head.oom) line(k, "FAIL", "batch limits: out of memory");
    else if (!bad_request(k, inst, "batch limits", what, head.data, ids, (size_t)(M + 1) * 4, V) &&
             !bad_request(k, inst, "batch limits", "sequences [1,1] for 3 tokens",
                          "{\"type\":\"forward\",\"id\":903,\"tokens\":3,\"sequences\":[1,1],\"capture\":false,"
                          "\"payload_bytes\":12}\n", three, sizeof three, V))
        line(k, "ok", "batch limits: a request of %lld sequences (max_batch %lld) and one whose lengths do not sum to "
             "its tokens answered with errors, serving went on", (long long)(M + 1), (long long)M);
    lab_buf_free(&head);
    free(ids);
}

/* max_batch > 1: a request of as many sequences as vtlab may send and one
 * of two (when max_batch > 2), both in flight at once, then each sequence
 * alone; bit-identical logits and the same records, then the limits. */
static void check_batch(checker *k, void *inst, const lab_engine_hello *h) {
    const int64_t M = h->max_batch, V = h->info.vocab;
    if (M <= 1) {
        cJSON *j = cJSON_Parse(h->json ? h->json : "");
        int said = cJSON_GetObjectItemCaseSensitive(j, "max_batch") != NULL;
        cJSON_Delete(j);
        line(k, "skip", "batch: the hello %s (one sequence per request): nothing to compare",
             said ? "says max_batch 1" : "declares no max_batch");
        return;
    }
    batch_req b[2];
    memset(b, 0, sizeof b);
    const int nb = M > 2 ? 2 : 1;
    const int64_t n = batch_size(M, V);
    char err[1024];
    float *alone = malloc((size_t)(15 * V) * sizeof *alone);   /* the longest sequence */
    if (!alone || batch_make(&b[0], n, 0, 0, V) || (nb == 2 && batch_make(&b[1], 2, n, BATCH_PAIR_T, V))) {
        line(k, "FAIL", "batch: out of memory for %lld sequences of vocab %lld", (long long)n, (long long)V);
        goto done;
    }
    if (take_probes(inst, &b[0].want, err, sizeof err)) { line(k, "FAIL", "batch: %s", err); goto done; }
    vtp_probes_clear(&b[0].want);   /* the records of the checks before */
    if (batch_send(k, inst, b, nb)) goto done;
    for (int i = 0; i < nb; i++)
        if (batch_compare(k, inst, h, &b[i], alone, V)) goto done;
    char more[96] = "";
    if (nb == 2) snprintf(more, sizeof more, " and one of 2 sequences of %d tokens, both in flight,", BATCH_PAIR_T);
    line(k, "ok", "batch: a request of %lld sequences of 1-15 tokens (%lld tokens; max_batch %lld)%s gave each "
         "sequence the logits it gets alone%s and the same probe records (%lld)", (long long)n, (long long)b[0].off[n],
         (long long)M, more, batch_exact(k, h) ? ", bit for bit," : " (within --prefix-tol)",
         (long long)b[0].want.n);
    check_batch_capture(k, inst, h);
    check_batch_limits(k, inst, M, V);
done:
    free(alone);
    batch_free(&b[0]);
    batch_free(&b[1]);
}

static void run_checks(checker *k, void *inst, const lab_engine_hello *h) {
    int64_t V = h->info.vocab;
    char err[1024];
    float *a = malloc((size_t)(CHECK_T * V) * sizeof *a), *b = malloc((size_t)(CHECK_T * V) * sizeof *b);
    if (!a || !b) { line(k, "FAIL", "out of memory for vocab %lld", (long long)V); goto done; }
    for (int i = 0; i < CHECK_T; i++) k->tok[i] = (int32_t)((i * 7919 + 13) % V);
    if (forward(inst, k->tok, CHECK_T, a, err, sizeof err)) { line(k, "FAIL", "forward: %s", err); goto done; }
    line(k, "ok", "forward: %d tokens -> logits [%d, %lld], all finite", CHECK_T, CHECK_T, (long long)V);
    if (forward(inst, k->tok, CHECK_T, b, err, sizeof err)) { line(k, "FAIL", "forward (again): %s", err); goto done; }
    int same = !memcmp(a, b, (size_t)(CHECK_T * V) * sizeof *a);
    k->nondeterministic = !same;
    if (!h->deterministic) line(k, "skip", "determinism: the engine says it is not deterministic");
    else if (same) line(k, "ok", "determinism: the same request twice, bit-identical logits");
    else line(k, "FAIL", "determinism: the hello says deterministic but the same request gave other logits");
    if (forward(inst, k->tok, CHECK_PREFIX, b, err, sizeof err)) { line(k, "FAIL", "forward (prefix): %s", err); goto done; }
    double d = 0, scale = max_abs(a, CHECK_PREFIX * V);
    for (int64_t i = 0; i < CHECK_PREFIX * V; i++) d = fabs(a[i] - b[i]) > d ? fabs(a[i] - b[i]) : d;
    if (d <= k->o->prefix_tol * (scale > 1 ? scale : 1))
        line(k, "ok", "prefix: the first %d positions of a %d-token request match the %d-token request (max |diff| %.3g)",
             CHECK_PREFIX, CHECK_T, CHECK_PREFIX, d);
    else line(k, "FAIL", "prefix: the first %d positions differ from the %d-token request's by up to %.3g (> %.3g of max |logit| %.3g)",
              CHECK_PREFIX, CHECK_T, d, k->o->prefix_tol, scale);
    check_probes(k, inst, h);
    check_bad_requests(k, inst, V);
    check_batch(k, inst, h);
    check_knobs(k, h, a, V);
    check_scopes(k, h, a, V);
    check_audit(k, h, a, V);
    for (int64_t f = 0; f < h->n_faults; f++) check_fault_replay(k, h, f, V);
done:
    free(a);
    free(b);
}

int lab_engine_check(const lab_engine_check_opts *o, FILE *out, int *failed, char *err, size_t errlen) {
    checker k;
    memset(&k, 0, sizeof k);
    k.o = o;
    k.out = out;
    k.spec.command = 1;
    k.spec.argc = o->argc;
    k.spec.argv = o->argv;
    k.spec.n_env = o->n_env;
    k.spec.env = o->env;
    k.spec.timeout_s = o->timeout_s;
    k.spec.grace_s = LAB_ENGINE_GRACE_S;
    *failed = 0;
    lab_engine_info info;
    int rc = lab_engine_command.load(&k.spec, o->model_dir, &k.model, &info, err, errlen);
    if (rc) return rc;
    void *inst = NULL;
    lab_engine_hello h;
    char verr[1024];
    if (start(&k, 0, NULL, NULL, "on", &inst, &h, verr, sizeof verr)) {
        line(&k, "FAIL", "hello: %s", verr);
    } else {
        char mb[48] = "";
        if (h.max_batch > 1) snprintf(mb, sizeof mb, ", max_batch %lld", (long long)h.max_batch);
        line(&k, "ok", "hello: %s, model %.12s, vocab %lld, %lld layers (%s), %lld knobs, %lld probe sites, %lld faults%s",
             h.engine_id, h.info.model_sha256, (long long)h.info.vocab, (long long)h.info.n_layers,
             h.info.layer_kinds[0] ? h.info.layer_kinds : "kinds not said", (long long)h.n_knobs, (long long)h.n_sites,
             (long long)h.n_faults, mb);
        check_faults(&k, &h);
        run_checks(&k, inst, &h);
        lab_engine_command.close(inst);
        lab_engine_hello_free(&h);
    }
    lab_engine_command.unload(k.model);
    fprintf(out, "engine-check: %d ok, %d failed, %d skipped\n", k.n_ok, k.n_fail, k.n_skip);
    *failed = k.n_fail;
    return LAB_OK;
}

int lab_engine_check_env_arg(const char *arg, char *err, size_t errlen) {
    static const char *const reserved[] = {"VTP_PROTOCOL", "VTP_PROBE", "VTP_MODEL", NULL};
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : 0;
    if (!eq) { snprintf(err, errlen, "--env %s: expected NAME=VALUE", arg); return -1; }
    int ok = n > 0 && !(arg[0] >= '0' && arg[0] <= '9');
    for (size_t i = 0; ok && i < n; i++) {
        char c = arg[i];
        ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (!ok) {
        snprintf(err, errlen, "--env %s: the name \"%.*s\" is not a variable name (letters, digits, _; not a digit first)",
                 arg, (int)n, arg);
        return -1;
    }
    for (int i = 0; reserved[i]; i++)
        if (strlen(reserved[i]) == n && !memcmp(arg, reserved[i], n)) {
            snprintf(err, errlen, "--env %s: engine-check sets %s itself (%s)", arg, reserved[i],
                     i == 2 ? "use --model" : "per check");
            return -1;
        }
    return 0;
}
