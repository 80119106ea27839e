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
 *   knobs        each declared knob set to another allowed value (one engine
 *                start each) is reported with that value; a numeric knob
 *                changes the logits, a non-numeric one does not (else runs
 *                under different values would share an identity)
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

/* Starts the engine with n knobs set. */
static int start(checker *k, int n, char *const *names, char *const *values, void **inst, lab_engine_hello *h,
                 char *err, size_t errlen) {
    lab_engine_req req = {0};
    req.n_knobs = n;
    req.knob_names = names;
    req.knob_values = values;
    req.probe = "on";
    return lab_engine_command.open(k->model, &req, inst, h, err, errlen);
}

static int forward(void *inst, const int32_t *tok, int64_t T, float *logits, char *err, size_t errlen) {
    return lab_engine_command.forward(inst, tok, T, 0, logits, err, errlen);
}

static void check_faults(checker *k, const lab_engine_hello *h) {
    for (int64_t f = 0; f < h->n_faults; f++) {
        const lab_engine_knob *kn = lab_engine_hello_knob(h, h->fault_knob[f]);
        char bar[300];
        snprintf(bar, sizeof bar, "|%s|", kn ? kn->values : "");
        char want[300];
        snprintf(want, sizeof want, "|%s|", h->fault_name[f]);
        if (!kn) line(k, "FAIL", "hello: faults[%lld] %s: its knob %s is not declared", (long long)f, h->fault_name[f],
                      h->fault_knob[f]);
        else if (strcmp(kn->type, "string") && !strstr(bar, want))
            line(k, "FAIL", "hello: faults[%lld] %s: not one of knob %s's values (%s)", (long long)f, h->fault_name[f],
                 kn->name, kn->values);
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

/* One bad request: it must get an error response, then a good one must work. */
static int bad_request(checker *k, void *inst, const char *what, const char *header, const void *pl, size_t n,
                       int64_t V) {
    char *reply = NULL, err[1024];
    int rc = lab_engine_command_raw(inst, header, pl, n, &reply, err, sizeof err);
    cJSON *j = rc ? NULL : cJSON_Parse(reply);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    int is_error = cJSON_IsString(t) && !strcmp(t->valuestring, "error");
    cJSON_Delete(j);
    if (rc) line(k, "FAIL", "bad request (%s): %s", what, err);
    else if (!is_error) line(k, "FAIL", "bad request (%s): the answer is not an error: %.200s", what, reply);
    free(reply);
    if (rc || !is_error) return -1;
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) return -1;
    rc = forward(inst, k->tok, 1, lg, err, sizeof err);
    free(lg);
    if (rc) {
        line(k, "FAIL", "bad request (%s): a good request afterwards failed: %s", what, err);
        return -1;
    }
    return 0;
}

static void check_bad_requests(checker *k, void *inst, int64_t V) {
    int32_t big[2] = {(int32_t)V, 3};
    int bad = 0;
    bad |= bad_request(k, inst, "header not JSON", "this is not a header\n", NULL, 0, V);
    if (!bad)
        bad |= bad_request(k, inst, "payload of the wrong size",
                           "{\"type\":\"forward\",\"id\":900,\"tokens\":2,\"capture\":false,\"payload_bytes\":4}\n",
                           big, 4, V);
    if (!bad)
        bad |= bad_request(k, inst, "token id = vocab",
                           "{\"type\":\"forward\",\"id\":901,\"tokens\":2,\"capture\":false,\"payload_bytes\":8}\n",
                           big, 8, V);
    if (!bad) line(k, "ok", "bad requests: three malformed requests answered with errors, serving went on");
}

/* A value of knob kn other than its default, or NULL (strings, or none). */
static const char *other_value(const lab_engine_knob *kn, char *buf, size_t n) {
    if (!strcmp(kn->type, "string")) return NULL;
    if (!strcmp(kn->type, "int")) {
        long long lo = 0, hi = 0, d = atoll(kn->def);
        if (sscanf(kn->values, "%lld..%lld", &lo, &hi) != 2 || lo == hi) return NULL;
        snprintf(buf, n, "%lld", d == lo ? lo + 1 : lo);
        return buf;
    }
    for (const char *p = kn->values; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l < n && (strlen(kn->def) != l || memcmp(p, kn->def, l))) {
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

/* The logits of the check's request with n knobs set; *status: 0 ok, 1 the
 * engine did not start (msg in err), 2 a knob is not reported as set (or
 * not read: *unread), 3 forward failed. */
static float *knob_logits(checker *k, int n, char *const *names, char *const *values, int64_t V, int *status,
                          int *unread, char *err, size_t errlen) {
    void *inst = NULL;
    lab_engine_hello h;
    float *lg = NULL;
    *status = 1;
    *unread = 0;
    if (start(k, n, names, values, &inst, &h, err, errlen)) return NULL;
    *status = 2;
    for (int i = 0; i < n; i++) {
        const lab_engine_knob *got = lab_engine_hello_knob(&h, names[i]);
        if (!got) { snprintf(err, errlen, "the hello no longer declares it"); goto done; }
        if (!got->read) { *unread = 1; goto done; }
        if (strcmp(got->value, values[i])) { snprintf(err, errlen, "the hello reports value \"%s\"", got->value); goto done; }
    }
    *status = 3;
    if (!(lg = malloc((size_t)(CHECK_T * V) * sizeof *lg))) snprintf(err, errlen, "out of memory");
    else if (forward(inst, k->tok, CHECK_T, lg, err, errlen)) { free(lg); lg = NULL; }
    else *status = 0;
done:
    lab_engine_command.close(inst);
    lab_engine_hello_free(&h);
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
        if (is_fault_knob(h, kn->name)) { line(k, "skip", "knob %s: selects faults (`vtlab specs check` checks a fault acts at its defect's site)", kn->name); continue; }
        if (!other_value(kn, alt[i], sizeof alt[i])) { line(k, "skip", "knob %s: no other value to try (%s %s)", kn->name, kn->type, kn->values); continue; }
        lg[i] = knob_logits(k, 1, &nm, &val, V, &st, &unread, err, sizeof err);
        int same = lg[i] && !memcmp(lg[i], base, bytes);
        if (st == 1) line(k, "skip", "knob %s=%s: the engine did not start with it: %.300s", nm, val, err);
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
    check_knobs(k, h, a, V);
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
    k.spec.timeout_s = o->timeout_s;
    k.spec.grace_s = LAB_ENGINE_GRACE_S;
    *failed = 0;
    lab_engine_info info;
    int rc = lab_engine_command.load(&k.spec, o->model_dir, &k.model, &info, err, errlen);
    if (rc) return rc;
    void *inst = NULL;
    lab_engine_hello h;
    char verr[1024];
    if (start(&k, 0, NULL, NULL, &inst, &h, verr, sizeof verr)) {
        line(&k, "FAIL", "hello: %s", verr);
    } else {
        line(&k, "ok", "hello: %s, model %.12s, vocab %lld, %lld layers (%s), %lld knobs, %lld probe sites, %lld faults",
             h.engine_id, h.info.model_sha256, (long long)h.info.vocab, (long long)h.info.n_layers,
             h.info.layer_kinds[0] ? h.info.layer_kinds : "kinds not said", (long long)h.n_knobs, (long long)h.n_sites,
             (long long)h.n_faults);
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
