/*
 * test_safetensors.c — the checkpoint reader and writer.
 *
 * Round trips through the writer and reader (every dtype, 0-d and n-d,
 * metadata, names that need JSON escaping), the writer's fixed byte format
 * and determinism, a sharded checkpoint, and one test per malformed input,
 * each checking that the status is VT_EINPUT and that the message names the
 * file and the tensor. Files live in a fresh mkdtemp directory per test.
 */
#include "tests/unit/vt_test.h"

#include "model/safetensors.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

typedef struct fx { char dir[64]; } fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    if (!f) return -1;
    strcpy(f->dir, "/tmp/vt_st_test_XXXXXX");
    if (!mkdtemp(f->dir)) { free(f); return -1; }
    *state = f;
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static int teardown(void **state) {
    fx *f = *state;
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static char *path_in(const fx *f, const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", f->dir, name);
    return p;
}

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (n) assert_int_equal(fwrite(d, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)sz, fp), (size_t)sz);
    fclose(fp);
    *n = (size_t)sz;
    return b;
}

/* A file with header length hlen (as given, possibly a lie), header text and
 * data_len zero bytes of data. */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t data_len) {
    size_t hl = strlen(header);
    size_t n = 8 + hl + data_len;
    unsigned char *b = calloc(1, n);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, hl);
    write_bytes(path, b, n);
    free(b);
}

static void write_st(const char *path, const char *header, size_t data_len) {
    write_raw(path, strlen(header), header, data_len);
}

/* Opens path, which must fail with VT_EINPUT and a message holding the path
 * (when want_path) and each of the NULL-terminated substrings. */
static void expect_bad(const char *open_path, const char *want_path, ...) {
    vt_err err = {0};
    vt_ckpt *c = (vt_ckpt *)0x1;
    int rc = vt_ckpt_open(open_path, &c, &err);
    if (rc != VT_EINPUT)
        fail_msg("open %s: status %d (want %d), message \"%s\"", open_path, rc, VT_EINPUT, err.msg);
    assert_null(c);
    assert_int_equal(err.code, VT_EINPUT);
    if (want_path) VT_ASSERT_CONTAINS(err.msg, want_path);
    va_list ap;
    va_start(ap, want_path);
    for (const char *s; (s = va_arg(ap, const char *));) VT_ASSERT_CONTAINS(err.msg, s);
    va_end(ap);
    assert_null(strchr(err.msg, '\n'));
}

/* Writes a file with the given tensors; data[i] is tensor i's bytes. */
typedef struct tdecl { const char *name; vt_dtype dt; int ndim; int64_t shape[4]; } tdecl;

static void write_file(const char *path, const tdecl *t, size_t n, const void *const *data,
                       const char *const *meta /* k, v, ..., NULL */) {
    vt_err err = {0};
    vt_st_writer *w = NULL;
    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    for (size_t i = 0; meta && meta[i]; i += 2)
        VT_ASSERT_OK(vt_st_writer_meta(w, meta[i], meta[i + 1], &err), err);
    for (size_t i = 0; i < n; i++)
        VT_ASSERT_OK(vt_st_writer_declare(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape, &err), err);
    VT_ASSERT_OK(vt_st_writer_begin(w, path, &err), err);
    for (size_t i = 0; i < n; i++) {
        size_t cnt = 1;
        for (int d = 0; d < t[i].ndim; d++) cnt *= (size_t)t[i].shape[d];
        VT_ASSERT_OK(vt_st_writer_put(w, data[i], vt_row_size(t[i].dt, (int64_t)cnt), &err), err);
    }
    VT_ASSERT_OK(vt_st_writer_finish(w, &err), err);
    vt_st_writer_free(w);
}

/* ------------------------------------------------------------ round trips */

static const float    RT_F32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
static const uint16_t RT_BF16[4] = {0x3f80, 0xbf80, 0x7f80, 0x0001};
static const uint16_t RT_F16[5] = {0x3c00, 0xc000, 0x7c00, 0x0001, 0x8000};
static const int32_t  RT_I32[8] = {1, -2, 3, -4, 5, -6, 7, INT32_MIN};
static const int64_t  RT_I64[1] = {INT64_MIN + 7};
static const uint8_t  RT_U8[3] = {0, 127, 255};

