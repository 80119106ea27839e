/*
 * plot.c — gnuplot as a subprocess (see plot.h).
 *
 * Why a subprocess and generated scripts rather than a plotting library: the
 * design fixes gnuplot (a Debian package, no linking), and a script on disk
 * next to its data is something a person can rerun and tweak. The cost is a
 * process per chart (about 50 ms), negligible next to a run.
 *
 * A child must not outlive vtlab: a killed `vtlab report` used to leave
 * gnuplot drawing into the output folder. Two mechanisms, for the two ways
 * vtlab can be stopped:
 *   - interrupted (SIGINT, SIGTERM, SIGHUP) while gnuplot draws: the signal
 *     is caught for the length of the chart (guard_on/guard_off below), the
 *     child's process group (its own: setpgid) is sent SIGTERM, then SIGKILL,
 *     and reaped, the chart's temporary images are removed, and only then
 *     does vtlab die of the signal (or return "interrupted" where the command
 *     handles the signal itself). No child and no temporary file is left,
 *     and no further chart starts;
 *   - killed (SIGKILL, which no handler sees): on Linux the child asked for
 *     SIGKILL when its parent dies (PR_SET_PDEATHSIG) before it exec'd
 *     gnuplot, and exits at once if the parent already died in between.
 *     Elsewhere a SIGKILLed vtlab can still leave a gnuplot finishing its
 *     chart.
 *
 * Temporary files carry the writer's pid (NAME.png.PID.tmp, and the atomic
 * writes' NAME.gp.PID.tmp): the first chart drawn into a folder removes the
 * temporary files whose process is gone from it and its src/, so a SIGKILLed
 * report leaves nothing behind after the next one, and a report running
 * concurrently keeps its own.
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
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli.h"
#include "interrupt.h"   /* lab_interrupted */

static int  g_checked = 0, g_ok = 0;
static char g_png_term[16] = "pngcairo";
static char g_why[256] = "";

/* ------------------------------------------------------------ interruption
 *
 * While gnuplot draws, SIGINT, SIGTERM and SIGHUP are caught here (unless the
 * process ignores them), so that vtlab, not the signal's default action,
 * decides what happens to the child: its process group is sent SIGTERM (then
 * SIGKILL), it is reaped, and the chart's temporary files are removed. A
 * handler the command installed itself (nightly's, which sets
 * lab_interrupted) is called too; where the disposition was the default
 * (report), the signal is raised again once everything is cleaned, so the
 * command still dies of it, exit status included. */

static const int g_sigs[3] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction g_old[3];
static volatile sig_atomic_t g_caught = 0;

static void on_interrupt(int sig, siginfo_t *si, void *uc) {
    g_caught = sig;
    for (int i = 0; i < 3; i++) {
        if (g_sigs[i] != sig) continue;
        if (g_old[i].sa_flags & SA_SIGINFO) g_old[i].sa_sigaction(sig, si, uc);
        else if (g_old[i].sa_handler != SIG_DFL && g_old[i].sa_handler != SIG_IGN) g_old[i].sa_handler(sig);
    }
}

static void guard_on(void) {
    g_caught = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_interrupt;
    sa.sa_flags = SA_SIGINFO;   /* no SA_RESTART: a signal cuts the wait's sleep short */
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaddset(&sa.sa_mask, g_sigs[i]);
    for (int i = 0; i < 3; i++) {
        sigaction(g_sigs[i], NULL, &g_old[i]);
        if (!(g_old[i].sa_flags & SA_SIGINFO) && g_old[i].sa_handler == SIG_IGN) continue;
        sigaction(g_sigs[i], &sa, NULL);
    }
}

/* Restores the dispositions; returns the signal caught whose disposition was
 * the default (to be raised again by the caller, after its cleanup), or 0. */
static int guard_off(void) {
    int reraise = 0;
    for (int i = 0; i < 3; i++) {
        sigaction(g_sigs[i], &g_old[i], NULL);
        if (g_caught == g_sigs[i] && !(g_old[i].sa_flags & SA_SIGINFO) && g_old[i].sa_handler == SIG_DFL)
            reraise = g_sigs[i];
    }
    return reraise;
}

/* 1 when this command was told to stop (by a signal caught here, or by the
 * command's own handler: lab_interrupted). */
static int interrupted(void) { return g_caught || lab_interrupted; }

/* Waits until pid has exited without reaping it (so that its pid, the
 * group's id, cannot be reused meanwhile). Once the command is interrupted:
 * SIGTERM to the group, SIGKILL from 1 s on. It polls (every 2 ms, a chart
 * takes tens) rather than blocking in waitid: a signal that lands between a
 * check and a blocking wait would not interrupt the wait, and vtlab would sit
 * out the whole chart. 0, or -1 on a wait error. */
