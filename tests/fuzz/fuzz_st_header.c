/*
 * fuzz_st_header.c — libFuzzer target for the safetensors header parser.
 *
 * Input: the first 8 bytes are the data section length (little-endian u64),
 * the rest is the header JSON, as it sits in a file after the length field.
 * Inputs shorter than 8 bytes are parsed as header JSON with an empty data
 * section. Beyond "no crash, no leak, no UB", every accepted header is checked
 * against what the parser promises, so a check that silently lets a bad
 * header through is a finding too: entries sorted by begin, ranges inside the
 * data section, shape x element size == range, non-empty ranges disjoint.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

static void check(const vt_st_header *h, uint64_t data_len, const vt_err *err) {
    for (size_t i = 0; i < h->n; i++) {
        const vt_st_entry *e = &h->entries[i];
        if (!e->name || !e->name[0] || e->data) abort();
        if (e->ndim < 0 || e->ndim > VT_ST_MAX_DIMS || !vt_dtype_valid((int)e->dtype)) abort();
        if (e->begin > e->end || e->end > data_len) abort();
        uint64_t count = 1;
        int zero = 0, overflow = 0;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0) abort();
            if (e->shape[d] == 0) zero = 1;
        }
        for (int d = 0; d < e->ndim && !zero; d++) {
            unsigned __int128 p = (unsigned __int128)count * (uint64_t)e->shape[d];
            if (p > UINT64_MAX) { overflow = 1; break; }
            count = (uint64_t)p;
        }
        if (overflow) abort();
        unsigned __int128 bytes = zero ? 0 : (unsigned __int128)count * vt_dtype_size(e->dtype);
        if (bytes != e->end - e->begin) abort();
        if (i > 0 && h->entries[i - 1].begin > e->begin) abort();
        for (size_t j = 0; j < i; j++) {
            const vt_st_entry *o = &h->entries[j];
            if (o->begin < o->end && e->begin < e->end && e->begin < o->end && o->begin < e->end)
                abort();
        }
    }
    (void)err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t data_len = 0;
    if (size >= 8) {
        for (int i = 7; i >= 0; i--) data_len = (data_len << 8) | data[i];
        data += 8;
        size -= 8;
    }
    /* A copy of exactly `size` bytes, so that ASan sees any read past the end. */
    char *json = malloc(size ? size : 1);
    if (!json) return 0;
    if (size) memcpy(json, data, size);
    vt_err err = {0};
    vt_st_header h;
    int rc = vt_st_parse_header(json, size, data_len, "fuzz.safetensors", &h, &err);
    if (rc == VT_OK) {
        check(&h, data_len, &err);
        vt_st_header_free(&h);
    } else {
        if (rc != VT_EINPUT && rc != VT_ENOMEM) abort();
        if (h.n != 0 || h.entries != NULL) abort();
        if (!memchr(err.msg, '\0', sizeof err.msg) || strchr(err.msg, '\n')) abort();
    }
    free(json);
    return 0;
}
