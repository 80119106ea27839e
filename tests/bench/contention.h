/*
 * contention.h — the bench's contention table (issue 32 item 1): prefill and
 * decode at the default thread count (all cores, the thread governor of
 * model/team.h) against one thread, while other tenants hold the cores.
 * Included by bench.c (`bench MODEL [T] --contention [PATTERNS]`, and
 * `--busy`, which `make bench` passes); `make bench-contention` runs it on the
 * 288M model.
 *
 * The patterns, each a set of child processes started before the rounds and
 * ended (their whole process group) after them:
 *   quiet    none: the reference
 *   steady1  one process spinning (one core busy, `yes`)
 *   steady2  two spinning (both cores busy)
 *   bursty   two processes, each busy then asleep for 5-80 ms at random
 *   membw    one process streaming memory (a STREAM triad over 3 x 64 MiB,
 *            far past the last-level cache): one core and much of the memory
 *            bandwidth taken, as a co-tenant's decode or data loader takes them
 *   teams    N other vtlab processes (BENCH_CONTENTION_TEAMS, default 2), each
 *            running prefills of the same model on its own 2-thread team
 *   ci       the project's own build and unit tests in a loop (make -B -j2
 *            of the libraries and two unit tests into a temporary build
 *            directory, then the tests): compilers come and go
 * Each pattern gets fresh sessions (the default count and one thread; what
 * the governor learnt is the process's and carries over, as in a sweep), one
 * warm-up prefill each, then BENCH_CONTENTION_ROUNDS (default 9) rounds
 * (cont_rounds); each session's median tokens/s and the median of the
 * rounds' ratios (default over one thread: >= 0.9 is the goal) are printed,
 * and recorded as phases cont-PATTERN-{prefill,decode}-tN.
 * BENCH_CONTENTION_AA=1 makes the "default" session a second one-thread
 * session: its ratios are the host's noise floor.
 * With PEER_MODELING set, the official peer is timed in the same rounds, its
 * prefill on 1 thread and on the default count, in processes of its own
 * (contention_peer.h): a row "+peer" under each pattern, with vtlab's default
 * over the peer's default, and phases cont-PATTERN-peer-prefill-tN. Without
 * it the table says "peer not run: PEER_MODELING not set".
 */
#ifndef BENCH_CONTENTION_H
#define BENCH_CONTENTION_H

#include <errno.h>
#include <time.h>

enum { CONT_DECODE = 32, CONT_MAX_LOAD = 16 };

/* A load: the children of one pattern, each the leader of its own group. */
typedef struct cont_load {
    pid_t pid[CONT_MAX_LOAD];
    int   n;
} cont_load;

/* Starts argv (argv[0] a path) in a process group of its own, output
 * discarded; ready_fd >= 0: the child's end of a pipe it writes a byte to
 * when its load is running (kept open across the exec). 0 or -1. */
static int cont_spawn(cont_load *L, char *const argv[], int ready_fd) {
    if (L->n >= CONT_MAX_LOAD) return -1;
    fflush(NULL);
    pid_t p = fork();
    if (p < 0) return -1;
    if (p == 0) {
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);   /* the bench ignores it while peers run (contention_peer.h); a load must not */
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) { dup2(dn, 0); dup2(dn, 1); dup2(dn, 2); }
        if (ready_fd >= 0) fcntl(ready_fd, F_SETFD, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(p, p);
    L->pid[L->n++] = p;
    return 0;
}

/* Ends every group of the load: SIGTERM (the ci loop removes its build
 * directory), SIGKILL to what is left 2 s later. */
static void cont_stop(cont_load *L) {
    for (int i = 0; i < L->n; i++) kill(-L->pid[i], SIGTERM);
    for (int i = 0; i < L->n; i++) {
        for (int w = 0; w < 200 && waitpid(L->pid[i], NULL, WNOHANG) == 0; w++) usleep(10000);
        kill(-L->pid[i], SIGKILL);
        waitpid(L->pid[i], NULL, WNOHANG);
    }
    L->n = 0;
}

/* ----------------------------------------------------------- the loads */

static double cont_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* `bench --load spin`: one core busy until killed. */
static int cont_load_spin(void) {
    volatile unsigned long x = 0;
    for (;;) x++;
    return 0;
}

