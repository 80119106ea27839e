/*
 * slurm.c — `vtlab submit` and `vtlab status` (see slurm.h, docs/slurm.md).
 */
#include "slurm.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "experiment.h"
#include "model/vt.h"
#include "store.h"
#include "store_merge.h"
#include "util.h"

/* Appends a zeroed row of size bytes to *v (n rows, capacity cap). */
static void *grow(void **v, int64_t *n, int64_t *cap, size_t size) {
    if (*n == *cap) {
        int64_t nc = *cap ? 2 * *cap : 16;
        void *p = realloc(*v, (size_t)nc * size);
        if (!p) return NULL;
        *v = p;
        *cap = nc;
    }
    void *row = (char *)*v + (size_t)*n * size;
    memset(row, 0, size);
    (*n)++;
    return row;
}

int lab_parse_shard(const char *s, int64_t *index, int64_t *count) {
    char *end;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (errno || end == s || *end != '/' || i < 0) return -1;
    const char *t = end + 1;
    long long n = strtoll(t, &end, 10);
    if (errno || end == t || *end || n < 1 || n > 1000000 || i >= n) return -1;
    *index = i;
    *count = n;
    return 0;
}

typedef struct task {
    const lab_experiment *e;
    const char *arm;
    int64_t     shard, count;
    char        db[PATH_MAX + 512];
    int         is_ref;
    char        state;      /* 'F' done, 'R' running (db), 'X' failed (db), 0 none; squeue: 'P', 'Q' (running) */
} task;

typedef struct sweep {
    lab_experiment **e;
    int              n_e;
    task            *t;
    int64_t          n_t;
    int64_t         *first;     /* [n_e + 1] tasks of experiment k: first[k] .. first[k+1) */
    char             dir[PATH_MAX], vtlab[PATH_MAX], cwd[PATH_MAX];
} sweep;

static void sweep_free(sweep *s) {
    for (int i = 0; i < s->n_e; i++) lab_experiment_free(s->e[i]);
    free(s->e);
    free(s->t);
    free(s->first);
}

/* Text that goes into a batch script between single quotes. */
static int script_safe(const char *what, const char *v, char *err, size_t errlen) {
    if (strpbrk(v, "'\n\t\r"))
        return lab_errf(err, errlen, LAB_EINPUT, "%s \"%s\": a quote, tab or newline cannot go into a batch script",
                        what, v);
    return LAB_OK;
}

static int abs_path(const char *p, const char *cwd, char *out, size_t n) {
    size_t lp = strlen(p), lc = strlen(cwd);
    if (p[0] == '/') {
        if (lp + 1 > n) return -1;
        memcpy(out, p, lp + 1);
        return 0;
    }
    if (lc + 1 + lp + 1 > n) return -1;
    memcpy(out, cwd, lc);
    out[lc] = '/';
    memcpy(out + lc + 1, p, lp + 1);
    return 0;
}

