/*
 * engine_command.c — an engine that is a command: a child process speaking
 * docs/engine-protocol.md over its stdin and stdout (see engine.h).
 *
 * One process per instance (per arm): started by open with the arm's knobs
 * in its environment, its hello read and checked, then one forward request
 * after another. Every read and write waits at most the spec's timeout_s;
 * the child's stderr is drained all along (a chatty engine never blocks on
 * a full pipe) and its last bytes go with every failure. After a failure
 * the instance is dead: the process has been killed and only close remains.
 *
 * The engine leads a process group that vtlab creates for it (setpgid
 * before exec), and vtlab ends that whole group — at a failure, at close,
 * after SIGINT/SIGTERM — so that nothing the engine started outlives vtlab.
 * Should vtlab itself be killed, a warden process (warden.h) ends the group.
 * Its exit is noticed by waitid, not only by the end of its stdout: a
 * process it started may hold that pipe open after the engine is gone.
 */
#include "engine.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "interrupt.h"
#include "paths.h"
#include "util.h"
#include "warden.h"

#define TAIL_BYTES 4096
/* How often a wait on the engine's pipes asks whether the engine has
 * exited (a crash behind a pipe that a grandchild holds open). */
#define EXIT_CHECK_MS 200

typedef struct cmd_model {
    const lab_engine_spec *spec;   /* the experiment's: outlives the model */
    char                  *model_dir;
} cmd_model;

/* A request written and not yet answered: its sequences' offsets (from 0,
 * n + 1 of them: a request of one sequence has off {0, T}). */
typedef struct pending {
    int64_t  id, n;
    int64_t *off;
    int      capture;
} pending;

typedef struct cmd_inst {
    const lab_engine_spec *spec;
    pid_t    pid;
    lab_warden warden;                 /* ends the group should vtlab be killed */
    int      to_fd, from_fd, err_fd;   /* engine stdin, stdout, stderr; -1 closed */
    char     label[160];               /* "engine ARGV0" for messages */
    char     tail[TAIL_BYTES];         /* last bytes of stderr (ring) */
    size_t   tail_len, tail_pos;
    char    *rbuf;                     /* bytes read from stdout, not consumed */
    size_t   rlen, rcap;
    int64_t  vocab, hidden, n_layers, next_id;
    int64_t  max_batch;                /* its hello's (1: none declared) */
    int      capture, dead;
    float   *resid;                    /* per sequence [L][2][T_i][H], one after another, of the last capture */
    int64_t *resid_off;                /* [resid_n + 1] its sequences' token offsets */
    int64_t  resid_n;                  /* 0: nothing captured */
    vtp_probes agg;                    /* since open or the last probes() */
    pending  pend[2];                  /* requests written, not yet answered (a ring) */
    int      pend_head, n_pending;
    double   forward_s;
} cmd_inst;

/* ------------------------------------------------------------ plumbing */

static void tail_add(cmd_inst *c, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        c->tail[c->tail_pos] = p[i];
        c->tail_pos = (c->tail_pos + 1) % TAIL_BYTES;
        if (c->tail_len < TAIL_BYTES) c->tail_len++;
    }
}

/* The last (at most max) bytes of stderr, oldest first, newlines as " | ". */
static void tail_text(const cmd_inst *c, char *out, size_t cap, size_t max) {
    size_t n = c->tail_len < max ? c->tail_len : max, o = 0;
    size_t start = (c->tail_pos + TAIL_BYTES - n) % TAIL_BYTES;
    for (size_t i = 0; i < n && o + 4 < cap; i++) {
        char ch = c->tail[(start + i) % TAIL_BYTES];
        if (ch == '\n') {
            if (i + 1 < n) { memcpy(out + o, " | ", 3); o += 3; }
        } else out[o++] = (ch >= 0 && ch < 0x20) ? ' ' : ch;
    }
    out[o] = 0;
}

static void drain_stderr(cmd_inst *c) {
    char buf[4096];
    for (;;) {
        ssize_t n = read(c->err_fd, buf, sizeof buf);
        if (n > 0) { tail_add(c, buf, (size_t)n); continue; }
        if (n == 0) { close(c->err_fd); c->err_fd = -1; }
        return;   /* EAGAIN: nothing more now */
    }
}

/* Whether the engine has exited, without reaping it: its zombie keeps its
 * pid — the id of its process group — from being reused until kill_child
 * or end_group has signalled the group. */
static int leader_exited(const cmd_inst *c) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return c->pid > 0 && waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == c->pid;
}

/* Ends the engine's whole group at once (SIGKILL: the engine and whatever
 * it started that stayed in its group) and reaps the engine: its exit
 * status in *status (NULL: not wanted). */
static void kill_child(cmd_inst *c, int *status) {
    if (c->pid > 0) {
        kill(-c->pid, SIGKILL);
        kill(c->pid, SIGKILL);   /* should the group not have been made */
        while (waitpid(c->pid, status, 0) < 0 && errno == EINTR) {}
        c->pid = 0;
    }
    lab_warden_release(&c->warden);
    c->dead = 1;
}

