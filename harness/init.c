/*
 * init.c — `vtlab init [DIR]` (see init.h).
 */
#include "init.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static const char example_json[] =
    "{\n"
    "  \"id\": \"example\",\n"
    "  \"description\": \"Written by `vtlab init`: a bf16 residual stream against the all-f32 reference, through an "
    "engine command.\",\n"
    "  \"hypothesis\": \"Storing the residual stream in bf16 keeps the next-token choice: top-1 agreement with the "
    "f32 reference of at least 90%.\",\n"
    "  \"notes\": \"Fields (docs/experiments.md in vtlab's docs): engine is the command vtlab starts and speaks the "
    "engine protocol to; [\\\"vtlab\\\", \\\"engine\\\"] serves vtlab's own model (the vtlab that runs the "
    "experiment), so this runs as it is: replace it with your engine's command line. model is what the engine loads "
    "(passed as VTP_MODEL): a checkpoint dir, or a synthetic model built once into vtlab's cache; "
    "model/configs/kimi-linear-tiny.json names the tiny config vtlab ships, and a relative path is otherwise "
    "relative to this file. Each arm's knobs are your engine's own settings (environment variables it declares in "
    "its hello); expect names a probe site and the dtype it must show. The decision is a Wilson interval of the "
    "top-1 agreement against the threshold.\",\n"
    "  \"engine\": [\"vtlab\", \"engine\"],\n"
    "  \"model\": {\"synth\": \"model/configs/kimi-linear-tiny.json\", \"seed\": 1},\n"
    "  \"dataset\": {\"generate\": {\"n_sequences\": 16, \"length\": 16, \"seed\": 7}},\n"
    "  \"score\": \"all\",\n"
    "  \"top_k\": 8,\n"
    "  \"reference\": \"f32\",\n"
    "  \"arms\": [\n"
    "    {\"name\": \"f32\", \"description\": \"the reference: every knob at its default\"},\n"
    "    {\"name\": \"bf16-stream\", \"knobs\": {\"VT_KIMI_BF16_STREAM\": \"1\"}, \"expect\": {\"residual.stream\": "
    "\"bf16\"}}\n"
    "  ],\n"
    "  \"decision\": {\"metric\": \"top1_agreement\", \"threshold\": 0.9, \"direction\": \">=\"},\n"
    "  \"divergence\": {\"sequences\": 2, \"tolerance\": 0.02}\n"
    "}\n";

static const char specs_readme[] =
    "# specs/ — the ledger\n\n"
    "Recorded results and known defects, committed with the code they were measured on (vtlab's\n"
    "docs/specs.md has the format):\n\n"
    "- `claims/*.json` — a recorded result. Write one from a finished run with\n"
    "  `vtlab claim RUN --id ID` (see `vtlab runs`), then commit it.\n"
    "- `defects/*.json` — a known defect: its probe site, the knobs that trigger it, the code range\n"
    "  it lived in, and the fault that replays it.\n\n"
    "`vtlab audit` flags results measured through a defect; `vtlab reopen CLAIM_ID` measures them\n"
    "again. A claim's `experiment` is a path relative to this directory's parent (the project\n"
    "root: `experiments/example.json`).\n";

static const char gitignore[] =
    "# vtlab: results and reports are made by vtlab, not committed\n"
    "results.db\n"
    "results.db-wal\n"
    "results.db-shm\n"
    "report/\n"
    "build/reopen/\n";