/* The tasks of every experiment: each arm's shards, the reference's first. */
static int plan(const lab_submit_opts *o, sweep *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (!getcwd(s->cwd, sizeof s->cwd)) return lab_errf(err, errlen, LAB_EIO, "getcwd: %s", strerror(errno));
    if (abs_path(o->results, s->cwd, s->dir, sizeof s->dir))
        return lab_errf(err, errlen, LAB_EINPUT, "--results %s: path too long", o->results);
    int rc = script_safe("--results", s->dir, err, errlen);
    if (rc) return rc;
    if (o->vtlab) {
        if (abs_path(o->vtlab, s->cwd, s->vtlab, sizeof s->vtlab))
            return lab_errf(err, errlen, LAB_EINPUT, "--vtlab: path too long");
    } else {
        ssize_t k = readlink("/proc/self/exe", s->vtlab, sizeof s->vtlab - 1);
        if (k <= 0) return lab_errf(err, errlen, LAB_EIO, "cannot find this vtlab binary (/proc/self/exe)");
        s->vtlab[k] = 0;
    }
    if ((rc = script_safe("--vtlab", s->vtlab, err, errlen))) return rc;
    if (o->merge_into && (rc = script_safe("--merge-into", o->merge_into, err, errlen))) return rc;
    s->e = calloc((size_t)o->n_files, sizeof *s->e);
    s->first = calloc((size_t)o->n_files + 1, sizeof *s->first);
    if (!s->e || !s->first) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    int64_t cap = 0;
    for (int k = 0; k < o->n_files; k++) {
        if ((rc = script_safe("experiment file", o->files[k], err, errlen))) return rc;
        if ((rc = lab_experiment_load(&s->e[k], o->files[k], err, errlen))) return rc;
        s->n_e = k + 1;
        const lab_experiment *e = s->e[k];
        for (int j = 0; j < k; j++)
            if (!strcmp(s->e[j]->id, e->id))
                return lab_errf(err, errlen, LAB_EINPUT, "%s: id %s: also the id of %s (one results directory per "
                                "experiment id)", o->files[k], e->id, o->files[j]);
        int64_t nseq = e->ds.kind == LAB_DS_GENERATE ? e->ds.gen_n : e->ds.n_seq, N = o->shards_per_arm;
        if (N > nseq)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: --shards-per-arm %lld: the dataset has %lld sequence(s)",
                            o->files[k], (long long)N, (long long)nseq);
        if (e->repeats > 1)
            fprintf(stderr, "vtlab submit: %s: repeats %lld: each task runs every repeat of its arm's shard\n",
                    o->files[k], (long long)e->repeats);
        s->first[k] = s->n_t;
        for (int64_t a = -1; a < e->n_arms; a++) {
            int64_t arm = a < 0 ? e->ref_index : a;
            if (a >= 0 && arm == e->ref_index) continue;
            for (int64_t i = 0; i < N; i++) {
                task *t = grow((void **)&s->t, &s->n_t, &cap, sizeof *t);
                if (!t) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
                t->e = e;
                t->arm = e->arms[arm].name;
                t->shard = i;
                t->count = N;
                t->is_ref = a < 0;
                snprintf(t->db, sizeof t->db, "%s/%s/%s.%lldof%lld.db", s->dir, e->id, t->arm, (long long)i,
                         (long long)N);
            }
        }
        if (s->n_t - s->first[k] > 1001)
            fprintf(stderr, "vtlab submit: %s: %lld tasks; Slurm's default MaxArraySize is 1001\n", o->files[k],
                    (long long)(s->n_t - s->first[k]));
    }
    s->first[s->n_e] = s->n_t;
    return LAB_OK;
}

/* The batch script of experiment k: task i runs line i+1 of tasks.tsv. */
static void write_script(const lab_submit_opts *o, const sweep *s, int k, lab_buf *b) {
    const lab_experiment *e = s->e[k];
    const char *part = o->partition ? o->partition : e->slurm_partition;
    const char *time = o->time ? o->time : e->slurm_time;
    const char *acct = o->account ? o->account : e->slurm_account;
    char gpus[32] = "";
    if (o->gpus_per_task) snprintf(gpus, sizeof gpus, "%s", o->gpus_per_task);
    else if (e->slurm_gpus_per_task > 0) snprintf(gpus, sizeof gpus, "%lld", (long long)e->slurm_gpus_per_task);
    lab_buf_printf(b, "#!/bin/bash\n");
    lab_buf_printf(b, "# vtlab submit: experiment %s (%s), one task per (arm, sequence shard);\n", e->id, e->path);
    lab_buf_printf(b, "# task i runs line i+1 of tasks.tsv into its own shard database (docs/slurm.md).\n");
    lab_buf_printf(b, "#SBATCH --job-name=vtlab-%s\n", e->id);
    lab_buf_printf(b, "#SBATCH --output=%s/logs/%%x-%%A_%%a.out\n", s->dir);
    lab_buf_printf(b, "#SBATCH --chdir=%s\n", s->cwd);
    lab_buf_printf(b, "#SBATCH --ntasks=1\n");
    if (part) lab_buf_printf(b, "#SBATCH --partition=%s\n", part);
    if (time) lab_buf_printf(b, "#SBATCH --time=%s\n", time);
    if (*gpus) lab_buf_printf(b, "#SBATCH --gpus-per-task=%s\n", gpus);
    if (acct) lab_buf_printf(b, "#SBATCH --account=%s\n", acct);
    lab_buf_printf(b, "set -eu\n");
    lab_buf_printf(b, "line=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" '%s/%s/tasks.tsv')\n", s->dir, e->id);
    lab_buf_printf(b, "IFS=$'\\t' read -r idx exp arm shard db kind <<<\"$line\"\n");
    lab_buf_printf(b, "export VTLAB_TASK=\"%s/$arm/$shard\"\n", e->id);
    lab_buf_printf(b, "echo \"vtlab task $SLURM_ARRAY_TASK_ID: $kind $arm shard $shard on $(hostname) -> $db\"\n");
    lab_buf_printf(b, "exec '%s' run \"$exp\" --arm \"$arm\" --shard \"$shard\" --db \"$db\"\n", s->vtlab);
}