/* A failure: kills the engine, reports what happened with its stderr tail. */
static int fail(cmd_inst *c, char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(cmd_inst *c, char *err, size_t errlen, int code, const char *fmt, ...) {
    char msg[512], tail[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err_fd >= 0) drain_stderr(c);
    int status = 0, exited = 0;
    /* An engine that closed its stdout is usually exiting: give it a moment
     * so that its exit status (and last words) can be reported. */
    for (int i = 0; c->pid > 0 && i < 50 && !(exited = leader_exited(c)); i++) {
        if (c->err_fd >= 0) drain_stderr(c);
        usleep(10000);
    }
    kill_child(c, &status);
    if (exited) {
        size_t l = strlen(msg);
        if (WIFEXITED(status)) snprintf(msg + l, sizeof msg - l, " (it exited with status %d)", WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) snprintf(msg + l, sizeof msg - l, " (it was killed by signal %d)", WTERMSIG(status));
    }
    if (c->err_fd >= 0) drain_stderr(c);
    tail_text(c, tail, sizeof tail, 480);
    return lab_errf(err, errlen, code, "%s: %s%s%s", c->label, msg, tail[0] ? "; its stderr ends: " : "", tail);
}

/* Waits until fd is ready for events (POLLIN/POLLOUT), draining stderr.
 * 0 ready; -1 timed out; -2 interrupted by a signal; -3 poll failed; -4 the
 * engine exited while the pipe stays open (a process it started holds it). */
static int wait_fd(cmd_inst *c, int fd, short events, double deadline) {
    for (;;) {
        if (lab_interrupted) return -2;
        double left = deadline - lab_mono();
        if (left <= 0) return -1;
        struct pollfd p[2] = {{fd, events, 0}, {c->err_fd, POLLIN, 0}};
        int ms = left * 1000 > EXIT_CHECK_MS ? EXIT_CHECK_MS : (int)(left * 1000) + 1;
        int n = poll(p, c->err_fd >= 0 ? 2 : 1, ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -3;
        if (c->err_fd >= 0 && p[1].revents) drain_stderr(c);
        if (p[0].revents) return 0;
        /* Asked after the poll and answered by one more look at the pipe, so
         * that what the engine wrote before it exited is still read. */
        if (leader_exited(c)) {
            p[0].revents = 0;
            return poll(p, 1, 0) > 0 && p[0].revents ? 0 : -4;
        }
    }
}

static const char *wait_what(int w) {
    return w == -1   ? "timed out"
           : w == -2 ? "interrupted by a signal"
           : w == -4 ? "the engine process ended while a process it started keeps the pipe open"
                     : "poll failed";
}

static int write_all(cmd_inst *c, const void *p, size_t n, double deadline, char *err, size_t errlen) {
    const char *b = p;
    while (n > 0) {
        int w = wait_fd(c, c->to_fd, POLLOUT, deadline);
        if (w) return fail(c, err, errlen, LAB_EINTERNAL, "writing a request: %s", wait_what(w));
        ssize_t k = write(c->to_fd, b, n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return fail(c, err, errlen, LAB_EINTERNAL, "writing a request: %s (the engine is gone?)",
                                strerror(errno));
        b += k;
        n -= (size_t)k;
    }
    return LAB_OK;
}

/* Reads more bytes from stdout into rbuf (at least one). */
static int fill(cmd_inst *c, double deadline, const char *what, char *err, size_t errlen) {
    if (c->rcap - c->rlen < 65536) {
        size_t nc = c->rcap ? c->rcap * 2 : 1 << 17;
        char *nb = realloc(c->rbuf, nc);
        if (!nb) return fail(c, err, errlen, LAB_ENOMEM, "out of memory");
        c->rbuf = nb;
        c->rcap = nc;
    }
    for (;;) {
        int w = wait_fd(c, c->from_fd, POLLIN, deadline);
        if (w) return fail(c, err, errlen, w == -2 ? LAB_EINTERNAL : LAB_EINTERNAL, "reading %s: %s", what,
                           wait_what(w));
        ssize_t k = read(c->from_fd, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k == 0) return fail(c, err, errlen, LAB_EINTERNAL, "reading %s: the engine closed its stdout", what);
        if (k < 0) return fail(c, err, errlen, LAB_EIO, "reading %s: %s", what, strerror(errno));
        c->rlen += (size_t)k;
        return LAB_OK;
    }
}

static void consume(cmd_inst *c, size_t n) {
    memmove(c->rbuf, c->rbuf + n, c->rlen - n);
    c->rlen -= n;
}

/* One header line (without its newline) into *line (malloc'd). */
static int read_line(cmd_inst *c, char **line, double deadline, const char *what, char *err, size_t errlen) {
    size_t scanned = 0;
    *line = NULL;
    for (;;) {
        char *nl = c->rlen > scanned ? memchr(c->rbuf + scanned, '\n', c->rlen - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - c->rbuf);
            if (n > VTP_MAX_HEADER)
                return fail(c, err, errlen, LAB_EINTERNAL, "%s: header longer than %d bytes", what, VTP_MAX_HEADER);
            if (!(*line = malloc(n + 1))) return fail(c, err, errlen, LAB_ENOMEM, "out of memory");
            memcpy(*line, c->rbuf, n);
            (*line)[n] = 0;
            consume(c, n + 1);
            return LAB_OK;
        }
        scanned = c->rlen;
        if (scanned > VTP_MAX_HEADER)
            return fail(c, err, errlen, LAB_EINTERNAL, "%s: header longer than %d bytes", what, VTP_MAX_HEADER);
        int rc = fill(c, deadline, what, err, errlen);
        if (rc) return rc;
    }
}

/* Exactly n payload bytes into dst (NULL: discard). */
static int read_exact(cmd_inst *c, void *dst, size_t n, double deadline, const char *what, char *err, size_t errlen) {
    char *d = dst;
    while (n > 0) {
        if (c->rlen == 0) {
            int rc = fill(c, deadline, what, err, errlen);
            if (rc) return rc;
        }
        size_t k = c->rlen < n ? c->rlen : n;
        if (d) { memcpy(d, c->rbuf, k); d += k; }
        consume(c, k);
        n -= k;
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ start */

static int set_env(const lab_engine_spec *sp, const lab_engine_req *req) {
    for (int64_t i = 0; i < sp->n_env; i++)
        if (putenv(sp->env[i])) return -1;
    for (int64_t i = 0; i < req->n_knobs; i++)
        if (setenv(req->knob_names[i], req->knob_values[i], 1)) return -1;
    if (setenv("VTP_PROTOCOL", "1", 1) || setenv("VTP_PROBE", req->probe ? req->probe : "on", 1)) return -1;
    if (req->model_dir && setenv("VTP_MODEL", req->model_dir, 1)) return -1;
    return 0;
}

/* Forks and execs the engine; its stdin/stdout/stderr are pipes to c. The
 * program "vtlab" is this vtlab (/proc/self/exe), not one looked up on PATH:
 * an experiment naming `vtlab engine` (vtlab init's example) then runs with
 * whichever vtlab runs it, installed or not. */
static int spawn(cmd_inst *c, const lab_engine_req *req, char *err, size_t errlen) {
    const lab_engine_spec *sp = c->spec;
    int in[2], out[2], er[2], st[2];
    char self[PATH_MAX];
    int is_self = !strcmp(sp->argv[0], "vtlab") && !lab_self_exe(self, sizeof self, NULL, 0);
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) || pipe2(st, O_CLOEXEC))
        return lab_errf(err, errlen, LAB_EIO, "%s: pipe: %s", c->label, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return lab_errf(err, errlen, LAB_EIO, "%s: fork: %s", c->label, strerror(errno));
    if (pid == 0) {
        int e = 0;
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        /* A group of its own, led by the engine: vtlab can end all of it,
         * and a terminal's Ctrl-C reaches vtlab alone, which ends it. */
        if (setpgid(0, 0)) e = errno;
        else if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0) e = errno;
        else if (sp->cwd && chdir(sp->cwd)) e = errno;
        else if (set_env(sp, req)) e = ENOMEM;
        else {
            if (is_self) execv(self, sp->argv);
            else execvp(sp->argv[0], sp->argv);
            e = errno;
        }
        if (write(st[1], &e, sizeof e) < 0) _exit(126);
        _exit(127);
    }
    setpgid(pid, pid);   /* also here, so the group exists whichever runs first; EACCES after exec */
    close(in[0]);
    close(out[1]);
    close(er[1]);
    close(st[1]);
    c->pid = pid;
    c->to_fd = in[1];
    c->from_fd = out[0];
    c->err_fd = er[0];
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->from_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->to_fd, F_SETFL, O_NONBLOCK);
    int e = 0;
    ssize_t k;
    while ((k = read(st[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    close(st[0]);
    if (k == (ssize_t)sizeof e) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        c->pid = 0;
        c->dead = 1;
        /* A relative program path is found from the directory the engine
         * starts in, which is not the experiment file's: say which it was. */
        char here[PATH_MAX], hint[PATH_MAX + 96] = "";
        const char *a0 = sp->argv[0];
        if (e == ENOENT && !sp->cwd && a0[0] != '/' && strchr(a0, '/') && getcwd(here, sizeof here))
            snprintf(hint, sizeof hint, " (looked for from the current directory %s; an engine's argv runs there, or in "
                     "its \"cwd\")", here);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot start it%s%s: %s%s", c->label, sp->cwd ? " in " : "",
                        sp->cwd ? sp->cwd : "", strerror(e), hint);
    }
    if ((e = lab_warden_start(&c->warden, pid)))
        return fail(c, err, errlen, LAB_EIO, "cannot start a warden for its process group: %s", strerror(e));
    return LAB_OK;
}

/* ------------------------------------------------------------ hello */

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* An integer member in lo..hi, or -1 in *ok. */
static int64_t jint(const cJSON *o, const char *k, int64_t lo, int64_t hi, int *ok) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < (double)lo ||
        j->valuedouble > (double)hi) {
        *ok = 0;
        return 0;
    }
    return (int64_t)j->valuedouble;
}

static char *dup_or(const char *s, int *oom) {
    char *d = lab_strdup(s ? s : "");
    if (!d) *oom = 1;
    return d;
}

/* The scope knob NAME_LAYERS of each scoped knob NAME, after the declared
 * ones (docs/engine-protocol.md, "Scoped knobs"): its value the hello's
 * scope_value (canonical), or "all" until cmd_open puts in the value the arm
 * set (an engine that does not report its scope is trusted). A hello that
 * declares NAME_LAYERS itself has that knob taken as the scope. */
static const char *add_scope_knobs(const cJSON *ks, lab_engine_hello *h, char *where, size_t wl, int *oom) {
    const int64_t n = h->n_knobs;
    for (int64_t i = 0; i < n; i++) {
        const lab_engine_knob *p = &h->knobs[i];
        if (!p->scope) continue;
        char name[320], sv[VTP_LAYER_SET_TEXT] = "all", why[400];
        snprintf(name, sizeof name, "%s_LAYERS", p->name);
        snprintf(where, wl, "knobs[%lld]", (long long)i);
        lab_engine_knob *decl = (lab_engine_knob *)lab_engine_hello_knob(h, name);
        if (decl) {   /* an engine that declares its scope knob itself: that knob is the scope */
            decl->scope_of = i;
            decl->reported = decl->read;
            continue;
        }
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ks, (int)i), "scope_value");
        vtp_layer_set set;
        if (val && (!cJSON_IsString(val) ||
                    vtp_layer_set_parse(val->valuestring, (int)h->info.n_layers, p->scope == 2, &set, why, sizeof why) ||
                    vtp_layer_set_format(&set, sv, sizeof sv)))
            return "scope_value: expected the layer set in use, of this model's layers (\"all\" when unscoped)";
        lab_engine_knob *o = &h->knobs[h->n_knobs++];
        o->name = dup_or(name, oom);
        o->type = dup_or("layers", oom);
        o->values = dup_or("", oom);
        o->def = dup_or("all", oom);
        o->value = dup_or(sv, oom);
        o->numeric = p->numeric;
        o->read = o->reported = val != NULL;
        o->scope_of = i;
    }
    return NULL;
}

