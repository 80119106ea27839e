/*
 * test_experiment.c — experiment files: a valid file parses into the
 * expected fields; every malformed one is LAB_EINPUT with a message naming
 * the file and the field.
 */
#include "tests/unit/vt_test.h"

#include <unistd.h>

#include "harness/experiment.h"
#include "harness/util.h"

#define GOOD_HEAD "{\"id\": \"t\", \"model\": {\"synth\": \"c.json\", \"seed\": 1}, "
#define GOOD_DS "\"dataset\": {\"generate\": {\"n_sequences\": 3, \"length\": 4, \"seed\": 7}}, "
#define GOOD_ARMS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\"}, {\"name\": \"b\", \"knobs\": {\"VT_X\": 1}}]"

static void test_valid(void **state) {
    (void)state;
    const char *text =
        "{\"id\": \"bf16-x\", \"description\": \"d\", \"model\": {\"synth\": \"c.json\", \"seed\": 3, \"dtype\": \"bf16\"},"
        " \"dataset\": {\"generate\": {\"n_sequences\": 3, \"length\": 4, \"seed\": 7}},"
        " \"score\": \"last\", \"top_k\": 5, \"probe\": \"audit\", \"reference\": \"f32\","
        " \"arms\": [{\"name\": \"f32\"}, {\"name\": \"bf16\", \"knobs\": {\"VT_KIMI_BF16_STREAM\": true, \"VT_THREADS\": 2},"
        "   \"expect\": {\"residual.stream\": \"bf16\"}},"
        "  {\"name\": \"replay\", \"knobs\": {\"VT_FAULT\": \"x\"}, \"expect_assertions\": \"fail\"}],"
        " \"metrics\": [\"kl\"], \"decision\": {\"metric\": \"top1_agreement\", \"threshold\": 0.9, \"direction\": \">=\"},"
        " \"divergence\": {\"sequences\": 2, \"tolerance\": 0.05}, \"repeats\": 2}";
    lab_experiment *e;
    char err[1024] = "";
    if (lab_experiment_parse(&e, "x.json", text, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(e->id, "bf16-x");
    assert_true(e->model_synth);
    assert_int_equal(e->synth_seed, 3);
    assert_string_equal(e->synth_dtype, "bf16");
    assert_true(e->score_last);
    assert_int_equal(e->top_k, 5);
    assert_string_equal(e->probe, "audit");
    assert_int_equal(e->n_arms, 3);
    assert_int_equal(e->ref_index, 0);
    assert_string_equal(e->arms[1].knob_names[0], "VT_KIMI_BF16_STREAM");
    assert_string_equal(e->arms[1].knob_values[0], "1");
    assert_string_equal(e->arms[1].knob_values[1], "2");
    assert_string_equal(e->arms[1].expect_sites[0], "residual.stream");
    assert_true(e->arms[2].expect_fail);
    assert_true(e->metrics & LAB_M_KL);
    assert_true(e->metrics & LAB_M_TOP1);
    assert_false(e->metrics & LAB_M_LAYERDIV);
    assert_true(e->has_decision && e->decision_ge);
    assert_int_equal(e->div_sequences, 2);
    assert_int_equal(e->repeats, 2);
    /* generated tokens: drawn once the vocabulary is known, in [3, vocab) */
    assert_int_equal(e->ds.n_seq, 0);
    assert_int_equal(lab_dataset_prepare(e, 50, err, sizeof err), 0);
    assert_int_equal(e->ds.n_seq, 3);
    assert_int_equal(e->ds.offsets[3], 12);
    for (int i = 0; i < 12; i++) assert_true(e->ds.tokens[i] >= 3 && e->ds.tokens[i] < 50);
    size_t n;
    char *canon = lab_dataset_canonical(&e->ds, &n);
    assert_non_null(canon);
    assert_int_equal(strlen(canon), n);
    assert_true(canon[n - 1] == '\n');
    /* deterministic: a second parse draws the same tokens */
    lab_experiment *e2;
    assert_int_equal(lab_experiment_parse(&e2, "x.json", text, err, sizeof err), 0);
    assert_int_equal(lab_dataset_prepare(e2, 50, err, sizeof err), 0);
    char *canon2 = lab_dataset_canonical(&e2->ds, NULL);
    assert_string_equal(canon, canon2);
    free(canon);
    free(canon2);
    lab_experiment_free(e);
    lab_experiment_free(e2);
}

/* Each case: the text, and what the message must contain (after "bad.json: "). */
static const struct { const char *text, *needle; } bad[] = {
    {"{\"id\": ", "not valid JSON at line 1 column 8"},
    {"[1]", "(top level): expected a JSON object"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"scroe\": \"last\"}", "scroe: unknown field"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"scroe\": \"last\"}", "scroe: unknown field (did you mean score?"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"metrics\": [\"kl\", \"mcnmear\"]}", "metrics[1]: \"mcnmear\" (did you mean mcnemar?)"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"f23\", \"arms\": [{\"name\": \"f32\"}]}", "(did you mean f32?)"},
    {"{\"model\": \"m\", " GOOD_DS GOOD_ARMS "}", "id: missing"},
    {"{\"id\": \"a b\", \"model\": \"m\", " GOOD_DS GOOD_ARMS "}", "id: \"a b\" may use only"},
    {"{\"id\": \"t\", " GOOD_DS GOOD_ARMS "}", "model: missing"},
    {"{\"id\": \"t\", \"model\": {\"synth\": \"c\"}, " GOOD_DS GOOD_ARMS "}", "model.seed: missing"},
    {"{\"id\": \"t\", \"model\": {\"synth\": \"c\", \"seed\": 1, \"dtype\": \"f8\"}, " GOOD_DS GOOD_ARMS "}", "model.dtype"},
    {GOOD_HEAD GOOD_ARMS "}", "dataset: missing"},
    {GOOD_HEAD "\"dataset\": {\"inline\": [[1]], \"file\": \"x\"}, " GOOD_ARMS "}", "dataset: expected exactly one"},
    {GOOD_HEAD "\"dataset\": {\"generate\": {\"n_sequences\": 3, \"length\": 0, \"seed\": 1}}, " GOOD_ARMS "}",
     "dataset.generate.length: expected an integer in 1..65536, got 0"},
    {GOOD_HEAD "\"dataset\": {\"generate\": {\"n_sequences\": 3, \"length\": 2.5, \"seed\": 1}}, " GOOD_ARMS "}",
     "dataset.generate.length: expected an integer"},
    {GOOD_HEAD "\"dataset\": {\"inline\": [[1, 2], [3, -4]]}, " GOOD_ARMS "}", "dataset.inline[1][1]: expected a token id"},
    {GOOD_HEAD "\"dataset\": {\"inline\": [[1, 2], []]}, " GOOD_ARMS "}", "dataset.inline[1]: expected a non-empty array"},
    {GOOD_HEAD "\"dataset\": {\"file\": \"/nonexistent/ids.txt\"}, " GOOD_ARMS "}", "dataset.file"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\"}", "arms: expected a non-empty array"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}",
     "arms[1].name: arm name \"a\" is already used by arms[0]"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"zz\", \"arms\": [{\"name\": \"a\"}]}", "reference: \"zz\" names no arm"},
    {GOOD_HEAD GOOD_DS "\"arms\": [{\"name\": \"a\"}]}", "reference: missing"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"knobs\": {\"KIMI_X\": 1}}]}",
     "arms[0].knobs.KIMI_X: knob names start with VT_"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"knobs\": {\"VT_X\": [1]}}]}",
     "arms[0].knobs.VT_X: expected a string, integer or boolean"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"expect\": {\"moe.scatter\": \"f64\"}}]}",
     "arms[0].expect.moe.scatter: expected a dtype name"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"kobs\": {}}]}", "arms[0].kobs: unknown field"},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"expect_assertions\": \"maybe\"}]}",
     "arms[0].expect_assertions: expected \"pass\" or \"fail\""},
    {GOOD_HEAD GOOD_DS "\"reference\": \"a\", \"arms\": [{\"name\": \"a\", \"expect_assertions\": \"fail\"}]}",
     "reference: the reference arm cannot expect"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"score\": \"first\"}", "score: expected \"all\""},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"top_k\": 0}", "top_k: expected an integer in 1..1000"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"probe\": \"off\"}", "probe: expected \"on\" or \"audit\""},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"metrics\": [\"kl\", \"bleu\"]}", "metrics[1]: expected one of"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"decision\": {\"metric\": \"top1_agreement\", \"threshold\": 0.9, \"direction\": \">\"}}",
     "decision.direction: expected \">=\" or \"<=\""},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"decision\": {\"metric\": \"kl_mean\", \"threshold\": 0.9, \"direction\": \">=\"}}",
     "decision.metric"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"decision\": {\"metric\": \"top1_agreement\", \"threshold\": 1.5, \"direction\": \">=\"}}",
     "decision.threshold: expected a number in [0, 1]"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"divergence\": {\"tolerance\": -1}}", "divergence.tolerance"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"repeats\": 0}", "repeats: expected an integer in 1..100"},
    {GOOD_HEAD GOOD_DS GOOD_ARMS ", \"id\": \"again\"}", "id: field given twice"},
};

