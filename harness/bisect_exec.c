/*
 * bisect_exec.c — git, builds and candidate runs for `vtlab bisect` (see
 * bisect_exec.h).
 */
#include "bisect_exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "interrupt.h"   /* lab_interrupted */
#include "store.h"    /* lab_pid_start, lab_pid_alive */

static void write_pgid(const char *file, pid_t pid) {
    if (!file) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%lld %lld\n", (long long)pid, (long long)lab_pid_start(pid));
    if (fclose(f) == 0) rename(tmp, file);
    else unlink(tmp);
}

void lab_bx_reap_orphans(const char *file) {
    FILE *f = fopen(file, "r");
    if (!f) return;
    long long pid = 0, start = 0;
    int got = fscanf(f, "%lld %lld", &pid, &start);
    fclose(f);
    if (got == 2 && pid > 1 && kill(-(pid_t)pid, 0) == 0) {
        /* The group exists. Its id is its leader's pid, which the kernel does
         * not hand out again while the group lives; a live process with that
         * pid and another start time means the group died and the pid was
         * reused: not ours. */
        int64_t now = lab_pid_start((int64_t)pid);
        if (now == 0 || now == start) {
            kill(-(pid_t)pid, SIGKILL);
            for (int i = 0; i < 100 && kill(-(pid_t)pid, 0) == 0; i++) usleep(50000);
        }
    }
    unlink(file);
}

