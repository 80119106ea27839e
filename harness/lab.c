/*
 * lab.c — dispatch of the lab commands (see lab.h): run, sweep, runs, show,
 * compare, export.
 *
 * Argument handling lives here; which options each command takes, their
 * values when they are a fixed set, and the help are the command table's
 * (help.c). The work is done by runner.c (run, sweep) and cmd_query.c (the
 * read-only commands). Every
 * usage error is exit 2 with a message naming the argument and what was
 * expected. SIGINT/SIGTERM during a run set a flag the runner polls between
 * sequences, so an interrupted run is recorded as KILLED rather than left
 * RUNNING.
 */
#include "lab.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "bisect.h"
#include "localize.h"
#include "bench_record.h"
#include "claim.h"
#include "cmd_query.h"
#include "help.h"
#include "store_query.h"
#include "ledger.h"
#include "ledger_engines.h"
#include "nightly.h"
#include "report.h"
#include "reopen.h"
#include "experiment.h"
#include "init.h"
#include "rerun.h"
#include "runner.h"
#include "store.h"
#include "merge.h"
#include "slurm.h"
#include "store_annot.h"
#include "util.h"

#define LAB_MAX_POS 4096
#define LAB_MAX_PAIRS 16   /* --knob and --tag filters of one `vtlab runs` */

typedef struct lab_args {
    const char *db, *arm, *format, *out, *experiment, *specs, *defect, *alpha, *perf_min_drop, *reason;
    const char *good, *bad, *repo, *build, *workdir, *max_scale, *cache;
    const char *shard, *into, *results, *partition, *time, *gpus, *account, *shards, *slurm, *merge_into, *vtlab;
    const char *claim_id, *hypothesis, *limit, *engine, *status, *since;
    const char *knob[LAB_MAX_PAIRS], *tag[LAB_MAX_PAIRS];   /* runs --knob/--tag, each as often as wanted */
    int         nknob, ntag;
    uint64_t    given;   /* the value options given, by their index in SLOTS: a second one is refused */
    int         force, json, no_plots, no_audit, exact, allow_dirty, keep, bisect, partial, dry_run, resume, use_slurm;
    const char *pos[LAB_MAX_POS];   /* positional arguments after the command */
    int         npos, maxpos;
} lab_args;

static int usage_error(const char *cmd, const char *fmt, const char *arg) {
    fprintf(stderr, "vtlab %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see `vtlab %s --help`)\n", cmd);
    return 2;
}

/* Where each option's value goes in lab_args. Which options a command
 * takes is the command table's (help.c) and nowhere else: an option the
 * table does not list for the command is unknown to it. "--slurm" is a
 * flag of status and sbatch options of submit: the table says which. */
typedef struct opt_slot {
    const char *name;
    int         flag;     /* 1: an int set to 1; 0: a const char * set to the value (once) */
    size_t      off;
    size_t      count;    /* > 0: a list (off: const char *[LAB_MAX_PAIRS]; count: its int length),
                             the option given as often as wanted */
} opt_slot;
#define FLAG(n, f) {n, 1, offsetof(lab_args, f), 0}
#define VALUE(n, f) {n, 0, offsetof(lab_args, f), 0}
#define LIST(n, f, c) {n, 0, offsetof(lab_args, f), offsetof(lab_args, c)}
static const opt_slot SLOTS[] = {
    FLAG("--force", force), FLAG("--json", json), FLAG("--no-plots", no_plots), FLAG("--no-audit", no_audit),
    FLAG("--exact", exact), FLAG("--allow-dirty", allow_dirty), FLAG("--keep-worktree", keep),
    FLAG("--bisect", bisect), FLAG("--partial", partial), FLAG("--dry-run", dry_run), FLAG("--resume", resume),
    FLAG("--slurm", use_slurm),
    VALUE("--db", db), VALUE("--arm", arm), VALUE("--format", format), VALUE("--out", out),
    VALUE("--experiment", experiment), VALUE("--specs", specs), VALUE("--defect", defect), VALUE("--alpha", alpha),
    VALUE("--reason", reason), VALUE("--perf-min-drop", perf_min_drop), VALUE("--good", good), VALUE("--bad", bad),
    VALUE("--repo", repo), VALUE("--build", build), VALUE("--workdir", workdir), VALUE("--max-scale", max_scale),
    VALUE("--shard", shard), VALUE("--into", into), VALUE("--results", results), VALUE("--partition", partition),
    VALUE("--time", time), VALUE("--gpus-per-task", gpus), VALUE("--account", account),
    VALUE("--shards-per-arm", shards), VALUE("--slurm", slurm), VALUE("--merge-into", merge_into),
    VALUE("--vtlab", vtlab), VALUE("--id", claim_id), VALUE("--hypothesis", hypothesis), VALUE("--limit", limit),
    VALUE("--status", status), VALUE("--since", since), VALUE("--engine", engine), VALUE("--cache", cache),
    LIST("--knob", knob, nknob), LIST("--tag", tag, ntag),
};
_Static_assert(sizeof SLOTS / sizeof SLOTS[0] <= 64, "lab_args.given has a bit per slot");