static const tdecl RT[] = {
    {"model.embed_tokens.weight", VT_F32, 2, {2, 3, 0, 0}},
    {"bf16.vec", VT_BF16, 1, {4, 0, 0, 0}},
    {"scalar.i64", VT_I64, 0, {0, 0, 0, 0}},
    {"bytes.u8", VT_U8, 1, {3, 0, 0, 0}},       /* odd size: the next offset is unaligned */
    {"cube.i32", VT_I32, 3, {2, 2, 2, 0}},
    {"empty.f32", VT_F32, 2, {0, 5, 0, 0}},     /* zero bytes */
    {"half.f16", VT_F16, 2, {5, 1, 0, 0}},
};
static const void *const RT_DATA[] = {RT_F32, RT_BF16, RT_I64, RT_U8, RT_I32, NULL, RT_F16};
static const size_t RT_N = sizeof RT / sizeof RT[0];
static const char *const RT_META[] = {"format", "pt", "vtlab.seed", "1", NULL};

static void check_rt(const vt_ckpt *c) {
    assert_int_equal(vt_ckpt_count(c), RT_N);
    uint64_t prev_end = 0;
    for (size_t i = 0; i < RT_N; i++) {
        const vt_st_entry *e = vt_ckpt_entry(c, i);
        assert_non_null(e);
        /* Declaration order is file order here, so entries come back in it. */
        assert_string_equal(e->name, RT[i].name);
        assert_true(e->begin == prev_end);
        prev_end = e->end;
        assert_ptr_equal(vt_ckpt_find(c, RT[i].name), e);
        assert_int_equal(e->dtype, RT[i].dt);
        assert_int_equal(e->ndim, RT[i].ndim);
        size_t cnt = 1;
        for (int d = 0; d < e->ndim; d++) {
            assert_int_equal(e->shape[d], RT[i].shape[d]);
            cnt *= (size_t)RT[i].shape[d];
        }
        size_t nb = vt_row_size(RT[i].dt, (int64_t)cnt);
        assert_int_equal(vt_ckpt_nbytes(c, e), nb);
        assert_int_equal(e->file, 0);
        assert_non_null(e->data);
        if (nb) assert_memory_equal(e->data, RT_DATA[i], nb);
    }
    assert_null(vt_ckpt_entry(c, RT_N));
    assert_null(vt_ckpt_find(c, "no.such.tensor"));
    assert_null(vt_ckpt_find(c, ""));
}

static void test_round_trip(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_file(file, RT, RT_N, RT_DATA, RT_META);
    char tn[64];
    snprintf(tn, sizeof tn, "model.safetensors.%ld.tmp", (long)getpid());   /* the writer's temp name */
    assert_int_equal(access(path_in(f, tn), F_OK), -1);

    vt_err err = {0};
    vt_ckpt *c = NULL;
    VT_ASSERT_OK(vt_ckpt_open(file, &c, &err), err);          /* the file itself */
    check_rt(c);
    assert_string_equal(vt_ckpt_file_name(c, 0), file);
    assert_null(vt_ckpt_file_name(c, 1));
    vt_ckpt_close(c);

    c = NULL;
    VT_ASSERT_OK(vt_ckpt_open(f->dir, &c, &err), err);        /* its directory */
    check_rt(c);
    vt_ckpt_close(c);
    vt_ckpt_close(NULL);

    /* The header on its own: metadata counted, 8-byte aligned data section. */
    size_t n;
    unsigned char *b = read_bytes(file, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | b[i];
    assert_int_equal((8 + hl) % 8, 0);
    vt_st_header h;
    VT_ASSERT_OK(vt_st_parse_header((const char *)b + 8, hl, n - 8 - hl, file, &h, &err), err);
    assert_int_equal(h.n, RT_N);
    assert_int_equal(h.n_metadata, 2);
    assert_null(h.entries[0].data);
    vt_st_header_free(&h);
    vt_st_header_free(NULL);
    free(b);
}

/* kB of the file that a fresh read-only mapping of it (madvised as the
 * reader does, every page touched) gets in 2 MiB pages: FilePmdMapped of the
 * mapping in /proc/self/smaps. */
static long pmd_mapped_kb(const char *path) {
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    (void)madvise(m, (size_t)st.st_size, MADV_HUGEPAGE);
    volatile unsigned sum = 0;
    for (off_t i = 0; i < st.st_size; i += 4096) sum += m[i];
    FILE *fp = fopen("/proc/self/smaps", "r");
    assert_non_null(fp);
    char line[512];
    long kb = -1;
    int in = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a == (unsigned long)m;
        else if (in && sscanf(line, "FilePmdMapped: %ld kB", &kb) == 1) break;
    }
    fclose(fp);
    munmap(m, (size_t)st.st_size);
    return kb;
}

