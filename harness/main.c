/*
 * main.c — the vtlab command line.
 *
 * The model commands live here (synth, validate, logits, generate, knobs,
 * faults); the lab commands (run, sweep, runs, show, compare, export, ...) are
 * dispatched to lab.c. This is the only place that exits. Exit status: 0
 * success, 1 a check failed, 2 bad input or usage (with a message on stderr
 * naming the file, the field or tensor, and what was expected).
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness/cli.h"
#include "harness/engine_check.h"
#include "harness/engine_serve.h"
#include "harness/experiment.h"   /* LAB_DS_MAX_SEQ_LEN: the longest sequence, as in a dataset */
#include "harness/help.h"
#include "harness/lab.h"
#include "model/vt.h"

extern char **environ;

/* `vtlab CMD --help` (or -h, or `vtlab help CMD`): CMD's entry of the
 * command table (help.c) on stdout; an unknown CMD is exit 2 with the
 * command it may be a misspelling of. */
static int command_help(const char *cmd) {
    if (lab_help_command(stdout, cmd) == 0) return 0;
    return lab_help_unknown_command(cmd);
}

/* `vtlab help [CMD] [--markdown]`. */
static int cmd_help(int argc, char **argv) {
    if (argc == 1) { lab_help_usage(stdout); return 0; }
    if (argc == 2 && !strcmp(argv[1], "--markdown")) { lab_help_markdown(stdout); return 0; }
    if (argc == 2 && argv[1][0] != '-') return command_help(argv[1]);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && strcmp(argv[i], "--markdown")) return lab_help_bad_argument("help", argv[i]);
    return lab_help_bad_argument("help", argv[2]);
}

/* The names split_equals allocated ("--opt" of "--opt=value"), freed when
 * the command has returned: held in a static, they were still reported by
 * LeakSanitizer (a store to a static that is never read may be dropped by
 * the compiler), which turned an ASan build's exit 2 into 1. */
static char **split_argv, **split_owned;
static int    split_n_owned;

static void split_free(void) {
    for (int i = 0; i < split_n_owned; i++) free(split_owned[i]);
    free(split_owned);
    free(split_argv);
    split_owned = split_argv = NULL;
    split_n_owned = 0;
}

/* "--opt=value" becomes "--opt" "value", so every command takes both
 * spellings. The value of `submit --slurm` is sbatch options, which have
 * their own "=": it is left whole. */
static char **split_equals(int *argc, char **argv) {
    char **out = split_argv = calloc((size_t)*argc * 2 + 1, sizeof *out);
    split_owned = calloc((size_t)*argc + 1, sizeof *split_owned);
    if (!out || !split_owned) { split_free(); return argv; }
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        char *eq = strchr(argv[i], '=');
        int slurm_value = i > 1 && !strcmp(argv[i - 1], "--slurm");
        char *name = NULL;
        if (i > 0 && !slurm_value && !strncmp(argv[i], "--", 2) && eq && eq > argv[i] + 2 &&
            (name = strndup(argv[i], (size_t)(eq - argv[i])))) {
            out[n++] = split_owned[split_n_owned++] = name;
            out[n++] = eq + 1;
        } else {
            out[n++] = argv[i];
        }
    }
    *argc = n;
    return out;
}

/* Status from the library -> exit status: bad input, and a request this
 * machine cannot serve (VT_BACKEND=cuda without a device), are 2; the rest 1. */
static int exit_for(int status) { return vt_exit_code(status); }

static int fail(int status, const char *msg) {
    fprintf(stderr, "vtlab: %s\n", msg);
    return exit_for(status);
}

static int cmd_synth(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *dtype = "f32", *seed_s = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed_s = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
        else return lab_help_bad_argument("synth", argv[i]);
    }
    if (!config || !out || !seed_s) return lab_cli_usage_error("synth", "--config, --seed and --out are required");
    if (lab_help_check_value("synth", "--dtype", dtype)) return 2;
    uint64_t seed;
    if (lab_cli_parse_u64(seed_s, &seed) != 0) {
        fprintf(stderr, "vtlab synth: --seed %s: expected a non-negative integer\n", seed_s);
        return 2;
    }
    char err[1024];
    int rc = vt_synth(config, seed, dtype, out, err, sizeof err);
    if (rc) return fail(rc, err);
    printf("wrote %s/config.json and %s/model.safetensors (seed %llu, %s)\n", out, out, (unsigned long long)seed, dtype);
    return 0;
}

