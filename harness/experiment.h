/*
 * experiment.h — an experiment file (experiments/NAME.json) parsed, validated
 * and with its dataset loaded.
 *
 * The file format is documented in docs/experiments.md. Parsing is strict:
 * an unknown field, a wrong type or an out-of-range value is an error whose
 * text starts with the file name and names the field by its JSON path
 * ("experiments/x.json: arms[2].knobs.VT_KIMI_BF16_STREAM: ..."), so a typo is
 * never silently ignored. Nothing here touches the model or the database: a
 * bad file is rejected before anything is written (exit 2).
 *
 * Knob names and values are checked against the model's knob table by the
 * runner (lab_resolve_knobs in runner.h), which needs the model library; token
 * ids are checked against the vocabulary (and generated datasets drawn) by
 * lab_dataset_prepare once the model is known.
 */
#ifndef LAB_EXPERIMENT_H
#define LAB_EXPERIMENT_H

#include <stddef.h>
#include <stdint.h>

/* The engine an experiment (or one arm) runs through: the builtin model, or
 * a command speaking the engine protocol (docs/engine-protocol.md). */
typedef struct lab_engine_spec {
    int      command;          /* 0: builtin; 1: argv below */
    int64_t  argc;
    char   **argv;             /* [argc + 1], NULL-terminated */
    char    *cwd;              /* NULL: vtlab's working directory; else resolved next to the
                                  experiment file */
    int64_t  n_env;
    char   **env;              /* [n_env] "NAME=VALUE" */
    double   timeout_s;        /* per response, hello included */
    double   grace_s;          /* after stdin closes, before SIGTERM/SIGKILL */
    int      keep_running;     /* 1 (default): each arm's engine runs from the check before the
                                  database is touched to the end of the experiment (one start per
                                  arm, all arms resident at once); 0: at most one engine at a time
                                  (started for the check, stopped, started again for each pass),
                                  for engines whose model does not fit twice */
} lab_engine_spec;

/* One arm: a named set of knob values plus what its probes must show. */
typedef struct lab_arm {
    char    *name;
    char    *description;      /* may be NULL */
    int64_t  n_knobs;
    char   **knob_names;       /* [n_knobs] "VT_..." as written */
    char   **knob_values;      /* [n_knobs] canonical text of the JSON value */
    int64_t  n_expect;
    char   **expect_sites;     /* [n_expect] probe site, e.g. "residual.stream" */
    char   **expect_dtypes;    /* [n_expect] dtype every record at that site must show */
    int      expect_fail;      /* 1: the arm replays a defect and must FAIL its assertions */
    lab_engine_spec *engine;   /* NULL: the experiment's */
} lab_arm;

enum { LAB_DS_INLINE = 1, LAB_DS_FILE, LAB_DS_GENERATE };

/* A token dataset, flattened: sequence s is tokens[offsets[s] .. offsets[s+1]). */
typedef struct lab_dataset {
    int       kind;            /* LAB_DS_* */
    char     *file;            /* LAB_DS_FILE: the path as resolved (next to the experiment) */
    int64_t   gen_n, gen_len;  /* LAB_DS_GENERATE */
    uint64_t  gen_seed;
    int64_t   n_seq;
    int64_t  *offsets;         /* [n_seq + 1] */
    int32_t  *tokens;          /* [offsets[n_seq]] */
    int64_t   max_len;
    int64_t   seq_base;        /* a shard's view (vtlab run --shard): global index of sequence 0; else 0 */
} lab_dataset;

/* Metric switches (bit flags of `metrics`). */
enum {
    LAB_M_TOP1 = 1 << 0, LAB_M_KL = 1 << 1, LAB_M_MAXDIFF = 1 << 2, LAB_M_RMSDP = 1 << 3,
    LAB_M_PPL = 1 << 4, LAB_M_MCNEMAR = 1 << 5, LAB_M_LAYERDIV = 1 << 6,
    LAB_M_ALL = (1 << 7) - 1
};