/* The writer hands the kernel 2 MiB-aligned 2 MiB writes (WRITE_CHUNK in
 * safetensors.c), so that the just-written checkpoint is mapped in 2 MiB
 * pages. Whether a kernel does that at all depends on it and the file system:
 * a control file written the same way by hand tells; where it does not, the
 * test is skipped. With 4 KiB stdio writes the writer's file gets none. */
static void test_writer_large_folios(void **state) {
    fx *f = *state;
    enum { MIB = 1 << 20, ROWS = 5, COLS = (2 * MIB) / 4 };   /* 10 MiB of f32 */
    float *d = malloc((size_t)ROWS * COLS * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) d[i] = (float)(i % 1000);
    char *control = path_in(f, "control.bin");
    int fd = open(control, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    for (size_t off = 0; off < (size_t)ROWS * COLS * 4; off += 2 * MIB)
        assert_int_equal(write(fd, (const char *)d + off, 2 * MIB), 2 * MIB);
    assert_int_equal(close(fd), 0);
    const long ck = pmd_mapped_kb(control);
    if (ck <= 0) {
        print_message("      (skipped: this kernel and file system map no file in 2 MiB pages)\n");
        free(d);
        skip();
    }
    /* 40 tensors of 256 KiB, as a checkpoint's many matrices smaller than
     * 2 MiB (each put a separate fwrite; stdio writes a large one straight
     * through, at whatever offset the file has reached) */
    enum { NT = 40 };
    tdecl t[NT];
    const void *data[NT];
    char names[NT][8];
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "w%d", i);
        t[i] = (tdecl){names[i], VT_F32, 2, {64, 1024}};
        data[i] = d + (size_t)i * 64 * 1024;
    }
    char *file = path_in(f, "big.safetensors");
    write_file(file, t, NT, data, NULL);
    const long wk = pmd_mapped_kb(file);
    print_message("      2 MiB-mapped: control %ld kB, writer's file %ld kB of %d\n", ck, wk, ROWS * COLS * 4 / 1024);
    assert_true(wk >= 4 * 2048);   /* 10 MiB plus a header: at least 4 whole aligned 2 MiB extents */
    free(d);
}

/* The exact bytes of a small file: the format is part of the contract. */
static void test_writer_exact_format(void **state) {
    fx *f = *state;
    char *file = path_in(f, "exact.safetensors");
    static const tdecl t[] = {{"w", VT_F32, 2, {2, 1}}, {"s", VT_U8, 0, {0}}};
    static const float wd[2] = {1.0f, 2.0f};
    static const uint8_t sd[1] = {7};
    const void *const d[] = {wd, sd};
    const char *const meta[] = {"k", "v", NULL};
    write_file(file, t, 2, d, meta);
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
                      "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}";
    size_t hl = strlen(hdr);
    size_t padded = hl + (8 - (8 + hl) % 8) % 8;
    size_t n;
    unsigned char *b = read_bytes(file, &n);
    assert_int_equal(n, 8 + padded + 9);
    assert_int_equal(b[0], padded & 0xff);
    for (int i = 1; i < 8; i++) assert_int_equal(b[i], (padded >> (8 * i)) & 0xff);
    assert_memory_equal(b + 8, hdr, hl);
    for (size_t i = hl; i < padded; i++) assert_int_equal(b[8 + i], ' ');
    assert_memory_equal(b + 8 + padded, wd, 8);
    assert_int_equal(b[8 + padded + 8], 7);
    free(b);

    /* No tensors, no metadata: "{}" padded to 6 bytes. */
    char *empty = path_in(f, "empty.safetensors");
    write_file(empty, NULL, 0, NULL, NULL);
    b = read_bytes(empty, &n);
    assert_int_equal(n, 16);
    assert_memory_equal(b, "\x08\0\0\0\0\0\0\0{}      ", 16);
    free(b);
    vt_err err = {0};
    vt_ckpt *c = NULL;
    VT_ASSERT_OK(vt_ckpt_open(empty, &c, &err), err);
    assert_int_equal(vt_ckpt_count(c), 0);
    assert_null(vt_ckpt_find(c, "w"));
    vt_ckpt_close(c);
}