static const char github_yml[] =
    "# vtlab nightly (written by `vtlab init`): reruns experiments/, audits them against specs/,\n"
    "# compares with the previous night and publishes report/ (junit.xml, nightly.md, the HTML\n"
    "# report). results.db is kept between nights in the Actions cache: without it a night has\n"
    "# nothing to compare with. The job fails (exit 1) on a regression.\n"
    "name: vtlab nightly\n"
    "on:\n"
    "  schedule:\n"
    "    - cron: \"17 3 * * *\"\n"
    "  workflow_dispatch:\n"
    "jobs:\n"
    "  nightly:\n"
    "    runs-on: ubuntu-latest\n"
    "    steps:\n"
    "      - uses: actions/checkout@v4\n"
    "      - name: install vtlab\n"
    "        # from its source: set the repository variable VTLAB_REPO to vtlab's git URL,\n"
    "        # or replace this step with your own install (vtlab must end up on PATH)\n"
    "        run: |\n"
    "          sudo apt-get update -qq\n"
    "          sudo apt-get install -y -qq --no-install-recommends libsqlite3-dev libcjson-dev libopenblas-dev "
    "gnuplot-nox\n"
    "          git clone --depth 1 \"${{ vars.VTLAB_REPO }}\" \"$RUNNER_TEMP/vtlab\"\n"
    "          make -C \"$RUNNER_TEMP/vtlab\" install PREFIX=\"$HOME/.local\"\n"
    "          echo \"$HOME/.local/bin\" >> \"$GITHUB_PATH\"\n"
    "      - name: restore results.db\n"
    "        uses: actions/cache/restore@v4\n"
    "        with:\n"
    "          path: results.db\n"
    "          key: vtlab-results-${{ github.run_id }}\n"
    "          restore-keys: vtlab-results-\n"
    "      - name: vtlab nightly\n"
    "        run: vtlab nightly --db results.db --out report\n"
    "      - name: keep results.db\n"
    "        if: always()\n"
    "        uses: actions/cache/save@v4\n"
    "        with:\n"
    "          path: results.db\n"
    "          key: vtlab-results-${{ github.run_id }}\n"
    "      - name: publish the report\n"
    "        if: always()\n"
    "        uses: actions/upload-artifact@v4\n"
    "        with:\n"
    "          name: vtlab-report\n"
    "          path: report/\n"
    "      - name: publish junit.xml\n"
    "        if: always()\n"
    "        uses: mikepenz/action-junit-report@v4\n"
    "        with:\n"
    "          report_paths: report/junit.xml\n";

static const char gitlab_yml[] =
    "# vtlab nightly (written by `vtlab init`) for GitLab CI: run it from a pipeline schedule\n"
    "# (CI/CD > Schedules). It reruns experiments/, audits them against specs/, compares with the\n"
    "# previous night and publishes report/junit.xml as the pipeline's test report. results.db is\n"
    "# kept between nights in the job's cache (a cleared cache means a night without a baseline).\n"
    "# vtlab must be on PATH in the job's image (make install PREFIX=... from vtlab's source).\n"
    "vtlab-nightly:\n"
    "  rules:\n"
    "    - if: $CI_PIPELINE_SOURCE == \"schedule\"\n"
    "    - if: $CI_PIPELINE_SOURCE == \"web\"\n"
    "  cache:\n"
    "    key: vtlab-results\n"
    "    paths:\n"
    "      - results.db\n"
    "    when: always\n"
    "  script:\n"
    "    - vtlab nightly --db results.db --out report\n"
    "  artifacts:\n"
    "    when: always\n"
    "    paths:\n"
    "      - report/\n"
    "    reports:\n"
    "      junit: report/junit.xml\n";

static const char gitlab_ci[] =
    "# written by `vtlab init`: the vtlab nightly job\n"
    "include:\n"
    "  - local: .gitlab/vtlab-nightly.yml\n";

typedef struct init_file {
    const char *path, *text, *what;
    int         optional;   /* 1: an existing one is kept (and said), not a refusal */
} init_file;

static const init_file files[] = {
    {"experiments/example.json", example_json, "an experiment through an engine command (vtlab engine)", 0},
    {"specs/README.md", specs_readme, "the ledger: claims/ and defects/", 0},
    {"specs/claims/.gitkeep", "", NULL, 1},
    {"specs/defects/.gitkeep", "", NULL, 1},
    {".github/workflows/vtlab-nightly.yml", github_yml, "GitHub Actions: vtlab nightly every night", 0},
    {".gitlab/vtlab-nightly.yml", gitlab_yml, "GitLab CI: the same job", 0},
    {".gitlab-ci.yml", gitlab_ci, "includes .gitlab/vtlab-nightly.yml", 1},
};
#define N_FILES (sizeof files / sizeof files[0])

/* Writes text to path, which must not exist: a temp file linked into place
 * (link fails on an existing name, so nothing is ever replaced, even by a
 * file that appeared since it was checked). */
