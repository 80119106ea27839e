/*
 * merge.c — shard databases into whole runs (see merge.h, docs/slurm.md).
 */
#include "merge.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experiment.h"
#include "metrics.h"
#include "run_forward.h"
#include "run_record.h"
#include "slurm.h"
#include "store.h"
#include "store_merge.h"
#include "util.h"

/* One shard run found in one input database. */
typedef struct found {
    lab_shard_run *r;
    int            db;
} found;

/* The shards of one (experiment, arm, repeat): shard i is at[i] (NULL when missing). */
typedef struct group {
    found   *at;
    int64_t  count, n_have;
    int      arm_pos;         /* the arm's position in the experiment file (merge order) */
    int      skip;            /* incomplete (partial) or its reference is */
    int64_t  run_id;          /* merged (or found) run in `into` */
} group;

static const char *field_diff(const lab_shard_run *a, const lab_shard_run *b) {
    if (strcmp(a->code_version, b->code_version)) return "code version";
    if (strcmp(a->model_sha256 ? a->model_sha256 : "", b->model_sha256 ? b->model_sha256 : "")) return "model";
    if (strcmp(a->dataset_sha256 ? a->dataset_sha256 : "", b->dataset_sha256 ? b->dataset_sha256 : "")) return "dataset";
    if (strcmp(a->knob_hash ? a->knob_hash : "", b->knob_hash ? b->knob_hash : "")) return "knob hash";
    if (a->info.count != b->info.count) return "shard count";
    if (a->info.n_seq_total != b->info.n_seq_total || a->info.n_tokens_total != b->info.n_tokens_total)
        return "dataset size";
    if (a->is_reference != b->is_reference) return "reference flag";
    return NULL;
}

static const char *field_val(const lab_shard_run *a, const char *f, char *buf, size_t n) {
    if (!strcmp(f, "code version")) return a->code_version;
    if (!strcmp(f, "model")) return a->model_sha256;
    if (!strcmp(f, "dataset")) return a->dataset_sha256;
    if (!strcmp(f, "knob hash")) return a->knob_hash;
    if (!strcmp(f, "shard count")) { snprintf(buf, n, "%lld", (long long)a->info.count); return buf; }
    snprintf(buf, n, "%lld sequences", (long long)a->info.n_seq_total);
    return buf;
}

static int same_arm(const lab_shard_run *a, const lab_shard_run *b) {
    return !strcmp(a->experiment, b->experiment) && !strcmp(a->arm, b->arm) && a->repeat == b->repeat;
}

/* ------------------------------------------------------------ what a shard may hold
 *
 * A merge copies a shard's names and ids into the merged database, where
 * every reader (report, export, nightly, audit, the views) takes them for
 * what the parsers let through. So each is held to the rule of the parser
 * that made it (lab_check_name for experiment ids and arm names, the knob
 * name rule, vt_sha256_hex_ok for hashes, lab_parse_shard for shards), and
 * recorded provenance to one line of UTF-8 (lab_check_line), before
 * anything is written: a shard edited by hand is refused whole, naming the
 * database, the table, the row and the field. */

#define LAB_LINE_MAX 1024   /* a code version, compiler, host...: far below */

/* "DB: table T, row R" (and " (run N)" for a row under run N, run > 0):
 * where a refused text is (the checkers' path). */
static const char *where_of(char *w, size_t n, const char *db, const char *table, int64_t row, int64_t run) {
    int k = snprintf(w, n, "%s: table %s, row %lld", db, table, (long long)row);
    if (run > 0 && k > 0 && (size_t)k < n) snprintf(w + k, n - (size_t)k, " (run %lld)", (long long)run);
    return w;
}

static int check_hash(const char *w, const char *field, const char *h, char *e, size_t el) {
    if (h && vt_sha256_hex_ok(h)) return LAB_OK;
    return lab_errf(e, el, LAB_EINPUT, "%s: %s: expected 64 lowercase hex digits, got %s%.72s%s", w, field,
                    h ? "\"" : "", h ? h : "NULL", h ? "\"" : "");
}

static int check_one_of(const char *w, const char *field, const char *v, const char *a, const char *b, char *e,
                        size_t el) {
    if (v && (!strcmp(v, a) || !strcmp(v, b))) return LAB_OK;
    return lab_errf(e, el, LAB_EINPUT, "%s: %s: expected \"%s\" or \"%s\", got \"%.48s\"", w, field, a, b,
                    v ? v : "NULL");
}