/* The knob registry of a hello; a message naming the bad member, or NULL. */
static const char *hello_knobs(const cJSON *ks, lab_engine_hello *h, char *where, size_t wl, int *oom) {
    static const char *const types[] = {"bool", "enum", "int", "string", NULL};
    int64_t n = cJSON_GetArraySize(ks);
    /* room for a scope knob per declared knob (add_scope_knobs) */
    if (!(h->knobs = calloc(2 * (size_t)n + 1, sizeof *h->knobs))) { *oom = 1; return "out of memory"; }
    const cJSON *k;
    cJSON_ArrayForEach(k, ks) {
        snprintf(where, wl, "knobs[%lld]", (long long)h->n_knobs);
        lab_engine_knob *o = &h->knobs[h->n_knobs++];
        o->scope_of = -1;
        const char *name = jstr(k, "name"), *type = jstr(k, "type"), *def = jstr(k, "default"), *val = jstr(k, "value");
        const cJSON *vals = cJSON_GetObjectItemCaseSensitive(k, "values");
        const cJSON *num = cJSON_GetObjectItemCaseSensitive(k, "numeric"), *rd = cJSON_GetObjectItemCaseSensitive(k, "read");
        if (!cJSON_IsObject(k)) return "expected an object";
        if (!name || !*name) return "name: expected a non-empty string";
        int t = -1;
        for (int i = 0; type && types[i]; i++)
            if (!strcmp(type, types[i])) t = i;
        if (t < 0) return "type: expected \"bool\", \"enum\", \"int\" or \"string\"";
        if (!cJSON_IsArray(vals)) return "values: expected an array of strings";
        if (!def) return "default: expected a string";
        if (!val) return "value: expected a string";
        if (!cJSON_IsBool(num)) return "numeric: expected true or false";
        if (!cJSON_IsBool(rd)) return "read: expected true or false";
        lab_buf vb = {0};
        const cJSON *v;
        cJSON_ArrayForEach(v, vals) {
            if (!cJSON_IsString(v)) { lab_buf_free(&vb); return "values: expected an array of strings"; }
            lab_buf_printf(&vb, "%s%s", vb.len ? "|" : "", v->valuestring);
        }
        if (vb.oom) { *oom = 1; return "out of memory"; }
        o->name = dup_or(name, oom);
        o->type = dup_or(type, oom);
        o->values = vb.data ? vb.data : dup_or("", oom);
        o->def = dup_or(def, oom);
        o->value = dup_or(val, oom);
        o->numeric = cJSON_IsTrue(num);
        o->read = cJSON_IsTrue(rd);
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(k, "scope");
        /* the singular is taken too: a hello written from the words */
        const char *sv = cJSON_IsString(sc) ? sc->valuestring : "";
        const int layers = !strcmp(sv, "layers") || !strcmp(sv, "layer"), sites = !strcmp(sv, "sites") || !strcmp(sv, "site");
        if (sc && !layers && !sites)
            return "scope: expected \"layers\" or \"sites\" (docs/engine-protocol.md, \"Scoped knobs\")";
        if (sc) o->scope = layers ? 1 : 2;
    }
    return add_scope_knobs(ks, h, where, wl, oom);
}

