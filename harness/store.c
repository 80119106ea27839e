/*
 * store.c — the results.db handle and the runs' leases: opening a database
 * for writing (created, put in WAL mode, migrated by store_schema.c) or for
 * reading only (with its integrity check), the liveness of the processes
 * that hold runs, what a FINISHED run must have (lab_store_run_missing),
 * leasing a run (and recording its experiment spec), the meta table, and the
 * reads of a run's top-1 ids. See store.h for the workload and
 * docs/schema.md for every table and column.
 *
 * The store's other files each hold one responsibility: store_sql.c the
 * statement helpers every store file uses, store_schema.c the migrations,
 * store_finish.c the one-transaction write of a finished run, and a
 * store_<area>.c for each command family's reads and writes.
 *
 * Durability: WAL with synchronous=NORMAL. A committed transaction survives
 * the process being killed (kill -9); only an OS crash or power loss can lose
 * the last commits, and never leaves the file inconsistent.
 */
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_internal.h"
#include "util.h"

/* ------------------------------------------------------------ opening */

/* Puts the database in WAL mode (a no-op when it already is). The switch
 * needs an exclusive lock, and when several processes open a NEW file at once
 * each holds a shared lock while asking for it: SQLite then answers
 * SQLITE_BUSY at once, without calling the busy handler (waiting could
 * deadlock). So the switch is retried here, with a growing sleep, for as long
 * as the busy timeout would have waited; whoever loses finds WAL already set.
 * The answer must be "wal": the concurrency promises above depend on it. */
static int switch_to_wal(lab_store *st, char *err, size_t errlen) {
#ifndef VT_MUTATE_NO_WAL_RETRY
    const int64_t budget_us = 30 * 1000000LL;
#else
    const int64_t budget_us = 0; /* mutation: give up on the first BUSY, as before the fix */
#endif
    int64_t waited_us = 0, nap_us = 1000;
    for (;;) {
        sqlite3_stmt *s = NULL;
        int rc = lab_sq_prep(st, "PRAGMA journal_mode = WAL", &s, err, errlen);
        if (rc) return rc;
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(s, 0);
            int wal = mode && strcmp(mode, "wal") == 0;
            char got[32];
            snprintf(got, sizeof got, "%s", mode ? mode : "(none)");
            sqlite3_finalize(s);
            if (wal) return LAB_OK;
            return lab_errf(err, errlen, LAB_EIO,
                            "%s: cannot switch the database to WAL journal mode (it stays \"%s\"); "
                            "is the file on a file system without shared memory support?", st->path, got);
        }
        int primary = step & 0xff;
        if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || waited_us >= budget_us) {
            rc = lab_sq_error(st, err, errlen, "journal_mode");
            sqlite3_finalize(s);
            return rc;
        }
        sqlite3_finalize(s);
        usleep((useconds_t)nap_us);
        waited_us += nap_us;
        if (nap_us < 100000) nap_us *= 2;
    }
}

/* A database that does not exist yet is created in its directory. A
 * directory that is missing, not a directory or not writable is bad input
 * (exit 2), said with the directory and the system's reason: SQLite's own
 * "unable to open database file" names neither. */
static int check_db_dir(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 || (errno != ENOENT && errno != ENOTDIR)) return LAB_OK;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    const char *why = NULL;
    if (stat(dir, &sb) != 0) why = strerror(errno);
    else if (!S_ISDIR(sb.st_mode)) why = strerror(ENOTDIR);
    else if (access(dir, W_OK | X_OK) != 0) why = strerror(errno);
    if (!why) return LAB_OK;
    return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot create the database in directory %s: %s", path, dir, why);
}