/* The runs row of r: identity, hashes, shard, provenance. */
static int check_runs_row(const lab_shard_run *r, const char *db, char *e, size_t el) {
    char w[4400], want[64];
    where_of(w, sizeof w, db, "runs", r->run_id, 0);
    int rc = lab_check_name(w, "experiment", "an experiment id", r->experiment, e, el);
    if (!rc) rc = lab_check_name(w, "arm", "an arm name", r->arm, e, el);
    const char *const hn[] = {"knob_hash", "model_sha256", "dataset_sha256", "experiment_sha256", "logits_sha256"};
    const char *const hv[] = {r->knob_hash, r->model_sha256, r->dataset_sha256, r->experiment_sha256, r->logits_sha256};
    for (size_t i = 0; i < 5 && !rc; i++) rc = check_hash(w, hn[i], hv[i], e, el);
    int64_t si = -1, sn = -1;
    snprintf(want, sizeof want, "%lld/%lld", (long long)r->info.index, (long long)r->info.count);
    if (!rc && (!r->shard || lab_parse_shard(r->shard, &si, &sn) || strcmp(r->shard, want)))
        rc = lab_errf(e, el, LAB_EINPUT, "%s: shard: expected \"%s\" (its run_shards row), got \"%.48s\"", w, want,
                      r->shard ? r->shard : "NULL");
    if (!rc) rc = check_one_of(w, "score", r->score, "all", "last", e, el);
    if (!rc) rc = check_one_of(w, "expected_assertions", r->expected_assertions, "pass", "fail", e, el);
    const char *const ln[] = {"code_version", "git_commit", "build_flags", "compiler", "backend", "device", "host",
                              "layer_kinds", "started_at", "finished_at"};
    const char *const lv[] = {r->code_version, r->git_commit, r->build_flags, r->compiler, r->backend, r->device,
                              r->host, r->layer_kinds, r->started_at, r->finished_at};
    for (size_t i = 0; i < sizeof ln / sizeof ln[0] && !rc; i++)
        rc = lab_check_line(w, ln[i], "recorded provenance", lv[i], LAB_LINE_MAX, e, el);
    if (!rc && !r->code_version[0])
        rc = lab_errf(e, el, LAB_EINPUT, "%s: code_version: expected a code version, got \"\"", w);
    return rc;
}

/* The run_shards row of r: who computed it. */
static int check_shards_row(const lab_shard_run *r, const char *db, char *e, size_t el) {
    char w[4400];
    where_of(w, sizeof w, db, "run_shards", r->run_id, 0);
    const lab_shard_info *h = &r->info;
    int rc = h->has_decision ? lab_check_name(w, "decision_metric", "a metric name", h->decision_metric, e, el) : 0;
    const char *const ln[] = {"task", "node", "slurm_job_id", "slurm_array_job_id", "slurm_array_task_id"};
    const char *const lv[] = {h->task, h->node, h->slurm_job_id, h->slurm_array_job_id, h->slurm_array_task_id};
    for (size_t i = 0; i < sizeof ln / sizeof ln[0] && !rc; i++)
        rc = lab_check_line(w, ln[i], "recorded provenance", lv[i], LAB_LINE_MAX, e, el);
    return rc;
}

typedef struct text_ctx {
    const lab_shard_run *r;
    const char          *db;
    char                *e;
    size_t               el;
    int                  refused;   /* a text broke its rule (else a failing read stopped the walk) */
} text_ctx;

static int check_text_rule(const text_ctx *c, const lab_shard_text *t);

/* One text under run r (lab_store_shard_texts): its field's rule. */
static int check_text(void *ctx, const lab_shard_text *t) {
    text_ctx *c = ctx;
    int rc = check_text_rule(c, t);
    c->refused = rc != LAB_OK;
    return rc;
}

static int check_text_rule(const text_ctx *c, const lab_shard_text *t) {
    char w[4400];
    where_of(w, sizeof w, c->db, t->table, t->row, strcmp(t->table, "experiment_specs") ? c->r->run_id : 0);
    const char *v = t->value ? t->value : "";
    if (!strcmp(t->table, "run_sequences")) return check_hash(w, t->field, t->value, c->e, c->el);
    if (!strcmp(t->table, "experiment_specs") && !strcmp(t->field, "id")) {
        int rc = lab_check_name(w, "id", "an experiment id", v, c->e, c->el);
        if (!rc && strcmp(v, c->r->experiment))
            rc = lab_errf(c->e, c->el, LAB_EINPUT, "%s: id: \"%s\" is not the experiment of its run (\"%s\")", w, v,
                          c->r->experiment);
        return rc;
    }
    if (!strcmp(t->table, "run_knobs") && !strcmp(t->field, "name")) {
        /* the builtin model's knobs are VT_* (the experiment parser's rule);
         * a command engine's are named by its hello: any one-line name */
        int builtin = !c->r->engine_hello || !c->r->engine_hello[0];
        if (builtin && (strncmp(v, "VT_", 3) || !lab_env_name_ok(v)))
            return lab_errf(c->e, c->el, LAB_EINPUT, "%s: name: \"%.64s\" is not a knob name (VT_[A-Za-z0-9_]*)", w, v);
        if (!*v) return lab_errf(c->e, c->el, LAB_EINPUT, "%s: name: expected a knob name, got \"\"", w);
    }
    if (!strcmp(t->table, "run_knobs") && !strcmp(t->field, "value")) {
        /* the parser's limit; a command engine's values are its own text */
        if (strlen(v) > 255)
            return lab_errf(c->e, c->el, LAB_EINPUT, "%s: value: %zu characters, more than the limit of 255", w,
                            strlen(v));
        return LAB_OK;
    }
    return lab_check_line(w, t->field, "a name", v, 255, c->e, c->el);
}

/* Everything merge copies from shard run r (of database db), before any of
 * it is used: LAB_EINPUT naming where, the shard refused. */