static const char *hello_lists(const cJSON *root, lab_engine_hello *h, char *where, size_t wl, int *oom) {
    const cJSON *sites = cJSON_GetObjectItemCaseSensitive(root, "probe_sites");
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(root, "faults");
    snprintf(where, wl, "probe_sites");
    if (!cJSON_IsArray(sites)) return "expected an array of strings";
    int64_t n = cJSON_GetArraySize(sites);
    if (!(h->sites = calloc((size_t)n + 1, sizeof *h->sites))) { *oom = 1; return "out of memory"; }
    const cJSON *s;
    cJSON_ArrayForEach(s, sites) {
        if (!cJSON_IsString(s) || !s->valuestring[0]) return "expected an array of non-empty strings";
        h->sites[h->n_sites++] = dup_or(s->valuestring, oom);
    }
    snprintf(where, wl, "faults");
    if (!cJSON_IsArray(faults)) return "expected an array of {name, knob, site, description}";
    n = cJSON_GetArraySize(faults);
    h->fault_name = calloc((size_t)n + 1, sizeof(char *));
    h->fault_knob = calloc((size_t)n + 1, sizeof(char *));
    h->fault_site = calloc((size_t)n + 1, sizeof(char *));
    if (!h->fault_name || !h->fault_knob || !h->fault_site) { *oom = 1; return "out of memory"; }
    cJSON_ArrayForEach(s, faults) {
        snprintf(where, wl, "faults[%lld]", (long long)h->n_faults);
        const char *fn = jstr(s, "name"), *fk = jstr(s, "knob"), *fs = jstr(s, "site");
        if (!fn || !*fn || !fk || !*fk || !fs || !jstr(s, "description"))
            return "expected {name, knob, site, description}, all strings";
        h->fault_name[h->n_faults] = dup_or(fn, oom);
        h->fault_knob[h->n_faults] = dup_or(fk, oom);
        h->fault_site[h->n_faults++] = dup_or(fs, oom);
    }
    return NULL;
}

/* Checks a hello and fills h; a message naming the member, or NULL. */
static const char *hello_parse(const cJSON *root, lab_engine_hello *h, char *where, size_t wl, int *oom) {
    int ok = 1;
    snprintf(where, wl, "(header)");
    if (!cJSON_IsObject(root)) return "expected a JSON object";
    const char *type = jstr(root, "type");
    snprintf(where, wl, "type");
    if (!type || strcmp(type, "hello")) return "expected \"hello\" as the first message";
    /* A hello is a header alone: bytes after it would be read as the first
     * response, and a payload_bytes of 10^12 could never be read at all. */
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(root, "payload_bytes");
    if (pb && cJSON_IsNumber(pb)) snprintf(where, wl, "payload_bytes %.17g", pb->valuedouble);
    else snprintf(where, wl, "payload_bytes");
    if (pb && !(cJSON_IsNumber(pb) && pb->valuedouble == 0)) return "a hello carries no payload";
    snprintf(where, wl, "protocol");
    int64_t proto = jint(root, "protocol", 0, INT_MAX, &ok);
    if (!ok || proto != VTP_PROTOCOL) return "expected 1 (this vtlab speaks protocol version 1)";
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(root, "engine");
    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *name = jstr(eng, "name"), *ver = jstr(eng, "version"), *commit = jstr(eng, "commit");
    snprintf(where, wl, "engine");
    if (!name || !*name || !ver || !commit) return "expected {name, version, commit}, all strings (name non-empty)";
    snprintf(where, wl, "model.sha256");
    const char *sha = jstr(mod, "sha256");
    if (!sha || !vt_sha256_hex_ok(sha)) return "expected 64 lowercase hex digits";
    snprintf(where, wl, "model");
    h->info.vocab = jint(mod, "vocab", 1, INT32_MAX, &ok);
    h->info.hidden = jint(mod, "hidden", 1, 1 << 20, &ok);
    h->info.n_layers = jint(mod, "n_layers", 1, VT_MODEL_MAX_LAYERS, &ok);
    if (!ok) return "expected integers vocab (>= 1), hidden (>= 1), n_layers (1..255)";
    const char *kinds = jstr(mod, "layer_kinds");
    snprintf(where, wl, "model.layer_kinds");
    if (!kinds) return "expected a string (\"\" when the engine does not say)";
    if (*kinds && (strlen(kinds) != (size_t)(2 * h->info.n_layers + 1) || kinds[h->info.n_layers] != '/'))
        return "expected n_layers attention kinds, '/', n_layers FFN kinds";
    const cJSON *det = cJSON_GetObjectItemCaseSensitive(root, "deterministic");
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(root, "capture");
    snprintf(where, wl, "deterministic");
    if (!cJSON_IsBool(det)) return "expected true or false";
    snprintf(where, wl, "capture");
    if (!cJSON_IsBool(cap)) return "expected true or false";
    h->deterministic = cJSON_IsTrue(det);
    h->capture = cJSON_IsTrue(cap);
    /* optional (absent: one sequence per request); a hello that declares it
     * wrongly is refused rather than read as 1: its author meant batches */
    snprintf(where, wl, "max_batch");
    h->max_batch = 1;
    if (cJSON_GetObjectItemCaseSensitive(root, "max_batch")) {
        h->max_batch = jint(root, "max_batch", 1, VTP_MAX_BATCH, &ok);
        if (!ok) return "expected an integer 1..65536 (the most sequences one request may carry)";
    }
    snprintf(h->info.engine, sizeof h->info.engine, "%s", name);
    snprintf(h->info.version, sizeof h->info.version, "%s%s%s", ver, *commit ? " " : "", commit);
    snprintf(h->info.model_sha256, sizeof h->info.model_sha256, "%s", sha);
    snprintf(h->info.layer_kinds, sizeof h->info.layer_kinds, "%s", kinds);
    snprintf(h->engine_id, sizeof h->engine_id, "%s %s %s", name, ver, commit);
    snprintf(h->backend, sizeof h->backend, "engine");
    snprintf(h->device, sizeof h->device, "engine: %s %s", name, ver);
    /* the device line is printed as is (show, run lines): an engine's name is
     * untrusted, so no control character reaches a terminal through it */
    lab_show_controls(h->device);
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(root, "knobs");
    snprintf(where, wl, "knobs");
    if (!cJSON_IsArray(ks)) return "expected an array (the engine's knob registry)";
    const char *bad = hello_knobs(ks, h, where, wl, oom);
    return bad ? bad : hello_lists(root, h, where, wl, oom);
}

int lab_engine_hello_parse(const char *line, lab_engine_hello *h, char *err, size_t errlen) {
    char where[64];
    int oom = 0;
    memset(h, 0, sizeof *h);
    cJSON *root = cJSON_Parse(line);
    const char *bad = root ? hello_parse(root, h, where, sizeof where, &oom) : "not JSON";
    cJSON_Delete(root);
    if (!bad && !oom && !(h->json = lab_strdup(line))) oom = 1;
    if (bad || oom) {
        int rc = oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory")
                     : lab_errf(err, errlen, LAB_EINPUT, "hello: %s: %s", root ? where : "(header)", bad);
        lab_engine_hello_free(h);
        return rc;
    }
    return LAB_OK;
}

static int read_hello(cmd_inst *c, lab_engine_hello *h, char *err, size_t errlen) {
    char *line = NULL, msg[1024];
    int rc = read_line(c, &line, lab_mono() + c->spec->timeout_s, "its hello", err, errlen);
    if (rc) return rc == LAB_ENOMEM ? rc : LAB_EINPUT;   /* no hello: bad input, nothing written */
    rc = lab_engine_hello_parse(line, h, msg, sizeof msg);
    free(line);
    if (rc) return fail(c, err, errlen, rc, "%s", msg);
    c->vocab = h->info.vocab;
    c->hidden = h->info.hidden;
    c->n_layers = h->info.n_layers;
    c->capture = h->capture;
    c->max_batch = h->max_batch;
    return LAB_OK;
}

