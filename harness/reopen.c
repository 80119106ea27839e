/*
 * reopen.c — re-measuring a confounded claim (see reopen.h).
 *
 * The claim's experiment file is the recipe. A derived experiment with the
 * same id (so the reference run's identity, and its finished run, are shared)
 * and three arms — the reference, the claim's arm, and the claim's arm with
 * the defect's replay fault — is written to the work dir and run through the
 * ordinary runner, so the replay and the rerun are runs like any other, with
 * probes, comparisons and verdicts in results.db.
 *
 * "Explained" means both: through the fault the recorded verdict comes back
 * (under the claim's own decision rule), and the fault makes a significant
 * difference (McNemar's exact test, replay vs rerun on the same positions,
 * p < 0.05). Whether the recorded k/n itself falls in the replay's interval
 * is reported too: a claim measured on another model need not reproduce its
 * number here, only its direction.
 */
#include "reopen.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "experiment.h"
#include "harness/cli.h"
#include "ledger.h"
#include "metrics.h"
#include "model/vt.h"
#include "runner.h"
#include "store.h"
#include "store_reopen.h"
#include "util.h"

/* Test-only: VTLAB_TEST_KILL_AT=POINT raises SIGKILL at the named point, so that
 * tests/cli/test_crash_safety.sh can show that a kill there leaves a ledger
 * every command accepts. Not for any other use. (Not VT_*: those are knobs,
 * and the runner refuses an undeclared one.) */
static void test_kill_at(const char *point) {
    const char *k = getenv("VTLAB_TEST_KILL_AT");
    if (k && !strcmp(k, point)) raise(SIGKILL);
}

typedef struct arm_result {
    int64_t run, k, n;
    double  lo, hi;
    char    verdict[16];     /* under the claim's rule */
    char    engine[64], commit[64];   /* the command engine it ran on ("" builtin) */
} arm_result;

/* The defect to replay: the one named, or the first whose trigger the claim's
 * knobs include in the claim's codebase. */
static const lab_defect *pick_defect(const lab_ledger *l, const lab_claim *c, const char *id, char *err, size_t errlen) {
    if (id) {
        const lab_defect *d = lab_ledger_defect(l, id);
        if (!d) lab_errf(err, errlen, LAB_EINPUT, "reopen: --defect %s: no such defect in %s/defects", id, l->dir);
        return d;
    }
    for (int64_t i = 0; i < l->n_defects; i++)
        if (!strcmp(l->defects[i].codebase, c->codebase) && lab_knobs_trigger(&l->defects[i].trigger, &c->arm_knobs))
            return &l->defects[i];
    lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s: no registered defect applies to it (its knobs include no "
             "defect's trigger in codebase %s); nothing to replay", c->id, c->codebase);
    return NULL;
}

static cJSON *knobs_obj(const lab_knobs_kv *kv, const lab_defect *fault) {
    cJSON *o = cJSON_CreateObject();
    for (int64_t i = 0; i < kv->n; i++) cJSON_AddStringToObject(o, kv->names[i], kv->values[i]);
    if (fault) cJSON_AddStringToObject(o, fault->replay_knob, fault->replay_fault);
    return o;
}