int lab_store_open_version(lab_store **out, const char *path, int version, char *err, size_t errlen) {
    *out = NULL;
    if (version < 1 || version > LAB_SCHEMA_VERSION)
        return lab_errf(err, errlen, LAB_EINTERNAL, "schema version %d out of range", version);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: is a directory, not a database file", path);
    int drc = check_db_dir(path, err, errlen);
    if (drc) return drc;
    lab_store *st = calloc(1, sizeof *st);
    if (!st) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    st->path = lab_strdup(path);
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK || !st->path) {
        rc = lab_errf(err, errlen, LAB_EIO, "%s: cannot open database: %s", path,
                      st->db ? sqlite3_errmsg(st->db) : "out of memory");
        lab_store_close(st);
        return rc;
    }
    /* 30 s: longer than any one transaction of ours (a finished run's rows
     * are a few MB), so a waiting writer never gives up while another works. */
    sqlite3_busy_timeout(st->db, 30000);
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_stmt *s = NULL;
    if ((rc = switch_to_wal(st, err, errlen))) goto fail;
    if ((rc = lab_sq_exec(st, "PRAGMA synchronous = NORMAL", err, errlen))) goto fail;
    if ((rc = lab_sq_exec(st, "PRAGMA foreign_keys = ON", err, errlen))) goto fail;
    if ((rc = lab_store_migrate(st, version, err, errlen))) goto fail;
    *out = st;
    return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_store_close(st);
    return rc;
}

int lab_store_open(lab_store **out, const char *path, char *err, size_t errlen) {
    return lab_store_open_version(out, path, LAB_SCHEMA_VERSION, err, errlen);
}

/* ------------------------------------------------------------ read-only */

/* "file:" URI of path with immutable=1 (RFC 3986: everything but unreserved
 * characters and '/' percent-encoded; an absolute path gets the empty
 * authority, "file:///...", so that "//x" is never read as a host). Caller
 * frees. */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(3 * n + 32);
    if (!u) return NULL;
    char *o = u + sprintf(u, path[0] == '/' ? "file://" : "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    strcpy(o, "?immutable=1");
    return u;
}

static int open_ro_connection(lab_store *st, const char *name, int uri, char *err, size_t errlen) {
    if (st->db) sqlite3_close(st->db);
    st->db = NULL;
    int rc = sqlite3_open_v2(name, &st->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | (uri ? SQLITE_OPEN_URI : 0),
                             NULL);
    if (rc != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "%s: cannot open database: %s", st->path,
                        st->db ? sqlite3_errmsg(st->db) : "out of memory");
    sqlite3_busy_timeout(st->db, 30000);
    sqlite3_extended_result_codes(st->db, 1);
    return LAB_OK;
}

/* 1 when path-SUFFIX exists. */
static int sidecar_exists(const char *path, const char *suffix) {
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (!p) return 1;   /* unknown: assume it does (the safe answer below) */
    snprintf(p, n, "%s%s", path, suffix);
    int yes = access(p, F_OK) == 0;
    free(p);
    return yes;
}

/* 1 when this process may write both the file and its directory (a
 * read-only mount answers no: access() reports EROFS). */
static int writable_here(const char *path) {
    if (access(path, W_OK) != 0) return 0;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return 0;
    int w = access(dir, W_OK) == 0;
    free(dir);
    return w;
}

/* path is a regular file this process may read: else LAB_EINPUT naming it. */
static int check_readable_file(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        if (e == ENOENT)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: no such database (run an experiment first, or pass --db PATH)",
                            path);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot open database: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: is a directory, not a database file", path);
    if (!S_ISREG(sb.st_mode)) return lab_errf(err, errlen, LAB_EINPUT, "%s: not a regular file", path);
    if (access(path, R_OK) != 0)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot read the database: %s", path, strerror(errno));
    return LAB_OK;
}

/* An older schema is migrated first when this process may write the file
 * (as every vtlab command always has: a database is upgraded once, by
 * whoever opens it first); a read-only one is read as it is. The version is
 * peeked at through a read-only connection of its own, so that a current
 * database is never opened for writing. */