/* One option of cmd at argv[*i] into a: 0, or the exit status. A value
 * from a fixed set (runs --status, export --format) is checked here. */
static int parse_option(const char *cmd, int argc, char **argv, int *i, lab_args *a) {
    const char *s = argv[*i];
    const lab_help_opt *o = lab_help_option(lab_help_find(cmd), s);
    if (!o) return lab_help_bad_argument(cmd, s);
    const opt_slot *slot = NULL;
    for (size_t k = 0; !slot && k < sizeof SLOTS / sizeof SLOTS[0]; k++)
        if (!strcmp(SLOTS[k].name, s) && SLOTS[k].flag == !o->arg) slot = &SLOTS[k];
    if (!slot) return usage_error(cmd, "%s: the command table lists it, lab.c has no place for it", s);
    if (slot->flag) {
        *(int *)((char *)a + slot->off) = 1;
        return 0;
    }
    if (*i + 1 >= argc || !argv[*i + 1][0]) return usage_error(cmd, "%s needs a value", s);
    const char *v = argv[++*i];
    if (slot->count) {   /* a list: runs --knob and --tag, every one must hold */
        int *n = (int *)((char *)a + slot->count);
        if (*n >= LAB_MAX_PAIRS) return usage_error(cmd, "%s is given more than 16 times", s);
        ((const char **)((char *)a + slot->off))[(*n)++] = v;
        return lab_help_check_value(cmd, s, v);
    }
    /* given again, the first value would be dropped without a word */
    const uint64_t bit = (uint64_t)1 << (slot - SLOTS);
    if (a->given & bit) return usage_error(cmd, "%s is given twice: it takes one value", s);
    a->given |= bit;
    *(const char **)((char *)a + slot->off) = v;
    return lab_help_check_value(cmd, s, v);
}

/* Parses argv[1..] of a lab command: its options (the command table's) and
 * at most maxpos (0: 4) positional arguments. */
static int parse_args_n(const char *cmd, int argc, char **argv, int maxpos, lab_args *a) {
    memset(a, 0, sizeof *a);
    a->maxpos = maxpos;
    a->db = LAB_DEFAULT_DB;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (s[0] == '-' && s[1]) {
            int u = parse_option(cmd, argc, argv, &i, a);
            if (u) return u;
            continue;
        }
        if (a->npos >= (a->maxpos ? a->maxpos : 4)) return usage_error(cmd, "unexpected argument %s", s);
        a->pos[a->npos++] = s;
    }
    /* --cache DIR is VTLAB_CACHE for this process and what it starts (an
     * engine, a bisection's candidates), so that all of them share one cache */
    if (a->cache && setenv("VTLAB_CACHE", a->cache, 1))
        return usage_error(cmd, "--cache %s: cannot set VTLAB_CACHE", a->cache);
    return 0;
}

static int parse_args(const char *cmd, int argc, char **argv, lab_args *a) {
    return parse_args_n(cmd, argc, argv, 4, a);
}

static int parse_run_id(const char *cmd, const char *s, int64_t *id) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v <= 0) return usage_error(cmd, "RUN must be a run id (a positive integer), got \"%s\"", s);
    *id = v;
    return 0;
}

/* A count > 0 (--limit N): 0, or -1 when s is not one. */
static int parse_count(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v <= 0) return -1;
    *out = v;
    return 0;
}

static void print_summary(const lab_run_summary *s) {
    double over = s->wall_s > 0 ? 100.0 * (s->wall_s - s->forward_s) / s->wall_s : 0.0;
    printf("summary: %lld run(s) done, %lld skipped (already finished), %lld failed/killed, %lld stale redone",
           (long long)s->runs_done, (long long)s->runs_skipped, (long long)s->runs_failed, (long long)s->stale_redone);
    if (s->runs_busy) printf(", %lld left to another process", (long long)s->runs_busy);
    printf("\ntime: %.2f s wall, %.2f s in the forward pass, harness overhead %.1f%%\n", s->wall_s, s->forward_s, over);
}

static int finish_runs(int rc, const char *err, const lab_run_summary *sum) {
    if (rc) {
        fprintf(stderr, "vtlab: %s\n", err);
        return lab_exit_code(rc);
    }
    print_summary(sum);
    if (sum->runs_failed || sum->check_failures) {
        fprintf(stderr, "vtlab: %lld run(s) failed, %lld arm(s) with unexpected assertion outcomes\n",
                (long long)sum->runs_failed, (long long)sum->check_failures);
        return 1;
    }
    return 0;
}