typedef struct lab_experiment {
    char       *path;          /* the file as given on the command line; the paths in it are
                                  relative to its directory (paths.h) */
    char       *id;            /* [A-Za-z0-9._-]+ */
    char       *description, *hypothesis;   /* may be NULL */
    /* model: a checkpoint dir, or a synthetic one built on demand */
    int         model_synth;
    char       *model_dir;     /* !model_synth: the checkpoint dir, resolved */
    char       *synth_name;    /* model_synth: the config as written */
    char       *synth_config;  /* model_synth: the config's path, resolved (next to the
                                  experiment, else the shipped config of that name) */
    uint64_t    synth_seed;
    char        synth_dtype[8];
    lab_dataset ds;
    int         score_last;    /* 1: score only each sequence's last position */
    int64_t     top_k;         /* top-k ids and log-probs stored per position */
    int         store_full_logits; /* 1: also store every logit row as f16 */
    char        probe[8];      /* VT_PROBE mode for arms that do not set it: "on" | "audit" */
    int         allow_model_mismatch; /* 1: arms whose engines report another model than the
                                     reference arm's run anyway (audit R4 flags them); 0
                                     (default): that is bad input, exit 2 before anything is written */
    int64_t     ref_index;     /* index into arms of the reference arm */
    int64_t     n_arms;
    lab_arm    *arms;          /* [n_arms] */
    unsigned    metrics;       /* LAB_M_* */
    int         has_decision;
    char        decision_metric[32];
    double      decision_threshold;
    int         decision_ge;   /* 1: ">=", 0: "<=" */
    int64_t     div_sequences; /* sequences captured for per-layer divergence */
    double      div_tolerance; /* first layer/site whose rel. L2 exceeds this */
    int64_t     repeats;       /* runs per arm (>= 1) */
    lab_engine_spec engine;    /* the arms' engine unless an arm names its own */
    char       *spec_json;     /* the file re-printed canonically (stored with runs) */
    /* "slurm": defaults for `vtlab submit` (docs/slurm.md); NULL / 0 when absent */
    char       *slurm_partition, *slurm_time, *slurm_account;
    int64_t     slurm_gpus_per_task;
} lab_experiment;

/* Dataset limits (docs/experiments.md, "Limits"), the same for every source.
 * A bigger dataset is LAB_EINPUT naming the file, the line or sequence, and
 * the limit. */
#define LAB_DS_MAX_FILE_BYTES ((size_t)64 << 20)  /* a dataset.file: ~10^7 ids of up to 6 digits */
#define LAB_DS_MAX_SEQS       1000000LL           /* sequences */
#define LAB_DS_MAX_SEQ_LEN    65536LL             /* tokens in one sequence (T) */
#define LAB_DS_MAX_TOKENS     10000000LL          /* tokens in all */
/* What one run may hold for the dataset given the model's vocabulary V
 * (checked by lab_dataset_prepare): 4·V·(longest T + scored positions) bytes
 * of f32 logits, 8·top_k bytes of top-k per token, and 2·V per token when
 * store_full_logits. */
#define LAB_RUN_MAX_BYTES     ((int64_t)8 << 30)

/* Parses and validates path and loads its dataset. On error returns
 * LAB_EINPUT (or LAB_ENOMEM/LAB_EIO) with err = "PATH: FIELD: what was
 * expected"; *out is then NULL. */
int  lab_experiment_load(lab_experiment **out, const char *path, char *err, size_t errlen);
/* Same, from text (path is used for messages and relative dataset files). */
int  lab_experiment_parse(lab_experiment **out, const char *path, const char *text,
                          char *err, size_t errlen);
/* Same, from len bytes of text (text[len] must be 0). NUL bytes and \u0000
 * escapes in strings are refused (they would shorten an id or a name). */
int  lab_experiment_parse_n(lab_experiment **out, const char *path, const char *text, size_t len,
                            char *err, size_t errlen);
void lab_experiment_free(lab_experiment *e);

/* The dataset-file reader, from len bytes of text (modified in place; ds
 * zeroed by the caller, its arrays freed by the caller even on error).
 * exp_path and shown name the experiment and the file in messages. Refuses
 * NUL bytes and anything over the LAB_DS_* limits. Fuzz target. */
int  lab_ds_parse_text(lab_dataset *ds, char *text, size_t len, const char *exp_path, const char *shown,
                       char *err, size_t errlen);

/* Completes the dataset once the model's vocabulary is known: draws a
 * generated dataset (ids uniform in [3, vocab), see experiment.c), or checks
 * that every token of an inline or file dataset is < vocab (the error names
 * the sequence and position). Idempotent. */
int  lab_dataset_prepare(lab_experiment *e, int64_t vocab, char *err, size_t errlen);

/* The canonical text of the dataset (one line per sequence, ids joined by
 * ',', each line ending in '\n'), whose sha256 is the dataset hash. Caller
 * frees. NULL when out of memory. */
char *lab_dataset_canonical(const lab_dataset *ds, size_t *len);

/* The engine arm i runs through. */
const lab_engine_spec *lab_arm_engine(const lab_experiment *e, int64_t i);

/* Rewrites, in the parsed JSON root (a cJSON *) of an experiment file read
 * from from_file, every relative path that exists next to from_file (model,
 * model.synth, dataset.file, engine.cwd, arms[].engine.cwd) as its absolute
 * path, so that a copy written elsewhere (reopen's derived experiment) names
 * the same files. A model.synth that is a shipped config's name, and not a
 * file next to from_file, is left as written (it resolves the same anywhere).
 * from_cwd: a path not found next to from_file but found from the current
 * directory is taken from there too — how a vtlab before paths.h read it, for
 * `vtlab rerun` of a run it recorded (whose model hash then checks the
 * file). LAB_ENOMEM only. */
int  lab_experiment_rebase(void *root, const char *from_file, int from_cwd, char *err, size_t errlen);

/* Index of the arm named name, or -1. */
int64_t lab_experiment_arm(const lab_experiment *e, const char *name);

#endif