static int cmd_validate(int argc, char **argv) {
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else return lab_help_bad_argument("validate", argv[i]);
    }
    if (!dir) return lab_cli_usage_error("validate", "--model is required");
    char err[1024];
    vt_model_info info;
    int rc = vt_model_validate(dir, &info, err, sizeof err);   /* headers only: no weight is loaded */
    if (rc) return fail(rc, err);
    printf("%s: ok — %lld layers (%s attention, %s FFN; K=KDA M=MLA, D=dense E=MoE), %lld MoE layers, "
           "hidden %lld, vocab %lld, weights %s\n",
           dir, (long long)info.n_layers, info.layer_kind, info.layer_ffn, (long long)info.n_moe_layers,
           (long long)info.hidden_size, (long long)info.vocab_size, info.weight_dtype);
    return 0;
}

/* Knobs from the environment; an unknown VT_* variable is exit 2. */
static int env_knobs(vt_knobset **ks) {
    char err[512];
    if (vt_knobset_new(ks) != 0) return fail(VT_STATUS_NOMEM, "out of memory");
    int rc = vt_knobset_from_env(*ks, environ, err, sizeof err);
    if (rc) { vt_knobset_free(*ks); *ks = NULL; return fail(rc, err); }
    return 0;
}

/* The probe records as JSON text (caller frees); NULL when out of memory. */
static char *probes_json(const vt_session *s) {
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = 0; i < vt_session_probe_count(s); i++) {
        const vt_probe *p = vt_session_probe_at(s, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "site", p->site);
        cJSON_AddNumberToObject(o, "layer", p->layer);
        cJSON_AddStringToObject(o, "dtype", p->dtype);
        cJSON_AddStringToObject(o, "src_dtype", p->src_dtype);
        cJSON_AddNumberToObject(o, "calls", (double)p->calls);
        cJSON_AddNumberToObject(o, "rows", (double)p->rows);
        cJSON_AddNumberToObject(o, "bytes_per_row", (double)p->bytes_per_row);
        cJSON_AddNumberToObject(o, "src_row_bytes", (double)p->src_row_bytes);
        cJSON_AddNumberToObject(o, "dst_row_bytes", (double)p->dst_row_bytes);
        cJSON_AddBoolToObject(o, "converting", p->converting);
        cJSON_AddNumberToObject(o, "violations", (double)p->violations);
        cJSON_AddNumberToObject(o, "rows_unwritten", (double)p->rows_unwritten);
        cJSON_AddBoolToObject(o, "ok", p->violations == 0 && p->rows_unwritten <= 0);
        cJSON_AddStringToObject(o, "detail", p->detail);
        cJSON_AddItemToArray(arr, o);
    }
    char *txt = cJSON_Print(arr);
    cJSON_Delete(arr);
    return txt;
}

/* What `logits` or `generate` was asked, checked. */
typedef struct logits_args {
    const char *name, *dir, *out, *probes;
    int         generate;
    int32_t    *tok;      /* the prompt (malloc'd) */
    int64_t     T;
    uint64_t    n_gen;    /* generate: tokens to generate */
} logits_args;

/* Parses and checks the arguments: 0, or the exit status (a->tok is NULL then). */
static int logits_parse(int argc, char **argv, int generate, logits_args *a) {
    const char *tokens_s = NULL, *n_s = "16";
    memset(a, 0, sizeof *a);
    a->generate = generate;
    a->name = generate ? "generate" : "logits";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) a->dir = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens_s = argv[++i];
        else if (!generate && !strcmp(argv[i], "--out") && i + 1 < argc) a->out = argv[++i];
        else if (!generate && !strcmp(argv[i], "--probes") && i + 1 < argc) a->probes = argv[++i];
        else if (generate && !strcmp(argv[i], "-n") && i + 1 < argc) n_s = argv[++i];
        else return lab_help_bad_argument(a->name, argv[i]);
    }
    if (!a->dir || !tokens_s || (!generate && !a->out))
        return lab_cli_usage_error(a->name, generate ? "--model and --tokens are required" : "--model, --tokens and --out are required");
    char err[1024];
    if (lab_cli_parse_tokens(tokens_s, LAB_DS_MAX_SEQ_LEN, &a->tok, &a->T, err, sizeof err) != 0) {
        fprintf(stderr, "vtlab %s: --tokens: %s\n", a->name, err);
        return 2;
    }
    int bad = 0;
    if (generate && (lab_cli_parse_u64(n_s, &a->n_gen) != 0 || a->n_gen > 100000)) {
        fprintf(stderr, "vtlab generate: -n %s: expected an integer in 0..100000\n", n_s);
        bad = 2;
    } else if (a->probes && !strcmp(a->probes, a->out)) {
        fprintf(stderr, "vtlab logits: --probes and --out name the same file %s\n", a->out);
        bad = 2;
    }
    if (bad) { free(a->tok); a->tok = NULL; }
    return bad;
}