/* `bench --load bursty SEED`: busy for 5-80 ms, asleep for 5-80 ms, again. */
static int cont_load_bursty(unsigned seed) {
    volatile unsigned long x = 0;
    for (;;) {
        const double on = 0.005 + 0.075 * (rand_r(&seed) / (double)RAND_MAX);
        const double off = 0.005 + 0.075 * (rand_r(&seed) / (double)RAND_MAX);
        for (const double end = cont_now() + on; cont_now() < end;)
            for (int i = 0; i < 10000; i++) x++;
        usleep((useconds_t)(off * 1e6));
    }
    return 0;
}

/* `bench --load membw`: a STREAM triad, a = b + 3 c, over three arrays of
 * 64 MiB each, until killed. */
static int cont_load_membw(void) {
    const size_t n = (size_t)8 << 20;   /* doubles per array: 64 MiB */
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    for (;;) {
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        double *t = a; a = b, b = t;   /* the stored array is read next: nothing folds the loop away */
    }
    return 0;
}

/* `bench --load team DIR THREADS READY_FD`: prefills of 256 tokens on a team
 * of THREADS, forever; a byte on READY_FD once the first is done. */
static int cont_load_team(const char *dir, int threads, int ready_fd) {
    vt_model *m;
    char err[1024];
    if (vt_model_open(&m, dir, err, sizeof err)) return 2;
    vt_session *s = session(m, threads, "off");
    const int T = 256;
    int32_t *tok = make_tokens(m->cfg.vocab_size, T);
    float *logits = malloc(sizeof(float) * (size_t)T * (size_t)m->cfg.vocab_size);
    if (!logits) return 1;
    for (int i = 0;; i++) {
        must(vt_session_prefill(s, tok, T, logits, err, sizeof err), err);
        if (i == 0 && ready_fd >= 0) {
            if (write(ready_fd, "r", 1) < 0) return 1;
            close(ready_fd);
        }
    }
    return 0;
}

/* The ci loop: the project's libraries and two unit tests built from
 * scratch into a temporary directory (make -B), then run, over and over. */
static const char CONT_CI_LOOP[] =
    "D=$(mktemp -d /tmp/vtlab-cont-ci.XXXXXX) || exit 1; trap 'rm -rf \"$D\"; exit 0' TERM INT; "
    "while :; do make -s -B -j2 BUILD=\"$D\" NO_CUDA=1 \"$D/tests/test_team\" \"$D/tests/test_dtype\"; "
    "\"$D/tests/test_team\"; \"$D/tests/test_dtype\"; done";

/* ---------------------------------------------------------- the patterns */

typedef struct cont_pattern {
    const char *name, *what;
} cont_pattern;

static const cont_pattern CONT_PATTERNS[] = {
    {"quiet", "no other load"},
    {"steady1", "one busy loop (one core)"},
    {"steady2", "two busy loops (both cores)"},
    {"bursty", "two processes, 5-80 ms busy / 5-80 ms asleep"},
    {"membw", "one process streaming memory (a triad)"},
    {"teams", "other vtlab processes, a 2-thread team each"},
    {"ci", "make -B -j2 of the project + unit tests, in a loop"},
};
enum { CONT_NPAT = sizeof CONT_PATTERNS / sizeof CONT_PATTERNS[0] };

/* Waits for n bytes on fd (the team loads' first prefills), 120 s at most. */
static void cont_wait_ready(int fd, int n) {
    char b;
    for (const double end = cont_now() + 120; n > 0 && cont_now() < end;) {
        ssize_t k = read(fd, &b, 1);
        if (k == 1) n--;
        else if (k == 0 || (k < 0 && errno != EINTR)) break;
    }
}