/* Writes the derived experiment; *rerun_arm and *replay_arm get the arm names. */
static int write_derived(const lab_claim *c, const lab_defect *d, const char *work, char *path, size_t pathlen,
                         char *replay_arm, size_t ralen, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = lab_read_json(c->experiment_path, &text, &len, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "reopen: claim %s: experiment", c->id);
    void *root = NULL;
    rc = lab_json_parse(c->experiment_path, text, len, &root, err, errlen);
    free(text);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "reopen: claim %s: experiment", c->id);
    cJSON *j = root;
    /* The derived experiment is an experiment of its own (its own id, so its
     * own runs and its own spec in results.db): reusing the claim's id made the
     * report render the original experiment's runs against this spec. */
    const cJSON *oid = cJSON_GetObjectItemCaseSensitive(j, "id");
    if (!cJSON_IsString(oid)) {
        cJSON_Delete(j);
        return lab_errf(err, errlen, LAB_EINPUT, "reopen: %s: id: missing or not a string", c->experiment_path);
    }
    char did[LAB_NAME_MAX + 1];
    snprintf(did, sizeof did, "%.*s.reopen", LAB_NAME_MAX - 7, oid->valuestring);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "id", cJSON_CreateString(did));
    cJSON *arms = cJSON_GetObjectItemCaseSensitive(j, "arms");
    const cJSON *refname = cJSON_GetObjectItemCaseSensitive(j, "reference");
    cJSON *ref = NULL, *same = NULL;
    for (cJSON *a = arms ? arms->child : NULL; a; a = a->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "name");
        if (!cJSON_IsString(n)) continue;
        if (cJSON_IsString(refname) && !strcmp(n->valuestring, refname->valuestring)) ref = a;
        if (!strcmp(n->valuestring, c->arm_name)) same = a;
    }
    if (!ref) { cJSON_Delete(j); return lab_errf(err, errlen, LAB_EINPUT, "reopen: %s: no reference arm", c->experiment_path); }
    cJSON *new_arms = cJSON_CreateArray();
    cJSON_AddItemToArray(new_arms, cJSON_Duplicate(ref, 1));
    cJSON *rerun = cJSON_CreateObject();
    cJSON_AddStringToObject(rerun, "name", c->arm_name);
    cJSON_AddStringToObject(rerun, "description", "reopen: the claim's arm on the current code, no fault");
    cJSON_AddItemToObject(rerun, "knobs", knobs_obj(&c->arm_knobs, NULL));
    const cJSON *expect = same ? cJSON_GetObjectItemCaseSensitive(same, "expect") : NULL;
    if (expect) cJSON_AddItemToObject(rerun, "expect", cJSON_Duplicate(expect, 1));
    cJSON_AddItemToArray(new_arms, rerun);
    replay_arm[0] = '\0';
    if (d->replay_fault) {   /* a defect with no built-in replay is only rerun */
        snprintf(replay_arm, ralen, "%s.replay", c->arm_name);   /* short: it labels plots; the knobs say which fault */
        cJSON *replay = cJSON_CreateObject();
        cJSON_AddStringToObject(replay, "name", replay_arm);
        cJSON_AddStringToObject(replay, "description", "reopen: the claim's arm through the defect's replay fault");
        cJSON_AddItemToObject(replay, "knobs", knobs_obj(&c->arm_knobs, d));
        cJSON_AddStringToObject(replay, "expect_assertions", "fail");
        cJSON_AddItemToArray(new_arms, replay);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(j, "arms", new_arms);
    /* written to the work dir: its paths must still name the claim's files */
    if ((rc = lab_experiment_rebase(j, c->experiment_path, 0, err, errlen))) { cJSON_Delete(j); return rc; }
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    if (!out) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if ((rc = lab_mkdirs(work, err, errlen))) { free(out); return rc; }
    snprintf(path, pathlen, "%s/%s.json", work, c->id);
    rc = lab_cli_write_file_atomic(path, out, strlen(out), err, errlen);
    free(out);
    return rc;
}

/* The knob hash arm `arm` of the derived experiment resolves to, as the
 * runner computes it (lab_arm_knob_hash: a command engine is asked). */
static int arm_knob_hash(const lab_experiment *e, const char *arm, char out[65], char *err, size_t errlen) {
    int64_t i = lab_experiment_arm(e, arm);
    if (i < 0) return lab_errf(err, errlen, LAB_EINTERNAL, "reopen: derived experiment has no arm %s", arm);
    return lab_arm_knob_hash(e, i, out, err, errlen);
}

/* The latest finished run of this arm's identity — same experiment, arm, knob
 * hash and code version as the runs just executed (or reused) — with its
 * top-1 comparison. Not merely the latest run of the arm's name: another
 * environment or build may have added runs of that name. */
static int arm_outcome(lab_store *st, const lab_experiment *e, const char *arm, const lab_claim *c, arm_result *r,
                       char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    char kh[65];
    int rc = arm_knob_hash(e, arm, kh, err, errlen);
    if (rc) return rc;
    lab_reopen_arm_key key = {e->id, arm, kh, vt_build_info()};
    lab_reopen_arm_run run;
    if ((rc = lab_reopen_read_arm(st, &key, &run, err, errlen))) return lab_err_prefix(err, errlen, rc, "reopen");
    if (!run.found)
        return lab_errf(err, errlen, LAB_EINTERNAL, "reopen: no finished run of %s/%s with a comparison", e->id, arm);
    r->run = run.run;
    r->k = run.k;
    r->n = run.n;
    memcpy(r->engine, run.engine, sizeof r->engine);
    memcpy(r->commit, run.commit, sizeof r->commit);
    lab_wilson(r->k, r->n, 1.959963984540054, &r->lo, &r->hi);
    snprintf(r->verdict, sizeof r->verdict, "%s",
             lab_verdict_name(lab_decide(r->lo, r->hi, c->threshold, !strcmp(c->direction, ">="))));
    return LAB_OK;
}

/* McNemar, replay vs rerun, on agreement with the reference's top-1. */
static int mcnemar(lab_store *st, int64_t ref, int64_t a, int64_t b, double *p, int64_t *nb, int64_t *nc,
                   char *err, size_t errlen) {
    int32_t *r = NULL, *x = NULL, *y = NULL;
    int64_t nr = 0, nx = 0, ny = 0;
    int rc = lab_store_top1(st, ref, &r, &nr, err, errlen);
    if (!rc) rc = lab_store_top1(st, a, &x, &nx, err, errlen);
    if (!rc) rc = lab_store_top1(st, b, &y, &ny, err, errlen);
    *nb = *nc = 0;
    if (!rc && (nx != nr || ny != nr)) rc = lab_errf(err, errlen, LAB_EINTERNAL, "reopen: runs scored different positions");
    for (int64_t i = 0; !rc && i < nr; i++) {
        int ax = x[i] == r[i], ay = y[i] == r[i];
        *nb += ax && !ay;
        *nc += !ax && ay;
    }
    if (!rc) *p = lab_mcnemar_exact(*nb, *nc);
    free(r); free(x); free(y);
    return rc;
}