static void write_tasks(const sweep *s, int k, lab_buf *b) {
    for (int64_t i = s->first[k]; i < s->first[k + 1]; i++) {
        const task *t = &s->t[i];
        lab_buf_printf(b, "%lld\t%s\t%s\t%lld/%lld\t%s\t%s\n", (long long)(i - s->first[k]), t->e->path, t->arm,
                       (long long)t->shard, (long long)t->count, t->db, t->is_ref ? "ref" : "arm");
    }
}

static void write_merge(const lab_submit_opts *o, const sweep *s, lab_buf *b) {
    char into[PATH_MAX];
    abs_path(o->merge_into, s->cwd, into, sizeof into);
    lab_buf_printf(b, "#!/bin/bash\n# vtlab submit: the merge, after every task of the sweep\n");
    lab_buf_printf(b, "#SBATCH --job-name=vtlab-merge\n#SBATCH --output=%s/logs/%%x-%%j.out\n", s->dir);
    lab_buf_printf(b, "#SBATCH --chdir=%s\n#SBATCH --ntasks=1\n", s->cwd);
    if (o->partition) lab_buf_printf(b, "#SBATCH --partition=%s\n", o->partition);
    if (o->account) lab_buf_printf(b, "#SBATCH --account=%s\n", o->account);
    lab_buf_printf(b, "set -eu\nexec '%s' merge '%s'/*/*.db --into '%s'\n", s->vtlab, s->dir, into);
}

static int write_file(const char *path, const lab_buf *b, char *err, size_t errlen) {
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return lab_errf(err, errlen, LAB_EIO, "%s: %s", tmp, strerror(errno));
    int ok = fwrite(b->data ? b->data : "", 1, b->len, f) == b->len;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path)) return lab_errf(err, errlen, LAB_EIO, "%s: %s", path, strerror(errno));
    return LAB_OK;
}

static int mkdir_p(const char *dir, char *err, size_t errlen) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(p, 0777) && errno != EEXIST) return lab_errf(err, errlen, LAB_EIO, "mkdir %s: %s", p, strerror(errno));
            *c = '/';
        }
    if (mkdir(p, 0777) && errno != EEXIST) return lab_errf(err, errlen, LAB_EIO, "mkdir %s: %s", p, strerror(errno));
    return LAB_OK;
}

/* Each task's state from its shard database. */
static int db_states(sweep *s, char *err, size_t errlen) {
    for (int64_t i = 0; i < s->n_t; i++) {
        task *t = &s->t[i];
        t->state = 0;
        if (access(t->db, R_OK)) continue;
        lab_store *st = NULL;
        char shard[48];
        snprintf(shard, sizeof shard, "%lld/%lld", (long long)t->shard, (long long)t->count);
        int st_state = 0, rc = lab_store_open_readonly(&st, t->db, err, errlen);
        if (!rc) rc = lab_store_shard_state(st, t->e->id, t->arm, shard, vt_build_info(), &st_state, err, errlen);
        lab_store_close(st);
        if (rc) {
            fprintf(stderr, "vtlab: %s: %s (counted as failed)\n", t->db, err);
            st_state = 'X';
        }
        t->state = (char)st_state;
    }
    return LAB_OK;
}

/* Tasks squeue lists (jobs of DIR/jobs.tsv): state 'P' pending, 'Q' running.
 * *have = 0 when squeue could not be asked. */