static int check_shard_run(lab_store *in, const lab_shard_run *r, const char *db, char *err, size_t errlen) {
    char e[1536] = "";
    int rc = check_runs_row(r, db, e, sizeof e);
    if (!rc) rc = check_shards_row(r, db, e, sizeof e);
    text_ctx c = {r, db, e, sizeof e, 0};
    if (!rc && (rc = lab_store_shard_texts(in, r, check_text, &c, e, sizeof e)) && !c.refused)
        return lab_errf(err, errlen, rc, "%s", e);   /* a read failure: as it is */
    if (rc) return lab_errf(err, errlen, LAB_EINPUT, "%s; the shard is refused, nothing merged", e);
    return LAB_OK;
}

/* Checks the stored experiment file of shard run r (database db) and
 * returns the arm's position in it (the order runs are made in): it must
 * be the file the run names (its sha256), of the run's experiment, with
 * arm names the parser accepts, one of them r's. */
static int spec_arm_position(const char *json, const lab_shard_run *r, const char *db, int *pos, char *err,
                             size_t errlen) {
    char w[4400], e[1536] = "", sha[65];
    snprintf(w, sizeof w, "%s: table experiment_specs, sha256 %.16s..., json", db, r->experiment_sha256);
    vt_sha256_hex(json, strlen(json), sha);
    cJSON *j = cJSON_Parse(json);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id"), *a;
    int rc = LAB_OK, i = 0;
    *pos = -1;
    if (strcmp(sha, r->experiment_sha256))
        rc = lab_errf(e, sizeof e, LAB_EINPUT, "%s: its sha256 is %.16s..., not the one its runs name", w, sha);
    else if (!cJSON_IsObject(j) || !cJSON_IsString(id))
        rc = lab_errf(e, sizeof e, LAB_EINPUT, "%s: not an experiment (an object with a string id)", w);
    else if (!(rc = lab_check_name(w, "id", "an experiment id", id->valuestring, e, sizeof e)) &&
             strcmp(id->valuestring, r->experiment))
        rc = lab_errf(e, sizeof e, LAB_EINPUT, "%s: id: \"%s\" is not the experiment of its runs", w, id->valuestring);
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, "arms")) {
        if (rc) break;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(a, "name");
        char f[64];
        snprintf(f, sizeof f, "arms[%d].name", i);
        rc = lab_check_name(w, f, "an arm name", cJSON_IsString(nm) ? nm->valuestring : "", e, sizeof e);
        if (!rc && *pos < 0 && !strcmp(nm->valuestring, r->arm)) *pos = i;
        i++;
    }
    cJSON_Delete(j);
    if (!rc && *pos < 0) rc = lab_errf(e, sizeof e, LAB_EINPUT, "%s: arms: no arm \"%s\" (its runs' arm)", w, r->arm);
    if (rc) return lab_errf(err, errlen, LAB_EINPUT, "%s; the shard is refused, nothing merged", e);
    return LAB_OK;
}

/* 1 when r was computed by the task of its own arm and shard (VTLAB_TASK =
 * "EXPERIMENT/ARM/I/N", set by submit's batch script). */
static int own_task(const lab_shard_run *r) {
    char want[512];
    snprintf(want, sizeof want, "%s/%s/%s", r->experiment, r->arm, r->shard ? r->shard : "");
    return r->info.task && !strcmp(r->info.task, want);
}

/* Groups the shard runs by (experiment, arm, repeat), checking that the
 * shards of a group agree (identity, shard count) and that two copies of
 * a shard are bit-identical. */
static int build_groups(found *f, int64_t nf, const char *const *dbs, group **out, int64_t *ng, char *err,
                        size_t errlen) {
    group *g = calloc((size_t)(nf + 1), sizeof *g);
    int64_t n = 0;
    if (!g) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    *out = g;
    /* (quadratic grouping: a sweep has tens to hundreds of shards) */
    for (int64_t i = 0; i < nf; i++) {
        const lab_shard_run *r = f[i].r;
        int64_t k;
        const found *first = NULL;
        for (k = 0; k < n; k++) {
            for (int64_t s = 0; s < g[k].count && !first; s++)
                if (g[k].at[s].r) first = &g[k].at[s];
            if (same_arm(first->r, r)) break;
            first = NULL;
        }
        if (k == n) {
            if (r->info.count <= 0 || r->info.index < 0 || r->info.index >= r->info.count)
                return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: shard %lld/%lld is not a shard", dbs[f[i].db],
                                (long long)r->run_id, (long long)r->info.index, (long long)r->info.count);
            g[n].count = r->info.count;
            if (!(g[n].at = calloc((size_t)r->info.count, sizeof *g[n].at)))
                return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
            g[n].at[r->info.index] = f[i];
            g[n].n_have = 1;
            n++;
            *ng = n;
            continue;
        }
        const char *d = field_diff(first->r, r);
        if (d) {
            char b1[64], b2[64];
            return lab_errf(err, errlen, LAB_EINPUT,
                            "%s/%s repeat %lld: the shards disagree on the %s: %s run %lld (shard %s) has %s, %s run "
                            "%lld (shard %s) has %s; the shards of one arm must come from one code version, model, "
                            "dataset and knob set (use a fresh results directory per build); nothing merged",
                            r->experiment, r->arm, (long long)r->repeat, d, dbs[first->db], (long long)first->r->run_id,
                            first->r->shard, field_val(first->r, d, b1, sizeof b1), dbs[f[i].db], (long long)r->run_id,
                            r->shard, field_val(r, d, b2, sizeof b2));
        }
        found *slot = &g[k].at[r->info.index];
        if (slot->r) {
            if (strcmp(slot->r->logits_sha256, r->logits_sha256))
                return lab_errf(err, errlen, LAB_EINPUT,
                                "%s/%s shard %s: two copies differ: %s run %lld has logits %.16s..., %s run %lld has "
                                "%.16s... (the forward pass did not reproduce across tasks); nothing merged",
                                r->experiment, r->arm, r->shard, dbs[slot->db], (long long)slot->r->run_id,
                                slot->r->logits_sha256, dbs[f[i].db], (long long)r->run_id, r->logits_sha256);
            /* the same shard again (the reference, computed by each task of
             * its range): the provenance kept is its own task's when known */
            if (own_task(r) && !own_task(slot->r)) slot->db = f[i].db, slot->r = f[i].r;
            continue;
        }
        *slot = f[i];
        g[k].n_have++;
    }
    *ng = n;
    return LAB_OK;
}

