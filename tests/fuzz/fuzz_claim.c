/*
 * fuzz_claim.c — libFuzzer target for the ledger's claim parser
 * (lab_claim_parse, harness/ledger.c).
 *
 * Why: the audit's rules read these records, so a record that parses must be
 * whole (no NUL or \u0000 shortening an id, a name or a knob value; ids and
 * names within LAB_NAME_MAX), and anything else must be refused as bad input
 * with one line naming the file, never crash. The file is named
 * specs/claims/c.json, so an accepted record has the id "c".
 *
 * Seeds: tests/fuzz/seeds/fuzz_claim (the shipped claim, renamed "c", and
 * variants).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/ledger.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FILE_NAME "specs/claims/c.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    lab_claim x;
    char err[2048] = "";
    int rc = lab_claim_parse(FILE_NAME, text, size, &x, err, sizeof err);
    free(text);
    if (rc != LAB_OK) {
        if (rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_EINPUT && (strncmp(err, FILE_NAME ": ", sizeof FILE_NAME + 1) || strchr(err, '\n'))) abort();
    } else {
        if (memchr(data, 0, size)) abort();
        if (!x.id || strcmp(x.id, "c")) abort();
        if (!x.arm_name || strlen(x.arm_name) > LAB_NAME_MAX || !x.ref_name || strlen(x.ref_name) > LAB_NAME_MAX) abort();
        if (x.k < 0 || x.n <= 0 || x.k > x.n) abort();
    }
    lab_claim_clear(&x);
    return 0;
}