static void test_determinism(void **state) {
    fx *f = *state;
    char *a = path_in(f, "a.safetensors"), *b = path_in(f, "b.safetensors");
    write_file(a, RT, RT_N, RT_DATA, RT_META);
    write_file(b, RT, RT_N, RT_DATA, RT_META);
    size_t na, nb;
    unsigned char *ba = read_bytes(a, &na), *bb = read_bytes(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba);
    free(bb);
}

/* Names needing escapes survive the trip through our printer and cJSON. */
static void test_escaped_names(void **state) {
    fx *f = *state;
    char *file = path_in(f, "esc.safetensors");
    static const tdecl t[] = {
        {"quote\"back\\slash", VT_U8, 1, {1}},
        {"ctl\n\t\r\b\f\x01\x1f", VT_U8, 1, {1}},
        {"utf8 \xc3\xa9\xe2\x82\xac /x", VT_U8, 1, {1}},
    };
    static const uint8_t one[1] = {9};
    const void *const d[] = {one, one, one};
    const char *const meta[] = {"k\"\n", "v\\\x02", NULL};
    write_file(file, t, 3, d, meta);
    /* The escapes themselves are part of the fixed format. */
    size_t n;
    unsigned char *b = read_bytes(file, &n);
    static const char *const want[] = {
        "\"quote\\\"back\\\\slash\"", "\"ctl\\n\\t\\r\\b\\f\\u0001\\u001f\"",
        "\"utf8 \xc3\xa9\xe2\x82\xac /x\"", "{\"__metadata__\":{\"k\\\"\\n\":\"v\\\\\\u0002\"}"};
    for (size_t i = 0; i < 4; i++)
        if (!memmem(b, n, want[i], strlen(want[i]))) fail_msg("header lacks %s", want[i]);
    free(b);
    vt_err err = {0};
    vt_ckpt *c = NULL;
    VT_ASSERT_OK(vt_ckpt_open(file, &c, &err), err);
    assert_int_equal(vt_ckpt_count(c), 3);
    for (int i = 0; i < 3; i++) {
        const vt_st_entry *e = vt_ckpt_find(c, t[i].name);
        if (!e) fail_msg("tensor %d not found after the round trip", i);
        assert_int_equal(((const uint8_t *)e->data)[0], 9);
    }
    vt_ckpt_close(c);
}