/* Starts pattern p's load. self: this program; dir: the model. */
static int cont_start(cont_load *L, const char *p, const char *self, const char *dir) {
    char a1[32], a2[32];
    if (!strcmp(p, "steady1") || !strcmp(p, "steady2")) {
        char *argv[] = {(char *)self, "--load", "spin", NULL};
        for (int i = 0; i < (p[6] == '2' ? 2 : 1); i++)
            if (cont_spawn(L, argv, -1)) return -1;
    } else if (!strcmp(p, "bursty")) {
        for (int i = 0; i < 2; i++) {
            snprintf(a1, sizeof a1, "%d", 101 + i);
            char *argv[] = {(char *)self, "--load", "bursty", a1, NULL};
            if (cont_spawn(L, argv, -1)) return -1;
        }
    } else if (!strcmp(p, "membw")) {
        char *argv[] = {(char *)self, "--load", "membw", NULL};
        if (cont_spawn(L, argv, -1)) return -1;
    } else if (!strcmp(p, "teams")) {
        int fds[2], n = env_int("BENCH_CONTENTION_TEAMS", 2);
        if (n > CONT_MAX_LOAD) n = CONT_MAX_LOAD;
        if (pipe(fds)) return -1;
        fcntl(fds[0], F_SETFD, FD_CLOEXEC);
        snprintf(a2, sizeof a2, "%d", fds[1]);
        for (int i = 0; i < n; i++) {
            char *argv[] = {(char *)self, "--load", "team", (char *)dir, "2", a2, NULL};
            if (cont_spawn(L, argv, fds[1])) return -1;
        }
        close(fds[1]);
        cont_wait_ready(fds[0], n);
        close(fds[0]);
    } else if (!strcmp(p, "ci")) {
        char *argv[] = {"/bin/sh", "-c", (char *)CONT_CI_LOOP, NULL};
        if (cont_spawn(L, argv, -1)) return -1;
        sleep(2);   /* make is compiling by then */
    }
    return 0;
}

#include "contention_peer.h"

/* What one pattern's rounds measured: vtlab's sessions [0] at the default
 * count and [1] on one thread, and, with the peer, its processes the same. */
typedef struct cont_result {
    double tp[2], td[2];   /* vtlab: medians of the seconds of one prefill, of CONT_DECODE steps */
    double ratio[2];       /* vtlab: medians of the rounds' ratios one thread / default, [0] prefill, [1] decode */
    long   gov[4];         /* what the governor chose: one thread in gov[0] of gov[1] prefill passes, gov[2] of gov[3] steps */
    int    peer;           /* the peer answered in every round: the figures below hold */
    double qp[2];          /* the peer: medians of the seconds of one prefill */
    double qratio;         /* the peer: median of the rounds' ratios one thread / default (prefill) */
    double vq;             /* median of the rounds' vtlab default / peer default (tok/s; prefill) */
} cont_result;

/* One pattern's rounds: session [0] at the default count, [1] on one thread.
 * A round is `rep` prefills of T tokens by each, then rep * CONT_DECODE
 * decode steps by each in chunks of CONT_CHUNK, the sessions taking turns at
 * every prefill and chunk, A B B A A B ... (the first alternating from round
 * to round): on a shared host the other tenants' load drifts within seconds
 * and comes in bursts of milliseconds, and what falls on one session must
 * fall on the other as well. rep makes a round's
 * prefills last ~0.15 s on one thread (the tiny model's 7 ms prefill, alone,
 * left two identical one-thread sessions 0.76 to 1.21 apart). With the peer
 * (pe, else NULL), its two processes time one prefill each between the
 * prefills and the decode steps (cont_peer_round): its rounds are vtlab's.
 * Out: per session the medians over the rounds of the seconds of one
 * prefill and of CONT_DECODE steps, and the medians of the rounds' own
 * ratios (the paired figures, which the drift between rounds does not
 * reach). */
enum { CONT_CHUNK = 8 };

static void cont_rounds(vt_model *m, int ndef, const int32_t *tok, int ntok, int T, float *logits, int rounds,
                        cont_peer *pe, cont_result *res) {
    vt_session *s[2] = {session(m, env_int("BENCH_CONTENTION_AA", 0) ? 1 : ndef, "off"), session(m, 1, "off")};
    double p[2][64], d[2][64], rp[64], rd[64], q[2][64], rq[64], rv[64], qs[2];
    if (rounds > 64) rounds = 64;
    prefill_s(s[0], tok, T, logits);   /* warm-up */
    int rep = (int)(0.15 / prefill_s(s[1], tok, T, logits)) + 1;
    if (rep > 32) rep = 32;
    while (rep > 1 && T + rep * CONT_DECODE > ntok) rep--;
    res->peer = pe != NULL;
    for (int r = 0; r < rounds; r++) {
        const int a = r % 2;
        p[0][r] = p[1][r] = d[0][r] = d[1][r] = 0;
        for (int i = 0; i < rep; i++)
            for (int j = 0; j < 2; j++) {
                const int k = (a + j + i) % 2;   /* A B, B A, A B, ... */
                p[k][r] += prefill_s(s[k], tok, T, logits) / rep;
            }
        if (res->peer && cont_peer_round(pe, r, qs)) res->peer = 0;
        if (res->peer) q[0][r] = qs[0], q[1][r] = qs[1], rq[r] = qs[1] / qs[0], rv[r] = qs[0] / p[0][r];
        for (int c = 0; c < rep * CONT_DECODE / CONT_CHUNK; c++)
            for (int j = 0; j < 2; j++) {
                const int k = (a + j + c) % 2;
                d[k][r] += decode_s(s[k], tok + T + c * CONT_CHUNK, CONT_CHUNK, logits) / rep;
            }
        rp[r] = p[1][r] / p[0][r];
        rd[r] = d[1][r] / d[0][r];
    }
    const vt_team *g = &s[0]->team;
    res->gov[0] = g->single_passes, res->gov[1] = g->passes, res->gov[2] = g->single_steps, res->gov[3] = g->steps;
    for (int k = 0; k < 2; k++) {
        res->tp[k] = median(p[k], rounds);
        res->td[k] = median(d[k], rounds);
        if (res->peer) res->qp[k] = median(q[k], rounds);
        vt_session_free(s[k]);
    }
    res->ratio[0] = median(rp, rounds);
    res->ratio[1] = median(rd, rounds);
    if (res->peer) res->qratio = median(rq, rounds), res->vq = median(rv, rounds);
}