static int write_new(const char *path, const char *text, char *err, size_t errlen) {
    char tmp[4300], dir[4300];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        int rc = lab_mkdirs(dir, err, errlen);
        if (rc) return rc;
    }
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wx");
    if (!f) return lab_errf(err, errlen, LAB_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0 && *text;
    bad |= fclose(f) != 0;
    if (bad || link(tmp, path) != 0) {
        int e = bad ? EIO : errno;
        unlink(tmp);
        return lab_errf(err, errlen, e == EEXIST ? LAB_EINPUT : LAB_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    unlink(tmp);
    return LAB_OK;
}

/* .gitignore: created, or the lines it lacks appended (under a comment). */
static int ignore_results(const char *path, FILE *out, char *err, size_t errlen) {
    char *have = NULL;
    if (!lab_path_exists(path)) {
        int rc = write_new(path, gitignore, err, errlen);
        if (!rc) fprintf(out, "  %-36s %s\n", ".gitignore", "results.db and report/ are not committed");
        return rc;
    }
    int rc = lab_read_file(path, &have, NULL, err, errlen);
    if (rc) return rc;
    lab_buf add = {0};
    const char *line = strchr(gitignore, '\n') + 1;   /* past the comment */
    for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        char want[64];
        snprintf(want, sizeof want, "%.*s", (int)(nl - line), line);
        int found = 0;
        for (char *p = have; p && !found; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
            found = !strncmp(p, want, strlen(want)) && (p[strlen(want)] == '\n' || !p[strlen(want)]);
        if (!found) lab_buf_printf(&add, "%s\n", want);
    }
    int ends_nl = !have[0] || have[strlen(have) - 1] == '\n';
    free(have);
    if (add.oom) { lab_buf_free(&add); return lab_oom(err, errlen); }
    if (add.len) {
        FILE *f = fopen(path, "a");
        int bad = !f || fprintf(f, "%s# vtlab\n%s", ends_nl ? "" : "\n", add.data) < 0;
        if (f && fclose(f) != 0) bad = 1;
        if (bad) rc = lab_errf(err, errlen, LAB_EIO, "%s: cannot append to it: %s", path, strerror(errno));
        else fprintf(out, "  %-36s %s\n", ".gitignore", "the lines for results.db and report/ appended");
    }
    lab_buf_free(&add);
    return rc;
}

int lab_init(const char *dir, FILE *out, char *err, size_t errlen) {
    char path[N_FILES][4200];
    int rc = lab_mkdirs(dir, err, errlen), keep[N_FILES] = {0};
    if (rc) return rc;
    /* every file checked before any is written: a refusal writes nothing */
    for (size_t i = 0; i < N_FILES; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, files[i].path);
        if (!lab_path_exists(path[i])) continue;
        if (!files[i].optional)
            return lab_errf(err, errlen, LAB_EINPUT, "%s exists: vtlab init writes nothing over an existing file "
                            "(nothing was written; move it aside, or init another DIR)", path[i]);
        keep[i] = 1;
    }
    fprintf(out, "vtlab init %s:\n", dir);
    for (size_t i = 0; i < N_FILES && !rc; i++) {
        if (keep[i]) continue;
        rc = write_new(path[i], files[i].text, err, errlen);
        if (!rc && files[i].what) fprintf(out, "  %-36s %s\n", files[i].path, files[i].what);
    }
    char gi[4200];
    snprintf(gi, sizeof gi, "%s/.gitignore", dir);
    if (!rc) rc = ignore_results(gi, out, err, errlen);
    if (rc) return rc;
    if (keep[N_FILES - 1])
        fprintf(out, "  .gitlab-ci.yml exists: add to it\n    include:\n      - local: .gitlab/vtlab-nightly.yml\n");
    fprintf(out, "next (in %s):\n"
                 "  vtlab run experiments/example.json     the example, through vtlab's own engine\n"
                 "  vtlab runs                             what was recorded (results.db)\n"
                 "  vtlab claim RUN --id NAME              a finished arm's verdict into specs/claims/\n"
                 "  vtlab audit; vtlab nightly; vtlab report\n", dir);
    return LAB_OK;
}