static void test_writer_misuse(void **state) {
    fx *f = *state;
    char *file = path_in(f, "w.safetensors");
    char tn[64];
    snprintf(tn, sizeof tn, "w.safetensors.%ld.tmp", (long)getpid());   /* the writer's temp name */
    char *tmp = path_in(f, tn);
    vt_err err = {0};
    vt_st_writer *w = NULL;
    int64_t shp[2] = {2, 2};
    static const float four[4] = {1, 2, 3, 4};
    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "a", VT_F32, 2, shp, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "b", VT_BF16, 2, shp, &err), err);
    int64_t neg[1] = {-1};
    assert_int_equal(vt_st_writer_declare(w, "c", VT_F32, 1, neg, &err), VT_EINPUT);
    assert_int_equal(vt_st_writer_declare(w, "c", VT_F32, 9, shp, &err), VT_EINPUT);
    assert_int_equal(vt_st_writer_declare(w, "__metadata__", VT_F32, 0, NULL, &err), VT_EINPUT);
    VT_ASSERT_OK(vt_st_writer_meta(w, "k", "v", &err), err);
    assert_int_equal(vt_st_writer_meta(w, "k", "w", &err), VT_EINPUT);
    VT_ASSERT_OK(vt_st_writer_begin(w, file, &err), err);
    assert_int_equal(access(tmp, F_OK), 0);
    assert_int_equal(vt_st_writer_declare(w, "late", VT_F32, 0, NULL, &err), VT_EINTERNAL);
    /* "a" is f32 [2, 2]: 16 bytes. 8 (its bf16 size) is the defect this guards. */
    assert_int_equal(vt_st_writer_put(w, four, 8, &err), VT_EINTERNAL);
    VT_ASSERT_CONTAINS(err.msg, "'a'");
    VT_ASSERT_CONTAINS(err.msg, "expected 16");
    VT_ASSERT_OK(vt_st_writer_put(w, four, 16, &err), err);
    assert_int_equal(vt_st_writer_finish(w, &err), VT_EINTERNAL);   /* "b" not written */
    VT_ASSERT_CONTAINS(err.msg, "1 of 2");
    vt_st_writer_free(w);                                            /* not finished */
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(access(file, F_OK), -1);

    /* Too many puts; a duplicate name is caught at begin. */
    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "x", VT_F32, 0, NULL, &err), err);
    VT_ASSERT_OK(vt_st_writer_begin(w, file, &err), err);
    VT_ASSERT_OK(vt_st_writer_put(w, four, 4, &err), err);
    assert_int_equal(vt_st_writer_put(w, four, 4, &err), VT_EINTERNAL);
    VT_ASSERT_OK(vt_st_writer_finish(w, &err), err);
    vt_st_writer_free(w);
    assert_int_equal(access(file, F_OK), 0);
    assert_int_equal(access(tmp, F_OK), -1);

    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "x", VT_F32, 0, NULL, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "x", VT_F32, 0, NULL, &err), err);
    assert_int_equal(vt_st_writer_begin(w, path_in(f, "dup.safetensors"), &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "'x'");
    vt_st_writer_free(w);
    vt_st_writer_free(NULL);

    /* begin into a missing directory is an I/O error naming the file; a
     * retry to a good path then works. */
    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    VT_ASSERT_OK(vt_st_writer_declare(w, "x", VT_U8, 0, NULL, &err), err);
    assert_int_equal(vt_st_writer_begin(w, path_in(f, "no/such/dir.safetensors"), &err), VT_EIO);
    VT_ASSERT_CONTAINS(err.msg, "no/such/dir.safetensors.");
    char *retry = path_in(f, "retry.safetensors");
    VT_ASSERT_OK(vt_st_writer_begin(w, retry, &err), err);
    VT_ASSERT_OK(vt_st_writer_put(w, "z", 1, &err), err);
    VT_ASSERT_OK(vt_st_writer_finish(w, &err), err);
    vt_st_writer_free(w);
    assert_int_equal(access(retry, F_OK), 0);
}

/* ---------------------------------------------------------------- shards */

static const float SH_A[4] = {1, 2, 3, 4};
static const float SH_B[2] = {5, 6};
static const float SH_C[3] = {7, 8, 9};

static void write_shards(const fx *f, const char *c_name /* tensor name in shard 2 */) {
    static const tdecl s1[] = {{"layer.0.a", VT_F32, 2, {2, 2}}, {"layer.0.b", VT_F32, 1, {2}}};
    const void *const d1[] = {SH_A, SH_B};
    write_file(path_in(f, "model-00001-of-00002.safetensors"), s1, 2, d1, NULL);
    tdecl s2[] = {{c_name, VT_F32, 1, {3}}};
    const void *const d2[] = {SH_C};
    write_file(path_in(f, "model-00002-of-00002.safetensors"), s2, 1, d2, NULL);
}

static void write_index(const fx *f, const char *weight_map_body) {
    char buf[2048];
    snprintf(buf, sizeof buf, "{\"metadata\":{\"total_size\":36},\"weight_map\":{%s}}",
             weight_map_body);
    write_bytes(path_in(f, "model.safetensors.index.json"), buf, strlen(buf));
}

#define WM_GOOD "\"layer.0.a\":\"model-00001-of-00002.safetensors\"," \
                "\"layer.1.c\":\"model-00002-of-00002.safetensors\"," \
                "\"layer.0.b\":\"model-00001-of-00002.safetensors\""

