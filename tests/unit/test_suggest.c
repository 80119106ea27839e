/* test_suggest.c — the one "did you mean" helper (model/suggest.c): the
 * distance, what is close enough, beginnings, lists, and the knob names. */
#include "tests/unit/vt_test.h"

#include "model/vt.h"

static const char *const COMMANDS[] = {"synth", "validate", "logits", "generate", "run", "runs", "rerun", "sweep",
                                       "show", "compare", "export", "report", "reopen", "record-bench", "nightly",
                                       "status", "specs", "submit", "localize", "bisect", "ack", "tag", "note"};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void test_distance(void **state) {
    (void)state;
    assert_int_equal(vt_edit_distance("run", "run"), 0);
    assert_int_equal(vt_edit_distance("rnu", "run"), 1);           /* a swap of neighbours is one edit */
    assert_int_equal(vt_edit_distance("comapre", "compare"), 1);
    assert_int_equal(vt_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(vt_edit_distance("", "abc"), 3);
    assert_int_equal(vt_edit_distance("finished", "FINISHED"), 0); /* case is not an edit */
    char longer[80];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_int_equal(vt_edit_distance(longer, "a"), 99);
}

static void test_commands(void **state) {
    (void)state;
    assert_string_equal(vt_suggest("rnu", COMMANDS, N_COMMANDS), "run");
    assert_string_equal(vt_suggest("comapre", COMMANDS, N_COMMANDS), "compare");
    assert_string_equal(vt_suggest("nightyl", COMMANDS, N_COMMANDS), "nightly");
    assert_string_equal(vt_suggest("locaize", COMMANDS, N_COMMANDS), "localize");
    assert_string_equal(vt_suggest("RUN", COMMANDS, N_COMMANDS), "run");
    assert_null(vt_suggest("frobnicate", COMMANDS, N_COMMANDS));
    assert_null(vt_suggest("xz", COMMANDS, N_COMMANDS));            /* too short to guess from */
    assert_null(vt_suggest("", COMMANDS, N_COMMANDS));
    assert_null(vt_suggest("run", COMMANDS, N_COMMANDS));           /* not a misspelling of anything */
    assert_null(vt_suggest("rnu", COMMANDS, 0));
    /* of two beginnings the shorter is taken */
    assert_string_equal(vt_suggest("runz", COMMANDS, N_COMMANDS), "run");   /* run and runs: the first */
    assert_string_equal(vt_suggest("rec", COMMANDS, N_COMMANDS), "record-bench");
    static const char *const pos[] = {"positions-csv", "positions", "json"};
    assert_string_equal(vt_suggest("posi", pos, 3), "positions");
}

static void test_ranks(void **state) {
    (void)state;
    static const char *const kinds[] = {"check", "accuracy", "numerics", "performance"};
    assert_string_equal(vt_suggest("perf", kinds, 4), "performance");   /* a beginning */
    assert_string_equal(vt_suggest("numeric", kinds, 4), "numerics");
    assert_string_equal(vt_suggest("chekc", kinds, 4), "check");
    assert_null(vt_suggest("speed", kinds, 4));
    static const char *const close[] = {"abcdef", "abcdxy", "abcdez"};
    assert_string_equal(vt_suggest("abcdeg", close, 3), "abcdef");      /* of equals, the first offered */
    static const char *const mixed[] = {"performance", "perl"};
    assert_string_equal(vt_suggest("perf", mixed, 2), "perl");          /* one edit before a beginning */
    static const char *const far[] = {"xyzperf-long", "perfume"};
    assert_string_equal(vt_suggest("perf", far, 2), "perfume");
}

static void test_list_and_suggester(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(vt_suggest_list("jsno", "json|csv|positions|positions-csv", out, sizeof out), "json");
    assert_string_equal(out, "json");
    assert_string_equal(vt_suggest_list("pos", "json|csv|positions|positions-csv", out, sizeof out), "positions");
    assert_null(vt_suggest_list("xml", "json|csv|positions|positions-csv", out, sizeof out));
    assert_string_equal(vt_suggest_list("bias", "unbiased|biased", out, sizeof out), "biased");
    assert_string_equal(vt_suggest_list("F16", "f32|bf16|f16", out, sizeof out), "f16");
    assert_null(vt_suggest_list("x", NULL, out, sizeof out));
    vt_suggester s;
    vt_suggest_init(&s, "VT_KIMI_BF16_STRAEM");
    for (int i = 0; i < vt_knob_count(); i++) vt_suggest_offer(&s, vt_knob_at(i)->name);
    assert_non_null(s.best);
    assert_string_equal(s.best, "VT_KIMI_BF16_STREAM");
    vt_suggest_init(&s, "VT_COMPLETELY_DIFFERENT_THING");
    for (int i = 0; i < vt_knob_count(); i++) vt_suggest_offer(&s, vt_knob_at(i)->name);
    assert_null(s.best);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distance),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_list_and_suggester),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
