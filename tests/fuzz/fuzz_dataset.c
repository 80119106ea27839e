/*
 * fuzz_dataset.c — libFuzzer target for the dataset-file reader
 * (lab_ds_parse_text, harness/experiment.c).
 *
 * Why: a dataset file is read as text from outside; a NUL byte once cut it
 * short silently, and a line had no length limit. The reader must refuse
 * with LAB_EINPUT naming the experiment, or return a dataset that keeps the
 * LAB_DS_* limits, whose sequences are non-empty, and whose canonical text
 * (the dataset hash's input) reads back as the same dataset.
 *
 * Seeds: tests/fuzz/seeds/fuzz_dataset.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/experiment.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int parse(const char *bytes, size_t size, lab_dataset *ds, char *err, size_t errlen) {
    char *text = malloc(size + 1);
    if (!text) return LAB_ENOMEM;
    memcpy(text, bytes, size);
    text[size] = 0;
    memset(ds, 0, sizeof *ds);
    int rc = lab_ds_parse_text(ds, text, size, "fuzz.json", "ids.txt", err, errlen);
    free(text);
    return rc;
}

static void ds_free(lab_dataset *ds) {
    free(ds->offsets);
    free(ds->tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lab_dataset ds, again;
    char err[2048] = "";
    int rc = parse((const char *)data, size, &ds, err, sizeof err);
    if (rc != LAB_OK) {
        if (rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_EINPUT && (strncmp(err, "fuzz.json: ", 11) || strchr(err, '\n'))) abort();
        ds_free(&ds);
        return 0;
    }
    if (memchr(data, 0, size)) abort();   /* a NUL byte is never accepted */
    if (ds.n_seq < 1 || ds.n_seq > LAB_DS_MAX_SEQS || ds.offsets[0] != 0 || ds.offsets[ds.n_seq] > LAB_DS_MAX_TOKENS)
        abort();
    int64_t max_len = 0;
    for (int64_t s = 0; s < ds.n_seq; s++) {
        int64_t len = ds.offsets[s + 1] - ds.offsets[s];
        if (len < 1 || len > LAB_DS_MAX_SEQ_LEN) abort();
        if (len > max_len) max_len = len;
    }
    if (max_len != ds.max_len) abort();
    for (int64_t i = 0; i < ds.offsets[ds.n_seq]; i++)
        if (ds.tokens[i] < 0) abort();
    /* the canonical text is a dataset file of the same sequences */
    size_t n = 0;
    char *canon = lab_dataset_canonical(&ds, &n);
    if (canon) {
        rc = parse(canon, n, &again, err, sizeof err);
        if (rc == LAB_OK) {
            if (again.n_seq != ds.n_seq ||
                memcmp(again.offsets, ds.offsets, (size_t)(ds.n_seq + 1) * sizeof *ds.offsets) ||
                memcmp(again.tokens, ds.tokens, (size_t)ds.offsets[ds.n_seq] * sizeof *ds.tokens))
                abort();
        } else if (rc != LAB_ENOMEM) {
            abort();
        }
        ds_free(&again);
        free(canon);
    }
    ds_free(&ds);
    return 0;
}
