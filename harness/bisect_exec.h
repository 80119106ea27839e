/*
 * bisect_exec.h — what `vtlab bisect` does outside its own process: git
 * (revisions, the commit list, the candidate worktree), the build, and the
 * candidate's `vtlab run`. Every child runs in a process group of its own
 * whose id is written to a file of the bisection's work directory while it
 * runs, so a bisection killed with -9 leaves nothing running behind it that
 * the resumed one does not first end (lab_bx_reap_orphans); each child also
 * gets SIGKILL when its parent dies.
 *
 * Errors are statuses with err filled (LAB_EINPUT for a bad revision or
 * repository, LAB_EIO when a child cannot be started); a child that ran and
 * failed is not an error: its exit status is returned for the caller to judge.
 */
#ifndef LAB_BISECT_EXEC_H
#define LAB_BISECT_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* Runs argv (argv[0] searched in PATH) in cwd (NULL: here). Its stdout is
 * appended to *out when out is not NULL, else written to log_path; its
 * stderr goes to log_path (NULL: discarded). *status: the exit status, or
 * 128 + the signal that ended it. pgid_file (may be NULL): where the child's
 * process group id and start time are kept while it runs. SIGINT/SIGTERM to
 * this process (lab_interrupted) are passed on to the child's group. */
int lab_bx_run(const char *const *argv, const char *cwd, lab_buf *out, const char *log_path, const char *pgid_file,
               int *status, char *err, size_t errlen);

/* Ends the process group recorded in pgid_file by a process that died (a
 * bisection killed with -9): SIGKILL to the group when it is still ours
 * (its leader gone or the same process), then the file is removed. */
void lab_bx_reap_orphans(const char *pgid_file);

/* The git repository at repo: LAB_EINPUT when it is not one. top receives
 * its top-level directory (absolute). *dirty = 1 when it has uncommitted
 * changes to tracked files or untracked files that are not ignored. */
int lab_bx_git_repo(const char *repo, char *top, size_t toplen, int *dirty, char *err, size_t errlen);

/* rev as a full commit id (40 hex), LAB_EINPUT naming rev when unknown. */
int lab_bx_git_commit(const char *repo, const char *rev, char out[41], char *err, size_t errlen);

/* The short id vtlab bakes into a build of commit sha (git rev-parse
 * --short=12), as its code version begins. */
int lab_bx_git_short(const char *repo, const char *sha, char *out, size_t outlen, char *err, size_t errlen);

/* The commits of good..bad along bad's first-parent path, oldest first,
 * with good itself first: shas[0] = good, shas[n] = bad, subjects alike.
 * LAB_EINPUT when good is not an ancestor of bad on that path, or equal. */
int lab_bx_git_range(const char *repo, const char *good, const char *bad, char (**shas)[41], char ***subjects,
                     int64_t *n, char *err, size_t errlen);

/* The candidate worktree wt (absolute path) at commit sha: created with
 * `git worktree add --detach` the first time (and then, when seed_build is
 * set, seeded with the repository's own build objects, see bisect.c), else
 * switched with `git checkout --detach --force` and cleaned of untracked,
 * non-ignored files, so the candidate's build is clean (dirty=0) and
 * incremental. log_path receives git's output. */
int lab_bx_worktree(const char *repo, const char *wt, const char *sha, int seed_build, const char *log_path,
                    const char *pgid_file, char *err, size_t errlen);

/* Removes the worktree wt (git worktree remove --force). */
void lab_bx_worktree_remove(const char *repo, const char *wt, const char *log_path);

/* The last non-empty line of a log file (at most len - 1 bytes), "" when none. */
void lab_bx_log_tail(const char *path, char *out, size_t len);

/* Copies file src to dst (through dst.tmp and a rename), mode 0755. */
int lab_bx_copy_exe(const char *src, const char *dst, char *err, size_t errlen);

#endif
