/* bench_record.h — `vtlab record-bench`: a benchmark report becomes runs (bench_record.c). */
#ifndef LAB_BENCH_RECORD_H
#define LAB_BENCH_RECORD_H

#include <stdio.h>

/* Validates the report at path whole, then records one FINISHED run per phase
 * in the database at db; prints one line per run to out (may be NULL). */
int lab_record_bench(const char *path, const char *db, FILE *out, char *err, size_t errlen);

#endif