static void test_sharded(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_index(f, WM_GOOD);
    vt_err err = {0};
    vt_ckpt *c = NULL;
    VT_ASSERT_OK(vt_ckpt_open(f->dir, &c, &err), err);
    assert_int_equal(vt_ckpt_count(c), 3);
    const vt_st_entry *a = vt_ckpt_find(c, "layer.0.a");
    const vt_st_entry *b = vt_ckpt_find(c, "layer.0.b");
    const vt_st_entry *cc = vt_ckpt_find(c, "layer.1.c");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(cc);
    assert_int_equal(a->file, b->file);
    assert_int_not_equal(a->file, cc->file);
    VT_ASSERT_CONTAINS(vt_ckpt_file_name(c, a->file), "model-00001-of-00002.safetensors");
    VT_ASSERT_CONTAINS(vt_ckpt_file_name(c, cc->file), "model-00002-of-00002.safetensors");
    assert_memory_equal(a->data, SH_A, sizeof SH_A);
    assert_memory_equal(b->data, SH_B, sizeof SH_B);
    assert_memory_equal(cc->data, SH_C, sizeof SH_C);
    assert_int_equal(vt_ckpt_nbytes(c, cc), 12);
    vt_ckpt_close(c);
}

static void test_shard_duplicate_tensor(void **state) {
    fx *f = *state;
    write_shards(f, "layer.0.a");        /* "layer.0.a" in both shards */
    write_index(f, WM_GOOD);
    expect_bad(f->dir, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "'layer.0.a'", "in both", NULL);
}

static void test_shard_missing_file(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_index(f, WM_GOOD ",\"layer.2.d\":\"model-00003-of-00003.safetensors\"");
    expect_bad(f->dir, "model.safetensors.index.json", "model-00003-of-00003.safetensors",
               "'layer.2.d'", NULL);
}

static void test_shard_index_lists_missing_tensor(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_index(f, WM_GOOD ",\"ghost\":\"model-00002-of-00002.safetensors\"");
    expect_bad(f->dir, "model.safetensors.index.json", "model-00002-of-00002.safetensors",
               "'ghost'", NULL);
}

static void test_shard_tensor_not_in_index(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_index(f, "\"layer.0.a\":\"model-00001-of-00002.safetensors\","
                   "\"layer.1.c\":\"model-00002-of-00002.safetensors\"");
    expect_bad(f->dir, "model-00001-of-00002.safetensors", "'layer.0.b'", "weight_map", NULL);
}

static void test_shard_wrong_shard_in_index(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_index(f, "\"layer.0.a\":\"model-00001-of-00002.safetensors\","
                   "\"layer.0.b\":\"model-00002-of-00002.safetensors\","
                   "\"layer.1.c\":\"model-00002-of-00002.safetensors\"");
    expect_bad(f->dir, "model.safetensors.index.json", "'layer.0.b'",
               "model-00001-of-00002.safetensors", NULL);
}

static void test_shard_bad_index(void **state) {
    fx *f = *state;
    write_shards(f, "layer.1.c");
    write_bytes(path_in(f, "model.safetensors.index.json"), "{\"weight_map\":[]}", 17);
    expect_bad(f->dir, "model.safetensors.index.json", "weight_map", NULL);
    write_index(f, "\"layer.0.a\":\"../etc/passwd\"");
    expect_bad(f->dir, "model.safetensors.index.json", "'layer.0.a'", NULL);
    write_bytes(path_in(f, "model.safetensors.index.json"), "{\"weight_map\":", 14);
    expect_bad(f->dir, "model.safetensors.index.json", "not valid JSON", NULL);
}

/* -------------------------------------------------------- malformed files */

#define T_A "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}"

static void test_bad_truncated(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_file(file, RT, RT_N, RT_DATA, NULL);
    size_t n;
    unsigned char *b = read_bytes(file, &n);
    free(b);
    /* Cut 2 bytes into the data of the last tensor, half.f16 (10 bytes). */
    assert_int_equal(truncate(file, (off_t)(n - 8)), 0);
    expect_bad(file, file, "'half.f16'", "truncated", NULL);
    expect_bad(f->dir, file, "'half.f16'", NULL);
    /* Cut to less than the length field. */
    assert_int_equal(truncate(file, 5), 0);
    expect_bad(file, file, "too short", NULL);
}

