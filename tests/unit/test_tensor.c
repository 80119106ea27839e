/* test_tensor.c — tensors carry their dtype; row copies refuse mismatches. */
#include "tests/unit/vt_test.h"

#include "model/tensor.h"

#include <stdlib.h>
#include <string.h>

static void fill_rows(vt_tensor *t) {
    float *p = t->data;
    for (int64_t i = 0; i < vt_tensor_nelem(t); i++) p[i] = (float)i;
}

static void test_strides_from_dtype(void **state) {
    (void)state;
    vt_tensor a, b;
    vt_err err = {0};
    int64_t shp[3] = {2, 3, 5};
    VT_ASSERT_OK(vt_tensor_alloc(&a, VT_F32, 3, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&b, VT_BF16, 3, shp, &err), err);
    assert_int_equal(a.stride[2], 4); assert_int_equal(a.stride[1], 20); assert_int_equal(a.stride[0], 60);
    assert_int_equal(b.stride[2], 2); assert_int_equal(b.stride[1], 10); assert_int_equal(b.stride[0], 30);
    assert_int_equal(a.nbytes, 120); assert_int_equal(b.nbytes, 60);
    assert_int_equal(vt_tensor_nrows(&a), 6);
    assert_int_equal(vt_tensor_row_bytes(&b), 10);
    assert_null(vt_tensor_row(&a, 6));
    assert_null(vt_tensor_row(&a, -1));
    vt_tensor_free(&a); vt_tensor_free(&b);
}