static int upgrade_if_writable(const char *path, char *err, size_t errlen) {
    if (!writable_here(path)) return LAB_OK;
    sqlite3 *peek = NULL;
    int v = -1;
    if (sqlite3_open_v2(path, &peek, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
        sqlite3_stmt *s = NULL;
        sqlite3_busy_timeout(peek, 30000);
        if (sqlite3_prepare_v2(peek, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(peek);
    if (v < 1 || v >= LAB_SCHEMA_VERSION) return LAB_OK;
    lab_store *st = NULL;
    int rc = lab_store_open(&st, path, err, errlen);
    if (!rc) lab_store_close(st);
    return rc;
}

/* The read-only connection of st (st->path) and its schema version *v. */
static int connect_readonly(lab_store *st, int *v, char *err, size_t errlen) {
    int rc = open_ro_connection(st, st->path, 0, err, errlen);
    if (rc || !(rc = lab_store_read_version(st, v, err, errlen))) return rc;
    /* A WAL database needs its -shm (and -wal) files. With neither there
     * and a directory this process cannot write, SQLite cannot create
     * them (SQLITE_READONLY_DIRECTORY / SQLITE_CANTOPEN): then no
     * connection has the file open (a connection keeps its -wal while
     * open), and it is read as immutable. With a -wal there (a writer is
     * active, or died), SQLite reads it through a read-only -shm itself;
     * immutable would ignore the -wal, so it is never used then. */
    int code = sqlite3_extended_errcode(st->db);
    if ((code == SQLITE_READONLY_DIRECTORY || (code & 0xff) == SQLITE_CANTOPEN) && !sidecar_exists(st->path, "-wal")) {
        char *uri = immutable_uri(st->path);
        if (!uri) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        rc = open_ro_connection(st, uri, 1, err, errlen);
        free(uri);
        if (!rc) rc = lab_store_read_version(st, v, err, errlen);
    }
    return rc;
}

int lab_store_open_readonly(lab_store **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    int rc = check_readable_file(path, err, errlen);
    if (rc || (rc = upgrade_if_writable(path, err, errlen))) return rc;
    lab_store *st = calloc(1, sizeof *st);
    if (!st || !(st->path = lab_strdup(path))) {
        lab_store_close(st);
        return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    int v = 0;
    if ((rc = connect_readonly(st, &v, err, errlen))) goto fail;
    if (v > LAB_SCHEMA_VERSION) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: schema version %d is newer than this vtlab (%d); use a newer build",
                      path, v, LAB_SCHEMA_VERSION);
        goto fail;
    }
    if (v < 2) {
        rc = v == 0 ? lab_errf(err, errlen, LAB_EINPUT, "%s: not a vtlab results database (no schema)", path)
                    : lab_errf(err, errlen, LAB_EINPUT,
                               "%s: schema version %d is too old to read, and this process cannot write the file to "
                               "migrate it: copy it somewhere writable and open it there", path, v);
        goto fail;
    }
    st->version = v;
    if ((rc = lab_store_check(st, err, errlen))) goto fail;
    *out = st;
    return LAB_OK;
fail:
    lab_store_close(st);
    return rc;
}

int lab_store_check(lab_store *st, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int64_t pages = 0, page_size = 0;
    int rc = lab_sq_prep(st, "SELECT (SELECT page_count FROM pragma_page_count), (SELECT page_size FROM pragma_page_size)",
                  &s, err, errlen);
    if (rc) return rc;
    if (sqlite3_step(s) == SQLITE_ROW) {
        pages = sqlite3_column_int64(s, 0);
        page_size = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    if (pages * page_size > LAB_STORE_CHECK_MAX_BYTES) return LAB_OK;
    /* The check reads every page: through a memory map it costs about half
     * of what a pread per page does. Only for the check: a file another
     * process shrank under a map would be SIGBUS, not an error. */
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA mmap_size = %lld", (long long)LAB_STORE_CHECK_MAX_BYTES);
    sqlite3_exec(st->db, pragma, NULL, NULL, NULL);   /* best effort: only speed depends on it */
    if ((rc = lab_sq_prep(st, "PRAGMA quick_check", &s, err, errlen))) return rc;
    int step = sqlite3_step(s);
    char first[256] = "";
    if (step == SQLITE_ROW) snprintf(first, sizeof first, "%s", lab_col_text(s, 0));
    else rc = lab_sq_error(st, err, errlen, "integrity check");
    sqlite3_finalize(s);
    sqlite3_exec(st->db, "PRAGMA mmap_size = 0", NULL, NULL, NULL);
    if (rc || !strcmp(first, "ok")) return rc;
    return lab_errf(err, errlen, LAB_EINPUT,
                    "%s: the database file is corrupt (PRAGMA quick_check: %s); restore it from a copy, or recover "
                    "what is readable with `sqlite3 %s .recover`", st->path, first, st->path);
}

void lab_store_close(lab_store *st) {
    if (!st) return;
    if (st->db) sqlite3_close(st->db);
    free(st->path);
    free(st);
}

int lab_store_meta(lab_store *st, const char *key, char *out, size_t outlen, char *err, size_t errlen) {
    sqlite3_stmt *s;
    out[0] = '\0';
    int rc = lab_sq_prep(st, "SELECT value FROM meta WHERE key = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    if (step != SQLITE_ROW && step != SQLITE_DONE) return lab_sq_error(st, err, errlen, "meta");
    return step == SQLITE_ROW ? LAB_OK : lab_errf(err, errlen, LAB_EINTERNAL, "%s: meta has no %s", st->path, key);
}

/* ------------------------------------------------------------ liveness */

int64_t lab_pid_start(int64_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and ')': skip to the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* fields from 3 on; starttime is field 22 */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) return 0;
    }
    return strtoll(p + 1, NULL, 10);
}

int lab_pid_alive(int64_t pid, int64_t pid_start) {
    if (pid <= 0) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    /* The pid exists; if it was reused by another process its start differs. */
    int64_t now = lab_pid_start(pid);
    if (pid_start > 0 && now > 0 && now != pid_start) return 0;
    /* A zombie has exited: it holds no database work any more. */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        if (p && p[1] == ' ' && p[2] == 'Z') return 0;
    }
    return 1;
}

static int mark_killed(lab_store *st, int64_t run_id, int64_t pid, const char *host, char *err, size_t errlen) {
    char now[32], msg[256];
    lab_now_iso(now);
    snprintf(msg, sizeof msg, "process %lld on %s died while running (found by pid %lld at %s)",
             (long long)pid, host ? host : "?", (long long)getpid(), now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE runs SET status = 'KILLED', error = ?1, finished_at = ?2 "
                      "WHERE id = ?3 AND status = 'RUNNING'", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, msg, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, run_id);
    rc = lab_sq_step(st, s, err, errlen, "mark killed");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_reap(lab_store *st, const char *host, int64_t *n, char *err, size_t errlen) {
    *n = 0;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "SELECT id, pid, pid_start FROM runs WHERE status = 'RUNNING' AND host = ?1", &s, err, errlen))) {
        lab_sq_rollback(st);
        return rc;
    }
    lab_sq_bind_text(s, 1, host);
    int64_t ids[256], pids[256], cnt = 0;
    while (sqlite3_step(s) == SQLITE_ROW && cnt < 256) {
        int64_t id = sqlite3_column_int64(s, 0), pid = sqlite3_column_int64(s, 1), ps = sqlite3_column_int64(s, 2);
        if (lab_pid_alive(pid, ps)) continue;
        ids[cnt] = id;
        pids[cnt++] = pid;
    }
    sqlite3_finalize(s);
    for (int64_t i = 0; i < cnt; i++)
        if ((rc = mark_killed(st, ids[i], pids[i], host, err, errlen))) { lab_sq_rollback(st); return rc; }
    if ((rc = lab_sq_commit(st, err, errlen))) { lab_sq_rollback(st); return rc; }
    *n = cnt;
    return LAB_OK;
}