static void squeue_states(sweep *s, int *have) {
    *have = 0;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/jobs.tsv", s->dir);
    FILE *jf = fopen(path, "r");
    if (!jf) return;
    FILE *q = popen("squeue -h -r -o '%i|%T' 2>/dev/null", "r");
    if (!q) { fclose(jf); return; }
    char line[512];
    /* jobs.tsv: JOBID \t EXPERIMENT \t KIND \t INDICES */
    char (*jobs)[2][128] = NULL;
    int64_t nj = 0, cap = 0;
    while (fgets(line, sizeof line, jf)) {
        char id[128], ex[128];
        if (sscanf(line, "%127[^\t]\t%127[^\t]", id, ex) != 2) continue;
        char (*j)[2][128] = grow((void **)&jobs, &nj, &cap, sizeof *jobs);
        if (!j) break;
        snprintf((*j)[0], 128, "%s", id);
        snprintf((*j)[1], 128, "%s", ex);
    }
    fclose(jf);
    int any = 0;
    while (fgets(line, sizeof line, q)) {
        any = 1;
        char *bar = strchr(line, '|'), *us = strchr(line, '_');
        if (!bar || !us || us > bar) continue;
        *us = 0;
        *bar = 0;
        long long idx = atoll(us + 1);
        const char *state = bar + 1;
        for (int64_t k = 0; k < nj; k++) {
            if (strcmp(jobs[k][0], line)) continue;
            for (int e = 0; e < s->n_e; e++) {
                if (strcmp(s->e[e]->id, jobs[k][1])) continue;
                int64_t ti = s->first[e] + idx;
                if (ti >= s->first[e + 1] || s->t[ti].state == 'F') continue;
                s->t[ti].state = !strncmp(state, "RUNNING", 7) || !strncmp(state, "COMPLETING", 10) ? 'Q' : 'P';
            }
        }
    }
    int st = pclose(q);
    *have = st == 0 || any;
    free(jobs);
    /* squeue answered: a RUNNING row of a task Slurm no longer lists is a
     * task that died (killed, node lost, out of memory) */
    for (int64_t i = 0; *have && i < s->n_t; i++)
        if (s->t[i].state == 'R') s->t[i].state = 'X';
}

/* "0-3,7,9-10" of the indices (relative to first) of tasks selected. */
static void array_spec(const sweep *s, int k, const uint8_t *sel, int ref, lab_buf *b) {
    int64_t f = s->first[k], n = s->first[k + 1] - f, i = 0;
    while (i < n) {
        if (!sel[f + i] || s->t[f + i].is_ref != ref) { i++; continue; }
        int64_t j = i;
        while (j + 1 < n && sel[f + j + 1] && s->t[f + j + 1].is_ref == ref) j++;
        if (b->len) lab_buf_printf(b, ",");
        if (j > i) lab_buf_printf(b, "%lld-%lld", (long long)i, (long long)j);
        else lab_buf_printf(b, "%lld", (long long)i);
        i = j + 1;
    }
}

/* sbatch with the given arguments; the job id in id (--parsable). */
static int sbatch(const char *args, char *id, size_t idlen, char *err, size_t errlen) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "sbatch --parsable %s 2>&1", args);
    FILE *p = popen(cmd, "r");
    if (!p) return lab_errf(err, errlen, LAB_EIO, "cannot run sbatch: %s", strerror(errno));
    char out[1024] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    if (st != 0) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            return lab_errf(err, errlen, LAB_EINPUT, "sbatch not found: Slurm is not installed here (--dry-run prints "
                            "the scripts)");
        return lab_errf(err, errlen, LAB_EIO, "%s: %s", cmd, out);
    }
    size_t k = strcspn(out, ";\n");
    out[k] = 0;
    snprintf(id, idlen, "%s", out);
    return *id ? LAB_OK : lab_errf(err, errlen, LAB_EIO, "sbatch printed no job id");
}

