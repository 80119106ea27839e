/*
 * fuzz_experiment.c — libFuzzer target for the experiment parser
 * (lab_experiment_parse_n, harness/experiment.c).
 *
 * Why: an experiment file is the record of what a verdict measured; the
 * parser must refuse anything malformed with one line naming the file
 * (LAB_EINPUT), never crash, never accept a NUL or \u0000 that shortens an
 * id, and never accept a name longer than LAB_NAME_MAX (the report's buffers
 * hold no more). An accepted experiment's dataset is then prepared for a
 * small vocabulary (when it is small enough to stay fast) and its canonical
 * text built, as the runner does.
 *
 * Seeds: tests/fuzz/seeds/fuzz_experiment (the shipped experiments' shapes:
 * generate, inline, knobs, expectations, decision, divergence).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/experiment.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s) {
    if (!s || !*s || strlen(s) > LAB_NAME_MAX) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    lab_experiment *e = NULL;
    char err[2048] = "";
    int rc = lab_experiment_parse_n(&e, "fuzz.json", text, size, err, sizeof err);
    free(text);
    if (rc != LAB_OK) {
        /* a refusal is bad input (or no memory), one line, naming the file */
        if (e || (rc != LAB_EINPUT && rc != LAB_ENOMEM)) abort();
        if (rc == LAB_EINPUT && (strncmp(err, "fuzz.json: ", 11) || strchr(err, '\n'))) abort();
        return 0;
    }
    /* nothing accepted may hold a NUL in the text: the id and names are whole */
    if (memchr(data, 0, size)) abort();
    check_name(e->id);
    for (int64_t i = 0; i < e->n_arms; i++) check_name(e->arms[i].name);
    if (e->ref_index < 0 || e->ref_index >= e->n_arms) abort();
    int64_t n_tok = e->ds.kind == LAB_DS_GENERATE ? e->ds.gen_n * e->ds.gen_len : e->ds.offsets[e->ds.n_seq];
    if (n_tok > LAB_DS_MAX_TOKENS) abort();
    if (n_tok <= 100000) {
        rc = lab_dataset_prepare(e, 50, err, sizeof err);
        if (rc != LAB_OK && rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_OK) {
            size_t n = 0;
            char *canon = lab_dataset_canonical(&e->ds, &n);
            if (canon && strlen(canon) != n) abort();
            free(canon);
        }
    }
    lab_experiment_free(e);
    return 0;
}
