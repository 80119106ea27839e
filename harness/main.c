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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness/cli.h"
#include "harness/engine_check.h"
#include "harness/engine_serve.h"
#include "harness/experiment.h"   /* LAB_DS_MAX_SEQ_LEN: the longest sequence, as in a dataset */
#include "harness/lab.h"
#include "model/vt.h"

extern char **environ;

static void usage(FILE *out) {
    fprintf(out,
            "usage: vtlab COMMAND [options]\n"
            "model commands:\n"
            "  synth    --config CONFIG.json --seed N --out DIR [--dtype f32|bf16|f16]\n"
            "  validate --model DIR                 check config and checkpoint, print a summary\n"
            "  logits   --model DIR --tokens 5,17,3 --out FILE [--probes FILE.json]\n"
            "  generate --model DIR --tokens 5,17,3 -n N   greedy decoding\n"
            "  engine   [--model DIR]               serve the model over the engine protocol on stdin/stdout\n"
            "                                       (docs/engine-protocol.md; model default $VTP_MODEL)\n"
            "  engine-check [--model DIR] [--timeout S] [--prefix-tol X] [--allow-noop KNOB]... [--env NAME=VALUE]... [--] CMD [ARGS...]\n"
            "                                       conformance checks of an engine command; exit 1 on a failure\n"
            "  knobs    [--markdown]                the knob registry (VT_* variables)\n"
            "  faults                               the replayable defects (VT_FAULT)\n"
            "  version                              the build's code version\n");
    lab_usage(out);
}

/* `vtlab CMD --help` (or -h): CMD's lines of the usage, on stdout. The usage
 * text is the one place commands and options are listed: a command's entry
 * is the line "  CMD ..." and the more-indented lines under it. 0 when CMD has
 * an entry, -1 when not. */
static int command_help(const char *cmd) {
    char *text = NULL;
    size_t len = 0, cl = strlen(cmd);
    FILE *m = open_memstream(&text, &len);
    if (!m) return -1;
    usage(m);
    fclose(m);
    int found = 0, in = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        int entry = n > 2 + cl && !strncmp(line, "  ", 2) && !strncmp(line + 2, cmd, cl) && line[2 + cl] == ' ';
        int more = in && n > 3 && !strncmp(line, "   ", 3);
        if (entry && !found) printf("usage: vtlab %s\n", cmd);
        if (entry || more) printf("%.*s\n", (int)n, line);
        found |= entry;
        in = entry || more;
    }
    free(text);
    return found ? 0 : -1;
}

/* The argv split_equals made: it lives as long as the process (held here, so
 * a leak checker sees it reachable). */
static char **split_argv;

/* "--opt=value" becomes "--opt" "value", so every command takes both
 * spellings. The value of `submit --slurm` is sbatch options, which have
 * their own "=": it is left whole. */