/* ------------------------------------------------------------ completeness */

/* Reads one integer of a one-row query with run_id bound as ?1. */
static int q_count(lab_store *st, const char *sql, int64_t run_id, int64_t *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s);
    *v = step == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    rc = (step == SQLITE_ROW || step == SQLITE_DONE) ? LAB_OK : lab_sq_error(st, err, errlen, "completeness check");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_run_missing(lab_store *st, int64_t run_id, char *what, size_t whatlen, char *err, size_t errlen) {
    what[0] = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT is_reference, repeat_idx, logits_sha256 IS NOT NULL, coalesce(n_sequences, 0)"
                      " FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        sqlite3_finalize(s);
        if (step != SQLITE_DONE) return lab_sq_error(st, err, errlen, "completeness check");
        snprintf(what, whatlen, "no such run");
        return LAB_OK;
    }
    int is_ref = sqlite3_column_int(s, 0), has_logits = sqlite3_column_int(s, 2);
    int64_t rep = sqlite3_column_int64(s, 1), n_seq = sqlite3_column_int64(s, 3);
    sqlite3_finalize(s);
    /* A benchmark run (record-bench) keeps no logits and compares with nothing. */
    if (!has_logits) return LAB_OK;
    int64_t n = 0;
    if ((rc = q_count(st, "SELECT count(*) FROM logits_topk WHERE run_id = ?1", run_id, &n, err, errlen))) return rc;
    if (n != n_seq) {
        snprintf(what, whatlen, "%lld of its %lld logits_topk rows", (long long)n, (long long)n_seq);
        return LAB_OK;
    }
    if (is_ref && rep == 0) return LAB_OK;   /* the reference's repeat 0 is what the others compare with */
    /* Every other run is compared with the FINISHED repeat 0 of its
     * experiment's reference arm (a PARTIAL run with the PARTIAL one over
     * the same sequences: the reference ran with the same --limit). */
    int64_t ref = 0;
    if ((rc = q_count(st, "SELECT c.reference_run_id FROM comparisons c JOIN runs f ON f.id = c.reference_run_id"
                          " JOIN runs r ON r.id = c.run_id WHERE c.run_id = ?1 AND (f.status = 'FINISHED'"
                          " OR (f.status = 'PARTIAL' AND f.dataset_sha256 = r.dataset_sha256))"
                          " AND f.is_reference = 1 AND f.repeat_idx = 0 AND f.experiment = r.experiment"
                          " ORDER BY c.reference_run_id DESC LIMIT 1", run_id, &ref, err, errlen))) return rc;
    if (!ref) {
        snprintf(what, whatlen, "its comparison with the reference run (repeat 0 of the reference arm, FINISHED)");
        return LAB_OK;
    }
    /* Per-layer divergence, when measured: one row per (layer, site) for
     * layers 0..max, i.e. 2 * (max + 1) rows. */
    int64_t div = 0, rows = 0, span = 0;
    sqlite3_stmt *d;
    if ((rc = lab_sq_prep(st, "SELECT c.div_sequences, (SELECT count(*) FROM layer_divergence l WHERE l.run_id = c.run_id"
                       " AND l.reference_run_id = c.reference_run_id), (SELECT 2 * (max(layer) + 1) FROM"
                       " layer_divergence l WHERE l.run_id = c.run_id AND l.reference_run_id = c.reference_run_id)"
                       " FROM comparisons c WHERE c.run_id = ?1 AND c.reference_run_id = ?2", &d, err, errlen)))
        return rc;
    sqlite3_bind_int64(d, 1, run_id);
    sqlite3_bind_int64(d, 2, ref);
    if ((step = sqlite3_step(d)) == SQLITE_ROW) {
        div = sqlite3_column_int64(d, 0);
        rows = sqlite3_column_int64(d, 1);
        span = sqlite3_column_int64(d, 2);
    }
    sqlite3_finalize(d);
    if (step != SQLITE_ROW) return lab_sq_error(st, err, errlen, "completeness check");
    if (div > 0 && (rows == 0 || rows != span))
        snprintf(what, whatlen, "its layer_divergence rows (%lld present; the comparison measured %lld sequence(s))",
                 (long long)rows, (long long)div);
    return LAB_OK;
}

