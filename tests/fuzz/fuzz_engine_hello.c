/*
 * fuzz_engine_hello.c — libFuzzer target for the parser of an engine's hello
 * (lab_engine_hello_parse, harness/engine_command.c).
 *
 * Why: an engine is another program; its first line decides the shapes vtlab
 * allocates logits and residual buffers by, the knob registry arms are
 * checked against and the probe sites expectations name. A hello that parses
 * must be usable as such (vocab and hidden >= 1, 1..255 layers, layer kinds
 * empty or of n_layers + 1 + n_layers characters, every knob named and
 * typed); anything else must be refused as bad input with one line, never
 * crash or leak. max_batch (optional) is checked against cJSON's own reading
 * of the line: absent means 1; a hello that parses has the integer 1..65536
 * it says; one refused for its max_batch really has another value there (0,
 * negative, huge, fractional, a string, true, null, an array).
 *
 * Seeds: tests/fuzz/seeds/fuzz_engine_hello (the hellos of vtlab engine,
 * devengine and the test engines, and broken variants).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The line's max_batch as cJSON reads it: 1 absent (*ok 1), the value when
 * an integer 1..VTP_MAX_BATCH (*ok 1), else *ok 0. */
static int64_t max_batch_of(const char *line, int *ok) {
    cJSON *root = cJSON_Parse(line);
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(root, "max_batch");
    int64_t v = 1;
    *ok = 1;
    if (mb) {
        *ok = cJSON_IsNumber(mb) && mb->valuedouble >= 1 && mb->valuedouble <= VTP_MAX_BATCH &&
              mb->valuedouble == floor(mb->valuedouble);
        v = *ok ? (int64_t)mb->valuedouble : 0;
    }
    cJSON_Delete(root);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = 0;
    lab_engine_hello h;
    char err[1024] = "";
    int rc = lab_engine_hello_parse(line, &h, err, sizeof err), mb_ok = 0;
    const int64_t mb = max_batch_of(line, &mb_ok);
    free(line);
    if (rc != LAB_OK) {
        if (rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_EINPUT && (strncmp(err, "hello: ", 7) || strchr(err, '\n'))) abort();
        if (!strncmp(err, "hello: max_batch: ", 18) && mb_ok) abort();   /* refused for a good max_batch */
        if (h.json || h.knobs || h.sites) abort();   /* freed on failure */
        return 0;
    }
    if (!mb_ok || h.max_batch != mb) abort();
    if (!h.json || h.info.vocab < 1 || h.info.hidden < 1 || h.info.n_layers < 1 ||
        h.info.n_layers > VT_MODEL_MAX_LAYERS)
        abort();
    size_t lk = strlen(h.info.layer_kinds);
    if (lk && (lk != (size_t)(2 * h.info.n_layers + 1) || h.info.layer_kinds[h.info.n_layers] != '/')) abort();
    for (int64_t i = 0; i < h.n_knobs; i++)
        if (!h.knobs[i].name || !h.knobs[i].name[0] || !h.knobs[i].type || !h.knobs[i].values || !h.knobs[i].value)
            abort();
    for (int64_t i = 0; i < h.n_faults; i++)
        if (!h.fault_name[i] || !h.fault_knob[i] || !h.fault_site[i]) abort();
    if (!h.engine_id[0] || strlen(h.info.model_sha256) != 64) abort();
    lab_engine_hello_free(&h);
    return 0;
}
