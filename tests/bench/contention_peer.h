/*
 * contention_peer.h — the official peer in the contention table (issue 32
 * item 1; contention.h). When PEER_MODELING names a modeling file (the
 * official modeling_kimi_linear.py, docs/bench.md "The official peer"), two
 * peer processes, `peer.py --serve-peer` on 1 thread and on the default
 * count (all cores, as vtlab's default session), each time one prefill of
 * the table's T tokens in every round of every pattern, between vtlab's
 * prefills and its decode steps, beside the same loads.
 *
 * Two processes, not one switching: torch's and OpenBLAS's thread pools are
 * sized when they load, and peer.py sets both (and vtlab's OpenMP waiting)
 * before that. They are started once, before the first pattern, so that
 * loading the checkpoint twice falls on no pattern, and their first prefills
 * (the logits check and a warm-up) are done before the rounds.
 *
 * BENCH_PEER_PY (default tests/bench/peer.py, from the repository root, where
 * make runs) and BENCH_PEER_PYTHON (default /usr/bin/python3, where Debian's
 * python3-torch is) say how to start it; PEER_CONFIG and PEER_KDA reach
 * peer.py through the environment.
 */
#ifndef BENCH_CONTENTION_PEER_H
#define BENCH_CONTENTION_PEER_H

#include <errno.h>
#include <signal.h>

typedef struct cont_peer {
    pid_t pid;
    FILE *to, *from;   /* its stdin, its stdout */
    int   threads;
    int   up;          /* ready, and has answered every command since */
    int   unclean;     /* its ready line said the mapping or the thread counts were not clean */
} cont_peer;

/* Starts one peer process (not yet ready: cont_peer_ready). 0 or -1 (why). */
static int cont_peer_spawn(cont_peer *q, const char *dir, int threads, char *why, size_t whylen) {
    const char *py = getenv("BENCH_PEER_PYTHON"), *script = getenv("BENCH_PEER_PY");
    if (!py || !*py) py = "/usr/bin/python3";
    if (!script || !*script) script = "tests/bench/peer.py";
    memset(q, 0, sizeof *q);
    q->threads = threads;
    if (access(script, R_OK)) {
        snprintf(why, whylen, "BENCH_PEER_PY=%s: %s (run from the repository root, or set BENCH_PEER_PY)", script,
                 strerror(errno));
        return -1;
    }
    if (access(py, X_OK)) {
        snprintf(why, whylen, "BENCH_PEER_PYTHON=%s: %s", py, strerror(errno));
        return -1;
    }
    int in[2], out[2];   /* close-on-exec: neither the loads nor the other peer inherit them */
    if (pipe2(in, O_CLOEXEC)) { snprintf(why, whylen, "pipe: %s", strerror(errno)); return -1; }
    if (pipe2(out, O_CLOEXEC)) {
        close(in[0]), close(in[1]);
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return -1;
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    char *argv[] = {(char *)py, (char *)script, "--serve-peer", "--model", (char *)dir, "--threads", th, NULL};
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        signal(SIGPIPE, SIG_DFL);
        dup2(in[0], 0), dup2(out[1], 1);   /* dup2 clears close-on-exec on 0 and 1 */
        execv(py, argv);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    if (p < 0) {
        close(in[1]), close(out[0]);
        snprintf(why, whylen, "fork: %s", strerror(errno));
        return -1;
    }
    q->pid = p;
    q->to = fdopen(in[1], "w");
    q->from = fdopen(out[0], "r");
    return q->to && q->from ? 0 : -1;
}

/* Waits for its "ready" (0) or "notrun REASON" / the end of its output (-1,
 * why). Its "info" lines (what peer.py says as it loads the model) are
 * printed: all of them when verbose, else only its thread counts. */
static int cont_peer_ready(cont_peer *q, int verbose, char *why, size_t whylen) {
    char line[4096];
    while (fgets(line, sizeof line, q->from)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "info ", 5)) {
            if (verbose || strstr(line, "peer: threads:")) printf("  [peer, %d thread%s] %s\n", q->threads,
                                                                  q->threads == 1 ? "" : "s", line + 5);
        } else if (!strncmp(line, "ready", 5)) {
            q->up = 1;
            q->unclean = strstr(line, "map=problems") || strstr(line, "thread-counts=differ");
            return 0;
        } else if (!strncmp(line, "notrun ", 7)) {
            snprintf(why, whylen, "%.*s", (int)whylen - 1, line + 7);
            return -1;
        } else {
            printf("  [peer, %d threads] %s\n", q->threads, line);
        }
    }
    snprintf(why, whylen, "the peer process (%d threads) ended before it was ready (its messages are above)",
             q->threads);
    return -1;
}

/* Asks cmd (a line without its newline); 0 and the text after "ok" in ans,
 * or -1 (printed) and the peer is no longer up. */
static int cont_peer_ask(cont_peer *q, const char *cmd, char *ans, size_t anslen) {
    char line[1024];
    if (!q->up) return -1;
    if (fprintf(q->to, "%s\n", cmd) < 0 || fflush(q->to) || !fgets(line, sizeof line, q->from)) {
        printf("  peer (%d threads): no answer to \"%.40s\": it has ended\n", q->threads, cmd);
        q->up = 0;
        return -1;
    }
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "ok", 2)) {
        printf("  peer (%d threads): \"%.40s\" -> %s\n", q->threads, cmd, line);
        q->up = 0;
        return -1;
    }
    snprintf(ans, anslen, "%.*s", (int)anslen - 1, line[2] == ' ' ? line + 3 : "");
    return 0;
}