static const found *group_first(const group *g) {
    for (int64_t s = 0; s < g->count; s++)
        if (g->at[s].r) return &g->at[s];
    return NULL;
}

/* The reference group of g (same experiment, code version, dataset; repeat 0). */
static group *reference_of(group *gs, int64_t ng, const group *g) {
    const lab_shard_run *r = group_first(g)->r;
    for (int64_t k = 0; k < ng; k++) {
        const lab_shard_run *q = group_first(&gs[k])->r;
        if (q->is_reference && q->repeat == 0 && !strcmp(q->experiment, r->experiment) &&
            !strcmp(q->code_version, r->code_version) && !strcmp(q->dataset_sha256, r->dataset_sha256))
            return &gs[k];
    }
    return NULL;
}

static void identity_of(const lab_shard_run *r, lab_identity *id) {
    memset(id, 0, sizeof *id);
    id->experiment = r->experiment;
    id->arm = r->arm;
    id->repeat = r->repeat;
    id->knob_hash = r->knob_hash;
    id->model_sha256 = r->model_sha256;
    id->dataset_sha256 = r->dataset_sha256;
    id->code_version = r->code_version;
    id->shard = "";
}

/* Merges probe records by their aggregation key (site, layer, dtypes, row
 * sizes, converting) in first-seen order, as one run's session does. */
static int merge_probes(vt_probe **out, int64_t *n, int64_t *cap, const vt_probe *p, int64_t np) {
    for (int64_t i = 0; i < np; i++) {
        const vt_probe *a = &p[i];
        vt_probe *b = NULL;
        for (int64_t k = 0; k < *n && !b; k++) {
            vt_probe *c = &(*out)[k];
            if (!strcmp(c->site, a->site) && c->layer == a->layer && !strcmp(c->dtype, a->dtype) &&
                !strcmp(c->src_dtype, a->src_dtype) && c->bytes_per_row == a->bytes_per_row &&
                c->src_row_bytes == a->src_row_bytes && c->dst_row_bytes == a->dst_row_bytes &&
                c->converting == a->converting)
                b = c;
        }
        if (!b) {
            if (*n == *cap) {
                int64_t nc = *cap ? 2 * *cap : 64;
                vt_probe *v = realloc(*out, (size_t)nc * sizeof *v);
                if (!v) return -1;
                *out = v;
                *cap = nc;
            }
            (*out)[(*n)++] = *a;
            continue;
        }
        b->calls += a->calls;
        b->rows += a->rows;
        b->violations += a->violations;
        if (a->rows_unwritten >= 0) b->rows_unwritten = (b->rows_unwritten > 0 ? b->rows_unwritten : 0) + a->rows_unwritten;
        if (!*b->detail && *a->detail) memcpy(b->detail, a->detail, sizeof b->detail);
    }
    return 0;
}

typedef struct merged {
    lab_shard_data *d;        /* [count] */
    lab_pass_acc    acc;
    int64_t        *offsets;
    lab_run_record  rec;
    char          **esites, **edtypes;
    lab_expect_result *kex;
    int64_t         n_es, n_kex, probe_cap;
    double          wall_s;
} merged;

static void merged_free(merged *m, int64_t count) {
    for (int64_t s = 0; m->d && s < count; s++) lab_shard_data_free(&m->d[s]);
    free(m->d);
    free(m->acc.topk_ids);
    free(m->acc.topk_lp);
    free(m->acc.full);
    free(m->acc.kl);
    free(m->acc.dp);
    free(m->acc.dnll);
    free(m->acc.div_num);
    free(m->acc.div_den);
    free(m->acc.probes);
    free(m->acc.seq);
    free(m->offsets);
    lab_run_record_free(&m->rec);
    free(m->esites);
    free(m->edtypes);
    free(m->kex);
    memset(m, 0, sizeof *m);
}

#define OOM() lab_errf(err, errlen, LAB_ENOMEM, "out of memory")

/* The whole run's pass accumulators from the shards' rows, summed in
 * sequence order as the unsharded pass sums them (fold_sequence). */
