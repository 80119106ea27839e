/* test_dtype.c — the traits table and the f32 <-> bf16 / f16 conversions. */
#include "tests/unit/vt_test.h"

#include <math.h>

#include "model/dtype.h"

static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static void test_traits(void **state) {
    (void)state;
    assert_int_equal(vt_dtype_size(VT_F32), 4);
    assert_int_equal(vt_dtype_size(VT_BF16), 2);
    assert_int_equal(vt_dtype_size(VT_F16), 2);
    assert_int_equal(vt_dtype_size(VT_I64), 8);
    assert_int_equal(vt_dtype_size(VT_U8), 1);
    assert_int_equal(vt_dtype_size((vt_dtype)99), 0);
    vt_dtype t;
    assert_int_equal(vt_dtype_from_st_name("BF16", &t), 0);
    assert_int_equal(t, VT_BF16);
    assert_int_equal(vt_dtype_from_st_name("bf16", &t), -1);   /* safetensors strings are upper case */
    assert_int_equal(vt_dtype_from_st_name("F64", &t), -1);
    assert_int_equal(vt_dtype_from_name("f16", &t), 0);
    assert_int_equal(t, VT_F16);
    assert_string_equal(vt_dtype_name(VT_I32), "i32");
}

static void test_row_size(void **state) {
    (void)state;
    assert_int_equal(vt_row_size(VT_F32, 192), 768);
    assert_int_equal(vt_row_size(VT_BF16, 192), 384);
    assert_int_equal(vt_row_size(VT_F32, 0), 0);
    assert_int_equal(vt_row_size(VT_F32, -1), 0);                  /* negative: error sentinel */
    assert_int_equal(vt_row_size(VT_I64, INT64_MAX), 0);           /* overflow: error sentinel */
    assert_int_equal(vt_row_size((vt_dtype)42, 10), 0);
}

/* Every one of the 65,536 bf16 patterns survives bf16 -> f32 -> bf16: exactly
 * for numbers, as a NaN (quiet, same sign) for NaNs. */
static void test_bf16_all_patterns_round_trip(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        vt_bf16 h = {(uint16_t)b};
        float f = vt_bf16_to_f32(h);
        assert_int_equal(bits(f), b << 16);                        /* widening is exact */
        vt_bf16 back = vt_f32_to_bf16(f);
        if ((b & 0x7F80) == 0x7F80 && (b & 0x7F)) {                /* NaN */
            assert_true(isnan(vt_bf16_to_f32(back)));
            assert_int_equal(back.bits & 0x8000, b & 0x8000);
            assert_int_equal(back.bits & 0x0040, 0x0040);          /* quiet */
        } else {
            if (back.bits != b) fail_msg("bf16 0x%04x -> %a -> 0x%04x", b, f, back.bits);
        }
    }
}

static void test_bf16_round_nearest_even(void **state) {
    (void)state;
    /* exactly halfway between 1.0 (0x3F80) and the next bf16 (0x3F81): ties to even -> 0x3F80 */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x3F808000)).bits, 0x3F80);
    /* halfway between 0x3F81 and 0x3F82: ties to even -> 0x3F82 */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x3F818000)).bits, 0x3F82);
    /* just above halfway rounds up, just below rounds down */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x3F808001)).bits, 0x3F81);
    assert_int_equal(vt_f32_to_bf16(from_bits(0x3F807FFF)).bits, 0x3F80);
    /* negative ties */
    assert_int_equal(vt_f32_to_bf16(from_bits(0xBF808000)).bits, 0xBF80);
    /* the largest finite f32 rounds to Inf; Inf stays Inf */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x7F7FFFFF)).bits, 0x7F80);
    assert_int_equal(vt_f32_to_bf16(INFINITY).bits, 0x7F80);
    assert_int_equal(vt_f32_to_bf16(-INFINITY).bits, 0xFF80);
    /* subnormals: RNE on the bit pattern, smallest f32 subnormal -> +0 */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x00000001)).bits, 0x0000);
    assert_int_equal(vt_f32_to_bf16(from_bits(0x00018000)).bits, 0x0002);   /* tie to even upward */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x00008000)).bits, 0x0000);   /* tie to even downward */
    assert_int_equal(vt_f32_to_bf16(-0.0f).bits, 0x8000);
}

static void test_bf16_nan_payload(void **state) {
    (void)state;
    /* payload only in the low 16 bits: naive rounding would make this Inf */
    vt_bf16 h = vt_f32_to_bf16(from_bits(0x7F800001));
    assert_true(isnan(vt_bf16_to_f32(h)));
    /* payload in the top bits is kept; sign kept */
    assert_int_equal(vt_f32_to_bf16(from_bits(0xFFA50000)).bits, 0xFFE5);   /* quiet bit forced */
    assert_int_equal(vt_f32_to_bf16(from_bits(0x7FC12345)).bits, 0x7FC1);
}

static void test_f16(void **state) {
    (void)state;
    /* every f16 pattern widens exactly and narrows back (NaNs stay NaN) */
    for (uint32_t b = 0; b < 65536; b++) {
        vt_f16 h = {(uint16_t)b};
        float f = vt_f16_to_f32(h);
        vt_f16 back = vt_f32_to_f16(f);
        if ((b & 0x7C00) == 0x7C00 && (b & 0x3FF)) assert_true(isnan(f) && isnan(vt_f16_to_f32(back)));
        else if (back.bits != b) fail_msg("f16 0x%04x -> %a -> 0x%04x", b, f, back.bits);
    }
    assert_int_equal(vt_f32_to_f16(1.0f).bits, 0x3C00);
    assert_int_equal(vt_f32_to_f16(65504.0f).bits, 0x7BFF);
    assert_int_equal(vt_f32_to_f16(65520.0f).bits, 0x7C00);          /* halfway to 2^16 rounds to Inf */
    assert_int_equal(vt_f32_to_f16(5.9604644775390625e-08f).bits, 0x0001);   /* smallest subnormal */
    assert_int_equal(vt_f32_to_f16(2.98023223876953125e-08f).bits, 0x0000);  /* half of it: tie to even -> 0 */
    assert_int_equal(vt_f32_to_f16(4.4703483581542969e-08f).bits, 0x0001);   /* 0.75 of it -> 1 */
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even */
    assert_int_equal(vt_f32_to_f16(1.0f + 0x1p-11f).bits, 0x3C00);
    assert_int_equal(vt_f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f).bits, 0x3C02);
}

static void test_convert(void **state) {
    (void)state;
    float src[4] = {1.0f, -2.5f, 3.14159f, 1e-3f}, back[4];
    vt_bf16 mid[4];
    assert_int_equal(vt_convert(mid, VT_BF16, src, VT_F32, 4), 0);
    assert_int_equal(vt_convert(back, VT_F32, mid, VT_BF16, 4), 0);
    for (int i = 0; i < 4; i++) assert_true(back[i] == vt_round_bf16(src[i]));
    int32_t ints[2];
    assert_int_equal(vt_convert(ints, VT_I32, src, VT_F32, 2), -1);     /* not a float conversion */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_row_size),
        cmocka_unit_test(test_bf16_all_patterns_round_trip),
        cmocka_unit_test(test_bf16_round_nearest_even),
        cmocka_unit_test(test_bf16_nan_payload),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_convert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
