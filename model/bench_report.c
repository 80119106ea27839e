/* bench_report.c — see bench_report.h. */
#include "bench_report.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "vt.h"

int vt_bench_name_ok(const char *s) {
    if (!s || !*s || strlen(s) > 31) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-')) return 0;
    return 1;
}

void vt_bench_tokens_sha256(const int32_t *tok, int64_t n, char out[65]) {
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)tok[i];
        uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        vt_sha256_update(&c, b, 4);
    }
    vt_sha256_final_hex(&c, out);
}

static int check(const vt_bench_report *r, vt_err *err) {
    if (!r->backend || (strcmp(r->backend, "cpu") && strcmp(r->backend, "cuda")))
        return vt_errf(err, VT_EINPUT, "bench report: backend must be \"cpu\" or \"cuda\"");
    if (!r->device || !*r->device || !r->model || !*r->model)
        return vt_errf(err, VT_EINPUT, "bench report: device and model must be named");
    if (!vt_sha256_hex_ok(r->model_sha256) || !vt_sha256_hex_ok(r->tokens_sha256))
        return vt_errf(err, VT_EINPUT, "bench report: model_sha256 and tokens_sha256 must be 64 lowercase hex digits");
    if (r->n_phases < 1) return vt_errf(err, VT_EINPUT, "bench report: no phases");
    for (int64_t i = 0; i < r->n_phases; i++) {
        const vt_bench_phase *p = &r->phases[i];
        if (!vt_bench_name_ok(p->name))
            return vt_errf(err, VT_EINPUT, "bench report: phase %lld: name must be 1-31 of [a-z0-9_-]", (long long)i);
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(p->name, r->phases[j].name))
                return vt_errf(err, VT_EINPUT, "bench report: phase name \"%s\" appears twice", p->name);
        if (!(p->seconds > 0) || p->tokens < 1 || p->batch < 1 || p->context < 0 || p->threads < 0 ||
            !(p->flops >= 0) || !(p->bytes >= 0) || !(p->peak_flops >= 0) || !(p->peak_bytes >= 0))
            return vt_errf(err, VT_EINPUT,
                           "bench report: phase \"%s\": seconds must be > 0, tokens and batch >= 1, "
                           "context, threads, flops, bytes and peaks >= 0",
                           p->name);
    }
    return VT_OK;
}

/* When and where it was measured (the runs' own started_at and host are the
 * recorder's). */
static void add_when_where(cJSON *o) {
    char when[32], host[256];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    cJSON_AddItemToObject(o, "measured_at", cJSON_CreateString(when));
    cJSON_AddItemToObject(o, "host", cJSON_CreateString(host));
}

/* One phase's object, with the rates derived from its counts; NULL when out
 * of memory. */
static cJSON *phase_json(const vt_bench_phase *p) {
    cJSON *q = cJSON_CreateObject();
    if (!q) return NULL;
    double fps = p->flops / p->seconds, bps = p->bytes / p->seconds;
    cJSON_AddItemToObject(q, "name", cJSON_CreateString(p->name));
    cJSON_AddItemToObject(q, "batch", cJSON_CreateNumber((double)p->batch));
    cJSON_AddItemToObject(q, "context", cJSON_CreateNumber((double)p->context));
    cJSON_AddItemToObject(q, "threads", cJSON_CreateNumber((double)p->threads));
    cJSON_AddItemToObject(q, "tokens", cJSON_CreateNumber((double)p->tokens));
    cJSON_AddItemToObject(q, "seconds", cJSON_CreateNumber(p->seconds));
    cJSON_AddItemToObject(q, "tokens_per_s", cJSON_CreateNumber((double)p->tokens / p->seconds));
    cJSON_AddItemToObject(q, "flops", cJSON_CreateNumber(p->flops));
    cJSON_AddItemToObject(q, "bytes", cJSON_CreateNumber(p->bytes));
    cJSON_AddItemToObject(q, "flops_per_s", cJSON_CreateNumber(fps));
    cJSON_AddItemToObject(q, "bytes_per_s", cJSON_CreateNumber(bps));
    cJSON_AddItemToObject(q, "peak_flops", cJSON_CreateNumber(p->peak_flops));
    cJSON_AddItemToObject(q, "peak_bytes", cJSON_CreateNumber(p->peak_bytes));
    /* a fraction with no peak to compare against is not measurable: null */
    cJSON_AddItemToObject(q, "flops_frac_of_peak",
                          p->peak_flops > 0 ? cJSON_CreateNumber(fps / p->peak_flops) : cJSON_CreateNull());
    cJSON_AddItemToObject(q, "bytes_frac_of_peak", p->peak_bytes > 0 && p->bytes > 0
                                                       ? cJSON_CreateNumber(bps / p->peak_bytes)
                                                       : cJSON_CreateNull());
    cJSON_AddItemToObject(q, "gemm_share", p->gemm_seconds >= 0 ? cJSON_CreateNumber(p->gemm_seconds / p->seconds)
                                                                : cJSON_CreateNull());
    return q;
}