static void test_alloc_rejects_bad_shapes(void **state) {
    (void)state;
    vt_tensor t;
    vt_err err = {0};
    int64_t zero[2] = {3, 0}, huge[2] = {INT64_MAX / 2, 4};
    assert_int_not_equal(vt_tensor_alloc(&t, VT_F32, 2, zero, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "expected > 0");
    assert_int_not_equal(vt_tensor_alloc(&t, VT_F32, 2, huge, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "overflow");
    float buf[8];
    int64_t shp[2] = {3, 3};
    assert_int_not_equal(vt_tensor_view(&t, VT_F32, 2, shp, buf, sizeof buf, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "needs 36 bytes, buffer has 32");
}

static void test_scatter_gather(void **state) {
    (void)state;
    vt_tensor src, dst, back;
    vt_err err = {0};
    int64_t shp[2] = {4, 3};
    VT_ASSERT_OK(vt_tensor_alloc(&src, VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&dst, VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&back, VT_F32, 2, shp, &err), err);
    fill_rows(&src);
    int64_t perm[4] = {2, 0, 3, 1};
    vt_copy_stats st;
    VT_ASSERT_OK(vt_rows_scatter(&dst, perm, &src, 4, &st, &err), err);
    assert_int_equal(st.bytes_per_row, 12);
    assert_int_equal(st.src_row_bytes, 12);
    assert_int_equal(st.dst_row_bytes, 12);
    assert_int_equal(st.rows, 4);
    for (int i = 0; i < 4; i++) assert_memory_equal(vt_tensor_row(&dst, perm[i]), vt_tensor_row(&src, i), 12);
    VT_ASSERT_OK(vt_rows_gather(&back, &dst, perm, 4, &st, &err), err);
    assert_memory_equal(back.data, src.data, src.nbytes);
    vt_tensor_free(&src); vt_tensor_free(&dst); vt_tensor_free(&back);
}

/* Big scatters (>= 1 MB) run in parallel when their destination rows are
 * distinct: a permutation of 1024 rows of 1 KB lands like the serial loop;
 * with every destination row written twice (source i and i + n/2, far apart
 * in the order, so two threads' halves would race for them), the later source
 * still wins everywhere, as the serial order says. */
static void test_big_scatter_order(void **state) {
    (void)state;
    enum { N = 1024, W = 256 };
    vt_tensor src, dst;
    vt_err err = {0};
    int64_t shp[2] = {N, W}, *rows = malloc(sizeof(int64_t) * N);
    VT_ASSERT_OK(vt_tensor_alloc(&src, VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&dst, VT_F32, 2, shp, &err), err);
    float *x = src.data;
    for (int64_t i = 0; i < N * W; i++) x[i] = (float)i;
    for (int64_t i = 0; i < N; i++) rows[i] = (i * 389) % N;   /* 389 is prime to 1024: a permutation */
    VT_ASSERT_OK(vt_rows_scatter(&dst, rows, &src, N, NULL, &err), err);
    for (int64_t i = 0; i < N; i++) assert_memory_equal(vt_tensor_row(&dst, rows[i]), vt_tensor_row(&src, i), W * 4);
    for (int64_t i = 0; i < N; i++) rows[i] = i % (N / 2);   /* row r from i = r, then from i = r + N/2 */
    memset(dst.data, 0, dst.nbytes);
    VT_ASSERT_OK(vt_rows_scatter(&dst, rows, &src, N, NULL, &err), err);
    for (int64_t r = 0; r < N / 2; r++) assert_memory_equal(vt_tensor_row(&dst, r), vt_tensor_row(&src, r + N / 2), W * 4);
    vt_tensor_free(&src); vt_tensor_free(&dst);
    free(rows);
}

/* The defect's shape: copying between buffers of different dtypes (or row
 * widths) must be refused, before any byte moves. */
static void test_copies_refuse_mismatch(void **state) {
    (void)state;
    vt_tensor f, h, w;
    vt_err err = {0};
    int64_t shp[2] = {4, 8}, wide[2] = {4, 16};
    VT_ASSERT_OK(vt_tensor_alloc(&f, VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&h, VT_BF16, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&w, VT_BF16, 2, wide, &err), err);
    int64_t idx[4] = {0, 1, 2, 3};
    memset(h.data, 0x11, h.nbytes);
    assert_int_not_equal(vt_rows_scatter(&h, idx, &f, 4, NULL, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "source is f32, destination is bf16");
    for (size_t i = 0; i < h.nbytes; i++) assert_int_equal(((unsigned char *)h.data)[i], 0x11);   /* untouched */
    assert_int_not_equal(vt_rows_gather(&f, &h, idx, 4, NULL, &err), 0);
    assert_int_not_equal(vt_rows_copy(&w, 0, &h, 0, 4, NULL, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "source rows have 8 elements, destination rows 16");
    /* an explicit converting copy is allowed and reports itself */
    vt_copy_stats st;
    VT_ASSERT_OK(vt_rows_convert(&h, &f, &st, &err), err);
    assert_int_equal(st.src_row_bytes, 32);
    assert_int_equal(st.dst_row_bytes, 16);
    vt_tensor_free(&f); vt_tensor_free(&h); vt_tensor_free(&w);
}

static void test_bounds(void **state) {
    (void)state;
    vt_tensor a, b;
    vt_err err = {0};
    int64_t shp[2] = {4, 2};
    VT_ASSERT_OK(vt_tensor_alloc(&a, VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&b, VT_F32, 2, shp, &err), err);
    int64_t bad[2] = {1, 4};
    assert_int_not_equal(vt_rows_scatter(&a, bad, &b, 2, NULL, &err), 0);
    VT_ASSERT_CONTAINS(err.msg, "row index 4 at position 1 outside [0, 4)");
    int64_t neg[1] = {-1};
    assert_int_not_equal(vt_rows_gather(&a, &b, neg, 1, NULL, &err), 0);
    assert_int_not_equal(vt_rows_copy(&a, 3, &b, 0, 2, NULL, &err), 0);          /* runs past the end */
    assert_int_not_equal(vt_rows_copy(&a, 0, &b, INT64_MAX, 2, NULL, &err), 0);  /* no overflow in the check */
    assert_int_not_equal(vt_rows_scatter(&a, bad, &b, 5, NULL, &err), 0);       /* more rows than the source */
    vt_tensor_free(&a); vt_tensor_free(&b);
}

static void test_sentinel(void **state) {
    (void)state;
    vt_tensor a, s;
    vt_err err = {0};
    int64_t shp[2] = {4, 3};
    VT_ASSERT_OK(vt_tensor_alloc(&a, VT_BF16, 2, shp, &err), err);
    VT_ASSERT_OK(vt_tensor_alloc(&s, VT_BF16, 2, shp, &err), err);
    vt_tensor_fill_sentinel(&a);
    int64_t first;
    assert_int_equal(vt_tensor_rows_unwritten(&a, &first), 4);
    assert_int_equal(first, 0);
    int64_t rows[2] = {0, 2};
    VT_ASSERT_OK(vt_rows_scatter(&a, rows, &s, 2, NULL, &err), err);
    assert_int_equal(vt_tensor_rows_unwritten(&a, &first), 2);
    assert_int_equal(first, 1);
    /* a row written only partly still counts */
    memset(vt_tensor_row(&a, 1), 0, 2);
    assert_int_equal(vt_tensor_rows_unwritten(&a, NULL), 2);
    vt_tensor_clear_sentinel(&a);
    assert_int_equal(vt_tensor_rows_unwritten(&a, NULL), 0);
    vt_tensor_free(&a); vt_tensor_free(&s);
}

/* The panel layout (tensor.h): element (j, k) of the first N - N % 32 rows
 * at 32 p K + 32 k + j % 32 of panel p = j / 32, the tail rows in place; the
 * rows come back out bit for bit; the row functions refuse a panel tensor. */
static void test_panels(void **state) {
    (void)state;
    const vt_dtype dts[2] = {VT_F32, VT_BF16};
    const int64_t Ns[3] = {70, 32, 5}, K = 7;
    for (int d = 0; d < 2; d++)
        for (int n = 0; n < 3; n++) {
            const int64_t N = Ns[n], shape[2] = {N, K};
            const size_t es = vt_dtype_size(dts[d]);
            vt_tensor t;
            vt_err err = {0};
            VT_ASSERT_OK(vt_tensor_alloc(&t, dts[d], 2, shape, &err), err);
            for (int64_t i = 0; i < N * K; i++) {   /* each element's bytes name its (j, k) */
                const uint16_t v = (uint16_t)(i * 3 + 1);
                memcpy((char *)t.data + (size_t)i * es, &v, 2);
                if (es == 4) memcpy((char *)t.data + (size_t)i * es + 2, &v, 2);
            }
            char *orig = malloc(t.nbytes), *back = malloc(t.nbytes);
            memcpy(orig, t.data, t.nbytes);
            VT_ASSERT_OK(vt_tensor_panelize(&t, &err), err);
            assert_int_equal(t.panel, VT_PANEL);
            const int64_t N32 = N / 32 * 32;
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) {
                    const int64_t at = j < N32 ? (j / 32) * 32 * K + 32 * k + j % 32 : j * K + k;
                    assert_memory_equal((char *)t.data + (size_t)at * es, orig + (size_t)(j * K + k) * es, es);
                }
            VT_ASSERT_OK(vt_tensor_panelize(&t, &err), err);   /* idempotent: already in panels */
            vt_tensor_unpanel(&t, 0, N, back);
            assert_memory_equal(back, orig, t.nbytes);
            vt_tensor_unpanel(&t, N - 3, 3, back);   /* a part */
            assert_memory_equal(back, orig + (size_t)((N - 3) * K) * es, (size_t)(3 * K) * es);
            assert_null(vt_tensor_row(&t, 0));
            vt_tensor dst;
            VT_ASSERT_OK(vt_tensor_alloc(&dst, dts[d], 2, shape, &err), err);
            assert_int_equal(vt_rows_copy(&dst, 0, &t, 0, 1, NULL, &err), VT_EINTERNAL);
            assert_non_null(strstr(err.msg, "panels"));
            vt_tensor_free(&dst);
            vt_tensor_free(&t);
            free(orig); free(back);
        }
    vt_tensor v;
    vt_err err = {0};
    const int64_t s1[1] = {64};
    VT_ASSERT_OK(vt_tensor_alloc(&v, VT_F32, 1, s1, &err), err);
    assert_int_equal(vt_tensor_panelize(&v, &err), VT_EINTERNAL);   /* a vector has no panels */
    vt_tensor_free(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strides_from_dtype),
        cmocka_unit_test(test_alloc_rejects_bad_shapes),
        cmocka_unit_test(test_scatter_gather),
        cmocka_unit_test(test_big_scatter_order),
        cmocka_unit_test(test_copies_refuse_mismatch),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_panels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