static int build_acc(merged *m, const group *g, char *err, size_t errlen) {
    const lab_shard_info *h = &group_first(g)->r->info;
    lab_pass_acc *a = &m->acc;
    int64_t nseq = 0, ntok = 0, nsc = 0, L = h->n_layers;
    int full = 1;
    for (int64_t s = 0; s < g->count; s++) {
        nseq += m->d[s].n_seq;
        ntok += m->d[s].n_tok;
        nsc += m->d[s].n_scored;
        full &= m->d[s].full != NULL;
    }
    if (nseq != h->n_seq_total || ntok != h->n_tokens_total)
        return lab_errf(err, errlen, LAB_EINPUT, "%s/%s: the shards hold %lld sequences and %lld tokens, the dataset %lld "
                        "and %lld", group_first(g)->r->experiment, group_first(g)->r->arm, (long long)nseq,
                        (long long)ntok, (long long)h->n_seq_total, (long long)h->n_tokens_total);
    int64_t K = m->d[0].top_k, V = m->d[0].vocab;
    a->top_k = K;
    a->n_seq = nseq;
    a->n_layers = L;
    m->offsets = calloc((size_t)(nseq + 1), sizeof *m->offsets);
    a->seq = calloc((size_t)(nseq + 1), sizeof *a->seq);
    a->topk_ids = malloc((size_t)(ntok * K + 1) * sizeof *a->topk_ids);
    a->topk_lp = malloc((size_t)(ntok * K + 1) * sizeof *a->topk_lp);
    a->kl = malloc((size_t)(nsc + 1) * sizeof *a->kl);
    a->dp = malloc((size_t)(nsc + 1) * sizeof *a->dp);
    a->dnll = malloc((size_t)(nsc + 1) * sizeof *a->dnll);
    if (!m->offsets || !a->seq || !a->topk_ids || !a->topk_lp || !a->kl || !a->dp || !a->dnll) return OOM();
    if (full && !(a->full = malloc((size_t)(ntok * V + 1) * sizeof *a->full))) return OOM();
    int compared = m->d[0].n_seq > 0 && m->d[0].seq[0].compared;
    if (compared && h->div_sequences > 0 && (h->metrics & LAB_M_LAYERDIV)) {
        a->div_num = calloc((size_t)(L * 2 + 1), sizeof *a->div_num);
        a->div_den = calloc((size_t)(L * 2 + 1), sizeof *a->div_den);
        if (!a->div_num || !a->div_den) return OOM();
    }
    vt_sha256_init(&a->hash);
    int64_t q = 0, p = 0, sc = 0;
    for (int64_t s = 0; s < g->count; s++) {
        const lab_shard_data *d = &m->d[s];
        if (d->top_k != K) return lab_errf(err, errlen, LAB_EINPUT, "shards disagree on top_k");
        memcpy(a->topk_ids + p * K, d->topk_ids, (size_t)(d->n_tok * K) * sizeof *a->topk_ids);
        memcpy(a->topk_lp + p * K, d->topk_lp, (size_t)(d->n_tok * K) * sizeof *a->topk_lp);
        if (a->full) memcpy(a->full + p * V, d->full, (size_t)(d->n_tok * V) * sizeof *a->full);
        memcpy(a->kl + sc, d->kl, (size_t)d->n_scored * sizeof *a->kl);
        memcpy(a->dp + sc, d->dp, (size_t)d->n_scored * sizeof *a->dp);
        memcpy(a->dnll + sc, d->dnll, (size_t)d->n_scored * sizeof *a->dnll);
        for (int64_t i = 0; i < d->n_seq; i++, q++) {
            lab_seq_stat x = d->seq[i];
            x.sc0 += sc;
            a->seq[q] = x;
            m->offsets[q + 1] = m->offsets[q] + x.n_pos;
            vt_sha256_update(&a->hash, x.logits_sha256, 64);
            vt_sha256_update(&a->hash, "\n", 1);
            a->nll_sum += x.nll_sum;
            a->nll_n += x.nll_n;
            a->f16_kl_sum += x.f16_kl_sum;
            a->f16_n += x.f16_n;
            if (x.f16_kl_max > a->f16_kl_max) a->f16_kl_max = x.f16_kl_max;
            if (x.f16_dlogit_max > a->f16_dlogit_max) a->f16_dlogit_max = x.f16_dlogit_max;
            a->agree += x.agree;
            a->dp2_sum += x.dp2_sum;
            if (x.maxd != x.maxd) a->maxdiff = NAN;
            else if (x.maxd > a->maxdiff) a->maxdiff = x.maxd;
            if (a->div_num && x.div)
                for (int64_t k = 0; k < L * 2; k++) {
                    a->div_num[k] += x.div[2 * k];
                    a->div_den[k] += x.div[2 * k + 1];
                }
        }
        p += d->n_tok;
        sc += d->n_scored;
        if (merge_probes(&a->probes, &a->n_probes, &m->probe_cap, d->probes, d->n_probes)) return OOM();
        a->forward_s += g->at[s].r->forward_s;
        a->probes_lost += g->at[s].r->info.probes_lost;
        m->wall_s += g->at[s].r->wall_s;
    }
    a->n_scored = sc;
    vt_sha256_final_hex(&a->hash, a->hash_hex);
    return LAB_OK;
}