/* ------------------------------------------------------------ leases */

static void bind_identity(sqlite3_stmt *s, const lab_identity *id) {
    lab_sq_bind_text(s, 1, id->experiment);
    lab_sq_bind_text(s, 2, id->arm);
    lab_sq_bind_text(s, 3, id->knob_hash);
    lab_sq_bind_text(s, 4, id->model_sha256);
    lab_sq_bind_text(s, 5, id->dataset_sha256);
    lab_sq_bind_text(s, 6, id->code_version);
    sqlite3_bind_int64(s, 7, id->repeat);
    lab_sq_bind_text(s, 25, id->shard ? id->shard : "");
}

#define IDENTITY_WHERE \
    "experiment = ?1 AND arm = ?2 AND knob_hash = ?3 AND model_sha256 = ?4 AND " \
    "dataset_sha256 = ?5 AND code_version = ?6 AND repeat_idx = ?7 AND shard = ?25"

/* Marks a FINISHED run that lacks rows a FINISHED run must have as FAILED,
 * saying what it lacks (inside the caller's transaction). */
static int mark_incomplete(lab_store *st, int64_t run_id, const char *what, char *err, size_t errlen) {
    char now[32], msg[512];
    lab_now_iso(now);
    snprintf(msg, sizeof msg, "incomplete: FINISHED without %s; marked FAILED and redone (pid %lld at %s)", what,
             (long long)getpid(), now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE runs SET status = 'FAILED', error = ?1 WHERE id = ?2 AND status = 'FINISHED'", &s, err,
                  errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, msg, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, run_id);
    rc = lab_sq_step(st, s, err, errlen, "mark incomplete run");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_lease(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                    int *kind, int64_t *run_id, int64_t *stale_id, char *err, size_t errlen) {
    return lab_store_lease_ex(st, id, pv, force, kind, run_id, stale_id, NULL, err, errlen);
}

/* Inserts the RUNNING row of a new lease (inside the caller's transaction). */
static int insert_running(lab_store *st, const lab_identity *id, const lab_provenance *pv, int64_t *run_id,
                          char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep(st,
                   "INSERT INTO runs (experiment, arm, knob_hash, model_sha256, dataset_sha256, code_version,"
                   " repeat_idx, status, started_at, experiment_sha256, git_commit, git_dirty, build_flags,"
                   " compiler, backend, device, host, pid, pid_start, is_reference, score, top_k,"
                   " expected_assertions, layer_kinds, engine_hello, shard)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'RUNNING', ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                   " ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)", &s, err, errlen);
    if (rc) return rc;
    bind_identity(s, id);
    lab_sq_bind_text(s, 8, now);
    lab_sq_bind_text(s, 9, pv->experiment_sha256);
    lab_sq_bind_text(s, 10, pv->git_commit);
    sqlite3_bind_int(s, 11, pv->git_dirty);
    lab_sq_bind_text(s, 12, pv->build_flags);
    lab_sq_bind_text(s, 13, pv->compiler);
    lab_sq_bind_text(s, 14, pv->backend);
    lab_sq_bind_text(s, 15, pv->device);
    lab_sq_bind_text(s, 16, pv->host);
    sqlite3_bind_int64(s, 17, pv->pid);
    sqlite3_bind_int64(s, 18, pv->pid_start);
    sqlite3_bind_int(s, 19, pv->is_reference);
    lab_sq_bind_text(s, 20, pv->score);
    sqlite3_bind_int64(s, 21, pv->top_k);
    lab_sq_bind_text(s, 22, pv->expected_assertions ? pv->expected_assertions : "pass");
    lab_sq_bind_text(s, 23, pv->layer_kinds && *pv->layer_kinds ? pv->layer_kinds : NULL);
    lab_sq_bind_text(s, 24, pv->engine_hello);
    rc = lab_sq_step(st, s, err, errlen, "lease run");
    sqlite3_finalize(s);
    if (!rc) *run_id = sqlite3_last_insert_rowid(st->db);
    return rc;
}

/* The newest complete FINISHED run of the identity (*done_id, 0 when none),
 * inside the caller's transaction. One that is not complete (left by an
 * older vtlab) is marked FAILED (*redone: the last so marked) and the next
 * older one looked at, so an incomplete run is redone instead of skipped for
 * ever. */
static int find_complete(lab_store *st, const lab_identity *id, int64_t *done_id, int64_t *redone, char *err,
                         size_t errlen) {
    for (;;) {
        sqlite3_stmt *s = NULL;
        *done_id = 0;
        int rc = lab_sq_prep(st, "SELECT id FROM runs WHERE " IDENTITY_WHERE " AND status = 'FINISHED' "
                                 "ORDER BY id DESC LIMIT 1", &s, err, errlen);
        if (rc) return rc;
        bind_identity(s, id);
        /* an I/O error must not read as "not finished yet" */
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) *done_id = sqlite3_column_int64(s, 0);
        else if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, "lease run");
        sqlite3_finalize(s);
        if (rc || !*done_id) return rc;
        char what[256];
        if ((rc = lab_store_run_missing(st, *done_id, what, sizeof what, err, errlen))) return rc;
        if (!what[0]) return LAB_OK;
        if ((rc = mark_incomplete(st, *done_id, what, err, errlen))) return rc;
        *redone = *done_id;
    }
}