int vt_bench_write(const char *path, const vt_bench_report *r, vt_err *err) {
    int rc = check(r, err);
    if (rc) return rc;
    cJSON *o = cJSON_CreateObject(), *knobs = cJSON_CreateObject(), *ph = cJSON_CreateArray();
    if (!o || !knobs || !ph) goto oom;
    cJSON_AddItemToObject(o, "format", cJSON_CreateString(VT_BENCH_FORMAT));
    cJSON_AddItemToObject(o, "version", cJSON_CreateNumber(VT_BENCH_VERSION));
    cJSON_AddItemToObject(o, "code_version", cJSON_CreateString(vt_build_info()));
    add_when_where(o);
    cJSON_AddItemToObject(o, "backend", cJSON_CreateString(r->backend));
    cJSON_AddItemToObject(o, "device", cJSON_CreateString(r->device));
    cJSON_AddItemToObject(o, "model", cJSON_CreateString(r->model));
    cJSON_AddItemToObject(o, "model_sha256", cJSON_CreateString(r->model_sha256));
    cJSON_AddItemToObject(o, "tokens_sha256", cJSON_CreateString(r->tokens_sha256));
    cJSON_AddItemToObject(o, "weights", cJSON_CreateString(r->weights ? r->weights : ""));
    cJSON_AddItemToObject(o, "peak_what", cJSON_CreateString(r->peak_what ? r->peak_what : ""));
    cJSON_AddItemToObject(o, "flops_counted", cJSON_CreateString(r->flops_counted ? r->flops_counted : ""));
    cJSON_AddItemToObject(o, "bytes_counted", cJSON_CreateString(r->bytes_counted ? r->bytes_counted : ""));
    for (int64_t i = 0; i < r->n_knobs; i++)
        cJSON_AddItemToObject(knobs, r->knob_names[i], cJSON_CreateString(r->knob_values[i]));
    cJSON_AddItemToObject(o, "knobs", knobs);
    knobs = NULL;
    if (r->rss_open_bytes > 0 || r->rss_peak_bytes > 0 || r->checkpoint_bytes > 0) {
        cJSON *mem = cJSON_CreateObject();
        if (!mem) goto oom;
        cJSON_AddItemToObject(o, "memory", mem);
        cJSON_AddItemToObject(mem, "rss_open_bytes", cJSON_CreateNumber((double)r->rss_open_bytes));
        cJSON_AddItemToObject(mem, "rss_peak_bytes", cJSON_CreateNumber((double)r->rss_peak_bytes));
        cJSON_AddItemToObject(mem, "checkpoint_bytes", cJSON_CreateNumber((double)r->checkpoint_bytes));
    }
    for (int64_t i = 0; i < r->n_phases; i++) {
        cJSON *q = phase_json(&r->phases[i]);
        if (!q) goto oom;
        cJSON_AddItemToArray(ph, q);
    }
    cJSON_AddItemToObject(o, "phases", ph);
    ph = NULL;
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
    size_t n = strlen(text);
    text[n] = '\n';   /* cJSON_Print's buffer holds n + 1 bytes: the NUL becomes the final newline */
    rc = vt_file_write_atomic(path, text, n + 1, err);
    cJSON_free(text);
    return rc;
oom:
    cJSON_Delete(o);
    cJSON_Delete(knobs);
    cJSON_Delete(ph);
    return vt_errf(err, VT_ENOMEM, "%s: out of memory", path);
}