/* `logits`: every position's logits into --out and the probe records into
 * --probes; neither is put in place unless both were written. */
static int logits_write(vt_session *s, const logits_args *a, float *logits, int64_t vocab, lab_cli_out *o_out,
                        lab_cli_out *o_probes, char *err, size_t errlen) {
    int rc = vt_session_prefill(s, a->tok, a->T, logits, err, errlen);
    if (!rc) rc = lab_cli_out_write(o_out, logits, sizeof(float) * (size_t)a->T * (size_t)vocab, err, errlen);
    if (!rc && a->probes) {
        char *txt = probes_json(s);
        if (!txt) { rc = VT_STATUS_NOMEM; snprintf(err, errlen, "%s: out of memory", a->probes); }
        if (!rc) rc = lab_cli_out_write(o_probes, txt, strlen(txt), err, errlen);
        free(txt);
    }
    if (!rc) rc = lab_cli_out_commit(o_out, err, errlen);
    if (!rc && a->probes) rc = lab_cli_out_commit(o_probes, err, errlen);
    return rc;
}

/* `generate`: prefill the prompt keeping only the last row, then greedy
 * decoding, each id printed as it comes. logits: one row. */
static int greedy(vt_session *s, const logits_args *a, float *logits, int64_t vocab, char *err, size_t errlen) {
    float *all = malloc(sizeof(float) * (size_t)a->T * (size_t)vocab);
    if (!all) { snprintf(err, errlen, "out of memory"); return VT_STATUS_NOMEM; }
    int rc = vt_session_prefill(s, a->tok, a->T, all, err, errlen);
    if (!rc) memcpy(logits, all + (a->T - 1) * vocab, sizeof(float) * (size_t)vocab);
    free(all);
    for (uint64_t g = 0; !rc && g < a->n_gen; g++) {
        int32_t best = 0;
        for (int64_t v = 1; v < vocab; v++) if (logits[v] > logits[best]) best = (int32_t)v;
        printf("%s%d", g ? "," : "", best);
        fflush(stdout);
        if (g + 1 < a->n_gen) rc = vt_session_decode(s, best, logits, err, errlen);
    }
    if (!rc) printf("\n");
    return rc;
}

static int cmd_logits(int argc, char **argv, int generate) {
    logits_args a;
    int ec = logits_parse(argc, argv, generate, &a);
    vt_knobset *ks = NULL;
    if (!ec) ec = env_knobs(&ks);
    if (ec) { free(a.tok); return ec; }
    vt_model *m = NULL;
    vt_session *s = NULL;
    float *logits = NULL;
    char err[1024];
    /* Every output is created (as a temp file) before any work: a bad
     * --probes path fails before --out is touched. */
    lab_cli_out o_out = {0}, o_probes = {0};
    o_out.fd = o_probes.fd = -1;
    int rc = VT_STATUS_OK;
    if (a.out) rc = lab_cli_out_open(&o_out, a.out, err, sizeof err);
    if (!rc && a.probes) rc = lab_cli_out_open(&o_probes, a.probes, err, sizeof err);
    if (!rc) rc = vt_model_open(&m, a.dir, err, sizeof err);
    if (!rc) rc = vt_session_new(&s, m, ks, err, sizeof err);
    vt_model_info info;
    if (!rc) {
        vt_model_get_info(m, &info);
        logits = malloc(sizeof(float) * (size_t)(generate ? 1 : a.T) * (size_t)info.vocab_size);
        if (!logits) { rc = VT_STATUS_NOMEM; snprintf(err, sizeof err, "out of memory for logits"); }
    }
    if (!rc && !generate) rc = logits_write(s, &a, logits, info.vocab_size, &o_out, &o_probes, err, sizeof err);
    else if (!rc) rc = greedy(s, &a, logits, info.vocab_size, err, sizeof err);
    lab_cli_out_abort(&o_out);      /* no-ops once committed */
    lab_cli_out_abort(&o_probes);
    free(logits);
    free(a.tok);
    vt_session_free(s);
    vt_model_free(m);
    vt_knobset_free(ks);
    if (rc) return fail(rc, err);
    return 0;
}