/* Rebuilds the run's record (assertions, metrics, comparison, verdict). */
static int build_record(merged *m, const group *g, int64_t ref_run, char *err, size_t errlen) {
    const lab_shard_run *r0 = group_first(g)->r;
    const lab_shard_info *h = &r0->info;
    const lab_shard_data *d0 = &m->d[0];
    m->esites = calloc((size_t)(d0->n_ex + 1), sizeof *m->esites);
    m->edtypes = calloc((size_t)(d0->n_ex + 1), sizeof *m->edtypes);
    m->kex = calloc((size_t)(d0->n_ex + 1), sizeof *m->kex);
    if (!m->esites || !m->edtypes || !m->kex) return OOM();
    for (int64_t i = 0; i < d0->n_ex; i++) {
        if (!strncmp(d0->ex[i].site, "knob:", 5)) m->kex[m->n_kex++] = d0->ex[i];
        else {
            m->esites[m->n_es] = (char *)d0->ex[i].site;
            m->edtypes[m->n_es++] = (char *)d0->ex[i].expected;
        }
    }
    lab_rebuild_spec sp = {h->metrics, h->div_tolerance, h->has_decision, h->decision_ge, h->decision_metric,
                           h->decision_threshold, m->acc.n_seq, m->offsets, h->n_layers, m->n_es, m->esites,
                           m->edtypes, m->kex, m->n_kex, d0->n_kn, (const char **)d0->kn, (const char **)d0->kv,
                           d0->knum};
    int compare = !(r0->is_reference && r0->repeat == 0);
    lab_ref_cache ref;
    memset(&ref, 0, sizeof ref);
    ref.run_id = ref_run;
    ref.hash_match = -1;
    for (int64_t s = 0; s < g->count; s++)
        if (g->at[s].r->ref_recomputed) {
            ref.recomputed = 1;
            int hm = g->at[s].r->ref_hash_match;
            ref.hash_match = ref.hash_match == -1 ? hm : (ref.hash_match && hm);
        }
    ref.n_div_seq = h->div_sequences;
    return lab_run_record_rebuild(&sp, &m->acc, compare ? &ref : NULL, &m->rec, err, errlen);
}

/* Loads, rebuilds and writes group g (inside the batch). */
static int merge_group(lab_store *st, group *g, int64_t ref_run, lab_store **in, const char *const *dbs,
                       char *err, size_t errlen) {
    const lab_shard_run *r0 = group_first(g)->r;
    merged m;
    memset(&m, 0, sizeof m);
    int rc = LAB_OK;
    if (!(m.d = calloc((size_t)g->count, sizeof *m.d))) return OOM();
    for (int64_t s = 0; s < g->count && !rc; s++) rc = lab_store_shard_load(in[g->at[s].db], g->at[s].r, &m.d[s], err, errlen);
    if (!rc) rc = build_acc(&m, g, err, errlen);
    if (!rc) rc = build_record(&m, g, ref_run, err, errlen);
    if (rc) goto done;
    const lab_shard_data *d0 = &m.d[0];
    if ((rc = lab_store_put_spec(st, d0->spec_sha, d0->spec_id, d0->spec_file, d0->spec_json, err, errlen))) goto done;
    lab_identity id;
    identity_of(r0, &id);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    lab_provenance pv = {r0->experiment_sha256, r0->git_commit, r0->git_dirty, r0->build_flags, r0->compiler,
                         r0->backend, r0->device, host, getpid(), lab_pid_start(getpid()), r0->is_reference,
                         r0->score, r0->top_k, r0->expected_assertions, r0->layer_kinds, r0->engine_hello};
    int kind = 0;
    int64_t run_id = 0, stale = 0;
    if ((rc = lab_store_lease(st, &id, &pv, 0, &kind, &run_id, &stale, err, errlen))) goto done;
    if (kind != LAB_LEASED) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: %s/%s: the run is %s there; nothing merged", lab_store_path(st),
                      r0->experiment, r0->arm, kind == LAB_LEASE_BUSY ? "being run by another process" : "FINISHED");
        goto done;
    }
    lab_run_result res;
    memset(&res, 0, sizeof res);
    lab_pass_acc *a = &m.acc;
    lab_run_record *rec = &m.rec;
    int compare = !(r0->is_reference && r0->repeat == 0);
    res.n_sequences = a->n_seq;
    res.n_tokens = m.offsets[a->n_seq];
    res.n_scored = a->n_scored;
    res.wall_s = m.wall_s;
    res.forward_s = a->forward_s;
    memcpy(res.logits_sha256, a->hash_hex, 65);
    res.assertions_ok = rec->ok;
    res.assertion_reason = rec->ok ? NULL : rec->reason.data;
    res.n_knobs = rec->n_kn;
    res.knob_names = rec->kn;
    res.knob_values = rec->kv;
    res.knob_numeric = rec->knum;
    res.n_probes = a->n_probes;
    res.probes = a->probes;
    res.probe_ok = rec->probe_ok;
    res.n_expect = rec->n_ex;
    res.expect = rec->ex;
    res.n_metrics = rec->nm;
    res.metric_names = rec->mn;
    res.metric_values = rec->mv;
    res.top_k = a->top_k;
    res.offsets = m.offsets;
    res.topk_ids = a->topk_ids;
    res.topk_logprobs = a->topk_lp;
    res.vocab = d0->vocab;
    res.full_f16 = a->full;
    res.cmp = compare ? &rec->cmp : NULL;
    res.verdict = compare && !r0->is_reference && r0->info.has_decision ? &rec->vr : NULL;
    res.seq = a->seq;
    res.seq_kl = a->kl;
    res.seq_dp = a->dp;
    res.seq_dnll = a->dnll;
    res.n_layers = a->n_layers;
    if ((rc = lab_store_finish(st, run_id, &res, err, errlen))) goto done;
    for (int64_t s = 0; s < g->count && !rc; s++)
        rc = lab_store_put_merged_shard(st, run_id, g->at[s].r, dbs[g->at[s].db], err, errlen);
    g->run_id = run_id;
