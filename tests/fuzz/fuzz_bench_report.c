/*
 * fuzz_bench_report.c — libFuzzer target for the benchmark-report parser
 * (lab_bench_report_check, harness/bench_record.c: what `vtlab record-bench`
 * validates before it opens the database).
 *
 * Why: a report comes from another process (make bench, bench_cuda) or from
 * a person; every malformed one must be bad input with one line naming the
 * file, never a crash, and a NUL or \u0000 must never shorten a phase name,
 * the device or the code version that is recorded.
 *
 * Seeds: tests/fuzz/seeds/fuzz_bench_report (a CPU and a CUDA report).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/util.h"

/* harness/bench_record.c (not in bench_record.h, which declares the command only) */
int lab_bench_report_check(const char *path, const char *text, size_t len, char *err, size_t errlen);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[2048] = "";
    int rc = lab_bench_report_check("fuzz.json", text, size, err, sizeof err);
    free(text);
    if (rc == LAB_OK && memchr(data, 0, size)) abort();
    if (rc != LAB_OK && rc != LAB_EINPUT && rc != LAB_ENOMEM) abort();
    if (rc == LAB_EINPUT && (strncmp(err, "fuzz.json: ", 11) || strchr(err, '\n'))) abort();
    return 0;
}