/* What the replay and the rerun measured, and what that says of the claim. */
typedef struct reopen_measure {
    arm_result replay;           /* replay.run = 0: no replay */
    arm_result rerun;
    int64_t    ref;              /* the rerun's reference run */
    double     p;                /* McNemar replay vs rerun; 1 without a replay */
    int        explained;
    char       explanation[1024];
} reopen_measure;

/* m->explained and m->explanation, from the measured arms (see the top). */
static void explain(const lab_claim *c, const lab_defect *d, reopen_measure *m) {
    const arm_result *replay = &m->replay, *rerun = &m->rerun;
    if (!replay->run) {
        m->explained = 0;
        snprintf(m->explanation, sizeof m->explanation,
                 "not explained: defect %s records no replay in vtlab, so the recorded %s %lld/%lld is unexplained (it "
                 "may be the defect's effect or something else); without the defect the arm scores %lld/%lld [%.3f, "
                 "%.3f], %s.", d->id, c->verdict, (long long)c->k, (long long)c->n, (long long)rerun->k,
                 (long long)rerun->n, rerun->lo, rerun->hi, rerun->verdict);
        return;
    }
    double rec = (double)c->k / (double)c->n;
    int same_verdict = !strcmp(replay->verdict, c->verdict);
    int significant = m->p < 0.05 && replay->k * rerun->n < rerun->k * replay->n;
    int number_inside = rec >= replay->lo && rec <= replay->hi;
    m->explained = same_verdict && significant;
    snprintf(m->explanation, sizeof m->explanation,
             "%s: through %s=%s the arm scores %lld/%lld [%.3f, %.3f], %s (recorded: %s %lld/%lld); without it "
             "%lld/%lld [%.3f, %.3f]; McNemar replay vs rerun p = %.2g. The recorded %lld/%lld %s the replay's interval%s.",
             m->explained ? "explained" : "not explained", d->replay_knob, d->replay_fault, (long long)replay->k, (long long)replay->n,
             replay->lo, replay->hi, replay->verdict, c->verdict, (long long)c->k, (long long)c->n, (long long)rerun->k,
             (long long)rerun->n, rerun->lo, rerun->hi, m->p, (long long)c->k, (long long)c->n,
             number_inside ? "is inside" : "is outside",
             number_inside ? "" : " (the direction is reproduced, not the number: the claim was measured on another "
                                  "model and code)");
}

/* Reads what the derived experiment's runs measured (the replay only when
 * replay_arm is not ""), and explains it. */
static int measure(lab_store *st, const lab_experiment *dx, const lab_claim *c, const lab_defect *d,
                   const char *replay_arm, reopen_measure *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->p = 1.0;
    int64_t nb = 0, nc = 0;
    int rc = replay_arm[0] ? arm_outcome(st, dx, replay_arm, c, &m->replay, err, errlen) : LAB_OK;
    if (!rc) rc = arm_outcome(st, dx, c->arm_name, c, &m->rerun, err, errlen);
    if (!rc && (rc = lab_reopen_read_reference(st, m->rerun.run, &m->ref, err, errlen)))
        lab_err_prefix(err, errlen, rc, "reopen");
    if (!rc && replay_arm[0]) rc = mcnemar(st, m->ref, m->rerun.run, m->replay.run, &m->p, &nb, &nc, err, errlen);
    if (!rc) explain(c, d, m);
    return rc;
}

/* ------------------------------------------------ the ledger commit
 *
 * A reopen changes two claim files: the new claim (history.supersedes) and the
 * old one (history.superseded_by). The loader requires both ends of that link
 * to agree, so no order of two file writes keeps DIR/claims valid at every
 * step: a kill between them used to leave a ledger that `specs check`, `audit`
 * and `reopen` all refused. Instead the next claims directory is staged whole
 * beside the current one — a copy of every entry, the new claim, the old one
 * rewritten — and swapped in with one renameat2(RENAME_EXCHANGE): at every
 * instant the claims directory is either the old ledger or the new one. The
 * old tree, now under the staging name, is then removed.
 *
 * Staging directories are named .BASE.reopen.XXXXXX next to the claims
 * directory BASE (the loader reads only DIR/claims and DIR/defects, and skips
 * dot-files, so none is ever read as a claim). A kill leaves at most one; the
 * next reopen removes it (lab_reopen_recover): before the swap it holds an
 * uncommitted next ledger, after it the previous one.
 *
 * Where the filesystem has no RENAME_EXCHANGE (EINVAL/ENOSYS/EOPNOTSUPP: NFS,
 * some FUSE mounts) the two files are renamed in from the staging directory
 * one after the other, after a COMMIT_MARK file listing them is written there:
 * a kill between those renames leaves the ledger inconsistent until the next
 * lab_reopen_recover rolls the commit forward. Only that fallback has such a
 * window.
 *
 * Concurrent reopens serialize their commits on flock() of the directory that
 * holds the claims directory, and reload the ledger under the lock: a claim
 * superseded meanwhile is refused rather than given a second successor, and no
 * reopen's new claim is lost to another's swap. A person editing a claim file
 * during the milliseconds between the copy and the swap would lose the edit.
 */

