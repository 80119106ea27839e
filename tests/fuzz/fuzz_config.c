/*
 * fuzz_config.c — libFuzzer target for the config parser.
 *
 * Why: a config.json comes from outside and its numbers size every later
 * allocation (the tensor list is num_experts x layers long; shapes are
 * products of fields). The fuzzer feeds arbitrary bytes to vt_config_parse
 * and, whenever a config is accepted, builds its tensor list, so that any
 * accepted config is also one the spec builder handles without overflow,
 * unbounded allocation or an inconsistent list. Invariants checked here abort
 * so that libFuzzer records the input.
 *
 * Seeds: tests/fuzz/seeds/fuzz_config (the shipped configs and variants).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vt_config cfg;
    vt_err err = {0};
    int rc = vt_config_parse((const char *)data, size, "fuzz.json", &cfg, &err);
    if (rc != VT_OK) {
        /* every refusal is a bad-input refusal with a one-line message that names the file */
        if (rc != VT_EINPUT || err.code != rc || strncmp(err.msg, "fuzz.json: ", 11) != 0 ||
            memchr(err.msg, '\n', strlen(err.msg)))
            abort();
        return 0;
    }
    vt_tensor_spec *specs = NULL;
    size_t n = 0;
    rc = vt_config_tensor_specs(&cfg, &specs, &n, &err);
    if (rc == VT_ENOMEM) return 0;
    if (rc != VT_OK) abort();   /* an accepted config must always yield its tensor list */
    if (n < 3 || strcmp(specs[0].name, "model.embed_tokens.weight") != 0 ||
        strcmp(specs[n - 1].name, "lm_head.weight") != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (specs[i].ndim < 1 || specs[i].ndim > 4) abort();
        for (int d = 0; d < specs[i].ndim; d++)
            if (specs[i].shape[d] < 1) abort();
    }
    int64_t moe = vt_config_n_moe_layers(&cfg);
    if (moe < 0 || moe > cfg.num_hidden_layers) abort();
    free(specs);
    return 0;
}
