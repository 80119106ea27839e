/* test_sha256.c — SHA-256 against the standard's vectors, on both paths
 * (SHA-NI where the CPU has it, the portable code always), and the two paths
 * against each other on random lengths and split updates. */
#include "tests/unit/vt_test.h"

#include "model/vt.h"

static void hex_of(const void *d, size_t n, char out[65]) { vt_sha256_hex(d, n, out); }

static void check_vectors(void) {
    char h[65];
    hex_of("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a', fed in uneven pieces */
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    char a[1000];
    memset(a, 'a', sizeof a);
    size_t left = 1000000, step = 1;
    while (left) {
        size_t k = step < left ? step : left;
        vt_sha256_update(&c, a, k);
        left -= k;
        step = step % 900 + 7;   /* pieces of 1..906 bytes, within the 1000-byte buffer */
    }
    uint8_t d[32];
    vt_sha256_final(&c, d);
    static const uint8_t want[32] = {0xcd, 0xc7, 0x6e, 0x5c, 0x99, 0x14, 0xfb, 0x92, 0x81, 0xa1, 0xc7, 0xe2, 0x84, 0xd7, 0x3e, 0x67,
                                     0xf1, 0x80, 0x9a, 0x48, 0xa4, 0x97, 0x20, 0x0e, 0x04, 0x6d, 0x39, 0xcc, 0xc7, 0x11, 0x2c, 0xd0};
    assert_memory_equal(d, want, 32);
}

static void test_vectors_default_path(void **state) {
    (void)state;
    vt_sha256_force_portable(0);
    check_vectors();
}

static void test_vectors_portable_path(void **state) {
    (void)state;
    vt_sha256_force_portable(1);
    check_vectors();
    vt_sha256_force_portable(0);
}

static void test_paths_agree(void **state) {
    (void)state;
    uint8_t buf[4096];
    uint64_t r = 12345;
    for (size_t i = 0; i < sizeof buf; i++) { r = r * 6364136223846793005ull + 1; buf[i] = (uint8_t)(r >> 56); }
    for (size_t n = 0; n < sizeof buf; n += 1 + n / 3) {
        char a[65], b[65];
        vt_sha256_force_portable(0);
        hex_of(buf, n, a);
        vt_sha256_force_portable(1);
        hex_of(buf, n, b);
        if (strcmp(a, b)) fail_msg("length %zu: default %s, portable %s", n, a, b);
    }
    vt_sha256_force_portable(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_default_path),
        cmocka_unit_test(test_vectors_portable_path),
        cmocka_unit_test(test_paths_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