#define STAGE_TAG   ".reopen."
#define COMMIT_MARK ".reopen-commit"   /* in a staging dir: names to rename in, one per line */

/* The real claims directory of specs dir `specs`, split: parent (where the
 * staging dirs and the lock live) and base name. */
static int claims_dir(const char *specs, char parent[PATH_MAX], char base[NAME_MAX + 1], char *err, size_t errlen) {
    char claims[PATH_MAX + 16], real[PATH_MAX];
    snprintf(claims, sizeof claims, "%s/claims", specs);
    if (!realpath(claims, real)) return lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", claims, strerror(errno));
    char *slash = strrchr(real, '/');
    snprintf(base, NAME_MAX + 1, "%s", slash + 1);
    if (slash == real) snprintf(parent, PATH_MAX, "/");
    else { *slash = '\0'; snprintf(parent, PATH_MAX, "%s", real); }
    return LAB_OK;
}

/* Opens and exclusively locks dir (blocking). Returns the fd, or -1 with err. */
static int lock_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) { lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", dir, strerror(errno)); return -1; }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        lab_errf(err, errlen, LAB_EIO, "reopen: %s: lock: %s", dir, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static void unlock_dir(int fd) {
    if (fd >= 0) close(fd);   /* closing the last fd releases the flock */
}

static int fsync_path(const char *path, int dir) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Removes dirfd/name and everything under it; never follows a symlink. */
static int remove_tree_at(int dirfd, const char *name) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlinkat(dirfd, name, 0);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) { close(fd); return -1; }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && remove_tree_at(fd, de->d_name) != 0) rc = -1;
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0) rc = -1;
    return rc;
}

/* Copies directory src into the existing directory dst: regular files (bytes
 * and mode, fsynced), symlinks (as links), subdirectories (recursively).
 * Anything else is refused: the swap would drop it. */
static int copy_tree(const char *src, const char *dst, char *err, size_t errlen) {
    DIR *d = opendir(src);
    if (!d) return lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", src, strerror(errno));
    int rc = LAB_OK;
    struct dirent *de;
    char *buf = malloc(1 << 16);
    if (!buf) { closedir(d); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char from[PATH_MAX + NAME_MAX + 2], to[PATH_MAX + NAME_MAX + 2];
        snprintf(from, sizeof from, "%s/%s", src, de->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, de->d_name);
        struct stat st;
        if (lstat(from, &st) != 0) { rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", from, strerror(errno)); break; }
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlink(from, target, sizeof target - 1);
            if (n < 0) { rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", from, strerror(errno)); break; }
            target[n] = '\0';
            if (symlink(target, to) != 0) rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", to, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (mkdir(to, st.st_mode & 07777) != 0) rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", to, strerror(errno));
            else rc = copy_tree(from, to, err, errlen);
        } else if (S_ISREG(st.st_mode)) {
            int in = open(from, O_RDONLY | O_CLOEXEC);
            int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
            ssize_t n = 0;
            while (in >= 0 && out >= 0 && (n = read(in, buf, 1 << 16)) != 0) {
                if (n < 0) { if (errno == EINTR) continue; break; }
                ssize_t off = 0;
                while (off < n) {
                    ssize_t w = write(out, buf + off, (size_t)(n - off));
                    if (w < 0) { if (errno == EINTR) continue; n = -1; break; }
                    off += w;
                }
                if (n < 0) break;
            }
            if (in < 0 || out < 0 || n != 0 || fsync(out) != 0)
                rc = lab_errf(err, errlen, LAB_EIO, "reopen: copying %s to %s: %s", from, to, strerror(errno));
            if (in >= 0) close(in);
            if (out >= 0 && close(out) != 0 && !rc)
                rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", to, strerror(errno));
        } else {
            rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: %s: neither a file, a link nor a directory; the claims "
                          "directory is replaced whole on commit and cannot carry it", from);
        }
    }
    free(buf);
    closedir(d);
    if (!rc && fsync_path(dst, 1) != 0) rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: fsync: %s", dst, strerror(errno));
    return rc;
}

