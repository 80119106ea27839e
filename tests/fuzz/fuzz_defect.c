/*
 * fuzz_defect.c — libFuzzer target for the ledger's defect parser
 * (lab_defect_parse, harness/ledger.c).
 *
 * Why: the audit's rules read these records, so a record that parses must be
 * whole (no NUL or \u0000 shortening an id, a name or a knob value; ids and
 * names within LAB_NAME_MAX), and anything else must be refused as bad input
 * with one line naming the file, never crash. The file is named
 * specs/defects/c.json, so an accepted record has the id "c". replay_fault is
 * optional (a defect nothing replays, docs/specs.md); replay_knob always has a
 * value once parsed (VT_FAULT when left out) and is never given alone.
 *
 * Seeds: tests/fuzz/seeds/fuzz_defect (the shipped defect, renamed "c", and
 * variants: one with no replay_fault, the shape a CI run's fuzzing found this
 * harness wrongly aborting on; one replayed through an engine's own knob).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/ledger.h"
#include "harness/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FILE_NAME "specs/defects/c.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    lab_defect x;
    char err[2048] = "";
    int rc = lab_defect_parse(FILE_NAME, text, size, &x, err, sizeof err);
    free(text);
    if (rc != LAB_OK) {
        if (rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
        if (rc == LAB_EINPUT && (strncmp(err, FILE_NAME ": ", sizeof FILE_NAME + 1) || strchr(err, '\n'))) abort();
    } else {
        if (memchr(data, 0, size)) abort();
        if (!x.id || strcmp(x.id, "c")) abort();
        if (!x.site || !x.guard_test || !x.replay_knob) abort();
        if (!x.replay_fault && strcmp(x.replay_knob, "VT_FAULT")) abort();
    }
    lab_defect_clear(&x);
    return 0;
}