static void test_bad_header_length_past_end(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_raw(file, 4096, "{" T_A "}", 16);
    expect_bad(file, file, "header length 4096", "past the end", NULL);
}

static void test_bad_header_length_huge(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_raw(file, (uint64_t)1 << 40, "{" T_A "}", 16);
    expect_bad(file, file, "exceeds the limit", NULL);
    write_raw(file, UINT64_MAX, "{" T_A "}", 16);
    expect_bad(file, file, "exceeds the limit", NULL);
    write_raw(file, 1, "{" T_A "}", 16);
    expect_bad(file, file, "too small", NULL);
}

static void test_bad_header_not_json(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",", 16);
    expect_bad(file, file, "not valid JSON", NULL);
    write_st(file, "{" T_A "}garbage", 16);
    expect_bad(file, file, "not valid JSON", "after the value", NULL);
}

static void test_bad_header_not_object(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "[1, 2, 3]", 16);
    expect_bad(file, file, "not an object", NULL);
    write_st(file, "\"str\"", 0);
    expect_bad(file, file, "not an object", NULL);
}

static void test_bad_overlap(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{" T_A ",\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[8],\"data_offsets\":[8,24]}}",
             24);
    expect_bad(file, file, "'a.weight'", "'b.weight'", "overlap", NULL);
}

static void test_bad_out_of_range(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[100,116]}}",
             16);
    expect_bad(file, file, "'a.weight'", "[100, 116]", "past the end of the data section", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 16);
    expect_bad(file, file, "'a.weight'", "begin > end", NULL);
}

static void test_bad_shape_bytes(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "[2, 3]", "needs 24 bytes", "hold 16", NULL);
    /* The same shape in bf16 would fit: the element size must come from the dtype. */
    write_st(file, "{\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,32]}}", 32);
    expect_bad(file, file, "'a.weight'", "needs 16 bytes", NULL);
}

static void test_bad_dtype(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{\"a.weight\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "unknown dtype \"F64\"", "F32", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"f32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "\"f32\"", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "dtype", NULL);
}

static void test_bad_negative_shape(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "shape[0] is -1", "non-negative", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "shape[1] is 1.5", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "shape[0] is not a number", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],"
                   "\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "more than 8 dimensions", NULL);
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16);
    expect_bad(file, file, "'a.weight'", "\"shape\"", NULL);
}

static void test_bad_offsets_type(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    static const char *const bad[] = {"\"0,16\"", "[0]", "[0,16,32]", "[\"0\",16]", "[0,16.5]",
                                      "[-8,16]", "{\"begin\":0}", "null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4],"
                 "\"data_offsets\":%s}}", bad[i]);
        write_st(file, hdr, 16);
        expect_bad(file, file, "'a.weight'", "\"data_offsets\"", NULL);
    }
    write_st(file, "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16);
    expect_bad(file, file, "'a.weight'", "\"data_offsets\" is missing", NULL);
}

static void test_bad_duplicate_and_metadata(void **state) {
    fx *f = *state;
    char *file = path_in(f, "model.safetensors");
    write_st(file, "{" T_A "," T_A "}", 16);
    expect_bad(file, file, "'a.weight'", "more than once", NULL);
    write_st(file, "{\"__metadata__\":{\"k\":1}," T_A "}", 16);
    expect_bad(file, file, "__metadata__", "'k'", NULL);
    write_st(file, "{\"__metadata__\":{}," T_A ",\"__metadata__\":{}}", 16);
    expect_bad(file, file, "__metadata__", "more than once", NULL);
    write_st(file, "{\"a.weight\":[1,2]}", 16);
    expect_bad(file, file, "'a.weight'", "expected an object", NULL);
    /* A name with a newline is shown escaped: messages stay one line. */
    write_st(file, "{\"bad\\nname\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", 16);
    expect_bad(file, file, "'bad\\x0aname'", NULL);
}

static void test_bad_paths(void **state) {
    fx *f = *state;
    expect_bad(path_in(f, "nope"), "nope", NULL);
    expect_bad(f->dir, f->dir, "model.safetensors", NULL);     /* empty directory */
}

/* --------------------------------------------- vt_st_parse_header directly */