/* Swaps two paths atomically; -1 with errno (ENOSYS where the call is missing). */
static int rename_exchange(const char *a, const char *b) {
#if defined(__linux__) && defined(SYS_renameat2)
    if (getenv("VTLAB_TEST_NO_RENAME_EXCHANGE")) { errno = EINVAL; return -1; }   /* test-only: the fallback */
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */);
#else
    (void)a; (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

/* Under the lock: finishes or discards what a killed commit left next to the
 * claims directory base in parent. A staging dir with COMMIT_MARK was being
 * renamed in (the fallback): the files it still holds are renamed in, in the
 * listed order. Any other staging dir is removed. */
static int recover_locked(const char *parent, const char *base, char *err, size_t errlen) {
    DIR *d = opendir(parent);
    if (!d) return lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", parent, strerror(errno));
    char prefix[NAME_MAX + 16];
    snprintf(prefix, sizeof prefix, ".%s" STAGE_TAG, base);
    int rc = LAB_OK;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix))) continue;
        char stage[PATH_MAX + NAME_MAX + 2], mark[PATH_MAX + 2 * NAME_MAX + 4];
        snprintf(stage, sizeof stage, "%s/%s", parent, de->d_name);
        snprintf(mark, sizeof mark, "%s/" COMMIT_MARK, stage);
        char *names = NULL;
        if (lab_path_exists(mark)) {
            if ((rc = lab_read_file(mark, &names, NULL, err, errlen))) break;   /* keep it: never discard a commit */
            for (char *line = strtok(names, "\n"); line && !rc; line = strtok(NULL, "\n")) {
                char from[sizeof stage + NAME_MAX + 2], to[PATH_MAX + 2 * NAME_MAX + 4];
                snprintf(from, sizeof from, "%s/%s", stage, line);
                snprintf(to, sizeof to, "%s/%s/%s", parent, base, line);
                if (lab_path_exists(from) && rename(from, to) != 0)
                    rc = lab_errf(err, errlen, LAB_EIO, "reopen: completing an interrupted commit: %s: %s", to,
                                  strerror(errno));
            }
            free(names);
        }
        if (!rc && remove_tree_at(AT_FDCWD, stage) != 0)
            rc = lab_errf(err, errlen, LAB_EIO, "reopen: removing %s: %s", stage, strerror(errno));
    }
    closedir(d);
    return rc;
}

int lab_reopen_recover(const char *specs_dir, char *err, size_t errlen) {
    char parent[PATH_MAX], base[NAME_MAX + 1];
    char claims[PATH_MAX + 16];
    snprintf(claims, sizeof claims, "%s/claims", specs_dir);
    if (!lab_path_exists(claims)) return LAB_OK;   /* no ledger, nothing to recover */
    int rc = claims_dir(specs_dir, parent, base, err, errlen);
    if (rc) return rc;
    int lk = lock_dir(parent, err, errlen);
    if (lk < 0) return LAB_EIO;
    rc = recover_locked(parent, base, err, errlen);
    unlock_dir(lk);
    return rc;
}

/* What the reopen measured, for the new claim. */
typedef struct reopen_record {
    const char       *defect_id;
    arm_result       *rerun;
    int64_t           ref;
    const char       *explanation;
} reopen_record;

/* The length of words [0, n) of which keep[] says 1, joined by '-'. */
static size_t kept_len(const size_t *len, const char *keep, size_t n) {
    size_t total = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) { total += len[i]; k++; }
    return k ? total + k - 1 : 0;
}

/* Drops words of the class `digits` (1: words with a digit) from the last
 * towards the first until the kept ones fit in room. */
static void drop_words(const char *const *w, const size_t *len, char *keep, size_t n, int digits, size_t room) {
    for (size_t i = n; i-- > 0 && kept_len(len, keep, n) > room;)
        if (keep[i] && (strpbrk(w[i], "0123456789") != NULL) == digits) keep[i] = 0;
}

/* The claim's part of a reopened claim's id is shortened by whole words
 * ('-'-separated): cutting characters turned "...-refuted-49of128" into
 * "...-refuted-49of12" ("49 of 12"), a number the claim never measured.
 * Words without digits go first (the verdict word among them: the new claim
 * records its own), then words with digits, each from the end; a word that
 * alone is longer than the room, or empty, goes before either. Only when no word fits
 * is the id cut at the room, never inside a run of digits. */
int lab_reopen_claim_id(const char *claim, const char *suffix, char *out, size_t outlen) {
    size_t sl = strlen(suffix), cl = strlen(claim);
    if (sl >= LAB_NAME_MAX || outlen < LAB_NAME_MAX + 1) return LAB_EINTERNAL;
    size_t room = LAB_NAME_MAX - sl;
    if (cl <= room) { snprintf(out, outlen, "%s%s", claim, suffix); return LAB_OK; }
    char *copy = lab_strdup(claim), **w = calloc(cl + 1, sizeof *w), *keep = calloc(cl + 1, 1);
    size_t *len = calloc(cl + 1, sizeof *len), n = 0;
    if (!copy || !w || !keep || !len) { free(copy); free(w); free(keep); free(len); return LAB_ENOMEM; }
    for (char *p = copy, *d;; p = d + 1) {   /* cl + 1 words at most: every '-' splits one more */
        d = strchr(p, '-');
        if (d) *d = '\0';
        w[n] = p;
        len[n] = strlen(p);
        keep[n] = len[n] > 0 && len[n] <= room;   /* an empty word ("a--b") only adds a '-' */
        n++;
        if (!d) break;
    }
    drop_words((const char *const *)w, len, keep, n, 0, room);
    drop_words((const char *const *)w, len, keep, n, 1, room);
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) o += (size_t)snprintf(out + o, outlen - o, "%s%s", o ? "-" : "", w[i]);
    if (o == 0) {   /* every word alone is longer than the room: cut the first at the room */
        const char *from = claim + strspn(claim, "-");
        size_t cut = strlen(from) < room ? strlen(from) : room;   /* shorter: the id was all '-' */
        while (cut > 0 && isdigit((unsigned char)from[cut - 1]) && isdigit((unsigned char)from[cut])) cut--;
        while (cut > 0 && strchr("-._", from[cut - 1])) cut--;
        o = (size_t)snprintf(out, outlen, "%.*s", (int)cut, from);
    }
    /* nothing of the claim left: the suffix alone, without its separator */
    snprintf(out + o, outlen - o, "%s", o ? suffix : suffix + strspn(suffix, "-._"));
    free(copy); free(w); free(keep); free(len);
    return LAB_OK;
}

