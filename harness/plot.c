/*
 * plot.c — gnuplot as a subprocess (see plot.h).
 *
 * Why a subprocess and generated scripts rather than a plotting library: the
 * design fixes gnuplot (a Debian package, no linking), and a script on disk
 * next to its data is something a person can rerun and tweak. The cost is a
 * process per chart (about 50 ms), negligible next to a run.
 *
 * A child must not outlive vtlab: a killed `vtlab report` used to leave
 * gnuplot drawing into the output folder. On Linux the child asks for SIGKILL
 * when its parent dies (PR_SET_PDEATHSIG) before it execs gnuplot, and exits
 * at once if the parent already died in between; that covers every way vtlab
 * can end (SIGKILL included), which no signal handler could. Elsewhere a
 * killed vtlab can still leave a gnuplot finishing its chart.
 *
 * Temporary files carry the writer's pid (NAME.png.PID.tmp, and the atomic
 * writes' NAME.gp.PID.tmp): the first chart drawn into a folder removes the
 * temporary files whose process is gone, so a killed report leaves nothing
 * behind after the next one, and a report running concurrently keeps its own.
 */
#include "plot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli.h"

static int  g_checked = 0, g_ok = 0;
static char g_png_term[16] = "pngcairo";
static char g_why[256] = "";

/* Runs `gnuplot` with the script file in cwd dir (NULL: unchanged), its
 * stdout and stderr into log (NULL: /dev/null). Returns the exit status, or
 * -1 when it could not be started or died by a signal. */
static int run_gnuplot(const char *dir, const char *script, const char *log) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
#ifdef __linux__
        /* Dies with the thread that forked it (the caller, which waits for
         * it); the getppid check closes the window before the prctl. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
#else
        (void)parent;
#endif
        if (dir && chdir(dir) != 0) _exit(126);
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0) { dup2(in, 0); close(in); }
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Probes gnuplot once: can it start, and does it have pngcairo (else png)
 * and svg? A tiny script per terminal, run in a temporary directory. */
int lab_plot_available(char *why, size_t whylen) {
    if (!g_checked) {
        g_checked = 1;
        char dir[] = "/tmp/vtlab-gp.XXXXXX";
        if (!mkdtemp(dir)) {
            snprintf(g_why, sizeof g_why, "cannot create a temporary directory: %s", strerror(errno));
        } else {
            char path[64];
            snprintf(path, sizeof path, "%s/t.gp", dir);
            static const char *const terms[] = {"pngcairo", "png", "svg"};
            int have[3] = {0, 0, 0};
            for (int i = 0; i < 3; i++) {
                FILE *f = fopen(path, "w");
                if (!f) break;
                fprintf(f, "set terminal %s\nset output '/dev/null'\nplot x\n", terms[i]);
                fclose(f);
                int rc = run_gnuplot(NULL, path, NULL);
                if (rc == 127 || rc == -1) {
                    snprintf(g_why, sizeof g_why, "gnuplot not found on PATH (Debian package gnuplot-nox)");
                    break;
                }
                have[i] = rc == 0;
            }
            remove(path);
            rmdir(dir);
            if (!g_why[0]) {
                if (!have[2]) snprintf(g_why, sizeof g_why, "gnuplot has no svg terminal");
                else if (!have[0] && !have[1]) snprintf(g_why, sizeof g_why, "gnuplot has neither pngcairo nor png");
                else {
                    snprintf(g_png_term, sizeof g_png_term, "%s", have[0] ? "pngcairo" : "png");
                    g_ok = 1;
                }
            }
        }
    }
    if (!g_ok && why) snprintf(why, whylen, "%s", g_why);
    return g_ok;
}

char *lab_gp_label(const char *s, char *out, size_t n) {
    size_t j = 0;
    for (; s && *s && j + 1 < n; s++) {
        unsigned char c = (unsigned char)*s;
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr(" ._:/+#=,()-", c);
        out[j++] = keep && c ? (char)c : '_';
    }
    if (n) out[j] = 0;
    return out;
}

