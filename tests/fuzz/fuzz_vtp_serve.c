/*
 * fuzz_vtp_serve.c — libFuzzer target for the engine side of the protocol
 * (vtp_serve in model/vtprobe.h): request headers and payloads as anything
 * a buggy client or a corrupted pipe could send.
 *
 * Why: every engine that includes vtprobe.h parses vtlab's requests with
 * this code; a malformed request must get an error response (or end the
 * loop at a truncated frame), never crash the engine or make it call
 * forward with tokens outside [0, vocab) or a length that is not the
 * header's. The forward here checks both.
 *
 * Seeds: tests/fuzz/seeds/fuzz_vtp_serve (good and malformed requests).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VOCAB 16

static int forward(void *user, const int32_t *tok, int64_t T, float *logits, float *resid, vtp_probes *pr,
                   char *err, size_t errlen) {
    (void)user; (void)err; (void)errlen;
    if (T < 1 || T > VTP_MAX_TOKENS) abort();
    for (int64_t t = 0; t < T; t++) {
        if (tok[t] < 0 || tok[t] >= VOCAB) abort();
        for (int v = 0; v < VOCAB; v++) logits[t * VOCAB + v] = (float)(tok[t] * v);
    }
    if (resid) resid[0] = 1.0f;
    vtp_probe_copy(pr, "moe.scatter", 0, "f32", "f32", T, 8, 16, 16, 0, -1);
    return tok[0] == 7;   /* an engine-side failure: an error response */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const sites[] = {"moe.scatter"};
    vtp_hello h;
    memset(&h, 0, sizeof h);
    h.engine = "fuzz"; h.version = "1"; h.commit = "";
    h.model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    h.vocab = VOCAB; h.hidden = 2; h.n_layers = 1; h.layer_kinds = "K/E";
    h.probe_sites = sites; h.n_probe_sites = 1; h.capture = 1;
    setenv("VTP_PROBE", "audit", 1);
    FILE *in = fmemopen((void *)data, size ? size : 1, "r");
    if (!in) return 0;
    if (!size) fgetc(in);   /* an empty input: at EOF at once */
    char *out = NULL;
    size_t outlen = 0;
    FILE *o = open_memstream(&out, &outlen);
    if (!o) { fclose(in); return 0; }
    int rc = vtp_serve(in, o, &h, forward, NULL);
    fclose(in);
    fclose(o);
    if (rc != 0 && rc != 1) abort();
    if (outlen < 20 || memcmp(out, "{\"type\":\"hello\"", 15)) abort();
    free(out);
    return 0;
}