static void cont_phase(phases *P, const vt_config *cfg, const char *pat, const char *what, int th, int T,
                       double sec) {
    char nm[32];
    snprintf(nm, sizeof nm, "cont-%s-%s-t%d", pat, what, th);
    vt_bench_phase *ph = add_phase(P, nm);
    ph->threads = th, ph->seconds = sec;
    if (what[0] == 'p') ph->tokens = T, ph->flops = T * flops_per_token(cfg, T / 2.0);
    else ph->context = T, ph->tokens = CONT_DECODE, ph->flops = CONT_DECODE * flops_per_token(cfg, T + CONT_DECODE / 2.0);
}

/* The table's header; the peer's line says what its rows are, or that it
 * did not run and why (never nothing). */
static void cont_header(int T, int rounds, int ndef, const char *peer_why) {
    printf("contention (rounds of prefills of T=%d and decode steps, %d per prefill, per session, the sessions "
           "taking turns; tok/s: medians of %d rounds; ratio: default / 1 thread, the median of the rounds' own ratios, goal >= "
           "0.90; default = %d thread(s), governed (model/team.h; the CPUs, lowered to a cgroup CPU quota)%s):\n", T,
           CONT_DECODE, rounds, ndef,
           env_int("BENCH_CONTENTION_AA", 0) ? "; BENCH_CONTENTION_AA=1: the 'default' is a second 1-thread session, "
                                               "the ratios are the noise floor" : "");
    if (peer_why)
        printf("peer not run: %s\n", peer_why);
    else
        printf("peer: PEER_MODELING=%s in two processes of its own (tests/bench/peer.py --serve-peer), 1 and %d "
               "threads, each timing one prefill of the same T tokens per round between vtlab's prefills and decode "
               "steps; its rows (+peer): its medians, tok/s, its ratio default / 1 thread, and vtlab default / peer "
               "default (tok/s, the median of the rounds' own ratios)\n", getenv("PEER_MODELING"), ndef);
    printf("  %-8s %-46s %8s %8s %6s | %8s %8s %6s\n", "pattern", "load", "pre t1", "pre def", "ratio", "dec t1",
           "dec def", "ratio");
}

/* A pattern's rows, and its phases: cont-PATTERN-{prefill,decode}-t1 and
 * -tN for the default count N; when N is 1 (one CPU, or a cgroup CPU quota
 * of at most one) the default session is a second one-thread session, its
 * ratio the noise floor, and only the -t1 phases are recorded (a name once). */
static void cont_report(phases *P, const vt_config *cfg, int i, int ndef, int T, int with_peer, double l0,
                        const cont_result *c) {
    const char *p = CONT_PATTERNS[i].name;
    printf("  %-8s %-46s %8.1f %8.1f %6.2f | %8.1f %8.1f %6.2f   (load %.1f; one thread: %ld/%ld prefills, "
           "%ld/%ld steps)\n", p, CONT_PATTERNS[i].what, T / c->tp[1], T / c->tp[0], c->ratio[0],
           CONT_DECODE / c->td[1], CONT_DECODE / c->td[0], c->ratio[1], l0, c->gov[0], c->gov[1], c->gov[2],
           c->gov[3]);
    cont_phase(P, cfg, p, "prefill", 1, T, c->tp[1]);
    if (ndef > 1) cont_phase(P, cfg, p, "prefill", ndef, T, c->tp[0]);
    cont_phase(P, cfg, p, "decode", 1, T, c->td[1]);
    if (ndef > 1) cont_phase(P, cfg, p, "decode", ndef, T, c->td[0]);
    if (!with_peer) return;
    if (!c->peer) {
        printf("  %-8s not run in this pattern: the peer stopped answering (above)\n", "+peer");
        return;
    }
    printf("  %-8s %-46s %8.1f %8.1f %6.2f | vtlab def / peer def %.2f\n", "+peer", "the peer (PEER_MODELING), prefill",
           T / c->qp[1], T / c->qp[0], c->qratio, c->vq);
    cont_phase(P, cfg, p, "peer-prefill", 1, T, c->qp[1]);
    if (ndef > 1) cont_phase(P, cfg, p, "peer-prefill", ndef, T, c->qp[0]);
}