int lab_bx_run(const char *const *argv, const char *cwd, lab_buf *out, const char *log_path, const char *pgid_file,
               int *status, char *err, size_t errlen) {
    *status = -1;
    int pfd[2] = {-1, -1};
    if (out && pipe2(pfd, O_CLOEXEC)) return lab_errf(err, errlen, LAB_EIO, "pipe: %s", strerror(errno));
    int logfd = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) {
        if (out) { close(pfd[0]); close(pfd[1]); }
        return lab_errf(err, errlen, LAB_EIO, "%s: %s", log_path, strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(logfd);
        if (out) { close(pfd[0]); close(pfd[1]); }
        return lab_errf(err, errlen, LAB_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(127);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(out ? pfd[1] : logfd, 1);
        dup2(logfd, 2);
        if (cwd && chdir(cwd)) {
            dprintf(2, "vtlab bisect: cd %s: %s\n", cwd, strerror(errno));
            _exit(127);
        }
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "vtlab bisect: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(logfd);
    write_pgid(pgid_file, pid);
    if (out) {
        close(pfd[1]);
        char buf[4096];
        for (;;) {
            ssize_t r = read(pfd[0], buf, sizeof buf);
            if (r > 0) { lab_buf_append(out, buf, (size_t)r); continue; }
            if (r < 0 && errno == EINTR) {
                if (lab_interrupted) kill(-pid, SIGTERM);
                continue;
            }
            break;
        }
        close(pfd[0]);
    }
    int ws = 0, passed = 0;
    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) { ws = 0; break; }
        if (lab_interrupted && !passed) {
            kill(-pid, SIGTERM);
            passed = 1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (passed) kill(-pid, SIGKILL);   /* whatever of the group is left */
    if (pgid_file) unlink(pgid_file);
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 255;
    return LAB_OK;
}

/* git -C repo ARGS..., stdout into out (trailing newlines cut). */
static int git_out(const char *repo, const char *const *args, lab_buf *out, int *status, char *err, size_t errlen) {
    const char *argv[16] = {"git", "-C", repo};
    int n = 3;
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    int rc = lab_bx_run(argv, NULL, out, NULL, NULL, status, err, errlen);
    if (rc) return rc;
    while (out->len && (out->data[out->len - 1] == '\n' || out->data[out->len - 1] == '\r')) out->data[--out->len] = 0;
    if (out->oom) return lab_oom(err, errlen);
    return LAB_OK;
}

int lab_bx_git_repo(const char *repo, char *top, size_t toplen, int *dirty, char *err, size_t errlen) {
    struct stat sb;
    if (stat(repo, &sb) || !S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: no such directory (--repo names the git repository to bisect)",
                        repo);
    lab_buf b = {0};
    int status = 0;
    const char *a1[] = {"rev-parse", "--show-toplevel", NULL};
    int rc = git_out(repo, a1, &b, &status, err, errlen);
    if (!rc && (status || !b.len))
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: not a git repository (git rev-parse failed)", repo);
    if (!rc) snprintf(top, toplen, "%s", b.data);
    lab_buf_free(&b);
    if (rc) return rc;
    lab_buf s = {0};
    const char *a2[] = {"status", "--porcelain", "--untracked-files=normal", NULL};
    rc = git_out(repo, a2, &s, &status, err, errlen);
    if (!rc && status) rc = lab_errf(err, errlen, LAB_EINPUT, "%s: git status failed", repo);
    if (!rc) *dirty = s.len > 0;
    lab_buf_free(&s);
    return rc;
}

int lab_bx_git_commit(const char *repo, const char *rev, char out[41], char *err, size_t errlen) {
    out[0] = 0;
    if (!rev[0] || rev[0] == '-')
        return lab_errf(err, errlen, LAB_EINPUT, "\"%s\" is not a revision", rev);
    char spec[300];
    snprintf(spec, sizeof spec, "%s^{commit}", rev);
    lab_buf b = {0};
    int status = 0;
    const char *a[] = {"rev-parse", "--verify", "--quiet", spec, NULL};
    int rc = git_out(repo, a, &b, &status, err, errlen);
    if (!rc && (status || b.len != 40))
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: unknown revision \"%s\" (not a commit of this repository)", repo,
                      rev);
    if (!rc) memcpy(out, b.data, 41);
    lab_buf_free(&b);
    return rc;
}

int lab_bx_git_short(const char *repo, const char *sha, char *out, size_t outlen, char *err, size_t errlen) {
    lab_buf b = {0};
    int status = 0;
    const char *a[] = {"rev-parse", "--short=12", sha, NULL};
    int rc = git_out(repo, a, &b, &status, err, errlen);
    if (!rc && (status || b.len < 7)) rc = lab_errf(err, errlen, LAB_EIO, "%s: git rev-parse --short %s failed", repo, sha);
    if (!rc) snprintf(out, outlen, "%s", b.data);
    lab_buf_free(&b);
    return rc;
}

int lab_bx_git_range(const char *repo, const char *good, const char *bad, char (**shas)[41], char ***subjects,
                     int64_t *n, char *err, size_t errlen) {
    *shas = NULL;
    *subjects = NULL;
    *n = 0;
    if (!strcmp(good, bad))
        return lab_errf(err, errlen, LAB_EINPUT, "--good and --bad are the same commit %.12s: nothing to bisect", good);
    char range[100];
    snprintf(range, sizeof range, "%s..%s", good, bad);
    lab_buf b = {0};
    int status = 0;
    const char *a[] = {"log", "--first-parent", "--reverse", "--format=%H%x09%s", range, NULL};
    int rc = git_out(repo, a, &b, &status, err, errlen);
    if (!rc && status) rc = lab_errf(err, errlen, LAB_EINPUT, "%s: git log %s failed", repo, range);
    int64_t lines = 0;
    for (size_t i = 0; !rc && i < b.len; i++) lines += b.data[i] == '\n';
    lines += b.len > 0;
    char(*v)[41] = NULL;
    char **subj = NULL;
    if (!rc && (!(v = calloc((size_t)lines + 1, sizeof *v)) || !(subj = calloc((size_t)lines + 1, sizeof *subj))))
        rc = lab_oom(err, errlen);
    int64_t k = 0;
    if (!rc) {
        memcpy(v[0], good, 41);
        subj[0] = NULL;
        k = 1;
        for (char *line = b.len ? b.data : NULL, *nl; line && *line; line = nl ? nl + 1 : NULL) {
            nl = strchr(line, '\n');
            if (nl) *nl = 0;
            char *tab = strchr(line, '\t');
            if (!tab || tab - line != 40) continue;
            memcpy(v[k], line, 40);
            v[k][40] = 0;
            subj[k] = lab_strdup(tab + 1);
            k++;
        }
        /* good must be on bad's first-parent path: the first listed commit's
         * first parent is good. */
        int on_path = 0;
        if (k > 1) {
            char spec[64];
            snprintf(spec, sizeof spec, "%s^1", v[1]);
            char parent[41];
            char perr[256];
            on_path = !lab_bx_git_commit(repo, spec, parent, perr, sizeof perr) && !strcmp(parent, good);
        }
        if (!on_path || strcmp(v[k - 1], bad))
            rc = lab_errf(err, errlen, LAB_EINPUT,
                          "%s: --good %.12s is not an ancestor of --bad %.12s on its first-parent path", repo, good,
                          bad);
    }
    lab_buf_free(&b);
    if (rc) {
        for (int64_t i = 0; subj && i < k; i++) free(subj[i]);
        free(subj);
        free(v);
        return rc;
    }
    subj[0] = NULL;
    *shas = v;
    *subjects = subj;
    *n = k - 1;
    return LAB_OK;
}

/* ---------------------------------------------------------- the worktree */

static int git_logged(const char *dir, const char *const *args, const char *log_path, const char *pgid_file, char *err,
                      size_t errlen, const char *what) {
    const char *argv[16] = {"git", "-C", dir};
    int n = 3;
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    int status = 0;
    int rc = lab_bx_run(argv, NULL, NULL, log_path, pgid_file, &status, err, errlen);
    if (!rc && status) {
        char tail[300];
        lab_bx_log_tail(log_path, tail, sizeof tail);
        rc = lab_errf(err, errlen, LAB_EIO, "%s: %s failed (exit %d): %s", dir, what, status, tail);
    }
    return rc;
}

/* Same content? (both regular files, same bytes) */
static int same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    char e[64];
    int same = !lab_read_file(a, &x, &nx, e, sizeof e) && !lab_read_file(b, &y, &ny, e, sizeof e) && nx == ny &&
               !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

/* The repository's own build objects as a start for the candidate's build:
 * build/{model,harness,gen} copied (times kept), and every tracked file of
 * the worktree whose content equals the repository's file given that file's
 * modification time. make then rebuilds exactly what differs (a file of the
 * candidate that the repository's build did not compile has the checkout's
 * time, newer than any copied object). */
static void seed_build(const char *repo, const char *wt, const char *log_path) {
    char src[4200], dst[4200];
    snprintf(dst, sizeof dst, "%s/build", wt);
    mkdir(dst, 0755);
    static const char *const dirs[] = {"model", "harness", "gen", NULL};
    for (int i = 0; dirs[i]; i++) {
        snprintf(src, sizeof src, "%s/build/%s", repo, dirs[i]);
        struct stat sb;
        if (stat(src, &sb) || !S_ISDIR(sb.st_mode)) continue;
        const char *argv[] = {"cp", "-a", src, dst, NULL};
        int status = 0;
        char e[256];
        lab_bx_run(argv, NULL, NULL, log_path, NULL, &status, e, sizeof e);
    }
    lab_buf files = {0};
    int status = 0;
    char e[256];
    const char *argv[] = {"git", "-C", wt, "ls-files", "-z", NULL};
    if (lab_bx_run(argv, NULL, &files, NULL, NULL, &status, e, sizeof e) || status || files.oom) {
        lab_buf_free(&files);
        return;
    }
    for (size_t off = 0; off < files.len;) {
        const char *f = files.data + off;
        size_t l = strlen(f);
        off += l + 1;
        snprintf(src, sizeof src, "%s/%s", repo, f);
        snprintf(dst, sizeof dst, "%s/%s", wt, f);
        struct stat sb;
        if (lstat(src, &sb) || !S_ISREG(sb.st_mode) || !same_file(src, dst)) continue;
        struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
        utimensat(AT_FDCWD, dst, ts, 0);
    }
    lab_buf_free(&files);
}

int lab_bx_worktree(const char *repo, const char *wt, const char *sha, int seed, const char *log_path,
                    const char *pgid_file, char *err, size_t errlen) {
    char gitfile[4200];
    snprintf(gitfile, sizeof gitfile, "%s/.git", wt);
    if (!lab_path_exists(gitfile)) {
        const char *prune[] = {"worktree", "prune", NULL};
        int rc = git_logged(repo, prune, log_path, pgid_file, err, errlen, "git worktree prune");
        const char *add[] = {"worktree", "add", "--detach", "-f", wt, sha, NULL};
        if (!rc) rc = git_logged(repo, add, log_path, pgid_file, err, errlen, "git worktree add");
        if (!rc && seed) seed_build(repo, wt, log_path);
        return rc;
    }
    /* A git killed with its bisection (kill -9) leaves its locks: this
     * worktree is the bisection's own, and the caller holds its lock and has
     * ended what the dead one left running, so they are stale. */
    char *gf = NULL;
    size_t gl = 0;
    char e[64];
    if (!lab_read_file(gitfile, &gf, &gl, e, sizeof e) && !strncmp(gf, "gitdir: ", 8)) {
        gf[strcspn(gf, "\r\n")] = 0;
        char lock[4300];
        snprintf(lock, sizeof lock, "%.4000s/index.lock", gf + 8);
        unlink(lock);
        snprintf(lock, sizeof lock, "%.4000s/HEAD.lock", gf + 8);
        unlink(lock);
    }
    free(gf);
    const char *co[] = {"checkout", "--detach", "--force", "-q", sha, NULL};
    int rc = git_logged(wt, co, log_path, pgid_file, err, errlen, "git checkout");
    const char *clean[] = {"clean", "-fdq", NULL};
    if (!rc) rc = git_logged(wt, clean, log_path, pgid_file, err, errlen, "git clean");
    return rc;
}

void lab_bx_worktree_remove(const char *repo, const char *wt, const char *log_path) {
    const char *argv[] = {"git", "-C", repo, "worktree", "remove", "--force", wt, NULL};
    int status = 0;
    char e[256];
    lab_bx_run(argv, NULL, NULL, log_path, NULL, &status, e, sizeof e);
}

void lab_bx_log_tail(const char *path, char *out, size_t len) {
    out[0] = 0;
    char *text = NULL;
    size_t n = 0;
    char e[64];
    if (!path || lab_read_file(path, &text, &n, e, sizeof e)) return;
    /* a compiler's or make's error line when there is one, else the last line */
    size_t end = n;
    const char *e1 = strstr(text, "error:");
    if (!e1) e1 = strstr(text, "Error ");
    if (e1) {
        const char *nl = strchr(e1, '\n');
        end = nl ? (size_t)(nl - text) : n;
    }
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) end--;
    size_t start = end;
    while (start > 0 && text[start - 1] != '\n') start--;
    size_t l = end - start < len - 1 ? end - start : len - 1;
    memcpy(out, text + start, l);
    out[l] = 0;
    for (size_t i = 0; i < l; i++)
        if ((unsigned char)out[i] < 0x20) out[i] = ' ';
    free(text);
}

int lab_bx_copy_exe(const char *src, const char *dst, char *err, size_t errlen) {
    char *data = NULL;
    size_t n = 0;
    int rc = lab_read_file(src, &data, &n, err, errlen);
    if (rc) return rc;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (fd < 0) { free(data); return lab_errf(err, errlen, LAB_EIO, "%s: %s", tmp, strerror(errno)); }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, data + off, n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    free(data);
    if (off != n || fsync(fd) || close(fd)) {
        unlink(tmp);
        return lab_errf(err, errlen, LAB_EIO, "%s: write failed", tmp);
    }
    if (rename(tmp, dst)) { unlink(tmp); return lab_errf(err, errlen, LAB_EIO, "%s: %s", dst, strerror(errno)); }
    return LAB_OK;
}