/* ------------------------------------------------------------ ops */

static int cmd_load(const lab_engine_spec *spec, const char *model_dir, void **model, lab_engine_info *info,
                    char *err, size_t errlen) {
    *model = NULL;
    memset(info, 0, sizeof *info);
    cmd_model *m = calloc(1, sizeof *m);
    if (!m) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    m->spec = spec;
    char abs[PATH_MAX];
    m->model_dir = lab_strdup(model_dir && realpath(model_dir, abs) ? abs : model_dir ? model_dir : "");
    if (!m->model_dir) {
        free(m);
        return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    snprintf(info->engine, sizeof info->engine, "%s", spec->argv[0]);
    *model = m;
    return LAB_OK;
}

static void cmd_unload(void *model) {
    cmd_model *m = model;
    if (!m) return;
    free(m->model_dir);
    free(m);
}

/* A scope knob whose value the engine did not report: the value the arm
 * set, canonical (lab_engine_check_arm refuses one that is no layer set). */
static void scope_from_request(lab_engine_hello *h, const lab_engine_req *r) {
    for (int64_t j = 0; j < h->n_knobs; j++) {
        lab_engine_knob *k = &h->knobs[j];
        if (k->scope_of < 0 || k->reported) continue;
        k->read = 1;
        for (int64_t i = 0; i < r->n_knobs; i++) {
            char canon[VTP_LAYER_SET_TEXT], *v;
            vtp_layer_set set;
            if (strcmp(r->knob_names[i], k->name)) continue;
            const char *want = r->knob_values[i];
            if (!vtp_layer_set_parse(want, (int)h->info.n_layers, 1, &set, NULL, 0) &&
                !vtp_layer_set_format(&set, canon, sizeof canon))
                want = canon;
            if ((v = lab_strdup(want))) {
                free(k->value);
                k->value = v;
            }
        }
    }
}

static int cmd_open(void *model, const lab_engine_req *req, void **inst, lab_engine_hello *hello, char *err,
                    size_t errlen) {
    cmd_model *m = model;
    *inst = NULL;
    memset(hello, 0, sizeof *hello);
    signal(SIGPIPE, SIG_IGN);   /* a dead engine is a failed write, not the end of vtlab */
    cmd_inst *c = calloc(1, sizeof *c);
    if (!c) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    c->spec = m->spec;
    c->to_fd = c->from_fd = c->err_fd = c->warden.fd = -1;
    snprintf(c->label, sizeof c->label, "engine %s", m->spec->argv[0]);
    c->agg.mode = VTP_ON;
    lab_engine_req r = *req;
    r.model_dir = m->model_dir;
    int rc = spawn(c, &r, err, errlen);
    if (!rc) rc = read_hello(c, hello, err, errlen);
    if (!rc) scope_from_request(hello, req);
    if (rc) {
        lab_engine_command.close(c);
        lab_engine_hello_free(hello);
        return rc;
    }
    *inst = c;
    return LAB_OK;
}

static int check_logits(cmd_inst *c, const float *logits, int64_t T, char *err, size_t errlen) {
    for (int64_t i = 0; i < T * c->vocab; i++)
        if (!isfinite(logits[i]))
            return fail(c, err, errlen, LAB_EINTERNAL, "logits[%lld][%lld] is %s", (long long)(i / c->vocab),
                        (long long)(i % c->vocab), isnan(logits[i]) ? "NaN" : "infinite");
    return LAB_OK;
}

/* The probe records of a response, merged into c->agg. */
static const char *merge_probes(cmd_inst *c, const cJSON *probes) {
    if (!cJSON_IsArray(probes)) return "probes: expected an array of records";
    const cJSON *p;
    cJSON_ArrayForEach(p, probes) {
        vtp_record r;
        int ok = 1;
        memset(&r, 0, sizeof r);
        const char *site = jstr(p, "site"), *dt = jstr(p, "dtype"), *src = jstr(p, "src_dtype"), *det = jstr(p, "detail");
        if (!site || !*site || strlen(site) >= sizeof r.site) return "probes: site: expected a name of 1..31 bytes";
        if (!dt || strlen(dt) >= sizeof r.dtype || !src || strlen(src) >= sizeof r.src_dtype)
            return "probes: dtype, src_dtype: expected strings of at most 7 bytes";
        if (!det) return "probes: detail: expected a string";
        r.layer = (int)jint(p, "layer", -1, VT_MODEL_MAX_LAYERS, &ok);
        r.calls = jint(p, "calls", 0, INT64_MAX / 4, &ok);
        r.rows = jint(p, "rows", 0, INT64_MAX / 4, &ok);
        r.bytes_per_row = jint(p, "bytes_per_row", 0, INT64_MAX / 4, &ok);
        r.src_row_bytes = jint(p, "src_row_bytes", 0, INT64_MAX / 4, &ok);
        r.dst_row_bytes = jint(p, "dst_row_bytes", 0, INT64_MAX / 4, &ok);
        r.converting = (int)jint(p, "converting", 0, 1, &ok);
        r.violations = jint(p, "violations", 0, INT64_MAX / 4, &ok);
        r.rows_unwritten = jint(p, "rows_unwritten", -1, INT64_MAX / 4, &ok);
        if (!ok) return "probes: expected integers layer (>= -1), calls, rows, bytes_per_row, src_row_bytes, "
                        "dst_row_bytes, violations (>= 0), converting (0/1), rows_unwritten (>= -1)";
        snprintf(r.site, sizeof r.site, "%s", site);
        snprintf(r.dtype, sizeof r.dtype, "%s", dt);
        snprintf(r.src_dtype, sizeof r.src_dtype, "%s", src);
        snprintf(r.detail, sizeof r.detail, "%s", det);
        vtp_probes_merge(&c->agg, &r);
    }
    return NULL;
}

/* A batched request's response echoes its sequences (docs/engine-protocol.md):
 * an engine that ran the request as one sequence, or left sequences out,
 * would otherwise hand back logits of the right size and the wrong meaning.
 * A request of one sequence may be answered with or without [T]. */
static int check_sequences(cmd_inst *c, const cJSON *h, const pending *p, char *err, size_t errlen) {
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(h, "sequences");
    if (!js && p->n == 1) return LAB_OK;
    int ok = cJSON_IsArray(js) && cJSON_GetArraySize(js) == p->n;
    int64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, js) {
        if (!ok) break;
        ok = cJSON_IsNumber(x) && x->valuedouble == (double)(p->off[i + 1] - p->off[i]);
        i++;
    }
    if (ok) return LAB_OK;
    char got[96] = "none", want[96];
    char *gs = js ? cJSON_PrintUnformatted(js) : NULL;
    if (gs) snprintf(got, sizeof got, "%.80s%s", gs, strlen(gs) > 80 ? "..." : "");
    free(gs);
    size_t o = (size_t)snprintf(want, sizeof want, "[");
    for (i = 0; i < p->n && o + 16 < sizeof want; i++)
        o += (size_t)snprintf(want + o, sizeof want - o, "%s%lld", i ? "," : "", (long long)(p->off[i + 1] - p->off[i]));
    snprintf(want + o, sizeof want - o, "%s]", i < p->n ? ",..." : "");
    return fail(c, err, errlen, LAB_EINTERNAL, "response to a request of %lld sequences: sequences %s, expected %s",
                (long long)p->n, got, want);
}