static int cmd_run(int argc, char **argv) {
    lab_args a;
    int u = parse_args("run", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("run", "expected one EXPERIMENT.json%s", "");
    lab_run_opts o = {a.db, a.arm, a.force, lab_progress_mode(), 0, 0};
    lab_run_more m = {0};
    if (a.shard && lab_parse_shard(a.shard, &o.shard_index, &o.shard_count))
        return usage_error("run", "--shard must be I/N with 0 <= I < N (e.g. 0/4), got \"%s\"", a.shard);
    if (a.limit && (parse_count(a.limit, &m.limit) || a.shard))
        return usage_error("run", "--limit N takes a number of sequences > 0, and not with --shard; got \"%s\"", a.limit);
    lab_run_summary sum = {0};
    char err[2048] = "";
    lab_install_signals();
    int rc = lab_run_experiment_more(a.pos[0], &o, &m, &sum, err, sizeof err);
    return finish_runs(rc, err, &sum);
}

static int cmd_sweep(int argc, char **argv) {
    lab_args a;
    int u = parse_args("sweep", argc, argv, &a);
    if (u) return u;
    if (a.npos > 1) return usage_error("sweep", "expected at most one DIR, got %s", a.pos[1]);
    const char *dir = a.npos ? a.pos[0] : LAB_DEFAULT_EXPERIMENTS;
    char **files = NULL;
    int64_t n = 0;
    char lerr[1024] = "";
    if (lab_list_json(dir, 0, &files, &n, lerr, sizeof lerr)) {
        fprintf(stderr, "vtlab sweep: %s\n", lerr);
        return 2;
    }
    int status = 0;
    char err[2048] = "";
    /* Parse every file first: a malformed one stops the sweep before any
     * database work (exit 2, nothing written). */
    for (int64_t i = 0; i < n; i++) {
        lab_experiment *e = NULL;
        int rc = lab_experiment_load(&e, files[i], err, sizeof err);
        lab_experiment_free(e);
        if (rc) {
            fprintf(stderr, "vtlab: %s\n", err);
            status = lab_exit_code(rc);
        }
    }
    if (n == 0) {
        fprintf(stderr, "vtlab sweep: %s: no *.json experiment files\n", dir);
        status = 2;
    }
    lab_run_summary sum = {0};
    lab_install_signals();
    for (int64_t i = 0; i < n && !status; i++) {
        lab_run_opts o = {a.db, NULL, a.force, lab_progress_mode(), 0, 0};
        printf("== %s\n", files[i]);
        fflush(stdout);
        int rc = lab_run_experiment(files[i], &o, &sum, err, sizeof err);
        if (rc) {
            fprintf(stderr, "vtlab: %s\n", err);
            int ec = lab_exit_code(rc);
            if (ec > status) status = ec;
            if (lab_interrupted) break;
        }
    }
    lab_free_list(files, n);
    if (status) return status;
    return finish_runs(0, "", &sum);
}

/* Opens the database for a read command, read-only: a missing file is bad
 * input (the read commands never create a database), a corrupt one is named,
 * and a read-only directory or mount is fine. */
static int open_for_read(const char *cmd, const char *db, lab_store **st) {
    char err[1024] = "";
    if (!lab_path_exists(db)) {
        fprintf(stderr, "vtlab %s: %s: no such database (run an experiment first, or pass --db PATH)\n", cmd, db);
        return 2;
    }
    int rc = lab_store_open_readonly(st, db, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab %s: %s\n", cmd, err);
        return lab_exit_code(rc);
    }
    return 0;
}

/* The NAME=VALUE arguments of --knob (or --tag) as the JSON array of
 * [name, value] pairs the query takes (*json: malloc'ed; NULL when none). */
static int pairs_json(const char *const *args, int n, char **json) {
    *json = NULL;
    if (n == 0) return 0;
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(args[i], '=');
        if (!eq || eq == args[i]) return usage_error("runs", "--knob and --tag take NAME=VALUE, got \"%s\"", args[i]);
    }
    cJSON *arr = cJSON_CreateArray();
    int ok = arr != NULL;
    for (int i = 0; ok && i < n; i++) {
        const char *eq = strchr(args[i], '=');
        char *name = strndup(args[i], (size_t)(eq - args[i]));
        cJSON *pair = cJSON_CreateArray();
        ok = name && pair && cJSON_AddItemToArray(pair, cJSON_CreateString(name)) &&
             cJSON_AddItemToArray(pair, cJSON_CreateString(eq + 1)) && cJSON_AddItemToArray(arr, pair);
        if (!ok) cJSON_Delete(pair);   /* not in arr yet: ours to free */
        free(name);
    }
    *json = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!*json) {
        fprintf(stderr, "vtlab runs: out of memory\n");
        return 1;
    }
    return 0;
}

