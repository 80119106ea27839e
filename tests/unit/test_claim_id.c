/*
 * test_claim_id.c — the id of a reopened claim (lab_reopen_claim_id,
 * harness/reopen.c): CLAIM-reopened-YYYYMMDD[-N], at most LAB_NAME_MAX
 * characters, the claim's part shortened by dropping whole '-'-separated
 * words. Cutting characters made "dev-bf16-stream-refuted-49of128" read
 * "...-49of12-reopened-20261204" ("49 of 12"): a number cut mid-way says
 * something the claim never measured.
 */
#include "vt_test.h"

#include "harness/reopen.h"
#include "harness/util.h"

/* The '-'-separated words of s (at most 64) into w[], their count. */
static int words(const char *s, char w[64][128]) {
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *d = strchr(p, '-');
        size_t l = d ? (size_t)(d - p) : strlen(p);
        assert_true(n < 64 && l < 128);
        memcpy(w[n], p, l);
        w[n++][l] = '\0';
        if (!d) return n;
        p = d + 1;
    }
}

/* id = PREFIX + suffix, at most LAB_NAME_MAX, PREFIX non-empty and made of
 * whole words of claim, in their order (no word cut, so no number cut). */
static void check_shortened(const char *claim, const char *suffix, const char *id) {
    size_t il = strlen(id), sl = strlen(suffix);
    if (il > LAB_NAME_MAX) fail_msg("%s: %zu characters, more than %d", id, il, LAB_NAME_MAX);
    if (il <= sl || strcmp(id + il - sl, suffix)) fail_msg("%s does not end in the whole suffix %s", id, suffix);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(il - sl), id);
    static char cw[64][128], pw[64][128];
    int nc = words(claim, cw), np = words(prefix, pw), j = 0;
    for (int i = 0; i < np; i++) {
        while (j < nc && strcmp(cw[j], pw[i])) j++;
        if (j == nc) fail_msg("%s: \"%s\" is not a whole word of %s (in order)", id, pw[i], claim);
        j++;
    }
}

static void shorten(const char *claim, const char *suffix, char out[128]) {
    assert_int_equal(lab_reopen_claim_id(claim, suffix, out, 128), LAB_OK);
    check_shortened(claim, suffix, out);
}

/* The id that went wrong: 31 characters + "-reopened-20261204" is 49. */
static void test_story_id_keeps_its_numbers(void **state) {
    (void)state;
    char id[128];
    shorten("dev-bf16-stream-refuted-49of128", "-reopened-20261204", id);
    VT_ASSERT_CONTAINS(id, "-49of128-reopened-20261204");
    /* a word without digits goes first: the verdict word (the reopen records a new one) */
    assert_string_equal(id, "dev-bf16-stream-49of128-reopened-20261204");
    shorten("dev-bf16-stream-refuted-49of128", "-reopened-20261204-12", id);
    VT_ASSERT_CONTAINS(id, "-49of128-reopened-20261204-12");
}

static void test_short_ids_unchanged(void **state) {
    (void)state;
    char id[128];
    shorten("bf16-stream-refuted-4of128", "-reopened-20261204", id);
    assert_string_equal(id, "bf16-stream-refuted-4of128-reopened-20261204");
    /* exactly 48 */
    shorten("a23456789012345678901234567890", "-reopened-20261204", id);
    assert_int_equal(strlen(id), 48);
    assert_string_equal(id, "a23456789012345678901234567890-reopened-20261204");
}

/* Words with digits are kept longest: every non-number word goes first. */
static void test_long_ids(void **state) {
    (void)state;
    char id[128];
    shorten("moe-scatter-row-bytes-from-stream-refuted-4of128-t0.9", "-reopened-20261204", id);
    VT_ASSERT_CONTAINS(id, "4of128-t0.9-reopened-20261204");
    shorten("kimi-linear-48b-bf16-expert-out-top1-122of128", "-reopened-20270101-3", id);
    VT_ASSERT_CONTAINS(id, "122of128-reopened-20270101-3");
    shorten("a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-r-s-t-u-v-w-x-y", "-reopened-20261204", id);
    assert_true(strncmp(id, "a-b-c-", 6) == 0);   /* dropped from the end, the start kept */
    shorten("x--y---z-12of34-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "-reopened-20261204", id);
    assert_string_equal(id, "x-y-z-12of34-reopened-20261204");   /* empty words go too */
}

/* Ids made only of groups of digits: whole groups dropped, from the end. */
static void test_digit_groups(void **state) {
    (void)state;
    char id[128];
    shorten("2026-12-04-1111-2222-3333-4444-5555-6666", "-reopened-20261204-2", id);
    assert_string_equal(id, "2026-12-04-1111-2222-3333-reopened-20261204-2");
    shorten("12345678-12345678-12345678-12345678", "-reopened-20261204", id);
    assert_string_equal(id, "12345678-12345678-12345678-reopened-20261204");
    shorten("1-22-333-4444-55555-666666-7777777-88888888", "-reopened-20261204", id);
}

/* One word longer than the room left: a number is never cut, so it goes
 * whole; other text is cut at the limit. */
static void test_one_long_word(void **state) {
    (void)state;
    char id[128];
    assert_int_equal(lab_reopen_claim_id("123456789012345678901234567890123456789", "-reopened-20261204", id, 128),
                     LAB_OK);
    assert_string_equal(id, "reopened-20261204");
    assert_int_equal(lab_reopen_claim_id("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", "-reopened-20261204",
                                         id, 128), LAB_OK);
    assert_string_equal(id, "abcdefghijklmnopqrstuvwxyzabcd-reopened-20261204");
    assert_int_equal(lab_reopen_claim_id("abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnop", "-reopened-20261204",
                                         id, 128), LAB_OK);
    assert_string_equal(id, "abcdefghijklmnopqrstuvwxyz-reopened-20261204");
    assert_int_equal(lab_reopen_claim_id("--aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "-reopened-20261204", id,
                                         128), LAB_OK);
    assert_string_equal(id, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-reopened-20261204");
    char dashes[61];
    memset(dashes, '-', 60);
    dashes[60] = '\0';
    assert_int_equal(lab_reopen_claim_id(dashes, "-reopened-20261204", id, 128), LAB_OK);
    assert_string_equal(id, "reopened-20261204");
    /* the only word with digits, too long alone, is dropped for the word that fits */
    shorten("stream-123456789012345678901234567890123", "-reopened-20261204", id);
    assert_string_equal(id, "stream-reopened-20261204");
}

static void test_bad_arguments(void **state) {
    (void)state;
    char id[128], small[16];
    char suffix[64];
    memset(suffix, 'x', sizeof suffix - 1);
    suffix[sizeof suffix - 1] = '\0';
    assert_int_equal(lab_reopen_claim_id("a", suffix, id, sizeof id), LAB_EINTERNAL);
    assert_int_equal(lab_reopen_claim_id("a", "-reopened-20261204", small, sizeof small), LAB_EINTERNAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_story_id_keeps_its_numbers),
        cmocka_unit_test(test_short_ids_unchanged),
        cmocka_unit_test(test_long_ids),
        cmocka_unit_test(test_digit_groups),
        cmocka_unit_test(test_one_long_word),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