/* Checks a response header against the request; its payload size in *payload. */
static int check_response(cmd_inst *c, const cJSON *h, const pending *p, int64_t *payload, int *resid, char *err,
                          size_t errlen) {
    int ok = 1;
    const int64_t id = p->id, T = p->off[p->n];
    const char *type = jstr(h, "type");
    if (!type) return fail(c, err, errlen, LAB_EINTERNAL, "response: type: expected a string");
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(h, "id");
    if (!strcmp(type, "error")) {
        const char *msg = jstr(h, "message");
        return fail(c, err, errlen, LAB_EINTERNAL, "it answered request %lld with an error: %s", (long long)id,
                    msg ? msg : "(no message)");
    }
    if (strcmp(type, "logits")) return fail(c, err, errlen, LAB_EINTERNAL, "response: type \"%s\", expected \"logits\"", type);
    if (!cJSON_IsNumber(jid))
        return fail(c, err, errlen, LAB_EINTERNAL, "response without an id, expected id %lld", (long long)id);
    if (jid->valuedouble != (double)id)
        return fail(c, err, errlen, LAB_EINTERNAL, "response out of order: id %.0f, expected %lld", jid->valuedouble,
                    (long long)id);
    int64_t rt = jint(h, "tokens", 0, INT64_MAX / 8, &ok), rv = jint(h, "vocab", 0, INT64_MAX / 8, &ok);
    *payload = jint(h, "payload_bytes", 0, INT64_MAX / 8, &ok);
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(h, "residuals");
    *resid = cJSON_IsTrue(jr);
    if (!ok) return fail(c, err, errlen, LAB_EINTERNAL, "response: tokens, vocab, payload_bytes: expected integers");
    int rc = check_sequences(c, h, p, err, errlen);
    if (rc) return rc;
    if (rt != T || rv != c->vocab)
        return fail(c, err, errlen, LAB_EINTERNAL, "logits of the wrong shape: [%lld, %lld], expected [%lld, %lld]",
                    (long long)rt, (long long)rv, (long long)T, (long long)c->vocab);
    if (*resid && !p->capture)
        return fail(c, err, errlen, LAB_EINTERNAL, "response: residuals sent but not asked for");
    int64_t want = T * c->vocab * 4 + (*resid ? c->n_layers * 2 * T * c->hidden * 4 : 0);
    if (*payload != want)
        return fail(c, err, errlen, LAB_EINTERNAL, "response: payload_bytes %lld, expected %lld", (long long)*payload,
                    (long long)want);
    return LAB_OK;
}

/* Requests written and not yet answered, oldest first (see cmd_submit). */
#define MAX_PENDING 2

/* The header of a forward request for p (sequences named when more than one). */
static int request_header(const pending *p, lab_buf *b) {
    lab_buf_printf(b, "{\"type\":\"forward\",\"id\":%lld,\"tokens\":%lld,", (long long)p->id, (long long)p->off[p->n]);
    if (p->n > 1) {
        lab_buf_printf(b, "\"sequences\":[");
        for (int64_t i = 0; i < p->n; i++)
            lab_buf_printf(b, i ? ",%lld" : "%lld", (long long)(p->off[i + 1] - p->off[i]));
        lab_buf_printf(b, "],");
    }
    lab_buf_printf(b, "\"capture\":%s,\"payload_bytes\":%lld}\n", p->capture ? "true" : "false",
                   (long long)(4 * p->off[p->n]));
    return b->oom ? -1 : 0;
}

/* Writes a forward request for sequences [0, n) of tokens (off: their
 * offsets from 0); its response is read by cmd_collect. */
static int cmd_submit(void *inst, int64_t n, const int32_t *tokens, const int64_t *off, int capture, char *err,
                      size_t errlen) {
    cmd_inst *c = inst;
    if (c->dead) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: the engine is no longer running", c->label);
    if (c->n_pending == MAX_PENDING) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: too many requests in flight", c->label);
    if (n < 1 || n > c->max_batch)
        return lab_errf(err, errlen, LAB_EINTERNAL, "%s: %lld sequences in one request (its max_batch is %lld)",
                        c->label, (long long)n, (long long)c->max_batch);
    double t0 = lab_mono(), deadline = t0 + c->spec->timeout_s;
    pending *p = &c->pend[(c->pend_head + c->n_pending) % MAX_PENDING];
    if (!(p->off = malloc((size_t)(n + 1) * sizeof *p->off))) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    memcpy(p->off, off, (size_t)(n + 1) * sizeof *off);
    p->id = c->next_id++;
    p->n = n;
    p->capture = capture && c->capture;
    lab_buf head = {0};
    int rc = request_header(p, &head) ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory")
                                      : write_all(c, head.data, head.len, deadline, err, errlen);
    lab_buf_free(&head);
    if (!rc) rc = write_all(c, tokens, (size_t)off[n] * 4, deadline, err, errlen);
    if (!rc) c->n_pending++;
    else {
        free(p->off);
        p->off = NULL;
    }
    c->forward_s += lab_mono() - t0;
    return rc;
}

/* The residuals of the response to p: [L][2][T_i][H] per sequence, kept
 * for batch_residual. */
static int read_residuals(cmd_inst *c, const pending *p, double deadline, char *err, size_t errlen) {
    const int64_t T = p->off[p->n];
    size_t n = (size_t)(c->n_layers * 2 * T * c->hidden);
    float *r = realloc(c->resid, n * sizeof *r);
    int64_t *o = realloc(c->resid_off, (size_t)(p->n + 1) * sizeof *o);
    if (r) c->resid = r;
    if (o) c->resid_off = o;
    if (!r || !o) return fail(c, err, errlen, LAB_ENOMEM, "out of memory");
    int rc = read_exact(c, r, n * 4, deadline, "residuals", err, errlen);
    if (rc) return rc;
    memcpy(o, p->off, (size_t)(p->n + 1) * sizeof *o);
    c->resid_n = p->n;
    return LAB_OK;
}

/* Reads the response to the oldest request written: logits [T, vocab] of
 * all its sequences. */