/* CLAIM-reopened-YYYYMMDD[-N] into id[128] (lab_reopen_claim_id): the first
 * that is not in the ledger yet. */
static int new_claim_id(const lab_ledger *l, const char *claim, const char *today, char id[128], char *err,
                        size_t errlen) {
    for (int i = 1;; i++) {
        char suffix[48];
        int sl = snprintf(suffix, sizeof suffix, "-reopened-%.4s%.2s%.2s", today, today + 5, today + 8);
        if (i > 1) snprintf(suffix + sl, sizeof suffix - (size_t)sl, "-%d", i);
        int rc = lab_reopen_claim_id(claim, suffix, id, 128);
        if (rc) return lab_errf(err, errlen, rc, "reopen: claim %s: cannot make the new claim's id", claim);
        if (!lab_ledger_claim(l, id)) return LAB_OK;
    }
}

/* The claim that supersedes c with the rerun's numbers, into *nw (shallow:
 * every field not set here is c's; commit[64] and notes[1400] are the
 * caller's buffers it points at). Measured on an engine of the claim's
 * codebase (its commit from its hello), or on vtlab's own model. */
static void superseding_claim(const lab_claim *c, const reopen_record *r, const char *id, const char *today,
                              char *commit, char *notes, lab_claim *nw) {
    const char *codebase, *cm;
    lab_claim_code_of_run(r->rerun->engine, r->rerun->commit, c->codebase, vt_build_commit(), &codebase, &cm);
    snprintf(commit, 64, "%s", cm ? cm : "");
    snprintf(notes, 1400, "Reopened from %s (measured through defect %s). %s", c->id, r->defect_id, r->explanation);
    *nw = *c;
    nw->id = (char *)id;
    nw->verdict = r->rerun->verdict;
    nw->k = r->rerun->k;
    nw->n = r->rerun->n;
    nw->codebase = (char *)codebase;
    nw->code.commit = commit[0] ? commit : NULL;
    nw->code.date = (char *)today;
    nw->measured_at = (char *)today;
    nw->supersedes = c->id;
    nw->superseded_by = NULL;
    nw->run_arm = r->rerun->run;
    nw->run_ref = r->ref;
    nw->notes = notes;
}

/* Where the directory swap is not available: mark the staging dir as a
 * commit in progress (lab_reopen_recover completes it), then rename the
 * two files (the new claim NEW, the superseded OLD) from stage into real. */
static int commit_by_renames(const char *parent, const char *base, char *stage, const char *real, const char *nid,
                             const char *oid, char *err, size_t errlen) {
    char mark[PATH_MAX + NAME_MAX + 40], list[300], path[PATH_MAX + 2 * NAME_MAX + 16], to[PATH_MAX + 2 * NAME_MAX + 16];
    snprintf(mark, sizeof mark, "%s/" COMMIT_MARK, stage);
    int n = snprintf(list, sizeof list, "%s.json\n%s.json\n", nid, oid);
    int rc = lab_cli_write_file_atomic(mark, list, (size_t)n, err, errlen);
    if (rc) return rc;
    if (fsync_path(mark, 0) || fsync_path(stage, 1))
        return lab_errf(err, errlen, LAB_EIO, "reopen: %s: fsync: %s", mark, strerror(errno));
    snprintf(path, sizeof path, "%s/%s.json", stage, nid);
    snprintf(to, sizeof to, "%s/%s.json", real, nid);
    if (rename(path, to) != 0) return lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", to, strerror(errno));
    test_kill_at("reopen-between-renames");
    snprintf(path, sizeof path, "%s/%s.json", stage, oid);
    snprintf(to, sizeof to, "%s/%s.json", real, oid);
    if (rename(path, to) != 0) {
        /* The new claim is in: complete rather than undo, as recovery would. */
        rc = recover_locked(parent, base, err, errlen);
        stage[0] = '\0';
        return rc ? rc : lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", to, strerror(errno));
    }
    fsync_path(real, 1);
    return LAB_OK;
}

/* Under the commit lock: reloads the ledger, picks the new claim's id
 * (<old>-reopened-YYYYMMDD, then -2, -3 ...), stages the next claims
 * directory and swaps it in (see above). id, file (the new claim's path) and
 * old_file (the old claim's) are set on LAB_OK; on an error the ledger is
 * unchanged. */
