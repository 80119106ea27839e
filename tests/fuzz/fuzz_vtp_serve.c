/*
 * fuzz_vtp_serve.c — libFuzzer target for the engine side of the protocol
 * (vtp_serve_batch in model/vtprobe.h): request headers and payloads as
 * anything a buggy client or a corrupted pipe could send, to engines that
 * declare any max_batch.
 *
 * Why: every engine that includes vtprobe.h parses vtlab's requests with
 * this code; a malformed request must get an error response (or end the
 * loop at a truncated frame), never crash the engine or make it call
 * forward with tokens outside [0, vocab) or a length that is not the
 * header's — nor call the batch callback with more sequences than the
 * engine's max_batch, or offsets that do not split the request's tokens.
 * The callbacks here check all of it, and what the engine wrote back is
 * read as vtlab would: a hello (with max_batch exactly when it is > 1), then
 * frames whose payload is the size the header says, a `sequences` (when
 * echoed) of at most max_batch positive lengths summing to `tokens`.
 *
 * Input: one configuration byte c, then the request stream.
 *   c & 7         the hello's max_batch: 1, 4, 0, -3, 2, 65536, 100000, 3
 *                 (0 and -3: none; 100000: above VTP_MAX_BATCH, served as it)
 *   (c >> 4) & 3  the callbacks: 0 forward only, 1 and 3 forward and batch,
 *                 2 batch only
 * So '@' + text is the old target (max_batch 1, forward only), a digit 'N'
 * max_batch table[N] with both callbacks, 'a'.. the batch callback alone.
 *
 * Seeds: tests/fuzz/seeds/fuzz_vtp_serve (good and malformed requests, one
 * and several sequences).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VOCAB 16
#define HIDDEN 2
#define LAYERS 1

static const int max_batch_of[8] = {1, 4, 0, -3, 2, VTP_MAX_BATCH, 100000, 3};
static int64_t served_max;   /* the most sequences vtp_serve_batch may hand over at once */

/* One sequence: checks its tokens, writes its logits and residuals. */
static void run_one(const int32_t *tok, int64_t T, float *logits, float *resid, vtp_probes *pr) {
    if (T < 1 || T > VTP_MAX_TOKENS) abort();
    for (int64_t t = 0; t < T; t++) {
        if (tok[t] < 0 || tok[t] >= VOCAB) abort();
        for (int v = 0; v < VOCAB; v++) logits[t * VOCAB + v] = (float)(tok[t] * v);
    }
    for (int64_t i = 0; resid && i < LAYERS * 2 * T * HIDDEN; i++) resid[i] = 1.0f;
    vtp_probe_copy(pr, "moe.scatter", 0, "f32", "f32", T, 8, 16, 16, 0, -1);
}

static int forward(void *user, const int32_t *tok, int64_t T, float *logits, float *resid, vtp_probes *pr,
                   char *err, size_t errlen) {
    (void)user; (void)err; (void)errlen;
    run_one(tok, T, logits, resid, pr);
    return tok[0] == 7;   /* an engine-side failure: an error response */
}

static int forward_batch(void *user, int64_t n, const int32_t *tok, const int64_t *off, float *logits, float *resid,
                         vtp_probes *pr, char *err, size_t errlen) {
    (void)err; (void)errlen;
    if (n < 1 || n > served_max || off[0] != 0 || (user && n == 1)) abort();   /* user: a forward callback exists */
    for (int64_t i = 0; i < n; i++) {
        if (off[i + 1] <= off[i]) abort();
        run_one(tok + off[i], off[i + 1] - off[i], logits + off[i] * VOCAB,
                resid ? resid + LAYERS * 2 * HIDDEN * off[i] : NULL, pr);
    }
    return tok[0] == 7;
}

/* The sequences a response echoes: at most served_max positive lengths
 * summing to tokens, or absent. */
static void check_sequences(const cJSON *h, double tokens) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(h, "sequences"), *x;
    if (!s) return;
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) < 1 || cJSON_GetArraySize(s) > served_max) abort();
    double sum = 0;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 1) abort();
        sum += x->valuedouble;
    }
    if (sum != tokens) abort();
}

/* Reads what the engine wrote as vtlab would: frames whose payloads are
 * the size their headers say, ending exactly at the end. */
static void check_output(const char *out, size_t n, int max_batch) {
    const char *p = out, *end = out + n;
    for (int first = 1; p < end; first = 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) abort();
        cJSON *h = cJSON_ParseWithLength(p, (size_t)(nl - p));
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(h, "type");
        if (!cJSON_IsString(type)) abort();
        double pb = 0;
        if (first) {
            const cJSON *mb = cJSON_GetObjectItemCaseSensitive(h, "max_batch");
            if (strcmp(type->valuestring, "hello") || (max_batch > 1) != (mb != NULL)) abort();
            if (mb && (!cJSON_IsNumber(mb) || mb->valuedouble != max_batch)) abort();
        } else if (!strcmp(type->valuestring, "logits")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "tokens");
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(h, "payload_bytes");
            if (!cJSON_IsNumber(t) || !cJSON_IsNumber(b)) abort();
            check_sequences(h, t->valuedouble);
            int resid = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "residuals"));
            pb = 4.0 * t->valuedouble * VOCAB + (resid ? 4.0 * LAYERS * 2 * t->valuedouble * HIDDEN : 0);
            if (b->valuedouble != pb) abort();
        } else if (strcmp(type->valuestring, "error")) abort();
        cJSON_Delete(h);
        if (pb > (double)(end - nl - 1)) abort();
        p = nl + 1 + (size_t)pb;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const sites[] = {"moe.scatter"};
    const uint8_t c = size ? data[0] : 0;
    const int cb = (c >> 4) & 3;
    vtp_hello h;
    memset(&h, 0, sizeof h);
    h.engine = "fuzz"; h.version = "1"; h.commit = "";
    h.model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    h.vocab = VOCAB; h.hidden = HIDDEN; h.n_layers = LAYERS; h.layer_kinds = "K/E";
    h.probe_sites = sites; h.n_probe_sites = 1; h.capture = 1;
    h.max_batch = max_batch_of[c & 7];
    served_max = h.max_batch <= 1 ? 1 : h.max_batch < VTP_MAX_BATCH ? h.max_batch : VTP_MAX_BATCH;
    setenv("VTP_PROBE", "audit", 1);
    if (size) { data++; size--; }
    FILE *in = fmemopen((void *)data, size ? size : 1, "r");
    if (!in) return 0;
    if (!size) fgetc(in);   /* an empty input: at EOF at once */
    char *out = NULL;
    size_t outlen = 0;
    FILE *o = open_memstream(&out, &outlen);
    if (!o) { fclose(in); return 0; }
    vtp_forward_fn fn = cb == 2 ? NULL : forward;
    vtp_forward_batch_fn bfn = cb == 0 ? NULL : forward_batch;
    int rc = vtp_serve_batch(in, o, &h, fn, bfn, fn ? (void *)&h : NULL);
    fclose(in);
    fclose(o);
    if (rc != 0 && rc != 1) abort();
    if (outlen < 20 || memcmp(out, "{\"type\":\"hello\"", 15)) abort();
    check_output(out, outlen, h.max_batch);   /* a frame is written whole or not at all, also before rc 1 */
    free(out);
    return 0;
}