static const char *type_name(vt_knob_type t) {
    switch (t) {
    case VT_KNOB_BOOL: return "bool";
    case VT_KNOB_ENUM: return "enum";
    case VT_KNOB_INT: return "int";
    default: return "string";
    }
}

/* A test fixture (VT_TEST_*, e.g. VT_TEST_IGNORED_KNOB, audit rule R3's
 * knob that never takes effect): accepted like any knob, so that tests can
 * set it, but not offered to users in `vtlab knobs` or docs/knobs.md. */
static int test_only(const vt_knob_info *k) { return !strncmp(k->name, "VT_TEST_", 8); }

static int cmd_knobs(int argc, char **argv) {
    int md = argc > 1 && !strcmp(argv[1], "--markdown");
    if (argc > 1 + md) return lab_help_bad_argument("knobs", argv[1 + md]);
    if (md) {
        printf("# Knob reference\n\n"
               "Generated from the knob registry (`model/knobs.c`) by `make knobs-doc`; do not edit by hand.\n\n"
               "Knobs are `VT_*` environment variables, or the `knobs` of an experiment arm. Any `VT_*`\n"
               "variable that no knob declares is an error (exit 2) with a did-you-mean. A bool knob is `0`\n"
               "or `1` and nothing else (`yes`, `true`, `on`, `off`... are errors that name the value they\n"
               "mean). \"Numerics\" says whether the knob may change the model's numbers; only those enter a\n"
               "run's knob hash. Knobs named `VT_TEST_*` are test fixtures: accepted, not listed here.\n\n"
               "| knob | type | default | allowed | numerics | what it does |\n|---|---|---|---|---|---|\n");
        for (int i = 0; i < vt_knob_count(); i++) {
            const vt_knob_info *k = vt_knob_at(i);
            if (test_only(k)) continue;
            printf("| `%s` | %s | `%s` | `%s` | %s | %s |\n", k->name, type_name(k->type), k->def, k->allowed,
                   k->numeric ? "yes" : "no", k->doc);
        }
        printf("\n## Faults (`VT_FAULT`)\n\n| fault | site | what it replays |\n|---|---|---|\n");
        for (int i = 0; i < vt_fault_count(); i++) {
            const vt_fault_info *f = vt_fault_at(i);
            printf("| `%s` | `%s` | %s |\n", f->name, f->site, f->doc);
        }
        return 0;
    }
    printf("%-26s %-6s %-14s %-8s %s\n", "KNOB", "TYPE", "DEFAULT", "NUMERIC", "ALLOWED / DOC");
    for (int i = 0; i < vt_knob_count(); i++) {
        const vt_knob_info *k = vt_knob_at(i);
        if (test_only(k)) continue;
        printf("%-26s %-6s %-14s %-8s %s\n%-58s %s\n", k->name, type_name(k->type), k->def, k->numeric ? "yes" : "no",
               k->allowed, "", k->doc);
    }
    return 0;
}

/* `vtlab engine`: this model as a protocol engine (engine_serve.c). */
static int cmd_engine(int argc, char **argv) {
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else return lab_help_bad_argument("engine", argv[i]);
    }
    char err[1024] = "";
    int rc = lab_engine_serve(dir, stdin, stdout, err, sizeof err);
    if (rc) fprintf(stderr, "vtlab engine: %s\n", err);
    return rc ? vt_exit_code(rc) : 0;
}