static void test_bad_files(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lab_experiment *e = (lab_experiment *)1;
        char err[1024] = "";
        int rc = lab_experiment_parse(&e, "bad.json", bad[i].text, err, sizeof err);
        if (rc != LAB_EINPUT) fail_msg("case %zu: status %d (err \"%s\") for %s", i, rc, err, bad[i].text);
        assert_null(e);
        if (strncmp(err, "bad.json: ", 10)) fail_msg("case %zu: message does not start with the file: %s", i, err);
        VT_ASSERT_CONTAINS(err, bad[i].needle);
    }
}

static void test_inline_vocab_and_file(void **state) {
    (void)state;
    lab_experiment *e;
    char err[1024] = "";
    const char *t = GOOD_HEAD "\"dataset\": {\"inline\": [[5, 17, 3], [9, 2000]]}, " GOOD_ARMS "}";
    assert_int_equal(lab_experiment_parse(&e, "v.json", t, err, sizeof err), 0);
    assert_int_equal(lab_dataset_prepare(e, 1024, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "v.json: dataset.inline[1][1]: token 2000 is not below the model's vocab_size 1024");
    lab_experiment_free(e);

    /* a file of ids next to the experiment, commas and blanks, comments */
    char dir[128], path[192], ids[192];
    snprintf(dir, sizeof dir, "/tmp/vtlab-test-exp-%d", (int)getpid());
    assert_int_equal(lab_mkdirs(dir, err, sizeof err), 0);
    snprintf(ids, sizeof ids, "%s/ids.txt", dir);
    FILE *f = fopen(ids, "w");
    fprintf(f, "# two sequences\n5, 17 3\n\n9 10\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/e.json", dir);
    const char *t2 = GOOD_HEAD "\"dataset\": {\"file\": \"ids.txt\"}, " GOOD_ARMS "}";
    assert_int_equal(lab_experiment_parse(&e, path, t2, err, sizeof err), 0);
    assert_int_equal(e->ds.n_seq, 2);
    assert_int_equal(e->ds.offsets[1], 3);
    assert_int_equal(e->ds.tokens[1], 17);
    assert_int_equal(e->ds.tokens[4], 10);
    assert_int_equal(lab_dataset_prepare(e, 11, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "sequence 0 (line of ids 1) position 1: token 17");
    lab_experiment_free(e);
    f = fopen(ids, "w");
    fprintf(f, "5 x 3\n");
    fclose(f);
    assert_int_equal(lab_experiment_parse(&e, path, t2, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "dataset.file");
    VT_ASSERT_CONTAINS(err, "line 1 position 1: expected a token id, got 'x'");
    unlink(ids);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_inline_vocab_and_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
