/*
 * engine_name.h — how every output names the engine a run went through
 * (`vtlab runs`, `show`, `compare`, the report, the nightly's nightly.md and
 * junit.xml), so that they all say it in the same words.
 *
 * A run through a command engine (docs/engine-protocol.md) is named by its
 * stored hello (runs.engine_hello): engine.name, engine.version,
 * engine.commit and model.sha256. A run of vtlab's own model has no hello:
 * its engine is "builtin", with no version, and its commit is vtlab's own
 * (runs.git_commit): the builtin model is vtlab's code. Its model is
 * runs.model_sha256. docs/schema.md has the wording.
 *
 *   label     "good 1.0"; "builtin"                              (one column)
 *   describe  "good 1.0, commit c0ffee, model 0123456789ab";
 *             "builtin, commit 5fb1e41d41a2, model 4056819a2810"  (a commit
 *             the engine leaves empty is left out)
 *
 * An engine's hello is untrusted input: its strings are copied with every
 * control character shown as '?' (a name cannot move a terminal's cursor or
 * break a line of a table), cut to the fields' sizes; each output still
 * escapes them for its own format (HTML, XML, markdown).
 */
#ifndef LAB_ENGINE_NAME_H
#define LAB_ENGINE_NAME_H

#include <cjson/cJSON.h>
#include <stddef.h>

struct sqlite3_stmt;

typedef struct lab_engine_name {
    int  builtin;            /* 1: vtlab's own model (runs.engine_hello NULL) */
    char name[64];           /* "builtin"; "(unreadable hello)" when the stored hello is not JSON */
    char version[64];        /* "" for builtin */
    char commit[64];         /* the engine's commit; vtlab's (runs.git_commit) for builtin */
    char model_sha256[65];   /* the hello's model.sha256, else runs.model_sha256 */
} lab_engine_name;

/* The columns a query selects to name the engine of the runs row aliased R
 * (LAB_ENGINE_NCOLS of them, read back with lab_engine_name_read). The
 * hello's fields are read only when it is valid JSON, so a damaged hello
 * names no engine rather than failing the query. */
#define LAB_ENGINE_HELLO_(R, PATH) \
    " CASE WHEN json_valid(" R ".engine_hello) THEN json_extract(" R ".engine_hello, '" PATH "') END"
#define LAB_ENGINE_SQL(R)                                                                                  \
    " CASE WHEN " R ".engine_hello IS NULL THEN 0 WHEN json_valid(" R ".engine_hello) THEN 1 ELSE -1 END," \
    LAB_ENGINE_HELLO_(R, "$.engine.name") "," LAB_ENGINE_HELLO_(R, "$.engine.version") ","                \
    LAB_ENGINE_HELLO_(R, "$.engine.commit") "," LAB_ENGINE_HELLO_(R, "$.model.sha256") ","                \
    " " R ".git_commit, " R ".model_sha256"
#define LAB_ENGINE_NCOLS 7
/* The same columns from a file older than schema v7, which has no
 * runs.engine_hello (a read-only file is read as it is, never migrated:
 * lab_store_open_readonly): all its runs are builtin. */
#define LAB_ENGINE_SQL_V6(R) " 0, NULL, NULL, NULL, NULL, " R ".git_commit, " R ".model_sha256"

/* The engine of the current row of s, whose columns i .. i+LAB_ENGINE_NCOLS-1
 * are LAB_ENGINE_SQL's. */
void lab_engine_name_read(struct sqlite3_stmt *s, int i, lab_engine_name *n);

/* The wordings above, into buf (always terminated, cut to len); buf. */
const char *lab_engine_label(const lab_engine_name *n, char *buf, size_t len);
const char *lab_engine_describe(const lab_engine_name *n, char *buf, size_t len);

/* {"name", "version", "commit", "model_sha256", "builtin", "label"}; NULL
 * when out of memory. */
cJSON *lab_engine_json(const lab_engine_name *n);

#endif