static int cmd_collect(void *inst, float *logits, char *err, size_t errlen) {
    cmd_inst *c = inst;
    if (c->dead) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: the engine is no longer running", c->label);
    if (!c->n_pending) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: no request to collect", c->label);
    pending p = c->pend[c->pend_head];
    c->pend[c->pend_head].off = NULL;   /* p owns it now */
    c->pend_head = (c->pend_head + 1) % MAX_PENDING;
    c->n_pending--;
    double t0 = lab_mono(), deadline = t0 + c->spec->timeout_s;
    const int64_t T = p.off[p.n];
    char *line = NULL;
    int64_t payload = 0;
    int resid = 0;
    int rc = read_line(c, &line, deadline, "a response", err, errlen);
    cJSON *h = rc ? NULL : cJSON_Parse(line);
    free(line);
    if (!rc && !h) rc = fail(c, err, errlen, LAB_EINTERNAL, "response: the header is not JSON");
    if (!rc) rc = check_response(c, h, &p, &payload, &resid, err, errlen);
    const char *bad = rc ? NULL : merge_probes(c, cJSON_GetObjectItemCaseSensitive(h, "probes"));
    cJSON_Delete(h);
    if (!rc && bad) rc = fail(c, err, errlen, LAB_EINTERNAL, "response: %s", bad);
    c->resid_n = 0;
    if (!rc) rc = read_exact(c, logits, (size_t)(T * c->vocab) * 4, deadline, "logits", err, errlen);
    if (!rc && resid) rc = read_residuals(c, &p, deadline, err, errlen);
    free(p.off);
    c->forward_s += lab_mono() - t0;
    return rc ? rc : check_logits(c, logits, T, err, errlen);
}

static int cmd_batch_forward(void *inst, int64_t n, const int32_t *tokens, const int64_t *off, int capture,
                             float *logits, char *err, size_t errlen) {
    int rc = cmd_submit(inst, n, tokens, off, capture, err, errlen);
    return rc ? rc : cmd_collect(inst, logits, err, errlen);
}

static int cmd_forward(void *inst, const int32_t *tokens, int64_t T, int capture, float *logits, char *err,
                       size_t errlen) {
    const int64_t off[2] = {0, T};
    return cmd_batch_forward(inst, 1, tokens, off, capture, logits, err, errlen);
}

static const float *cmd_batch_residual(void *inst, int64_t i, int64_t layer, int site, int64_t *T) {
    cmd_inst *c = inst;
    *T = 0;
    if (i < 0 || i >= c->resid_n || layer < 0 || layer >= c->n_layers || site < 0 || site > 1) return NULL;
    const int64_t a = c->resid_off[i];
    *T = c->resid_off[i + 1] - a;
    return c->resid + (size_t)(c->n_layers * 2 * c->hidden * a + (layer * 2 + site) * *T * c->hidden);
}

static const float *cmd_residual(void *inst, int64_t layer, int site, int64_t *T) {
    return cmd_batch_residual(inst, 0, layer, site, T);
}

/* The most tokens of a request of several sequences. Smaller than what a
 * pipe holds (LAB_ENGINE_AHEAD_MAX, so that a request can be submitted
 * ahead), so that a pass is several requests: the engine computes one while
 * vtlab scores the one before (the shipped designs are 4096 tokens an arm).
 * The engine packs a request as it likes (`vtlab engine`: passes of
 * VTLAB_BATCH_ROWS). On the 2-core VM, the tiny bf16-stream sweep through
 * `vtlab engine` took the same time with 256 to 8192 (noise +-15%). */
#define LAB_ENGINE_BATCH_ROWS 2048

/* Batches for an engine that declared max_batch; VTLAB_ENGINE_BATCH=0 in
 * vtlab's environment: one sequence per request. */
static void cmd_batch_limits(void *inst, int64_t *max_seqs, int64_t *max_rows) {
    const cmd_inst *c = inst;
    *max_seqs = lab_env_off("VTLAB_ENGINE_BATCH") ? 1 : c->max_batch;
    *max_rows = *max_seqs > 1 ? LAB_ENGINE_BATCH_ROWS : 0;
}

static int cmd_probes(void *inst, vt_probe **recs, int64_t *n, int64_t *lost, char *err, size_t errlen) {
    cmd_inst *c = inst;
    *recs = NULL;
    *n = c->agg.n;
    *lost = c->agg.lost;
    if (*n > 0) {
        if (!(*recs = malloc((size_t)*n * sizeof **recs))) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        memcpy(*recs, c->agg.recs, (size_t)*n * sizeof **recs);
    }
    vtp_probes_clear(&c->agg);
    return LAB_OK;
}

static double cmd_forward_seconds(void *inst) { return ((cmd_inst *)inst)->forward_s; }

/* After stdin closed: gives the engine grace_s to exit (none once vtlab
 * was sent SIGINT/SIGTERM, which do not reach the engine's group), then
 * SIGTERM to its group, SIGKILL to what is left a second later. The group
 * is signalled even when the engine exited in time if anything of it is
 * left: a process it started would otherwise outlive vtlab. */
static void end_group(cmd_inst *c) {
    pid_t group = c->pid;
    double end = lab_mono() + (lab_interrupted ? 0 : c->spec->grace_s);
    int sent_term = 0;
    for (;;) {
        pid_t w = c->pid > 0 ? waitpid(c->pid, NULL, WNOHANG) : 0;
        if (w == c->pid || (w < 0 && errno != EINTR)) c->pid = 0;   /* reaped (or not ours) */
        /* Once the engine is reaped, its group id stays reserved while the
         * group has members: kill(-group) reaches only what it left. */
        if (!c->pid && kill(-group, 0) != 0) return;
        if (!sent_term && (!c->pid || lab_mono() > end)) {
            kill(-group, SIGTERM);
            sent_term = 1;
            end = lab_mono() + 1.0;
        } else if (sent_term && lab_mono() > end) {
            kill(-group, SIGKILL);
            if (c->pid > 0) kill_child(c, NULL);
            return;
        }
        if (c->err_fd >= 0) drain_stderr(c);
        usleep(2000);
    }
}

/* Closes stdin, then ends the engine's group (end_group). */
static void cmd_close(void *inst) {
    cmd_inst *c = inst;
    if (!c) return;
    if (c->to_fd >= 0) close(c->to_fd);
    if (c->pid > 0) end_group(c);
    lab_warden_release(&c->warden);
    if (c->from_fd >= 0) close(c->from_fd);
    if (c->err_fd >= 0) close(c->err_fd);
    vtp_probes_free(&c->agg);
    for (int i = 0; i < MAX_PENDING; i++) free(c->pend[i].off);
    free(c->rbuf);
    free(c->resid);
    free(c->resid_off);
    free(c);
}

int lab_engine_command_raw(void *inst, const char *header, const void *payload, size_t n, char **reply, char *err,
                           size_t errlen) {
    cmd_inst *c = inst;
    *reply = NULL;
    if (c->dead) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: the engine is no longer running", c->label);
    double deadline = lab_mono() + c->spec->timeout_s;
    int rc = write_all(c, header, strlen(header), deadline, err, errlen);
    if (!rc && n) rc = write_all(c, payload, n, deadline, err, errlen);
    if (!rc) rc = read_line(c, reply, deadline, "a response", err, errlen);
    if (rc) return rc;
    cJSON *h = cJSON_Parse(*reply);
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(h, "payload_bytes");
    int64_t skip = cJSON_IsNumber(pb) && pb->valuedouble > 0 && pb->valuedouble < 1e12 ? (int64_t)pb->valuedouble : 0;
    cJSON_Delete(h);
    return skip ? read_exact(c, NULL, (size_t)skip, deadline, "a payload", err, errlen) : LAB_OK;
}

/* ------------------------------------------------------------ arms */

