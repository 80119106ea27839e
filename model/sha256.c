/*
 * sha256.c — SHA-256 (FIPS 180-4) for provenance hashes: model files, datasets,
 * logits, knob sets, written from the standard.
 *
 * Every run hashes all of its logits (16 MB for 128 x 32 positions of a 1024
 * vocabulary), which at the portable code's ~175 MB/s was the largest part of
 * the harness's own time. Where the CPU has the SHA extensions (x86-64
 * sha_ni, detected at run time) the compression function uses them instead;
 * tests/unit/test_sha256.c checks both paths against the standard's vectors
 * and against each other.
 */
#include "vt.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define VT_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block_portable(vt_sha256_ctx *c, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
    uint32_t e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
    c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

#ifdef VT_SHA_NI
/* One 64-byte block with the SHA-NI instructions. The state is kept as the
 * two halves the instructions want, ABEF and CDGH; each group of four rounds
 * adds its four constants to four message words, and the message schedule of
 * group g+1 (msg2) and of group g+3 (msg1) is computed on the way. */
__attribute__((target("sha,sse4.1,ssse3")))
static void block_ni(vt_sha256_ctx *c, const uint8_t *p) {
    const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&c->h[0]);     /* a b c d */
    __m128i st1 = _mm_loadu_si128((const __m128i *)&c->h[4]);     /* e f g h */
    tmp = _mm_shuffle_epi32(tmp, 0xB1);
    st1 = _mm_shuffle_epi32(st1, 0x1B);
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                   /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);                        /* CDGH */
    const __m128i abef = st0, cdgh = st1;
    __m128i m[4];
    for (int g = 0; g < 16; g++) {
        __m128i *cur = &m[g & 3], *prev = &m[(g + 3) & 3], *next = &m[(g + 1) & 3];
        if (g < 4) *cur = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), MASK);
        __m128i msg = _mm_add_epi32(*cur, _mm_loadu_si128((const __m128i *)&K[4 * g]));
        st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
        if (g >= 3 && g <= 14) {
            *next = _mm_add_epi32(*next, _mm_alignr_epi8(*cur, *prev, 4));
            *next = _mm_sha256msg2_epu32(*next, *cur);
        }
        msg = _mm_shuffle_epi32(msg, 0x0E);
        st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
        if (g >= 1 && g <= 12) *prev = _mm_sha256msg1_epu32(*prev, *cur);
    }
    st0 = _mm_add_epi32(st0, abef);
    st1 = _mm_add_epi32(st1, cdgh);
    tmp = _mm_shuffle_epi32(st0, 0x1B);
    st1 = _mm_shuffle_epi32(st1, 0xB1);
    st0 = _mm_blend_epi16(tmp, st1, 0xF0);                        /* d c b a -> a b c d in memory */
    st1 = _mm_alignr_epi8(st1, tmp, 8);
    _mm_storeu_si128((__m128i *)&c->h[0], st0);
    _mm_storeu_si128((__m128i *)&c->h[4], st1);
}
#endif

/* -1: not decided yet; 0: portable; 1: SHA-NI. vt_sha256_force_portable
 * (tests) pins the portable path. */
static int use_ni = -1;

void vt_sha256_force_portable(int on) { use_ni = on ? 0 : -1; }

static void block(vt_sha256_ctx *c, const uint8_t *p) {
#ifdef VT_SHA_NI
    if (use_ni < 0) {
        /* cpuid: leaf 7 EBX bit 29 = SHA; leaf 1 ECX bits 9, 19 = SSSE3, SSE4.1 */
        unsigned a, b, c1, d;
        int sha = __get_cpuid_count(7, 0, &a, &b, &c1, &d) && (b >> 29 & 1);
        int sse = __get_cpuid(1, &a, &b, &c1, &d) && (c1 >> 9 & 1) && (c1 >> 19 & 1);
        use_ni = sha && sse;
    }
    if (use_ni) { block_ni(c, p); return; }
#endif
    block_portable(c, p);
}

void vt_sha256_init(vt_sha256_ctx *c) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, H0, sizeof H0);
    c->len = 0;
    c->nbuf = 0;
}

void vt_sha256_update(vt_sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->len += n;
    if (c->nbuf) {
        size_t take = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take; p += take; n -= take;
        if (c->nbuf == 64) { block(c, c->buf); c->nbuf = 0; }
    }
    for (; n >= 64; p += 64, n -= 64) block(c, p);
    if (n) { memcpy(c->buf, p, n); c->nbuf = n; }
}

void vt_sha256_final(vt_sha256_ctx *c, uint8_t out[32]) {
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80;
    vt_sha256_update(c, &pad, 1);
    uint8_t zero = 0;
    while (c->nbuf != 56) vt_sha256_update(c, &zero, 1);
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    vt_sha256_update(c, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24); out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8); out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void vt_sha256(const void *data, size_t n, uint8_t out[32]) {
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    vt_sha256_update(&c, data, n);
    vt_sha256_final(&c, out);
}

static void to_hex(const uint8_t d[32], char out[65]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) { out[2 * i] = hx[d[i] >> 4]; out[2 * i + 1] = hx[d[i] & 15]; }
    out[64] = '\0';
}

void vt_sha256_hex(const void *data, size_t n, char out[65]) {
    uint8_t d[32];
    vt_sha256(data, n, d);
    to_hex(d, out);
}

int vt_sha256_hex_ok(const char *s) {
    size_t n = 0;
    for (; s && ((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')); n++) {}
    return s && n == 64 && !s[n];
}

void vt_sha256_final_hex(vt_sha256_ctx *c, char out[65]) {
    uint8_t d[32];
    vt_sha256_final(c, d);
    to_hex(d, out);
}

int vt_sha256_file(const char *path, char out[65], char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open for hashing", path);
        return VT_STATUS_IO;
    }
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) vt_sha256_update(&c, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: read error while hashing", path);
        return VT_STATUS_IO;
    }
    vt_sha256_final_hex(&c, out);
    return VT_STATUS_OK;
}