/* --slurm 'OPTS': each blank-separated option single-quoted. */
static int extra_args(const char *extra, lab_buf *b, char *err, size_t errlen) {
    if (!extra) return LAB_OK;
    if (strchr(extra, '\''))
        return lab_errf(err, errlen, LAB_EINPUT, "--slurm \"%s\": options may not contain a quote", extra);
    char *copy = lab_strdup(extra), *save = NULL;
    for (char *tok = strtok_r(copy, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
        lab_buf_printf(b, " '%s'", tok);
    free(copy);
    return LAB_OK;
}

/* The tasks this submission sends into sel[0..n_t): every task, or under
 * --resume those with no state (never run, not queued) or FAILED ('X').
 * Returns how many. */
static int64_t select_tasks(const lab_submit_opts *o, sweep *s, uint8_t *sel, char *err, size_t errlen) {
    if (o->resume) {
        int have = 0;
        db_states(s, err, errlen);
        squeue_states(s, &have);
    }
    int64_t n_sel = 0;
    for (int64_t i = 0; i < s->n_t; i++) {
        sel[i] = !o->resume || !s->t[i].state || s->t[i].state == 'X';
        n_sel += sel[i];
    }
    return n_sel;
}

/* What experiment k's submission would write and run (--dry-run): its
 * tasks.tsv and task.sbatch (at sp), and the sbatch line of each array. */
static void print_experiment(const lab_submit_opts *o, const sweep *s, int k, const lab_buf *script,
                             const lab_buf *tasks, const lab_buf *ref, const lab_buf *arm, const char *sp) {
    printf("# %s/%s/tasks.tsv\n%s# %s\n%s", s->dir, s->e[k]->id, tasks->data ? tasks->data : "", sp,
           script->data ? script->data : "");
    if (ref->len) printf("# sbatch --parsable --array=%s%s%s '%s'\n", ref->data, o->extra ? " " : "",
                         o->extra ? o->extra : "", sp);
    if (arm->len) printf("# sbatch --parsable --array=%s%s%s%s '%s'\n", arm->data,
                         ref->len ? " --dependency=afterok:REFJOB --kill-on-invalid-dep=yes" : "",
                         o->extra ? " " : "", o->extra ? o->extra : "", sp);
}

/* Submits the job array `array` of the script sp, after job `after` when it
 * is not "", with --slurm's options; its job id into id. */
static int submit_array(const lab_submit_opts *o, const char *array, const char *after, const char *sp, char *id,
                        size_t idlen, char *err, size_t errlen) {
    lab_buf args = {0};
    lab_buf_printf(&args, "--array=%s", array);
    if (*after) lab_buf_printf(&args, " --dependency=afterok:%s --kill-on-invalid-dep=yes", after);
    int rc = extra_args(o->extra, &args, err, errlen);
    if (!rc) {
        lab_buf_printf(&args, " '%s'", sp);
        rc = sbatch(args.data, id, idlen, err, errlen);
    }
    lab_buf_free(&args);
    return rc;
}

/* Writes experiment k's tasks.tsv and task.sbatch (at sp), then submits the
 * array of its selected reference shards and, after that job, the array of
 * its arm shards. Each job goes to jobs (a jobs.tsv line) and all_ids
 * (":ID", what the merge waits for). */
static int submit_experiment(const lab_submit_opts *o, const sweep *s, int k, const lab_buf *script,
                             const lab_buf *tasks, const lab_buf *ref, const lab_buf *arm, const char *sp,
                             lab_buf *jobs, lab_buf *all_ids, char *err, size_t errlen) {
    char dir[PATH_MAX + 64], path[PATH_MAX + 256], ref_id[128] = "", arm_id[128] = "";
    snprintf(dir, sizeof dir, "%s/%s", s->dir, s->e[k]->id);
    int rc = mkdir_p(dir, err, errlen);
    if (!rc) {
        snprintf(path, sizeof path, "%s/tasks.tsv", dir);
        rc = write_file(path, tasks, err, errlen);
    }
    if (!rc) rc = write_file(sp, script, err, errlen);
    if (!rc && ref->len && !(rc = submit_array(o, ref->data, "", sp, ref_id, sizeof ref_id, err, errlen))) {
        lab_buf_printf(jobs, "%s\t%s\tref\t%s\n", ref_id, s->e[k]->id, ref->data);
        lab_buf_printf(all_ids, ":%s", ref_id);
        printf("submitted job %s: %s reference shards (array %s)\n", ref_id, s->e[k]->id, ref->data);
    }
    if (!rc && arm->len && !(rc = submit_array(o, arm->data, ref_id, sp, arm_id, sizeof arm_id, err, errlen))) {
        lab_buf_printf(jobs, "%s\t%s\tarm\t%s\n", arm_id, s->e[k]->id, arm->data);
        lab_buf_printf(all_ids, ":%s", arm_id);
        printf("submitted job %s: %s arm shards (array %s)%s%s\n", arm_id, s->e[k]->id, arm->data,
               *ref_id ? ", after job " : "", ref_id);
    }
    return rc;
}

/* Experiment k's part of the submission: its script, task list and arrays
 * of selected shards, submitted (or printed under --dry-run). */
static int experiment_jobs(const lab_submit_opts *o, const sweep *s, int k, const uint8_t *sel, lab_buf *jobs,
                           lab_buf *all_ids, char *err, size_t errlen) {
    lab_buf script = {0}, tasks = {0}, ref = {0}, arm = {0};
    write_script(o, s, k, &script);
    write_tasks(s, k, &tasks);
    array_spec(s, k, sel, 1, &ref);
    array_spec(s, k, sel, 0, &arm);
    char sp[PATH_MAX + 64];
    snprintf(sp, sizeof sp, "%s/%s/task.sbatch", s->dir, s->e[k]->id);
    int rc = LAB_OK;
    if (o->dry_run) print_experiment(o, s, k, &script, &tasks, &ref, &arm, sp);
    else rc = submit_experiment(o, s, k, &script, &tasks, &ref, &arm, sp, jobs, all_ids, err, errlen);
    lab_buf_free(&script);
    lab_buf_free(&tasks);
    lab_buf_free(&ref);
    lab_buf_free(&arm);
    return rc;
}

/* The merge job (--merge-into), after every job all_ids names; printed
 * under --dry-run. */
static int merge_job(const lab_submit_opts *o, const sweep *s, lab_buf *jobs, const lab_buf *all_ids, char *err,
                     size_t errlen) {
    lab_buf m = {0}, args = {0};
    write_merge(o, s, &m);
    char mp[PATH_MAX + 32], mid[128] = "";
    snprintf(mp, sizeof mp, "%s/merge.sbatch", s->dir);
    int rc = LAB_OK;
    if (o->dry_run) {
        printf("# %s\n%s# sbatch --parsable --dependency=afterok:ALLJOBS --kill-on-invalid-dep=yes '%s'\n", mp, m.data, mp);
    } else if (!(rc = write_file(mp, &m, err, errlen))) {
        if (all_ids->len) lab_buf_printf(&args, "--dependency=afterok%s --kill-on-invalid-dep=yes ", all_ids->data);
        lab_buf_printf(&args, "'%s'", mp);
        if (!(rc = sbatch(args.data, mid, sizeof mid, err, errlen))) {
            lab_buf_printf(jobs, "%s\t-\tmerge\t-\n", mid);
            printf("submitted job %s: merge into %s\n", mid, o->merge_into);
        }
    }
    lab_buf_free(&m);
    lab_buf_free(&args);
    return rc;
}

/* Appends the submitted jobs to DIR/jobs.tsv (what `vtlab status` reads). */
static int append_jobs(const sweep *s, const lab_buf *jobs, char *err, size_t errlen) {
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/jobs.tsv", s->dir);
    FILE *f = fopen(path, "a");
    if (!f || fputs(jobs->data, f) < 0 || fclose(f)) return lab_errf(err, errlen, LAB_EIO, "%s: %s", path, strerror(errno));
    return LAB_OK;
}

int lab_submit(const lab_submit_opts *o, char *err, size_t errlen) {
    sweep s;
    int rc = plan(o, &s, err, errlen);
    uint8_t *sel = NULL;
    lab_buf jobs = {0}, all_ids = {0};
    if (rc) goto done;
    if (!(sel = calloc((size_t)s.n_t + 1, 1))) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    int64_t n_sel = select_tasks(o, &s, sel, err, errlen);
    if (!o->dry_run && (rc = mkdir_p(s.dir, err, errlen))) goto done;
    if (!o->dry_run) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/logs", s.dir);
        if ((rc = mkdir_p(path, err, errlen))) goto done;
    }
    for (int k = 0; k < s.n_e && !rc; k++) rc = experiment_jobs(o, &s, k, sel, &jobs, &all_ids, err, errlen);
    if (!rc && o->merge_into && (n_sel || o->dry_run)) rc = merge_job(o, &s, &jobs, &all_ids, err, errlen);
    if (!o->dry_run && jobs.len) {
        /* a failure before keeps its message: the jobs it did submit are still recorded */
        int jrc = append_jobs(&s, &jobs, rc ? NULL : err, errlen);
        if (!rc) rc = jrc;
    }
    if (!rc && !o->dry_run)
        printf("%lld of %lld task(s) submitted; results in %s (vtlab status --results %s)\n", (long long)n_sel,
               (long long)s.n_t, s.dir, o->results);
done:
    free(sel);
    lab_buf_free(&jobs);
    lab_buf_free(&all_ids);
    sweep_free(&s);
    return rc;
}

/* The experiments of DIR: the experiment file of each DIR/EXP/tasks.tsv,
 * with its shard count. */
static int status_plan(const lab_submit_opts *o, sweep *s, char *err, size_t errlen) {
    char dir[PATH_MAX], cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || abs_path(o->results, cwd, dir, sizeof dir))
        return lab_errf(err, errlen, LAB_EINPUT, "--results %s: bad path", o->results);
    DIR *d = opendir(dir);
    if (!d) return lab_errf(err, errlen, LAB_EINPUT, "--results %s: %s (no submitted sweep there)", dir, strerror(errno));
    const char *files[256];
    char store[256][PATH_MAX];
    int nf = 0;
    int64_t N = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nf < 256) {
        if (de->d_name[0] == '.') continue;
        char tp[PATH_MAX + 600];
        snprintf(tp, sizeof tp, "%s/%s/tasks.tsv", dir, de->d_name);
        FILE *f = fopen(tp, "r");
        if (!f) continue;
        char line[PATH_MAX * 2];
        if (fgets(line, sizeof line, f)) {
            char ex[PATH_MAX], sh[64];
            if (sscanf(line, "%*[^\t]\t%4095[^\t]\t%*[^\t]\t%63[^\t]", ex, sh) == 2) {
                int64_t i0, n0;
                if (!lab_parse_shard(sh, &i0, &n0)) {
                    if (N && n0 != N) {
                        fclose(f);
                        closedir(d);
                        return lab_errf(err, errlen, LAB_EINPUT, "%s: shard counts differ between experiments", dir);
                    }
                    N = n0;
                    snprintf(store[nf], PATH_MAX, "%s", ex);
                    files[nf] = store[nf];
                    nf++;
                }
            }
        }
        fclose(f);
    }
    closedir(d);
    if (!nf) return lab_errf(err, errlen, LAB_EINPUT, "--results %s: no DIR/EXPERIMENT/tasks.tsv (nothing submitted)", dir);
    lab_submit_opts so = *o;
    so.files = files;
    so.n_files = nf;
    so.shards_per_arm = N;
    return plan(&so, s, err, errlen);
}