/* `vtlab runs` filters: a date or UTC time, NAME=VALUE pairs (the status,
 * one of those vtlab writes, was checked by the parser); anything else is a
 * usage error (exit 2) naming it. The pairs' JSON (*knobs, *tags) is the
 * caller's to free. */
static int runs_filter(const lab_args *a, lab_query_filter *f, char **knobs, char **tags) {
    memset(f, 0, sizeof *f);
    *knobs = *tags = NULL;
    f->experiment = a->experiment;
    f->arm = a->arm;
    f->status = a->status;
    f->engine = a->engine;
    f->since = a->since;
    int y, mo, d, h, mi, sec;
    char z;
    if (a->since && !(strlen(a->since) == 10 && sscanf(a->since, "%4d-%2d-%2d", &y, &mo, &d) == 3) &&
        !(strlen(a->since) == 20 && sscanf(a->since, "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &z) == 7 && z == 'Z'))
        return usage_error("runs", "--since takes a date YYYY-MM-DD or a UTC time YYYY-MM-DDTHH:MM:SSZ, got \"%s\"", a->since);
    int u = pairs_json(a->knob, a->nknob, knobs);
    if (!u) u = pairs_json(a->tag, a->ntag, tags);
    f->knobs = *knobs, f->tags = *tags;
    return u;
}

static int cmd_read(const char *cmd, int argc, char **argv) {
    lab_args a;
    int u;
    int64_t id = 0, id2 = 0;
    lab_query_filter f;
    char *knobs = NULL, *tags = NULL;   /* runs: its --knob and --tag pairs as JSON */
    if (!strcmp(cmd, "runs")) {
        if ((u = parse_args(cmd, argc, argv, &a))) return u;
        if (a.npos) return usage_error(cmd, "unexpected argument %s", a.pos[0]);
        if ((u = runs_filter(&a, &f, &knobs, &tags))) {
            free(knobs), free(tags);
            return u;
        }
    } else if (!strcmp(cmd, "show")) {
        if ((u = parse_args(cmd, argc, argv, &a))) return u;
        if (a.npos != 1) return usage_error(cmd, "expected one RUN id%s", "");
        if ((u = parse_run_id(cmd, a.pos[0], &id))) return u;
    } else if (!strcmp(cmd, "compare")) {
        if ((u = parse_args(cmd, argc, argv, &a))) return u;
        if (a.npos != 2) return usage_error(cmd, "expected two run ids RUN_A RUN_B%s", "");
        if ((u = parse_run_id(cmd, a.pos[0], &id)) || (u = parse_run_id(cmd, a.pos[1], &id2))) return u;
    } else {
        if ((u = parse_args(cmd, argc, argv, &a))) return u;
        if (a.npos != 1) return usage_error(cmd, "expected one RUN id%s", "");
        if ((u = parse_run_id(cmd, a.pos[0], &id))) return u;
        if (!a.format) a.format = "json";   /* its values checked by the parser (help.c's table) */
    }
    lab_store *st = NULL;
    if ((u = open_for_read(cmd, a.db, &st))) {
        free(knobs), free(tags);
        return u;
    }
    char err[1024] = "";
    int rc;
    if (!strcmp(cmd, "runs")) rc = lab_cmd_runs_filtered(st, &f, a.json, err, sizeof err);
    else if (!strcmp(cmd, "show") && a.json) rc = lab_cmd_export(st, id, "json", stdout, err, sizeof err);
    else if (!strcmp(cmd, "show")) rc = lab_cmd_show(st, id, err, sizeof err);
    else if (!strcmp(cmd, "compare")) rc = lab_cmd_compare(st, id, id2, a.json, err, sizeof err);
    else {
        if (a.out) rc = lab_cmd_export_file(st, id, a.format, a.out, err, sizeof err);
        else rc = lab_cmd_export(st, id, a.format, stdout, err, sizeof err);
    }
    lab_store_close(st);
    free(knobs), free(tags);
    if (rc) {
        fprintf(stderr, "vtlab %s: %s\n", cmd, err);
        return lab_exit_code(rc);
    }
    return 0;
}

/* ------------------------------------------------ the ledger: specs, audit, reopen */

static int cmd_specs(int argc, char **argv) {
    lab_args a;
    int u = parse_args("specs", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("specs", "expected `specs check [--specs DIR]`%s", "");
    if (strcmp(a.pos[0], "check")) return lab_help_value_error("specs", "the subcommand", a.pos[0], "check");
    const char *dir = a.specs ? a.specs : LAB_DEFAULT_SPECS;
    lab_ledger l;
    char err[2048] = "";
    int rc = lab_ledger_load(dir, &l, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab specs: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("%s: %lld claim(s), %lld defect(s): ok\n", dir, (long long)l.n_claims, (long long)l.n_defects);
    for (int64_t i = 0; i < l.n_claims; i++) {
        const lab_claim *c = &l.claims[i];
        printf("  claim  %-40s %-12s %lld/%lld%s%s\n", c->id, c->verdict, (long long)c->k, (long long)c->n,
               c->superseded_by ? "  superseded by " : "", c->superseded_by ? c->superseded_by : "");
    }
    for (int64_t i = 0; i < l.n_defects; i++)
        printf("  defect %-40s site %s, %s%s%s%s\n", l.defects[i].id, l.defects[i].site,
               l.defects[i].replay_fault ? "replay " : "no replay", l.defects[i].replay_fault ? l.defects[i].replay_knob : "",
               l.defects[i].replay_fault ? "=" : "", l.defects[i].replay_fault ? l.defects[i].replay_fault : "");
    int problems = 0;
    rc = lab_ledger_check_engines(&l, stdout, &problems, err, sizeof err);
    lab_ledger_free(&l);
    if (rc) {
        fprintf(stderr, "vtlab specs: %s\n", err);
        return lab_exit_code(rc);
    }
    if (problems) fprintf(stderr, "vtlab specs: %d problem(s) found against the records' engines\n", problems);
    return problems ? 2 : 0;
}

static int cmd_audit(int argc, char **argv) {
    lab_args a;
    int u = parse_args("audit", argc, argv, &a);
    if (u) return u;
    if (a.npos) return usage_error("audit", "unexpected argument %s", a.pos[0]);
    lab_audit_opts o = {a.db, a.specs ? a.specs : LAB_DEFAULT_SPECS, a.json};
    lab_audit_result res;
    char err[2048] = "";
    int rc = lab_audit_run(&o, &res, stdout, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab audit: %s\n", err);
        return lab_exit_code(rc);
    }
    return res.n_open ? 1 : 0;
}

static int cmd_reopen(int argc, char **argv) {
    lab_args a;
    int u = parse_args("reopen", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("reopen", "expected one CLAIM_ID%s", "");
    lab_reopen_opts o = {a.pos[0], a.db, a.specs ? a.specs : LAB_DEFAULT_SPECS, a.defect, LAB_DEFAULT_REOPEN_DIR};
    char err[2048] = "", id[128] = "";
    lab_install_signals();
    int rc = lab_reopen(&o, stdout, id, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab reopen: %s\n", err);
        return lab_exit_code(rc);
    }
    return 0;
}

static int cmd_claim(int argc, char **argv) {
    lab_args a;
    int64_t run = 0;
    int u = parse_args("claim", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("claim", "expected one RUN id (an arm's finished run, see `vtlab runs`)%s", "");
    if (!a.claim_id) return usage_error("claim", "--id ID is required (the new claim's id: SPECS/claims/ID.json)%s", "");
    if ((u = parse_run_id("claim", a.pos[0], &run))) return u;
    lab_claim_opts o = {run, a.claim_id, a.specs ? a.specs : LAB_DEFAULT_SPECS, a.db, a.hypothesis};
    char err[2048] = "", path[4400] = "", warning[1024] = "";
    int rc = lab_claim_record(&o, stdout, path, sizeof path, warning, sizeof warning, err, sizeof err);
    if (warning[0]) fprintf(stderr, "vtlab claim: warning: %s\n", warning);
    if (rc) {
        fprintf(stderr, "vtlab claim: %s\n", err);
        return lab_exit_code(rc);
    }
    return 0;
}

static int cmd_record_bench(int argc, char **argv) {
    lab_args a;
    int u = parse_args("record-bench", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("record-bench", "expected one REPORT.json (from `make bench` or bench_cuda)%s", "");
    char err[2048] = "";
    int rc = lab_record_bench(a.pos[0], a.db, stdout, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab record-bench: %s\n", err);
        return lab_exit_code(rc);
    }
    return 0;
}

/* A fraction option in (0, 1): 0, or 2 with the message. */
static int parse_fraction(const char *cmd, const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0 && v < 1))
        return usage_error(cmd, "%s must be a number in (0, 1)", opt);
    *out = v;
    return 0;
}

/* The kinds of regression a nightly finds (nightly_compare.c), the KIND of
 * an `ack` key EXPERIMENT/ARM/KIND. */
#define LAB_ACK_KINDS "check|accuracy|numerics|performance"

/* An audit rule's code: R and digits (R1..R6). */
static int is_rule(const char *s, size_t n) { return n >= 2 && s[0] == 'R' && strspn(s + 1, "0123456789") >= n - 1; }

/* A KEY of the shape EXPERIMENT/ARM/KIND must name one of the kinds, or the
 * nightly's lookup answers "no regression found" for a misspelt kind
 * ("perf"). Confound keys (confound_key.h) are let through: their rule is
 * the second part (CLAIM_ID/RULE[/CAUSE]) or the third (EXPERIMENT/ARM/RULE
 * [/CAUSE]), and "run N/RULE..." has a blank. 0, or 2 with the message. */
static int check_ack_kind(const char *key) {
    const char *s1 = strchr(key, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s1 || !s2 || strchr(s2 + 1, '/') || strchr(key, ' ')) return 0;
    const char *kind = s2 + 1;
    if (is_rule(s1 + 1, (size_t)(s2 - s1 - 1)) || is_rule(kind, strlen(kind))) return 0;
    char what[600];
    snprintf(what, sizeof what, "%.500s: the regression's KIND (EXPERIMENT/ARM/KIND)", key);
    for (const char *p = LAB_ACK_KINDS; *p;) {
        size_t k = strcspn(p, "|");
        if (k == strlen(kind) && !strncmp(p, kind, k)) return 0;
        p += k + (p[k] == '|');
    }
    return lab_help_value_error("ack", what, kind, LAB_ACK_KINDS);
}

/* `vtlab ack KEY --reason TEXT`, `ack --list`, `ack --remove KEY` (nightly.h).
 * --list and --remove are taken out of argv before the common parser sees it. */
static int cmd_ack(int argc, char **argv) {
    lab_args a;
    int list = 0, rm = 0, n = 0;
    char *rest[argc + 1];
    for (int i = 0; i < argc; i++) {
        if (i && !strcmp(argv[i], "--list")) list = 1;
        else if (i && !strcmp(argv[i], "--remove")) rm = 1;
        else rest[n++] = argv[i];
    }
    rest[n] = NULL;
    int u = parse_args("ack", n, rest, &a);
    if (u) return u;
    if (list && rm) return usage_error("ack", "--list and --remove do not go together%s", "");
    if ((list || rm) && a.reason) return usage_error("ack", "--reason goes with KEY only, not with %s", list ? "--list" : "--remove");
    if (a.npos > (list ? 0 : 1)) return usage_error("ack", "unexpected argument %s", a.pos[list ? 0 : 1]);
    if (!list && (!a.npos || !a.pos[0][0]))
        return usage_error("ack", "which confound or regression? (its key, as in nightly.md)%s", "");
    if (!list && !rm && !a.reason)
        return usage_error("ack", "--reason TEXT is required (why this confound or regression is known and accepted)%s", "");
    if (!list && !rm && (u = check_ack_kind(a.pos[0]))) return u;
    if (!lab_path_exists(a.db)) {
        fprintf(stderr, "vtlab ack: %s: no such database\n", a.db);
        return 2;
    }
    if (list) return lab_cmd_ack_list(a.db);
    if (rm) return lab_cmd_ack_remove(a.db, a.pos[0]);
    return lab_cmd_ack(a.db, a.pos[0], a.reason);
}

static int cmd_report(int argc, char **argv) {
    lab_args a;
    int u = parse_args("report", argc, argv, &a);
    if (u) return u;
    if (a.npos) return usage_error("report", "unexpected argument %s", a.pos[0]);
    return lab_report_cmd(a.db, a.out ? a.out : LAB_DEFAULT_REPORT, !a.no_plots);
}

static int cmd_nightly(int argc, char **argv) {
    lab_args a;
    int u = parse_args("nightly", argc, argv, &a);
    if (u) return u;
    if (a.npos > 1) return usage_error("nightly", "unexpected argument %s (one experiments DIR at most)", a.pos[1]);
    lab_nightly_opts o;
    lab_nightly_defaults(&o);
    o.db_path = a.db;
    if (a.npos) o.exp_dir = a.pos[0];
    if (a.out) o.out_dir = a.out;
    if (a.specs) o.specs_dir = a.specs;
    if (a.alpha && parse_fraction("nightly", "--alpha", a.alpha, &o.alpha)) return 2;
    if (a.perf_min_drop && parse_fraction("nightly", "--perf-min-drop", a.perf_min_drop, &o.perf_min_drop)) return 2;
    if (a.no_audit) o.audit = 0;
    if (a.no_plots) o.plots = 0;
    if (a.bisect || (getenv("VTLAB_NIGHTLY_BISECT") && !strcmp(getenv("VTLAB_NIGHTLY_BISECT"), "1"))) o.bisect = 1;
    return lab_nightly_cmd(&o, a.specs != NULL);
}

static int cmd_bisect(int argc, char **argv) {
    lab_args a;
    int u = parse_args("bisect", argc, argv, &a);
    if (u) return u;
    if (a.npos != 1) return usage_error("bisect", "expected one EXPERIMENT.json%s", "");
    if (!a.arm) return usage_error("bisect", "--arm NAME is required (the arm that regressed)%s", "");
    if (!a.good || !a.bad) return usage_error("bisect", "--good REV and --bad REV are required%s", "");
    lab_bisect_opts o;
    lab_bisect_defaults(&o);
    o.experiment = a.pos[0];
    o.arm = a.arm;
    o.good = a.good;
    o.bad = a.bad;
    if (a.repo) o.repo = a.repo;
    o.build_cmd = a.build;
    o.workdir = a.workdir;
    o.db_path = a.db;
    o.exact = a.exact;
    o.allow_dirty = a.allow_dirty;
    o.keep_worktree = a.keep;
    if (a.alpha && parse_fraction("bisect", "--alpha", a.alpha, &o.alpha)) return 2;
    if (a.max_scale) {
        char *end;
        errno = 0;
        long v = strtol(a.max_scale, &end, 10);
        if (errno || *end || v < 1 || v > 1024)
            return usage_error("bisect", "--max-scale must be an integer 1..1024, got \"%s\"", a.max_scale);
        o.max_scale = v;
    }
    return lab_bisect_cmd(&o);
}

static int cmd_merge(int argc, char **argv) {
    lab_args a;
    int u = parse_args_n("merge", argc, argv, LAB_MAX_POS, &a);
    if (u) return u;
    if (a.npos < 1) return usage_error("merge", "expected one or more SHARD.db%s", "");
    if (!a.into) return usage_error("merge", "--into RESULTS.db is required%s", "");
    for (int i = 0; i < a.npos; i++)
        if (!strcmp(a.pos[i], a.into)) return usage_error("merge", "--into %s is also a shard database", a.into);
    lab_merge_summary sum;
    char err[4096] = "";
    int rc = lab_merge(a.pos, a.npos, a.into, a.partial, &sum, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab merge: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("merge: %lld run(s) merged from %lld shard run(s), %lld already in %s, %lld left out; %.2f s\n",
           (long long)sum.merged, (long long)sum.shards, (long long)sum.already, a.into, (long long)sum.left_out,
           sum.wall_s);
    return 0;
}

static int submit_opts(const char *cmd, const lab_args *a, lab_submit_opts *o) {
    memset(o, 0, sizeof *o);
    o->files = a->pos;
    o->n_files = a->npos;
    o->results = a->results ? a->results : "shards";
    o->partition = a->partition;
    o->time = a->time;
    o->gpus_per_task = a->gpus;
    o->account = a->account;
    o->extra = a->slurm;
    o->merge_into = a->merge_into;
    o->vtlab = a->vtlab;
    o->dry_run = a->dry_run;
    o->resume = a->resume;
    o->use_slurm = a->use_slurm;
    o->shards_per_arm = 1;
    if (a->shards) {
        char *end;
        errno = 0;
        long long v = strtoll(a->shards, &end, 10);
        if (errno || *end || v < 1 || v > 100000)
            return usage_error(cmd, "--shards-per-arm must be an integer 1..100000, got \"%s\"", a->shards);
        o->shards_per_arm = v;
    }
    return 0;
}

static int cmd_submit(int argc, char **argv) {
    lab_args a;
    int u = parse_args_n("submit", argc, argv, LAB_MAX_POS, &a);
    if (u) return u;
    if (a.npos < 1) return usage_error("submit", "expected one or more EXPERIMENT.json%s", "");
    lab_submit_opts o;
    if ((u = submit_opts("submit", &a, &o))) return u;
    char err[4096] = "";
    int rc = lab_submit(&o, err, sizeof err);
    if (rc) fprintf(stderr, "vtlab submit: %s\n", err);
    return lab_exit_code(rc);
}

static int cmd_status(int argc, char **argv) {
    lab_args a;
    int u = parse_args_n("status", argc, argv, 0, &a);
    if (u) return u;
    lab_submit_opts o;
    if ((u = submit_opts("status", &a, &o))) return u;
    char err[4096] = "";
    int complete = 0;
    int rc = lab_status(&o, &complete, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab status: %s\n", err);
        return lab_exit_code(rc);
    }
    return complete ? 0 : 1;
}

/* ------------------------------------------------ a user's project: init, rerun, tag, note */

static int cmd_init(int argc, char **argv) {
    lab_args a;
    int u = parse_args("init", argc, argv, &a);
    if (u) return u;
    if (a.npos > 1) return usage_error("init", "unexpected argument %s (one DIR at most)", a.pos[1]);
    char err[4600] = "";
    int rc = lab_init(a.npos ? a.pos[0] : ".", stdout, err, sizeof err);
    if (rc) fprintf(stderr, "vtlab init: %s\n", err);
    return lab_exit_code(rc);
}

static int cmd_rerun(int argc, char **argv) {
    lab_args a;
    int u = parse_args_n("rerun", argc, argv, LAB_MAX_POS, &a);
    if (u) return u;
    if (!a.npos == !a.experiment)
        return usage_error("rerun", "expected RUN... (run ids, see `vtlab runs`) or --experiment ID, not both%s", "");
    int64_t *ids = calloc((size_t)a.npos + 1, sizeof *ids), failed = 0;
    if (!ids) return usage_error("rerun", "out of memory%s", "");
    for (int i = 0; i < a.npos && !u; i++) u = parse_run_id("rerun", a.pos[i], &ids[i]);
    if (u) { free(ids); return u; }
    lab_rerun_opts o = {a.db, ids, a.npos, a.experiment, a.engine, a.force};
    char err[4096] = "";
    lab_install_signals();
    int rc = lab_rerun(&o, stdout, &failed, err, sizeof err);
    free(ids);
    if (rc) {
        fprintf(stderr, "vtlab rerun: %s\n", err);
        return lab_exit_code(rc);
    }
    if (failed) fprintf(stderr, "vtlab rerun: %lld rerun(s) did not finish\n", (long long)failed);
    return failed ? 1 : 0;
}

/* `vtlab tag RUN key=value...` and `vtlab note RUN TEXT`: a write to an
 * existing database (never created here), every argument checked first. */
static int cmd_annotate(const char *cmd, int argc, char **argv) {
    lab_args a;
    int64_t run = 0;
    int tag = !strcmp(cmd, "tag");
    int u = parse_args_n(cmd, argc, argv, LAB_MAX_POS, &a);
    if (u) return u;
    if (a.npos < 2) return usage_error(cmd, tag ? "expected RUN KEY=VALUE...%s" : "expected RUN TEXT%s", "");
    if (!tag && a.npos > 2) return usage_error(cmd, "expected one TEXT (quote it), got also \"%s\"", a.pos[2]);
    if ((u = parse_run_id(cmd, a.pos[0], &run))) return u;
    int64_t n = a.npos - 1;
    char **keys = calloc((size_t)n, sizeof *keys), **vals = calloc((size_t)n, sizeof *vals), err[1024] = "";
    int rc = keys && vals ? LAB_OK : lab_oom(err, sizeof err);
    for (int64_t i = 0; tag && !rc && i < n; i++) rc = lab_annot_parse_tag(a.pos[i + 1], &keys[i], &vals[i], err, sizeof err);
    if (!tag && !rc) rc = lab_annot_check_note(a.pos[1], err, sizeof err);
    if (!rc && !lab_path_exists(a.db))
        rc = lab_errf(err, sizeof err, LAB_EINPUT, "%s: no such database (pass --db PATH)", a.db);
    lab_store *st = NULL;
    if (!rc) rc = lab_store_open(&st, a.db, err, sizeof err);
    if (!rc) rc = tag ? lab_store_tag(st, run, n, keys, vals, err, sizeof err) : lab_store_note(st, run, a.pos[1], err, sizeof err);
    lab_store_close(st);
    for (int64_t i = 0; keys && i < n; i++) free(keys[i]);   /* a value lives in its key's copy */
    free(keys);
    free(vals);
    if (rc) {
        fprintf(stderr, "vtlab %s: %s\n", cmd, err);
        return lab_exit_code(rc);
    }
    printf("run %lld: %s\n", (long long)run, tag ? "tagged" : "note added");
    return 0;
}

int lab_main(const char *cmd, int argc, char **argv, int *handled) {
    *handled = 1;
    if (!strcmp(cmd, "run")) return cmd_run(argc, argv);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc, argv);
    if (!strcmp(cmd, "merge")) return cmd_merge(argc, argv);
    if (!strcmp(cmd, "submit")) return cmd_submit(argc, argv);
    if (!strcmp(cmd, "status")) return cmd_status(argc, argv);
    if (!strcmp(cmd, "runs") || !strcmp(cmd, "show") || !strcmp(cmd, "compare") || !strcmp(cmd, "export"))
        return cmd_read(cmd, argc, argv);
    if (!strcmp(cmd, "specs")) return cmd_specs(argc, argv);
    if (!strcmp(cmd, "audit")) return cmd_audit(argc, argv);
    if (!strcmp(cmd, "reopen")) return cmd_reopen(argc, argv);
    if (!strcmp(cmd, "claim")) return cmd_claim(argc, argv);
    if (!strcmp(cmd, "record-bench")) return cmd_record_bench(argc, argv);
    if (!strcmp(cmd, "ack")) return cmd_ack(argc, argv);
    /* reports and nightly CI sweeps (their options parsed above, like every command's) */
    if (!strcmp(cmd, "report")) return cmd_report(argc, argv);
    if (!strcmp(cmd, "nightly")) return cmd_nightly(argc, argv);
    if (!strcmp(cmd, "bisect")) return cmd_bisect(argc, argv);
    if (!strcmp(cmd, "localize")) return lab_localize_main(argc, argv);   /* its options: localize.c */
    if (!strcmp(cmd, "init")) return cmd_init(argc, argv);
    if (!strcmp(cmd, "rerun")) return cmd_rerun(argc, argv);
    if (!strcmp(cmd, "tag") || !strcmp(cmd, "note")) return cmd_annotate(cmd, argc, argv);
    *handled = 0;
    return 0;
}
