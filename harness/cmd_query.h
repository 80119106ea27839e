/*
 * cmd_query.h — read-only commands over results.db: runs, show, compare,
 * export. Each returns 0 or a status with err filled (LAB_EINPUT for a run
 * id that does not exist; a corrupt page or an I/O error met while reading is
 * an error too, never a partial answer). The store is meant to be opened with
 * lab_store_open_readonly.
 */
#ifndef LAB_CMD_QUERY_H
#define LAB_CMD_QUERY_H

#include <stdint.h>
#include <stdio.h>

#include "store.h"

struct lab_query_filter;   /* store_query.h */

/* One line per run (optionally of one experiment; json: a JSON array of
 * objects instead): status, assertions,
 * top-1 agreement with its interval, KL, verdict, first divergent layer. */
int lab_cmd_runs(lab_store *st, const char *experiment, int json, char *err, size_t errlen);
/* The same for the runs the filter f lets through (`vtlab runs --arm
 * --status --engine --knob --tag --since`; f NULL: every run); --json rows
 * carry each run's tags. */
int lab_cmd_runs_filtered(lab_store *st, const struct lab_query_filter *f, int json, char *err, size_t errlen);
/* Everything recorded about one run, for a person. */
int lab_cmd_show(lab_store *st, int64_t id, char *err, size_t errlen);
/* Two runs side by side: identity, differing knobs, metrics, top-1
 * agreement between them and McNemar on agreement with their reference. */
int lab_cmd_compare(lab_store *st, int64_t a, int64_t b, int json, char *err, size_t errlen);
/* format "json" (everything, top-k included) or "csv" (per-position top-k). */
int lab_cmd_export(lab_store *st, int64_t id, const char *format, FILE *out, char *err, size_t errlen);
/* lab_cmd_export into the file path, atomically (`vtlab export --out`): the
 * export is written to an unnamed temp file in path's directory (O_TMPFILE;
 * a named PATH.<pid>.tmp where the file system lacks it), flushed, fsynced,
 * then renamed onto path. On any failure path is left as it was (the
 * previous file byte-identical, or still absent) and no temp file remains;
 * a process killed while writing leaves none either (O_TMPFILE). A run that
 * does not exist is LAB_EINPUT before any file is touched; a directory that
 * cannot take the file is LAB_EINPUT; a full disk ("the disk is full") or the
 * file size limit ("file too large") is LAB_EIO, named in err with path.
 * A symlink is kept (the file it points to is replaced); a path that is not a
 * regular file (/dev/stdout, a pipe) is written directly, as there is nothing
 * to replace; a directory is LAB_EINPUT. */
int lab_cmd_export_file(lab_store *st, int64_t id, const char *format, const char *path, char *err, size_t errlen);

#endif