int lab_status(const lab_submit_opts *o, int *complete, char *err, size_t errlen) {
    sweep s;
    *complete = 0;
    int rc = status_plan(o, &s, err, errlen);
    if (rc) { sweep_free(&s); return rc; }
    db_states(&s, err, errlen);
    int have = 0;
    if (o->use_slurm) {
        squeue_states(&s, &have);
        if (!have) printf("(squeue not available: states from the shard databases only)\n");
    }
    int64_t tot[6] = {0};   /* done, running, pending, failed, missing */
    lab_buf redo = {0};
    for (int k = 0; k < s.n_e; k++) {
        int64_t c[5] = {0};
        for (int64_t i = s.first[k]; i < s.first[k + 1]; i++) {
            const task *t = &s.t[i];
            int w = t->state == 'F' ? 0 : (t->state == 'Q' || t->state == 'R') ? 1 : t->state == 'P' ? 2
                  : t->state == 'X' ? 3 : 4;
            c[w]++;
            static const char *const nm[] = {"done", "running", "pending", "failed", "missing"};
            if (w >= 3) lab_buf_printf(&redo, "  %-8s %s/%s shard %lld/%lld  (task %lld, %s)\n", nm[w], s.e[k]->id,
                                       t->arm, (long long)t->shard, (long long)t->count,
                                       (long long)(i - s.first[k]), t->db);
        }
        printf("%-24s %lld task(s): %lld done, %lld running, %lld pending, %lld failed, %lld missing\n", s.e[k]->id,
               (long long)(s.first[k + 1] - s.first[k]), (long long)c[0], (long long)c[1], (long long)c[2],
               (long long)c[3], (long long)c[4]);
        for (int w = 0; w < 5; w++) tot[w] += c[w];
    }
    if (redo.len) {
        printf("to resubmit (vtlab submit EXPERIMENT.json... --results %s --shards-per-arm %lld --resume):\n%s",
               o->results, (long long)s.t[0].count, redo.data);
    }
    if (tot[0] == s.n_t) printf("all %lld task(s) done: vtlab merge %s/*/*.db --into results.db\n", (long long)s.n_t,
                                o->results);
    *complete = tot[0] == s.n_t;
    lab_buf_free(&redo);
    sweep_free(&s);
    return LAB_OK;
}
