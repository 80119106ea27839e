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
 * crash or leak.
 *
 * Seeds: tests/fuzz/seeds/fuzz_engine_hello (the hellos of vtlab engine,
 * devengine and the test engines, and broken variants).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/engine.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = 0;
    lab_engine_hello h;
    char err[1024] = "";
    int rc = lab_engine_hello_parse(line, &h, err, sizeof err);
    free(line);
    if (rc != LAB_OK) {
        if (rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_EINPUT && (strncmp(err, "hello: ", 7) || strchr(err, '\n'))) abort();
        if (h.json || h.knobs || h.sites) abort();   /* freed on failure */
        return 0;
    }
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
