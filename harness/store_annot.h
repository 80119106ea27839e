/*
 * store_annot.h — what people add to runs (tags and notes: `vtlab tag`,
 * `vtlab note`), and the reads `vtlab rerun` makes of a run (a store*.c
 * file: the SQL lives in store_annot.c; see store_internal.h).
 *
 * Tags are key=value pairs, one value per key (a later `vtlab tag` of the
 * same key replaces it); notes are free text kept in the order written.
 * Both live in their own tables (run_tags, run_notes; schema v9), never in a
 * run's identity or results.
 */
#ifndef LAB_STORE_ANNOT_H
#define LAB_STORE_ANNOT_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Limits of what a tag or note may hold (checked by lab_annot_check_*). */
#define LAB_TAG_VALUE_MAX 256
#define LAB_NOTE_MAX      4096

/* LAB_EINPUT naming arg when "key=value" is not a tag: the key a name
 * ([A-Za-z0-9._-], at most LAB_NAME_MAX), the value one line of at most
 * LAB_TAG_VALUE_MAX bytes of UTF-8 without control characters (it may be
 * empty). On success *key and *value point into a copy the caller frees
 * (*key). */
int lab_annot_parse_tag(const char *arg, char **key, char **value, char *err, size_t errlen);
/* LAB_EINPUT when text is not a note: empty, longer than LAB_NOTE_MAX, not
 * UTF-8, or holding a control character other than a newline or a tab. */
int lab_annot_check_note(const char *text, char *err, size_t errlen);

/* Sets the n tags keys[i]=values[i] of run, in one transaction. A run that
 * does not exist is LAB_EINPUT. */
int lab_store_tag(lab_store *st, int64_t run, int64_t n, char *const *keys, char *const *values, char *err,
                  size_t errlen);
/* Adds a note to run. A run that does not exist is LAB_EINPUT. */
int lab_store_note(lab_store *st, int64_t run, const char *text, char *err, size_t errlen);

/* A run's tags (sorted by key) and notes (in order). */
typedef struct lab_run_annot {
    int64_t n_tags, n_notes;
    char  **keys, **values;      /* [n_tags] */
    char  **notes, **note_at;    /* [n_notes] text, UTC time written */
} lab_run_annot;
/* Reads run's tags and notes (none on a database older than v9). */
int  lab_store_run_annot(lab_store *st, int64_t run, lab_run_annot *a, char *err, size_t errlen);
void lab_run_annot_free(lab_run_annot *a);

/* Records that RUNNING run run_id reruns run `of` (runs.rerun_of, v9). */
int  lab_store_set_rerun_of(lab_store *st, int64_t run_id, int64_t of, char *err, size_t errlen);

/* A run as `vtlab rerun` needs it. */
typedef struct lab_rerun_src {
    int64_t id, repeat, n_sequences, rerun_of;
    int     found, is_reference;
    char    experiment[128], arm[128], status[16];
    char    knob_hash[65], model_sha256[65], dataset_sha256[65], logits_sha256[65], spec_sha256[65];
    char    code_version[640], shard[48], engine[64], backend[32];
    char   *spec_file, *spec_json;   /* experiment_specs: NULL when the spec is not stored */
} lab_rerun_src;
/* Reads run id (found = 0 when there is none). lab_rerun_src_free. */
int  lab_store_rerun_src(lab_store *st, int64_t id, lab_rerun_src *r, char *err, size_t errlen);
void lab_rerun_src_free(lab_rerun_src *r);
/* The latest run of each arm of experiment `experiment` that ran its latest
 * spec (repeat 0, FINISHED; a PARTIAL one where none finished): run ids into
 * *ids (caller frees), *n of them, oldest arm first. */
int  lab_store_latest_runs(lab_store *st, const char *experiment, int64_t **ids, int64_t *n, char *err, size_t errlen);
/* The newest run that reruns run `of` (rerun_of), 0 when none. */
int  lab_store_rerun_of(lab_store *st, int64_t of, int64_t *id, char *err, size_t errlen);
/* A run's latest comparison with its reference: *have = 0 when it has none. */
typedef struct lab_rerun_cmp {
    int     have;
    int64_t reference_run, k, n;
    double  lo, hi, kl_mean;
} lab_rerun_cmp;
int  lab_store_rerun_cmp(lab_store *st, int64_t run, lab_rerun_cmp *c, char *err, size_t errlen);
/* Per-position top-1 agreement counts of runs a and b with reference run ref
 * over the positions both scored: b_only = a agrees and b does not, c_only
 * the reverse; *n positions. LAB_EINPUT when their positions differ. */
int  lab_store_agreement_pair(lab_store *st, int64_t a, int64_t b, int64_t ref, int64_t *n, int64_t *b_only,
                              int64_t *c_only, char *err, size_t errlen);

#endif