static int parse(const char *json, uint64_t data_len, vt_st_header *h, vt_err *err) {
    return vt_st_parse_header(json, strlen(json), data_len, "hdr.safetensors", h, err);
}

static void test_parse_edge_cases(void **state) {
    (void)state;
    vt_err err = {0};
    vt_st_header h;

    VT_ASSERT_OK(parse("{}", 0, &h, &err), err);
    assert_int_equal(h.n, 0);
    vt_st_header_free(&h);

    VT_ASSERT_OK(parse("  {\"__metadata__\":{\"a\":\"b\",\"c\":\"d\"}}  \n", 5, &h, &err), err);
    assert_int_equal(h.n, 0);
    assert_int_equal(h.n_metadata, 2);
    vt_st_header_free(&h);

    /* Declared out of file order, with a gap and zero-size tensors sharing an
     * offset (and one inside another's range: it owns no bytes): sorted by begin. */
    VT_ASSERT_OK(parse("{\"late\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]},"
                       "\"z2\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                       "\"z1\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
                       "\"big0\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,0],"
                       "\"data_offsets\":[2,2]},"
                       "\"early\":{\"dtype\":\"U8\",\"shape\":[2,2,2],\"data_offsets\":[0,8]}}",
                       40, &h, &err), err);
    assert_int_equal(h.n, 5);
    static const char *const order[] = {"early", "big0", "z1", "z2", "late"};
    for (size_t i = 0; i < 5; i++) assert_string_equal(h.entries[i].name, order[i]);
    assert_int_equal(h.entries[0].ndim, 3);
    assert_int_equal(h.entries[4].dtype, VT_I64);
    assert_int_equal(h.entries[4].begin, 24);
    vt_st_header_free(&h);

    /* json need not be NUL-terminated: only json_len bytes are read. */
    const char *buf = "{\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}XYZ";
    VT_ASSERT_OK(vt_st_parse_header(buf, strlen(buf) - 3, 1, "f", &h, &err), err);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.entries[0].ndim, 0);
    vt_st_header_free(&h);

    /* Errors; *out is left empty. */
    h.n = 99;
    assert_int_equal(parse("{", 0, &h, &err), VT_EINPUT);
    assert_int_equal(h.n, 0);
    VT_ASSERT_CONTAINS(err.msg, "hdr.safetensors");
    assert_int_equal(vt_st_parse_header("{}", 1, 0, "f", &h, &err), VT_EINPUT);
    assert_int_equal(parse("", 0, &h, &err), VT_EINPUT);
    assert_int_equal(parse("null", 0, &h, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "not an object");
    /* Exactly at the data section's end is fine; one byte past is not. */
    VT_ASSERT_OK(parse("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &h, &err),
                 err);
    vt_st_header_free(&h);
    assert_int_equal(parse("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 3,
                           &h, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "'t'");
    /* Products that overflow, and integers a double cannot hold exactly. */
    assert_int_equal(parse("{\"t\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992],"
                           "\"data_offsets\":[0,4]}}", 4, &h, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "overflows");
    assert_int_equal(parse("{\"t\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4,
                           &h, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "2^53");
    assert_int_equal(parse("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
                           "\"data_offsets\":[0,18446744073709551615]}}", UINT64_MAX, &h, &err),
                     VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "data_offsets");
    assert_int_equal(parse("{\"\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, &h,
                           &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "empty name");
    /* A huge name is cut in the message, which stays within its buffer. */
    size_t big = 5000;
    char *huge = malloc(big + 64);
    assert_non_null(huge);
    strcpy(huge, "{\"");
    memset(huge + 2, 'n', big);
    strcpy(huge + 2 + big, "\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}");
    assert_int_equal(parse(huge, 0, &h, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "nnn...");
    free(huge);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_exact_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_large_folios, setup, teardown),
        cmocka_unit_test_setup_teardown(test_determinism, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaped_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_duplicate_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_index_lists_missing_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_tensor_not_in_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_wrong_shard_in_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_bad_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_length_past_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_length_huge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_not_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_not_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_shape_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_negative_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_offsets_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_duplicate_and_metadata, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_paths, setup, teardown),
        cmocka_unit_test(test_parse_edge_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