char *lab_file_part(const char *s, char *out, size_t n) {
    size_t j = 0, lim = n ? n - 1 : 0;
    if (lim > 40) lim = 40;
    for (; s && *s && j < lim; s++) {
        unsigned char c = (unsigned char)*s;
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                   c == '-';
        out[j++] = keep ? (char)c : '_';
    }
    if (j == 0 && lim) out[j++] = '_';
    if (n) out[j] = 0;
    return out;
}

/* 1 when name is "*.PID.tmp" with PID a process that no longer exists. */
static int stale_tmp(const char *name) {
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 4, ".tmp")) return 0;
    size_t end = n - 4, i = end;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') i--;
    if (i == end || i == 0 || name[i - 1] != '.' || end - i > 9) return 0;
    long pid = strtol(name + i, NULL, 10);
    if (pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int64_t lab_sweep_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t removed = 0;
    struct dirent *de;
    char path[4400];
    while ((de = readdir(d))) {
        if (!stale_tmp(de->d_name)) continue;
        int len = snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (len > 0 && (size_t)len < sizeof path && unlink(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int lab_plot_render(const char *dir, const char *name, const char *data, const char *body, int width, int height,
                    char *err, size_t errlen) {
    char why[256];
    if (!lab_plot_available(why, sizeof why)) return lab_errf(err, errlen, LAB_EIO, "plot %s: %s", name, why);
    char src[4096], path[4300], log[4300];
    snprintf(src, sizeof src, "%s/src", dir);
    int rc = lab_mkdirs(src, err, errlen);
    if (rc) return rc;
    static char swept[4096] = "";   /* once per folder per process: the first chart drawn there */
    if (strcmp(swept, dir)) {
        lab_sweep_stale_tmp(dir);
        lab_sweep_stale_tmp(src);
        snprintf(swept, sizeof swept, "%s", dir);
    }
    long me = (long)getpid();
    if (data) {
        snprintf(path, sizeof path, "%s/%s.dat", src, name);
        if ((rc = lab_cli_write_file_atomic(path, data, strlen(data), err, errlen))) return rc;
    }
    lab_buf s = {0};
    static const char *const ext[2] = {"png", "svg"};
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            lab_buf_printf(&s, "set terminal %s size %d,%d noenhanced font 'Sans,10'\n", g_png_term, width, height);
        else
            lab_buf_printf(&s, "reset\nset terminal svg size %d,%d noenhanced font 'Sans,11' background rgb 'white'\n",
                           width, height);
        lab_buf_printf(&s, "set output '%s.%s.%ld.tmp'\n%s\nunset output\n", name, ext[i], me, body);
    }
    if (s.oom) { lab_buf_free(&s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    snprintf(path, sizeof path, "%s/%s.gp", src, name);
    rc = lab_cli_write_file_atomic(path, s.data, s.len, err, errlen);
    lab_buf_free(&s);
    if (rc) return rc;
    snprintf(log, sizeof log, "%s/%s.log", src, name);
    char script[300];
    snprintf(script, sizeof script, "src/%s.gp", name);
    int st = run_gnuplot(dir, script, log);
    char out[4300], tmp[4400];
    int bad = st != 0;
    for (int i = 0; i < 2 && !bad; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.%s.%ld.tmp", dir, name, ext[i], me);
        if (file_size(tmp) <= 0) bad = 1;
    }
    if (bad) {
        char first[200] = "";
        FILE *f = fopen(log, "r");
        if (f) {
            char line[200];
            while (fgets(line, sizeof line, f))
                if (strstr(line, "rror") || strstr(line, "arning")) { snprintf(first, sizeof first, "%s", line); break; }
            fclose(f);
        }
        first[strcspn(first, "\n")] = 0;
        for (int i = 0; i < 2; i++) {
            snprintf(tmp, sizeof tmp, "%s/%s.%s.%ld.tmp", dir, name, ext[i], me);
            remove(tmp);
        }
        return lab_errf(err, errlen, LAB_EIO, "%s/%s.gp: gnuplot exited %d%s%s (log: %s)", src, name, st,
                        first[0] ? ": " : "", first, log);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.%s.%ld.tmp", dir, name, ext[i], me);
        snprintf(out, sizeof out, "%s/%s.%s", dir, name, ext[i]);
        if (rename(tmp, out) != 0) return lab_errf(err, errlen, LAB_EIO, "%s: rename: %s", out, strerror(errno));
    }
    return LAB_OK;
}