static int commit_claims(const char *specs, const char *claim_id, const reopen_record *r, char id[128],
                         char *file, size_t filelen, char *old_file, size_t oldlen, char *err, size_t errlen) {
    char parent[PATH_MAX], base[NAME_MAX + 1];
    int rc = claims_dir(specs, parent, base, err, errlen);
    if (rc) return rc;
    int lk = lock_dir(parent, err, errlen);
    if (lk < 0) return LAB_EIO;
    char stage[PATH_MAX + NAME_MAX + 2] = "";
    lab_ledger l;
    memset(&l, 0, sizeof l);
    if ((rc = recover_locked(parent, base, err, errlen))) goto out;
    if ((rc = lab_ledger_load(specs, &l, err, errlen))) goto out;
    lab_claim *c = (lab_claim *)lab_ledger_claim(&l, claim_id);
    if (!c) { rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s disappeared from %s/claims meanwhile", claim_id, specs); goto out; }
    if (c->superseded_by) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s was superseded by %s meanwhile (a concurrent reopen?); "
                      "nothing recorded", c->id, c->superseded_by);
        goto out;
    }
    char today[32], notes[1400], commit[64];
    lab_now_iso(today);
    today[10] = '\0';
    if ((rc = new_claim_id(&l, c->id, today, id, err, errlen))) goto out;
    lab_claim nw;
    superseding_claim(c, r, id, today, commit, notes, &nw);

    char real[PATH_MAX + NAME_MAX + 2], path[sizeof stage + NAME_MAX + 8], path2[sizeof path];
    snprintf(real, sizeof real, "%s/%s", parent, base);
    int sl = snprintf(stage, sizeof stage, "%s/.%s" STAGE_TAG "XXXXXX", parent, base);
    if (sl < 0 || (size_t)sl >= sizeof stage) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: %s/%s: path too long", parent, base);
        stage[0] = '\0';
        goto out;
    }
    if (!mkdtemp(stage)) {
        rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: %s", stage, strerror(errno));
        stage[0] = '\0';
        goto out;
    }
    if ((rc = copy_tree(real, stage, err, errlen))) goto out;
    snprintf(path, sizeof path, "%s/%s.json", stage, id);
    if ((rc = lab_claim_write(&nw, path, err, errlen))) goto out;
    test_kill_at("reopen-between-writes");
    snprintf(path2, sizeof path2, "%s/%s.json", stage, c->id);
    c->superseded_by = id;
    rc = lab_claim_write(c, path2, err, errlen);
    c->superseded_by = NULL;
    if (rc) goto out;
    if (fsync_path(path, 0) || fsync_path(path2, 0) || fsync_path(stage, 1)) {
        rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s: fsync: %s", stage, strerror(errno));
        goto out;
    }
    test_kill_at("reopen-before-commit");
    if (rename_exchange(stage, real) == 0) {
        fsync_path(parent, 1);   /* the swap is done; durability of the directory entry is best effort */
        test_kill_at("reopen-after-commit");
    } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == ENOTSUP) {
        if ((rc = commit_by_renames(parent, base, stage, real, id, c->id, err, errlen))) goto out;
    } else {
        rc = lab_errf(err, errlen, LAB_EIO, "reopen: swapping %s into %s: %s", stage, real, strerror(errno));
        goto out;
    }
    /* committed: stage now holds the previous ledger (or, in the fallback, the
     * untouched copies); removing it is housekeeping */
    remove_tree_at(AT_FDCWD, stage);
    stage[0] = '\0';
    snprintf(file, filelen, "%s/claims/%s.json", specs, id);
    snprintf(old_file, oldlen, "%s/claims/%s.json", specs, c->id);
out:
    if (rc && stage[0]) remove_tree_at(AT_FDCWD, stage);
    lab_ledger_free(&l);
    unlock_dir(lk);
    return rc;
}

/* 1 when git tracks file (its directory's repository has it): the ledger is
 * a checkout's, and what reopen wrote there is to be committed. A copy of
 * the ledger outside git (build/demo/specs is ignored) has nothing to
 * commit. git is asked without a shell (the path is the user's). */