done:
    merged_free(&m, g->count);
    return rc;
}

/* McNemar between each pair of merged non-reference arms (repeat 0) of
 * one experiment on agreement with the reference's top-1, as the runner's
 * pair_tests after a sweep. */
static int pair_tests(lab_store *st, group *gs, int64_t ng, char *err, size_t errlen) {
    int rc = LAB_OK;
    for (int64_t k = 0; k < ng && !rc; k++) {
        const lab_shard_run *rr = group_first(&gs[k])->r;
        if (!rr->is_reference || rr->repeat || !gs[k].run_id || !(rr->info.metrics & LAB_M_MCNEMAR)) continue;
        int32_t *ref = NULL;
        int64_t nr = 0;
        if ((rc = lab_store_top1(st, gs[k].run_id, &ref, &nr, err, errlen))) break;
        for (int64_t i = 0; i < ng && !rc; i++) {
            const lab_shard_run *ri = group_first(&gs[i])->r;
            if (ri->is_reference || ri->repeat || !gs[i].run_id || reference_of(gs, ng, &gs[i]) != &gs[k]) continue;
            int32_t *ai = NULL;
            int64_t na = 0;
            if ((rc = lab_store_top1(st, gs[i].run_id, &ai, &na, err, errlen))) break;
            for (int64_t j = 0; j < ng && !rc; j++) {
                const lab_shard_run *rj = group_first(&gs[j])->r;
                if (gs[j].arm_pos <= gs[i].arm_pos || rj->is_reference || rj->repeat || !gs[j].run_id ||
                    reference_of(gs, ng, &gs[j]) != &gs[k])
                    continue;
                int32_t *aj = NULL;
                int64_t nj = 0;
                if ((rc = lab_store_top1(st, gs[j].run_id, &aj, &nj, err, errlen))) break;
                if (na == nr && nj == nr) {
                    int64_t b = 0, c = 0;
                    for (int64_t p = 0; p < nr; p++) {
                        int ai_ok = ai[p] == ref[p], aj_ok = aj[p] == ref[p];
                        b += ai_ok && !aj_ok;
                        c += !ai_ok && aj_ok;
                    }
                    rc = lab_store_put_pair_test(st, gs[i].run_id, gs[j].run_id, gs[k].run_id, nr, b, c,
                                                 lab_mcnemar_exact(b, c), err, errlen);
                }
                free(aj);
            }
            free(ai);
        }
        free(ref);
    }
    return rc;
}

static int group_cmp(const void *pa, const void *pb) {
    const group *a = pa, *b = pb;
    const lab_shard_run *x = group_first(a)->r, *y = group_first(b)->r;
    int c = strcmp(x->experiment, y->experiment);
    if (c) return c;
    if ((c = strcmp(x->code_version, y->code_version))) return c;
    if (x->is_reference != y->is_reference) return y->is_reference - x->is_reference;
    if (x->repeat != y->repeat && x->is_reference) return x->repeat < y->repeat ? -1 : 1;
    if (a->arm_pos != b->arm_pos) return a->arm_pos < b->arm_pos ? -1 : 1;
    return x->repeat < y->repeat ? -1 : x->repeat > y->repeat;
}

/* What stays out: incomplete arms (an error unless partial) and arms whose
 * reference is incomplete or absent (unless FINISHED in `into`). */
static int decide(lab_store *st, group *gs, int64_t ng, int partial, lab_merge_summary *sum, char *err,
                  size_t errlen) {
    lab_buf miss = {0};
    for (int64_t k = 0; k < ng; k++) {
        group *g = &gs[k];
        if (g->n_have == g->count) continue;
        const lab_shard_run *r = group_first(g)->r;
        lab_buf_printf(&miss, "%s%s/%s repeat %lld: %lld of %lld shards (missing:", miss.len ? "; " : "", r->experiment,
                       r->arm, (long long)r->repeat, (long long)g->n_have, (long long)g->count);
        for (int64_t s = 0; s < g->count; s++)
            if (!g->at[s].r) lab_buf_printf(&miss, " %lld", (long long)s);
        lab_buf_printf(&miss, ")");
        g->skip = 1;
    }
    if (miss.len && !partial) {
        int rc = lab_errf(err, errlen, LAB_EINPUT, "incomplete: %s; run the missing shards (vtlab submit --resume) "
                          "or merge the complete arms with --partial; nothing merged", miss.data);
        lab_buf_free(&miss);
        return rc;
    }
    if (miss.len) fprintf(stderr, "vtlab merge: left out (incomplete): %s\n", miss.data);
    lab_buf_free(&miss);
    for (int64_t k = 0; k < ng; k++) {
        group *g = &gs[k];
        const lab_shard_run *r = group_first(g)->r;
        lab_identity id;
        identity_of(r, &id);
        int rc = lab_store_find_finished(st, &id, &g->run_id, NULL, err, errlen);
        if (rc) return rc;
        if (g->run_id) { g->skip = 2; sum->already++; continue; }
        if (g->skip) { sum->left_out++; continue; }
        if (r->is_reference && r->repeat == 0) continue;
        group *rg = reference_of(gs, ng, g);
        if (rg && !rg->skip) continue;
        if (rg && rg->skip == 2) continue;   /* merged before: found above (groups are sorted reference first) */
        if (!partial) {
            return lab_errf(err, errlen, LAB_EINPUT, "%s/%s: no complete shards of its reference arm to compare with "
                            "(merge them too, or use --partial); nothing merged", r->experiment, r->arm);
        }
        fprintf(stderr, "vtlab merge: left out %s/%s: its reference arm is incomplete\n", r->experiment, r->arm);
        g->skip = 1;
        sum->left_out++;
    }
    return LAB_OK;
}