/* The identity's RUNNING row, inside the caller's transaction: *busy_id is
 * its id when its process is alive, or runs on another host, which cannot be
 * checked from here (treated as alive); the row of a dead process on this
 * host is marked KILLED (*stale_id). */
static int check_running(lab_store *st, const lab_identity *id, const lab_provenance *pv, int64_t *busy_id,
                         int64_t *stale_id, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep(st, "SELECT id, pid, pid_start, host FROM runs WHERE " IDENTITY_WHERE
                             " AND status = 'RUNNING'", &s, err, errlen);
    if (rc) return rc;
    bind_identity(s, id);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, "lease run");
        sqlite3_finalize(s);
        return rc;
    }
    int64_t rid = sqlite3_column_int64(s, 0), pid = sqlite3_column_int64(s, 1);
    int64_t ps = sqlite3_column_int64(s, 2);
    const char *host = (const char *)sqlite3_column_text(s, 3);
    int same_host = host && pv->host && !strcmp(host, pv->host);
    if (!same_host || lab_pid_alive(pid, ps)) {
        sqlite3_finalize(s);
        *busy_id = rid;
        return LAB_OK;
    }
    char hostc[256];
    snprintf(hostc, sizeof hostc, "%s", host);
    sqlite3_finalize(s);
    if ((rc = mark_killed(st, rid, pid, hostc, err, errlen))) return rc;
    *stale_id = rid;
    return LAB_OK;
}