static char **split_equals(int *argc, char **argv) {
    char **out = split_argv = calloc((size_t)*argc * 2 + 1, sizeof *out);
    if (!out) return argv;
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        char *eq = strchr(argv[i], '=');
        int slurm_value = i > 1 && !strcmp(argv[i - 1], "--slurm");
        if (i > 0 && !slurm_value && !strncmp(argv[i], "--", 2) && eq && eq > argv[i] + 2) {
            out[n++] = strndup(argv[i], (size_t)(eq - argv[i]));
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
        else return lab_cli_usage_error("synth", argv[i]);
    }
    if (!config || !out || !seed_s) return lab_cli_usage_error("synth", "--config, --seed and --out are required");
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
        else return lab_cli_usage_error("validate", argv[i]);
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

static int cmd_logits(int argc, char **argv, int generate) {
    const char *dir = NULL, *tokens_s = NULL, *out = NULL, *probes = NULL, *n_s = "16";
    const char *name = generate ? "generate" : "logits";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens_s = argv[++i];
        else if (!generate && !strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!generate && !strcmp(argv[i], "--probes") && i + 1 < argc) probes = argv[++i];
        else if (generate && !strcmp(argv[i], "-n") && i + 1 < argc) n_s = argv[++i];
        else return lab_cli_usage_error(name, argv[i]);
    }
    if (!dir || !tokens_s || (!generate && !out))
        return lab_cli_usage_error(name, generate ? "--model and --tokens are required" : "--model, --tokens and --out are required");
    int32_t *tok = NULL;
    int64_t T = 0;
    char err[1024];
    if (lab_cli_parse_tokens(tokens_s, LAB_DS_MAX_SEQ_LEN, &tok, &T, err, sizeof err) != 0) {
        fprintf(stderr, "vtlab %s: --tokens: %s\n", name, err);
        return 2;
    }
    uint64_t n_gen = 0;
    if (generate && (lab_cli_parse_u64(n_s, &n_gen) != 0 || n_gen > 100000)) {
        free(tok);
        fprintf(stderr, "vtlab generate: -n %s: expected an integer in 0..100000\n", n_s);
        return 2;
    }
    if (probes && !strcmp(probes, out)) {
        free(tok);
        fprintf(stderr, "vtlab logits: --probes and --out name the same file %s\n", out);
        return 2;
    }
    vt_knobset *ks = NULL;
    int ec = env_knobs(&ks);
    if (ec) { free(tok); return ec; }
    vt_model *m = NULL;
    vt_session *s = NULL;
    float *logits = NULL;
    /* Every output is created (as a temp file) before any work, and none is
     * put in place unless all were written: a bad --probes path fails before
     * --out is touched. */
    lab_cli_out o_out = {0}, o_probes = {0};
    o_out.fd = o_probes.fd = -1;
    int rc = VT_STATUS_OK;
    if (out) rc = lab_cli_out_open(&o_out, out, err, sizeof err);
    if (!rc && probes) rc = lab_cli_out_open(&o_probes, probes, err, sizeof err);
    if (!rc) rc = vt_model_open(&m, dir, err, sizeof err);
    if (!rc) rc = vt_session_new(&s, m, ks, err, sizeof err);
    vt_model_info info;
    if (!rc) {
        vt_model_get_info(m, &info);
        logits = malloc(sizeof(float) * (size_t)(generate ? 1 : T) * (size_t)info.vocab_size);
        if (!logits) { rc = VT_STATUS_NOMEM; snprintf(err, sizeof err, "out of memory for logits"); }
    }
    if (!rc && !generate) {
        rc = vt_session_prefill(s, tok, T, logits, err, sizeof err);
        if (!rc) rc = lab_cli_out_write(&o_out, logits, sizeof(float) * (size_t)T * (size_t)info.vocab_size, err, sizeof err);
        if (!rc && probes) {
            char *txt = probes_json(s);
            if (!txt) { rc = VT_STATUS_NOMEM; snprintf(err, sizeof err, "%s: out of memory", probes); }
            if (!rc) rc = lab_cli_out_write(&o_probes, txt, strlen(txt), err, sizeof err);
            free(txt);
        }
        if (!rc) rc = lab_cli_out_commit(&o_out, err, sizeof err);
        if (!rc && probes) rc = lab_cli_out_commit(&o_probes, err, sizeof err);
    } else if (!rc) {
        /* greedy: prefill the prompt keeping only the last row, then decode */
        float *all = malloc(sizeof(float) * (size_t)T * (size_t)info.vocab_size);
        if (!all) { rc = VT_STATUS_NOMEM; snprintf(err, sizeof err, "out of memory"); }
        if (!rc) rc = vt_session_prefill(s, tok, T, all, err, sizeof err);
        if (!rc) memcpy(logits, all + (T - 1) * info.vocab_size, sizeof(float) * (size_t)info.vocab_size);
        free(all);
        for (uint64_t g = 0; !rc && g < n_gen; g++) {
            int32_t best = 0;
            for (int64_t v = 1; v < info.vocab_size; v++) if (logits[v] > logits[best]) best = (int32_t)v;
            printf("%s%d", g ? "," : "", best);
            fflush(stdout);
            if (g + 1 < n_gen) rc = vt_session_decode(s, best, logits, err, sizeof err);
        }
        if (!rc) printf("\n");
    }
    lab_cli_out_abort(&o_out);      /* no-ops once committed */
    lab_cli_out_abort(&o_probes);
    free(logits);
    free(tok);
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
    if (argc > 1 && !md) return lab_cli_usage_error("knobs", argv[1]);
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
        else return lab_cli_usage_error("engine", argv[i]);
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
        } else usage = argv[i];
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
}

int main(int argc, char **argv) {
    wait_passively(argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--; argv++;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (command_help(cmd) == 0) return 0;
            fprintf(stderr, "vtlab: unknown command \"%s\"\n", cmd);
            usage(stderr);
            return 2;
        }
    argv = split_equals(&argc, argv);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc, argv);
    if (!strcmp(cmd, "validate")) return cmd_validate(argc, argv);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv, 0);
    if (!strcmp(cmd, "generate")) return cmd_logits(argc, argv, 1);
    if (!strcmp(cmd, "engine")) return cmd_engine(argc, argv);
    if (!strcmp(cmd, "engine-check")) return cmd_engine_check(argc, argv);
    if (!strcmp(cmd, "knobs")) return cmd_knobs(argc, argv);
    if (!strcmp(cmd, "faults")) return cmd_faults();
    if (!strcmp(cmd, "version")) { printf("%s\n", vt_build_info()); return 0; }
    int handled = 0;
    int rc = lab_main(cmd, argc, argv, &handled);
    if (handled) return rc;
    fprintf(stderr, "vtlab: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