/* Pattern p is in the comma-separated list which (NULL or "": all). */
static int cont_wanted(const char *which, const char *p) {
    if (!which || !*which) return 1;
    const char *h = strstr(which, p);
    size_t n = strlen(p);
    return h && (h == which || h[-1] == ',') && (!h[n] || h[n] == ',');
}

/* The table: each pattern of the comma-separated list which (NULL: all). */
static int contention_table(vt_model *m, const char *dir, const vt_config *cfg, const int32_t *tok, int ntok, int T,
                            float *logits, const char *which, phases *P) {
    const int ndef = vt_team_default_threads(), rounds = env_int("BENCH_CONTENTION_ROUNDS", 9);
    double worst = 1e9, vq_lo = 1e30, vq_hi = 0;
    char self[4096], why[1024] = "PEER_MODELING not set (make bench-contention PEER_MODELING=/path/to/"
                                 "modeling_kimi_linear.py: docs/bench.md, \"The official peer\")";
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return -1;
    self[sl] = 0;
    const char *pm = getenv("PEER_MODELING");
    cont_peer pe[2];
    int agree = 1, with_peer = pm && *pm &&
                               !cont_peers_open(pe, m, dir, ndef, tok, T, logits, &agree, why, sizeof why);
    cont_header(T, rounds, ndef, with_peer ? NULL : why);
    for (int i = 0; i < CONT_NPAT; i++) {
        const char *p = CONT_PATTERNS[i].name;
        if (!cont_wanted(which, p)) continue;
        cont_load L = {{0}, 0};
        cont_result c = {0};
        if (cont_start(&L, p, self, dir)) {
            cont_stop(&L);
            printf("  %-8s could not start its load\n", p);
            continue;
        }
        const double l0 = loadavg();
        const vt_gov gp0 = vt_team_gov(VT_TEAM_PREFILL, ndef), gd0 = vt_team_gov(VT_TEAM_DECODE, ndef);
        cont_rounds(m, ndef, tok, ntok, T, logits, rounds, with_peer && pe[0].up && pe[1].up ? pe : NULL, &c);
        cont_stop(&L);
        const vt_gov gp1 = vt_team_gov(VT_TEAM_PREFILL, ndef), gd1 = vt_team_gov(VT_TEAM_DECODE, ndef);
        if (env_int("BENCH_CONTENTION_VERBOSE", 0))
            printf("  # %s governor: prefill %ld probes, %ld changes, %ld called by a change of load; decode %ld, %ld, %ld\n",
                   p, gp1.probes - gp0.probes, gp1.changes - gp0.changes, gp1.odd_probes - gp0.odd_probes,
                   gd1.probes - gd0.probes, gd1.changes - gd0.changes, gd1.odd_probes - gd0.odd_probes);
        cont_report(P, cfg, i, ndef, T, with_peer, l0, &c);
        worst = c.ratio[0] < worst ? c.ratio[0] : worst;
        worst = c.ratio[1] < worst ? c.ratio[1] : worst;
        if (c.peer) vq_lo = c.vq < vq_lo ? c.vq : vq_lo, vq_hi = c.vq > vq_hi ? c.vq : vq_hi;
    }
    printf("contention: lowest ratio %.2f (goal >= 0.90)\n", worst);
    if (with_peer) {
        if (vq_hi > 0) printf("contention: vtlab default / peer default %.2f to %.2f over the patterns%s\n", vq_lo,
                              vq_hi, agree ? "" : " (WARNING: the peer's logits disagree with vtlab's, above)");
        cont_peer_stop(&pe[0]);
        cont_peer_stop(&pe[1]);
    }
    return 0;
}

#endif