/* `vtlab engine-check`: options, then the engine's command (engine_check.c). */
static int cmd_engine_check(int argc, char **argv) {
    lab_engine_check_opts o = {0};
    o.timeout_s = 60;
    o.prefix_tol = 1e-3;
    o.model_dir = getenv("VTP_MODEL");
    /* --env values in an array of their own: collecting them in place in argv,
     * as --allow-noop does, would overwrite its slots */
    if (!(o.env = calloc((size_t)argc, sizeof *o.env))) { fprintf(stderr, "vtlab engine-check: out of memory\n"); return 1; }
    const char *usage = NULL;
    char why[300];
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && !usage; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--")) { i++; break; }
        if (!strcmp(argv[i], "--model") && i + 1 < argc) o.model_dir = argv[++i];
        else if (!strcmp(argv[i], "--allow-noop") && i + 1 < argc) {
            if (!o.allow_noop) o.allow_noop = argv + i + 1;   /* consecutive in argv: collected below */
            char **slot = o.allow_noop + o.n_allow_noop;
            *slot = argv[++i];
            o.n_allow_noop++;
        } else if (!strcmp(argv[i], "--env") && i + 1 < argc) {
            if (lab_engine_check_env_arg(argv[++i], why, sizeof why)) usage = why;
            else o.env[o.n_env++] = argv[i];
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            o.timeout_s = strtod(argv[++i], &end);
            if (*end || !(o.timeout_s > 0)) usage = "--timeout: expected seconds > 0";
        } else if (!strcmp(argv[i], "--prefix-tol") && i + 1 < argc) {
            o.prefix_tol = strtod(argv[++i], &end);
            if (*end || !(o.prefix_tol >= 0)) usage = "--prefix-tol: expected a number >= 0";
        } else {
            free(o.env);
            return lab_help_bad_argument("engine-check", argv[i]);
        }
    }
    if (!usage && i >= argc) usage = "the engine's command is required";
    int rc = 0, failed = 0;
    char err[1024] = "";
    if (usage) rc = lab_cli_usage_error("engine-check", usage);
    else {
        o.argc = argc - i;
        o.argv = argv + i;
        rc = lab_engine_check(&o, stdout, &failed, err, sizeof err);
        if (rc) fprintf(stderr, "vtlab engine-check: %s\n", err);
        rc = rc ? vt_exit_code(rc) : failed ? 1 : 0;
    }
    free(o.env);
    return rc;
}

static int cmd_faults(void) {
    for (int i = 0; i < vt_fault_count(); i++) {
        const vt_fault_info *f = vt_fault_at(i);
        printf("%s  (site %s)\n    %s\n", f->name, f->site, f->doc);
    }
    return 0;
}

/* Idle OpenMP threads sleep instead of spinning (vt_openmp_wait_passively,
 * model/omp_wait.c, says why and what was measured). */
static void wait_passively(char **argv) {
    /* only the commands that run forward passes have threads to wait: the
     * others (runs, show, report, --help, ...) would pay the second start
     * (about 28 ms of a 33 ms start measured) for nothing */
    static const char *const computing[] = {"run", "sweep", "nightly", "reopen", "rerun", "logits", "generate",
                                               "synth", "engine", NULL};
    int computes = 0;
    for (int i = 0; argv[1] && computing[i]; i++) computes |= !strcmp(argv[1], computing[i]);
    if (computes) vt_openmp_wait_passively(argv);
    /* the harness's own regions (scoring) start at the model's default
     * count: all CPUs, lowered to a cgroup CPU quota (vt_team_default_threads) */
    if (computes && !getenv("OMP_NUM_THREADS")) omp_set_num_threads(vt_team_default_threads());
}

/* --help or -h among a command's arguments (before a "--", after which
 * they are an engine command's own). */
static int wants_help(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

static int dispatch(const char *cmd, int argc, char **argv) {
    if (!strcmp(cmd, "synth")) return cmd_synth(argc, argv);
    if (!strcmp(cmd, "validate")) return cmd_validate(argc, argv);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv, 0);
    if (!strcmp(cmd, "generate")) return cmd_logits(argc, argv, 1);
    if (!strcmp(cmd, "engine")) return cmd_engine(argc, argv);
    if (!strcmp(cmd, "engine-check")) return cmd_engine_check(argc, argv);
    if (!strcmp(cmd, "knobs")) return cmd_knobs(argc, argv);
    if (!strcmp(cmd, "faults")) return argc > 1 ? lab_help_bad_argument(cmd, argv[1]) : cmd_faults();
    if (!strcmp(cmd, "version")) {
        if (argc > 1) return lab_help_bad_argument(cmd, argv[1]);
        printf("%s\n", vt_build_info());
        return 0;
    }
    int handled = 0;
    int rc = lab_main(cmd, argc, argv, &handled);
    if (handled) return rc;
    /* not the whole usage: one line, and the command it may be a misspelling of */
    return lab_help_unknown_command(cmd);
}

int main(int argc, char **argv) {
    wait_passively(argv);
    if (argc < 2) {
        lab_help_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        lab_help_usage(stdout);
        return 0;
    }
    const char *cmd = argv[1];
    argc--; argv++;
    if (wants_help(argc, argv)) return command_help(cmd);
    if (!strcmp(cmd, "help")) return cmd_help(argc, argv);
    argv = split_equals(&argc, argv);
    int rc = dispatch(cmd, argc, argv);
    split_free();
    return rc;
}