int lab_store_lease_ex(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                       int *kind, int64_t *run_id, int64_t *stale_id, int64_t *redone_id, char *err, size_t errlen) {
    *kind = 0;
    *run_id = 0;
    *stale_id = 0;
    if (redone_id) *redone_id = 0;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    int64_t redone = 0, done_id = 0, busy_id = 0;
    if (!force && (rc = find_complete(st, id, &done_id, &redone, err, errlen))) goto fail;
    if (done_id) {
        *kind = LAB_LEASE_DONE;
        *run_id = done_id;
        /* Nothing to keep, unless an incomplete run was marked on the way
         * (in a batch, a DONE lease fails the batch either way, as documented). */
        if (redone && !st->batch) {
            if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
            if (redone_id) *redone_id = redone;
        } else {
            lab_sq_rollback(st);
        }
        return LAB_OK;
    }
    if ((rc = check_running(st, id, pv, &busy_id, stale_id, err, errlen))) goto fail;
    if (busy_id) {
        lab_sq_rollback(st);
        *kind = LAB_LEASE_BUSY;
        *run_id = busy_id;
        return LAB_OK;
    }
    if ((rc = insert_running(st, id, pv, run_id, err, errlen))) goto fail;
    if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
    *kind = LAB_LEASED;
    if (redone_id) *redone_id = redone;
    return LAB_OK;
fail:
    lab_sq_rollback(st);
    *kind = 0;
    return rc;
}