const lab_engine_knob *lab_engine_hello_knob(const lab_engine_hello *h, const char *name) {
    for (int64_t k = 0; k < h->n_knobs; k++)
        if (!strcmp(h->knobs[k].name, name)) return &h->knobs[k];
    return NULL;
}

/* Whether value is one the knob allows. */
static int value_allowed(const lab_engine_knob *k, const char *value) {
    if (!strcmp(k->type, "string")) return 1;
    if (!strcmp(k->type, "int")) {
        char *end = NULL;
        long long lo = 0, hi = 0, v = strtoll(value, &end, 10);
        if (!*value || *end) return 0;
        if (sscanf(k->values, "%lld..%lld", &lo, &hi) == 2) return v >= lo && v <= hi;
        return 1;
    }
    size_t n = strlen(value);
    for (const char *p = k->values; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !memcmp(p, value, n)) return 1;
        p += l + (bar ? 1 : 0);
    }
    return 0;
}

/* For an enumerated knob ("a|b|c"), " (did you mean b?)" in meant when one
 * of its values is close to value (suggest.c); else meant is left empty. */
static void suggest_value(const lab_engine_knob *k, const char *value, char *meant, size_t cap) {
    char best[LAB_NAME_MAX + 1];
    if (strcmp(k->type, "string") && strcmp(k->type, "int") && vt_suggest_list(value, k->values, best, sizeof best))
        snprintf(meant, cap, " (did you mean %s?)", best);
}

/* name is NAME_LAYERS of a declared knob NAME that is not scoped: that knob. */
static const lab_engine_knob *unscoped_parent(const lab_engine_hello *h, const char *name) {
    size_t n = strlen(name);
    if (n <= 7 || strcmp(name + n - 7, "_LAYERS")) return NULL;
    for (int64_t k = 0; k < h->n_knobs; k++)
        if (strlen(h->knobs[k].name) == n - 7 && !strncmp(h->knobs[k].name, name, n - 7) && !h->knobs[k].scope)
            return &h->knobs[k];
    return NULL;
}

int lab_engine_check_arm(const lab_engine_hello *h, const lab_experiment *e, int64_t arm, char *err, size_t errlen) {
    const lab_arm *a = &e->arms[arm];
    for (int64_t i = 0; i < a->n_knobs; i++) {
        const char *name = a->knob_names[i];
        const lab_engine_knob *k = lab_engine_hello_knob(h, name);
        if (!k && unscoped_parent(h, name))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].knobs.%s: engine %s does not declare %s scoped (its "
                            "hello record has no \"scope\"; docs/engine-protocol.md, \"Scoped knobs\")", e->path,
                            (long long)arm, name, h->info.engine, unscoped_parent(h, name)->name);
        if (!k) {
            vt_suggester sg;
            vt_suggest_init(&sg, name);
            for (int64_t j = 0; j < h->n_knobs; j++) vt_suggest_offer(&sg, h->knobs[j].name);
            if (sg.best)
                return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].knobs.%s: engine %s declares no such knob "
                                "(did you mean %s?)", e->path, (long long)arm, name, h->info.engine, sg.best);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].knobs.%s: engine %s declares no such knob "
                            "(its hello lists %lld)", e->path, (long long)arm, name, h->info.engine, (long long)h->n_knobs);
        }
        if (k->scope_of >= 0) {
            vtp_layer_set set;
            char why[400];
            if (vtp_layer_set_parse(a->knob_values[i], (int)h->info.n_layers, h->knobs[k->scope_of].scope == 2, &set,
                                    why, sizeof why))
                return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].knobs.%s: \"%.80s\": %s (engine %s)", e->path,
                                (long long)arm, name, a->knob_values[i], why, h->info.engine);
        } else if (!value_allowed(k, a->knob_values[i])) {
            char meant[LAB_NAME_MAX + 24] = "";
            suggest_value(k, a->knob_values[i], meant, sizeof meant);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].knobs.%s: \"%s\" is not one of the engine's "
                            "values (%s)%s", e->path, (long long)arm, name, a->knob_values[i], k->values, meant);
        }
    }
    for (int64_t i = 0; i < a->n_expect; i++) {
        int64_t s = 0;
        while (s < h->n_sites && strcmp(h->sites[s], a->expect_sites[i])) s++;
        if (s == h->n_sites)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arms[%lld].expect.%s: engine %s has no such probe site",
                            e->path, (long long)arm, a->expect_sites[i], h->info.engine);
    }
    return LAB_OK;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int lab_engine_knob_hash(const lab_engine_hello *h, char out[65]) {
    lab_buf b = {0};
    char **lines = calloc((size_t)h->n_knobs + 1, sizeof *lines);
    int64_t n = 0;
    if (!lines) return LAB_ENOMEM;
    for (int64_t k = 0; k < h->n_knobs; k++)
        /* an unscoped lever's scope knob is left out: an engine that learns
         * scopes keeps the identities of its unscoped runs */
        if (h->knobs[k].numeric && !(h->knobs[k].scope_of >= 0 && !strcmp(h->knobs[k].value, "all"))) {
            lab_buf l = {0};
            lab_buf_printf(&l, "%s=%s\n", h->knobs[k].name, h->knobs[k].value);
            lines[n++] = l.data;
        }
    qsort(lines, (size_t)n, sizeof *lines, cmp_cstr);
    lab_buf_printf(&b, "engine %s\n", h->engine_id);
    for (int64_t i = 0; i < n; i++) {
        if (!lines[i]) b.oom = 1;
        else lab_buf_printf(&b, "%s", lines[i]);
        free(lines[i]);
    }
    free(lines);
    if (b.oom) { lab_buf_free(&b); return LAB_ENOMEM; }
    vt_sha256_hex(b.data, b.len, out);
    lab_buf_free(&b);
    return LAB_OK;
}

void lab_engine_hello_free(lab_engine_hello *h) {
    for (int64_t i = 0; h->knobs && i < h->n_knobs; i++) {
        lab_engine_knob *k = &h->knobs[i];
        free(k->name);
        free(k->type);
        free(k->values);
        free(k->def);
        free(k->value);
    }
    for (int64_t i = 0; h->sites && i < h->n_sites; i++) free(h->sites[i]);
    for (int64_t i = 0; h->fault_name && i < h->n_faults; i++) {
        free(h->fault_name[i]);
        free(h->fault_knob[i]);
        free(h->fault_site[i]);
    }
    free(h->knobs);
    free(h->sites);
    free(h->fault_name);
    free(h->fault_knob);
    free(h->fault_site);
    free(h->json);
    memset(h, 0, sizeof *h);
}

const lab_engine_ops lab_engine_command = {
    .name = "command",
    .load = cmd_load,
    .unload = cmd_unload,
    .open = cmd_open,
    .forward = cmd_forward,
    .residual = cmd_residual,
    .probes = cmd_probes,
    .forward_seconds = cmd_forward_seconds,
    .close = cmd_close,
    .submit = cmd_submit,
    .collect = cmd_collect,
    .batch_limits = cmd_batch_limits,
    .batch_forward = cmd_batch_forward,
    .batch_residual = cmd_batch_residual,
};