static int wait_exit(pid_t pid) {
    double term_at = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG) == 0) {
            if (si.si_pid == pid) return 0;
        } else if (errno != EINTR) {
            return -1;
        }
        if (interrupted() && term_at == 0) {
            kill(-pid, SIGTERM);
            term_at = lab_mono();
        } else if (term_at > 0 && lab_mono() - term_at > 1.0) {
            kill(-pid, SIGKILL);
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);   /* a signal cuts it short */
    }
}

/* Runs `gnuplot` with the script file in cwd dir (NULL: unchanged), its
 * stdout and stderr into log (NULL: /dev/null), in a process group of its
 * own that is signalled when the command is interrupted. Returns the exit
 * status, or -1 when it could not be started, died by a signal or was
 * stopped; *reraise as guard_off. */
static int run_gnuplot(const char *dir, const char *script, const char *log, int *reraise) {
    pid_t parent = getpid();
    guard_on();
    pid_t pid = fork();
    if (pid < 0) { *reraise = guard_off(); return -1; }
    if (pid == 0) {
        for (int i = 0; i < 3; i++) sigaction(g_sigs[i], &g_old[i], NULL);
        /* its own group: vtlab signals the group, never its own */
        setpgid(0, 0);
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
    setpgid(pid, pid);   /* also here: no signal to the group can come before it exists */
    int bad = wait_exit(pid);
    kill(-pid, SIGKILL);   /* whatever of its group is left; pid is not reaped yet, so the id is still its */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    int stopped = interrupted();
    *reraise = guard_off();
    if (bad || stopped) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs a tiny script for each terminal in a temporary directory: have[i]
 * says whether terms[i] works; 127 when gnuplot did not start. */
static int probe_terms(const char *dir, const char *const *terms, int *have, int *reraise) {
    char path[64];
    snprintf(path, sizeof path, "%s/t.gp", dir);
    int rc = 0;
    for (int i = 0; i < 3 && !*reraise; i++) {
        FILE *f = fopen(path, "w");
        if (!f) break;
        fprintf(f, "set terminal %s\nset output '/dev/null'\nplot x\n", terms[i]);
        fclose(f);
        rc = run_gnuplot(NULL, path, NULL, reraise);
        if (rc == 127 || rc == -1) break;
        have[i] = rc == 0;
    }
    remove(path);
    return rc == -1 ? 127 : rc;
}

/* Probes gnuplot once: can it start, and does it have pngcairo (else png)
 * and svg? */
int lab_plot_available(char *why, size_t whylen) {
    if (!g_checked) {
        g_checked = 1;
        char dir[] = "/tmp/vtlab-gp.XXXXXX";
        static const char *const terms[] = {"pngcairo", "png", "svg"};
        int have[3] = {0, 0, 0}, reraise = 0;
        if (!mkdtemp(dir)) {
            snprintf(g_why, sizeof g_why, "cannot create a temporary directory: %s", strerror(errno));
        } else {
            int rc = probe_terms(dir, terms, have, &reraise);
            rmdir(dir);
            if (reraise) raise(reraise);   /* interrupted: die of it now that nothing is left behind */
            if (interrupted()) snprintf(g_why, sizeof g_why, "interrupted by a signal");
            else if (rc == 127) snprintf(g_why, sizeof g_why, "gnuplot not found on PATH (Debian package gnuplot-nox)");
            else if (!have[2]) snprintf(g_why, sizeof g_why, "gnuplot has no svg terminal");
            else if (!have[0] && !have[1]) snprintf(g_why, sizeof g_why, "gnuplot has neither pngcairo nor png");
            else {
                snprintf(g_png_term, sizeof g_png_term, "%s", have[0] ? "pngcairo" : "png");
                g_ok = 1;
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

int64_t lab_sweep_stale_tmp_tree(const char *dir, int depth) {
    int64_t removed = lab_sweep_stale_tmp(dir);
    DIR *d = depth > 0 ? opendir(dir) : NULL;
    if (!d) return removed;
    struct dirent *de;
    char path[4400];
    while ((de = readdir(d))) {
        struct stat st;
        int len = snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (de->d_name[0] == '.' || len <= 0 || (size_t)len >= sizeof path) continue;
        /* lstat: a link to a folder elsewhere is not this command's to clean */
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) removed += lab_sweep_stale_tmp_tree(path, depth - 1);
    }
    closedir(d);
    return removed;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static const char *const g_ext[2] = {"png", "svg"};

/* DIR/src/NAME.dat and DIR/src/NAME.gp, the script drawing into
 * NAME.EXT.PID.tmp. */
static int write_script(const char *src, const char *name, const char *data, const char *body, int width, int height,
                        char *err, size_t errlen) {
    char path[4300];
    int rc;
    if (data) {
        snprintf(path, sizeof path, "%s/%s.dat", src, name);
        if ((rc = lab_cli_write_file_atomic(path, data, strlen(data), err, errlen))) return rc;
    }
    lab_buf s = {0};
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            lab_buf_printf(&s, "set terminal %s size %d,%d noenhanced font 'Sans,10'\n", g_png_term, width, height);
        else
            lab_buf_printf(&s, "reset\nset terminal svg size %d,%d noenhanced font 'Sans,11' background rgb 'white'\n",
                           width, height);
        lab_buf_printf(&s, "set output '%s.%s.%ld.tmp'\n%s\nunset output\n", name, g_ext[i], (long)getpid(), body);
    }
    if (s.oom) { lab_buf_free(&s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    snprintf(path, sizeof path, "%s/%s.gp", src, name);
    rc = lab_cli_write_file_atomic(path, s.data, s.len, err, errlen);
    lab_buf_free(&s);
    return rc;
}

/* The chart's temporary images: removed (keep 0), or renamed into place. */
static int settle_images(const char *dir, const char *name, int keep, char *err, size_t errlen) {
    char tmp[4400], out[4300];
    for (int i = 0; i < 2; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.%s.%ld.tmp", dir, name, g_ext[i], (long)getpid());
        snprintf(out, sizeof out, "%s/%s.%s", dir, name, g_ext[i]);
        if (!keep) remove(tmp);
        else if (rename(tmp, out) != 0) return lab_errf(err, errlen, LAB_EIO, "%s: rename: %s", out, strerror(errno));
    }
    return LAB_OK;
}

/* LAB_EIO for a chart gnuplot did not draw: its exit status and the first
 * error or warning of its log. */
static int gnuplot_failed(const char *src, const char *name, const char *log, int st, char *err, size_t errlen) {
    char first[200] = "";
    FILE *f = fopen(log, "r");
    if (f) {
        char line[200];
        while (fgets(line, sizeof line, f))
            if (strstr(line, "rror") || strstr(line, "arning")) { snprintf(first, sizeof first, "%s", line); break; }
        fclose(f);
    }
    first[strcspn(first, "\n")] = 0;
    return lab_errf(err, errlen, LAB_EIO, "%s/%s.gp: gnuplot exited %d%s%s (log: %s)", src, name, st,
                    first[0] ? ": " : "", first, log);
}

int lab_plot_render(const char *dir, const char *name, const char *data, const char *body, int width, int height,
                    char *err, size_t errlen) {
    char why[256];
    if (interrupted()) return lab_errf(err, errlen, LAB_EIO, "plot %s: interrupted by a signal; not drawn", name);
    if (!lab_plot_available(why, sizeof why)) return lab_errf(err, errlen, LAB_EIO, "plot %s: %s", name, why);
    char src[4096], log[4300], tmp[4400], script[300];
    snprintf(src, sizeof src, "%s/src", dir);
    int rc = lab_mkdirs(src, err, errlen);
    if (rc) return rc;
    static char swept[4096] = "";   /* once per folder per process: the first chart drawn there */
    if (strcmp(swept, dir)) {
        lab_sweep_stale_tmp_tree(dir, 1);
        snprintf(swept, sizeof swept, "%s", dir);
    }
    if ((rc = write_script(src, name, data, body, width, height, err, errlen))) return rc;
    snprintf(log, sizeof log, "%s/%s.log", src, name);
    snprintf(script, sizeof script, "src/%s.gp", name);
    int reraise = 0, st = run_gnuplot(dir, script, log, &reraise);
    int bad = st != 0;
    for (int i = 0; i < 2 && !bad; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.%s.%ld.tmp", dir, name, g_ext[i], (long)getpid());
        if (file_size(tmp) <= 0) bad = 1;
    }
    if (!bad) return settle_images(dir, name, 1, err, errlen);
    settle_images(dir, name, 0, err, errlen);
    if (reraise) raise(reraise);   /* interrupted: die of it now that nothing is left behind */
    if (interrupted()) return lab_errf(err, errlen, LAB_EIO, "plot %s: interrupted by a signal; not drawn", name);
    return gnuplot_failed(src, name, log, st, err, errlen);
}