int lab_store_find_finished(lab_store *st, const lab_identity *id, int64_t *run_id,
                            char logits_sha256[65], char *err, size_t errlen) {
    *run_id = 0;
    if (logits_sha256) logits_sha256[0] = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT id, logits_sha256 FROM runs WHERE " IDENTITY_WHERE
                      " AND status = 'FINISHED' ORDER BY id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    bind_identity(s, id);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(s, 0);
        const char *h = (const char *)sqlite3_column_text(s, 1);
        if (logits_sha256 && h) snprintf(logits_sha256, 65, "%s", h);
        rc = LAB_OK;
    } else if (rc == SQLITE_DONE) rc = LAB_OK;
    else rc = lab_sq_error(st, err, errlen, "find run");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_put_spec(lab_store *st, const char *sha256, const char *id, const char *file,
                       const char *json, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    if ((rc = lab_sq_prep(st, "INSERT OR IGNORE INTO experiment_specs (sha256, id, file, json, first_seen)"
                       " VALUES (?1, ?2, ?3, ?4, ?5)", &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    lab_sq_bind_text(s, 1, sha256);
    lab_sq_bind_text(s, 2, id);
    lab_sq_bind_text(s, 3, file);
    lab_sq_bind_text(s, 4, json);
    lab_sq_bind_text(s, 5, now);
    rc = lab_sq_step(st, s, err, errlen, "store experiment spec");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

/* ------------------------------------------------------------ reads of a run's top-1 ids */

int lab_store_top1(lab_store *st, int64_t run_id, int32_t **ids, int64_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT t.n_pos, t.k, t.ids, r.score FROM logits_topk t JOIN runs r ON r.id = t.run_id"
                      " WHERE t.run_id = ?1 ORDER BY t.seq", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int64_t cap = 0;
    int32_t *out = NULL;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 0), k = sqlite3_column_int64(s, 1);
        const int32_t *blob = sqlite3_column_blob(s, 2);
        int64_t bytes = sqlite3_column_bytes(s, 2);
        const char *score = (const char *)sqlite3_column_text(s, 3);
        int last = score && !strcmp(score, "last");
        if (k <= 0 || np <= 0 || bytes != np * k * (int64_t)sizeof(int32_t)) {
            sqlite3_finalize(s);
            free(out);
            return lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld: malformed logits_topk row", st->path,
                            (long long)run_id);
        }
        for (int64_t p = last ? np - 1 : 0; p < np; p++) {
            if (*n >= cap) {
                cap = cap ? cap * 2 : 1024;
                int32_t *o = realloc(out, (size_t)cap * sizeof *o);
                if (!o) { sqlite3_finalize(s); free(out); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
                out = o;
            }
            int32_t v;
            memcpy(&v, (const char *)blob + (size_t)(p * k) * sizeof(int32_t), sizeof v);
            out[(*n)++] = v;
        }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) { free(out); *n = 0; return lab_sq_error(st, err, errlen, "read top-1"); }
    *ids = out;
    return LAB_OK;
}

int lab_store_agreement(lab_store *st, int64_t run, int64_t ref, uint8_t **agree, int64_t *n, char *err,
                        size_t errlen) {
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    *agree = NULL;
    *n = 0;
    int rc = lab_store_top1(st, run, &a, &na, err, errlen);
    if (!rc) rc = lab_store_top1(st, ref, &b, &nb, err, errlen);
    if (!rc && na != nb)
        rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: %lld positions, its reference run %lld has %lld",
                      (long long)run, (long long)na, (long long)ref, (long long)nb);
    if (!rc && !(*agree = malloc((size_t)(na ? na : 1)))) rc = lab_oom(err, errlen);
    if (!rc) {
        for (int64_t i = 0; i < na; i++) (*agree)[i] = a[i] == b[i];
        *n = na;
    }
    free(a);
    free(b);
    return rc;
}