static int git_tracks(const char *file) {
    char dir[4400];   /* print_result's paths are at most 4300 bytes */
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : file;
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    fflush(NULL);
    pid_t p = fork();
    if (p < 0) return 0;
    if (p == 0) {
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) { dup2(fd, 0); dup2(fd, 1); dup2(fd, 2); }
        execlp("git", "git", "-C", dir, "ls-files", "--error-unmatch", "--", base, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* (d) before and after, side by side. */
static void print_result(FILE *out, const lab_claim *c, const lab_defect *d, const reopen_measure *m, const char *id,
                         const char *file, const char *old_file) {
    const arm_result *rerun = &m->rerun;
    double rlo, rhi;
    lab_wilson(c->k, c->n, 1.959963984540054, &rlo, &rhi);
    fprintf(out, "\n%-14s %-34s %-34s\n", "", "BEFORE (recorded)", "AFTER (reopened)");
    fprintf(out, "%-14s %-34s %-34s\n", "claim", c->id, id);
    char a[96], b[192];
    snprintf(a, sizeof a, "%s", c->verdict);
    snprintf(b, sizeof b, "%s", rerun->verdict);
    fprintf(out, "%-14s %-34s %-34s\n", "verdict", a, b);
    snprintf(a, sizeof a, "%lld/%lld [%.3f, %.3f]", (long long)c->k, (long long)c->n, rlo, rhi);
    snprintf(b, sizeof b, "%lld/%lld [%.3f, %.3f]", (long long)rerun->k, (long long)rerun->n, rerun->lo, rerun->hi);
    fprintf(out, "%-14s %-34s %-34s\n", "top-1", a, b);
    snprintf(a, sizeof a, "%s", c->codebase);
    if (rerun->engine[0]) snprintf(b, sizeof b, "%s %s (engine %s)", c->codebase, rerun->commit, rerun->engine);
    else snprintf(b, sizeof b, "vtlab %s", vt_build_commit());
    fprintf(out, "%-14s %-34.34s %-34.34s\n", "code", a, b);
    snprintf(a, sizeof a, "through %s", d->id);
    snprintf(b, sizeof b, "run %lld (ref run %lld)", (long long)rerun->run, (long long)m->ref);
    fprintf(out, "%-14s %-34.34s %-34.34s\n", "measured", a, b);
    if (m->replay.run) fprintf(out, "\nreplay (run %lld): %s\n", (long long)m->replay.run, m->explanation);
    else fprintf(out, "\nno replay: %s\n", m->explanation);
    fprintf(out, "written: %s (new), %s (superseded_by set)\n", file, old_file);
    if (git_tracks(old_file))
        fprintf(out, "the ledger is in git: commit the reopened claim with the new one:\n  git add %s %s && git commit "
                     "-m \"reopen %s: %s\"\n", file, old_file, c->id, id);
    else fprintf(out, "(git does not track %s: a ledger copy, nothing to commit)\n", old_file);
}

int lab_reopen(const lab_reopen_opts *o, FILE *out, char new_claim[128], char *err, size_t errlen) {
    int rc = lab_reopen_recover(o->specs_dir, err, errlen);
    if (rc) return rc;
    lab_ledger l;
    if ((rc = lab_ledger_load(o->specs_dir, &l, err, errlen))) return rc;
    lab_store *st = NULL;
    lab_experiment *dx = NULL;
    lab_claim *c = (lab_claim *)lab_ledger_claim(&l, o->claim_id);
    if (!c) { rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: no claim \"%s\" in %s/claims", o->claim_id, o->specs_dir); goto done; }
    if (c->superseded_by) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s is already superseded by %s; reopen that one",
                      c->id, c->superseded_by);
        goto done;
    }
    const lab_defect *d = pick_defect(&l, c, o->defect_id, err, errlen);
    if (!d) { rc = LAB_EINPUT; goto done; }
    char path[4200], replay_arm[256];
    if ((rc = write_derived(c, d, o->work_dir, path, sizeof path, replay_arm, sizeof replay_arm, err, errlen))) goto done;
    if ((rc = lab_experiment_load(&dx, path, err, errlen))) goto done;
    if (out && d->replay_fault)
        fprintf(out, "reopening claim %s (%s %lld/%lld) through defect %s: replay (%s=%s) and rerun, experiment %s\n",
                c->id, c->verdict, (long long)c->k, (long long)c->n, d->id, d->replay_knob, d->replay_fault, path);
    else if (out)
        fprintf(out, "reopening claim %s (%s %lld/%lld) through defect %s: no replay (the defect records no replay_fault), "
                "rerun only, experiment %s\n", c->id, c->verdict, (long long)c->k, (long long)c->n, d->id, path);
    lab_run_opts ro = {o->db_path, NULL, 0, 0, 0, 0};
    lab_run_summary sum = {0};
    if ((rc = lab_run_experiment(path, &ro, &sum, err, errlen))) goto done;
    if (sum.runs_failed || sum.check_failures || sum.runs_busy) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "reopen: claim %s: %lld run(s) failed, %lld arm(s) with unexpected "
                      "assertion outcomes (a replay whose fault did not show), %lld held by another process; nothing "
                      "recorded", c->id, (long long)sum.runs_failed, (long long)sum.check_failures,
                      (long long)sum.runs_busy);
        goto done;
    }
    if ((rc = lab_store_open(&st, o->db_path, err, errlen))) goto done;
    reopen_measure m;
    if ((rc = measure(st, dx, c, d, replay_arm, &m, err, errlen))) goto done;

    /* (c) the new claim, and the old one's superseded_by, in one commit */
    char id[128], file[4300], old_file[4300];
    reopen_record record = {d->id, &m.rerun, m.ref, m.explanation};
    if ((rc = commit_claims(o->specs_dir, c->id, &record, id, file, sizeof file, old_file, sizeof old_file, err, errlen)))
        goto done;
    snprintf(new_claim, 128, "%s", id);
    char now[32];
    lab_now_iso(now);
    lab_reopen_row row = {c->id, d->id, m.replay.run, m.rerun.run, m.explained, m.explanation, id, m.rerun.verdict, now};
    if ((rc = lab_reopen_put(st, &row, err, errlen))) {
        lab_err_prefix(err, errlen, rc, "reopen");
        goto done;
    }
    if (out) print_result(out, c, d, &m, id, file, old_file);
done:
    lab_experiment_free(dx);
    lab_store_close(st);
    lab_ledger_free(&l);
    return rc;
}