/* Opens shard database db, checks its schema against the version it claims
 * (before anything is read from it), reads its FINISHED shard runs and
 * checks each. */
static int read_shard(lab_store **in, const char *db, lab_schema_cache *schemas, lab_shard_run **runs, int64_t *n,
                      char *err, size_t errlen) {
    int rc = lab_store_open_readonly(in, db, err, errlen);
    if (!rc) rc = lab_store_check_schema(*in, schemas, err, errlen);
    if (!rc) rc = lab_store_shard_runs(*in, runs, n, err, errlen);
    for (int64_t k = 0; !rc && k < *n; k++) rc = check_shard_run(*in, &(*runs)[k], db, err, errlen);
    if (!rc && !*n) fprintf(stderr, "vtlab merge: %s: no FINISHED shard run\n", db);
    return rc;
}

int lab_merge(const char *const *dbs, int n_db, const char *into, int partial, lab_merge_summary *sum, char *err,
              size_t errlen) {
    double t0 = lab_mono();
    memset(sum, 0, sizeof *sum);
    lab_store **in = calloc((size_t)n_db, sizeof *in), *st = NULL;
    lab_shard_run **runs = calloc((size_t)n_db, sizeof *runs);
    int64_t *nruns = calloc((size_t)n_db, sizeof *nruns), nf = 0, ng = 0;
    found *f = NULL;
    group *gs = NULL;
    lab_schema_cache schemas;
    memset(&schemas, 0, sizeof schemas);
    int rc = LAB_OK;
    if (!in || !runs || !nruns) { rc = OOM(); goto done; }
    for (int i = 0; i < n_db && !rc; i++) rc = read_shard(&in[i], dbs[i], &schemas, &runs[i], &nruns[i], err, errlen);
    for (int i = 0; i < n_db && !rc; i++) nf += nruns[i];
    if (rc) goto done;
    if (!nf) { rc = lab_errf(err, errlen, LAB_EINPUT, "no FINISHED shard run in the %d database(s); nothing merged", n_db); goto done; }
    if (!(f = calloc((size_t)nf, sizeof *f))) { rc = OOM(); goto done; }
    nf = 0;
    for (int i = 0; i < n_db; i++)
        for (int64_t k = 0; k < nruns[i]; k++) f[nf++] = (found){&runs[i][k], i};
    sum->shards = nf;
    if ((rc = build_groups(f, nf, dbs, &gs, &ng, err, errlen))) goto done;
    for (int64_t k = 0; k < ng; k++) {
        /* the arm order of the experiment file, read from its stored spec */
        const found *x = group_first(&gs[k]);
        char *json = NULL;
        if ((rc = lab_store_spec_json(in[x->db], x->r->experiment_sha256, &json, err, errlen))) goto done;
        rc = spec_arm_position(json, x->r, dbs[x->db], &gs[k].arm_pos, err, errlen);
        free(json);
        if (rc) goto done;
    }
    qsort(gs, (size_t)ng, sizeof *gs, group_cmp);
    if ((rc = lab_store_open(&st, into, err, errlen))) goto done;
    if ((rc = lab_store_check_schema(st, &schemas, err, errlen))) goto done;
    if ((rc = decide(st, gs, ng, partial, sum, err, errlen))) goto done;
    if ((rc = lab_store_batch_begin(st, err, errlen))) goto done;
    for (int64_t k = 0; k < ng && !rc; k++) {
        group *g = &gs[k];
        if (g->skip) continue;
        const lab_shard_run *r = group_first(g)->r;
        int64_t ref_run = 0;
        if (!(r->is_reference && r->repeat == 0)) {
            group *rg = reference_of(gs, ng, g);
            ref_run = rg ? rg->run_id : 0;
        }
        rc = merge_group(st, g, ref_run, in, dbs, err, errlen);
        if (!rc) {
            sum->merged++;
            printf("merged run %-4lld %s/%s%s from %lld shard(s)\n", (long long)g->run_id, r->experiment, r->arm,
                   r->repeat ? " (repeat)" : "", (long long)g->count);
        }
    }
    if (!rc && sum->merged) rc = pair_tests(st, gs, ng, err, errlen);
    if (rc) lab_store_batch_rollback(st);
    else rc = lab_store_batch_commit(st, err, errlen);
done:
    for (int64_t k = 0; gs && k < ng; k++) free(gs[k].at);
    free(gs);
    free(f);
    for (int i = 0; runs && i < n_db; i++) lab_shard_runs_free(runs[i], nruns[i]);
    for (int i = 0; in && i < n_db; i++) lab_store_close(in[i]);
    free(in);
    free(runs);
    free(nruns);
    lab_store_close(st);
    lab_schema_cache_free(&schemas);
    sum->wall_s = lab_mono() - t0;
    return rc;
}