/* Hands it the T input tokens every prefill uses. */
static int cont_peer_tokens(cont_peer *q, const int32_t *tok, int T) {
    size_t cap = 16 + (size_t)T * 12, n = (size_t)snprintf(NULL, 0, "tokens ");
    char *s = malloc(cap), ans[64];
    if (!s) return -1;
    snprintf(s, cap, "tokens ");
    for (int i = 0; i < T; i++) n += (size_t)snprintf(s + n, cap - n, "%s%d", i ? "," : "", tok[i]);
    int rc = cont_peer_ask(q, s, ans, sizeof ans);
    free(s);
    return rc;
}

/* Seconds of one prefill (model(input_ids) inside the peer), or -1. */
static double cont_peer_prefill(cont_peer *q) {
    char ans[64];
    if (cont_peer_ask(q, "prefill", ans, sizeof ans)) return -1;
    double s = atof(ans);
    return s > 0 ? s : -1;
}

/* "quit", then SIGKILL if it has not ended within 5 s. */
static void cont_peer_stop(cont_peer *q) {
    if (q->pid <= 0) return;
    if (q->to) { fprintf(q->to, "quit\n"); fclose(q->to); }
    if (q->from) fclose(q->from);
    for (int w = 0; w < 500 && waitpid(q->pid, NULL, WNOHANG) == 0; w++) usleep(10000);
    if (kill(q->pid, 0) == 0) { kill(q->pid, SIGKILL); waitpid(q->pid, NULL, 0); }
    memset(q, 0, sizeof *q);
}

/* The peer's logits of the T tokens (default-thread peer) against vtlab's
 * (a default-count session): max |delta| printed, agreement within
 * PEER_ATOL (default 1e-4, as peer.py's) returned 1, else 0; -1 when either
 * side could not give them. This prefill is also the peer's warm-up. */
static int cont_peer_check(cont_peer *q, vt_model *m, int ndef, const int32_t *tok, int T, float *logits) {
    const int64_t V = m->cfg.vocab_size;
    const size_t n = (size_t)T * (size_t)V;
    const char *atol_s = getenv("PEER_ATOL");
    const double atol = atol_s && *atol_s ? atof(atol_s) : 1e-4;
    char path[4096], cmd[4200], ans[64];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/vtpeer-contention.%d.f32", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "logits %s", path);
    if (cont_peer_ask(q, cmd, ans, sizeof ans)) return -1;
    float *lp = malloc(sizeof(float) * n);
    FILE *f = fopen(path, "rb");
    size_t got = lp && f ? fread(lp, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    unlink(path);
    vt_session *s = session(m, ndef, "off");
    prefill_s(s, tok, T, logits);
    vt_session_free(s);
    if (got != n) {
        printf("peer: its logits file held %zu of the %zu values of T=%d x vocab %lld\n", got, n, T, (long long)V);
        free(lp);
        return -1;
    }
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)lp[i] - (double)logits[i]);
        d = e > d || isnan(e) ? e : d;
        mx = fabs((double)logits[i]) > mx ? fabs((double)logits[i]) : mx;
    }
    free(lp);
    const int ok = d <= atol;
    printf("peer: logits max |delta| vs vtlab = %.3e over T=%d x vocab %lld (max |logit| %.3g): %s %g%s\n", d, T,
           (long long)V, mx, ok ? "agree within" : "MISMATCH (>", atol,
           ok ? "" : "): the peer computes something else, and its times are not of the same computation");
    return ok;
}

/* Starts both peers (pe[0] on ndef threads, pe[1] on one), waits for them,
 * hands them the tokens, checks the logits and warms the 1-thread one up.
 * 0: both up (*agree: the logits check's answer); -1: not run, and why. */
static int cont_peers_open(cont_peer pe[2], vt_model *m, const char *dir, int ndef, const int32_t *tok, int T,
                           float *logits, int *agree, char *why, size_t whylen) {
    signal(SIGPIPE, SIG_IGN);   /* a peer that dies is an answer (cont_peer_ask), not the end of the bench */
    memset(pe, 0, 2 * sizeof *pe);
    if (cont_peer_spawn(&pe[0], dir, ndef, why, whylen) || cont_peer_spawn(&pe[1], dir, 1, why, whylen) ||
        cont_peer_ready(&pe[0], 1, why, whylen) || cont_peer_ready(&pe[1], 0, why, whylen))
        goto fail;
    if (cont_peer_tokens(&pe[0], tok, T) || cont_peer_tokens(&pe[1], tok, T)) {
        snprintf(why, whylen, "the peer did not take the tokens (above)");
        goto fail;
    }
    *agree = cont_peer_check(&pe[0], m, ndef, tok, T, logits);
    if (*agree < 0 || cont_peer_prefill(&pe[1]) < 0) {
        snprintf(why, whylen, "the peer's first prefill failed (above)");
        goto fail;
    }
    if (pe[0].unclean || pe[1].unclean)
        printf("peer: WARNING: its ready line says the checkpoint did not map cleanly or its thread counts "
               "differ from the requested ones (its lines above)\n");
    return 0;
fail:
    cont_peer_stop(&pe[0]);
    cont_peer_stop(&pe[1]);
    return -1;
}

/* One round's peer prefills: both peers, which goes first alternating with
 * the round r; sec[k] for pe[k]. A pause after each: OpenBLAS's pthreads
 * workers keep polling for a while after a product, and must not do so
 * into the other's timing or vtlab's. -1 when a peer stopped answering. */
static int cont_peer_round(cont_peer pe[2], int r, double sec[2]) {
    for (int j = 0; j < 2; j++) {
        const int k = (r + j) % 2;
        if ((sec[k] = cont_peer_prefill(&pe[k])) < 0) return -1;
        usleep(100000);
    }
    return 0;
}

#endif
