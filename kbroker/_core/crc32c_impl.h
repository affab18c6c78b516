/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for kbroker._core.records.
 *
 * Header-only and meant to be included by exactly one translation unit (records.pyx), so the
 * tables and the backend switch are plain file-static state.
 *
 * Two backends:
 *   - x86-64 with SSE4.2: the crc32 instruction, compiled per function with
 *     __attribute__((target("sse4.2"))) so the module itself does not need -msse4.2, selected at
 *     runtime with __builtin_cpu_supports.  The instruction has a latency of ~3 cycles but a
 *     throughput of 1/cycle, so long buffers are cut into three interleaved streams whose CRCs are
 *     merged with "append N zero bytes" operator tables (the raw CRC register update is linear over
 *     GF(2): crc(A||B) = shift_|B|(crc(A)) ^ crc_0(B)).
 *   - anywhere else (or when forced for tests): portable slicing-by-8 tables.
 *
 * All state is built by kb_crc32c_init(), which must run once (module import) before use.
 */
#ifndef KBROKER_CRC32C_IMPL_H
#define KBROKER_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KB_CRC32C_POLY 0x82F63B78u

/* Stream lengths of the 3-way interleave: LONG amortises the merge, SHORT mops up the rest. */
#define KB_CRC32C_LONG 8192
#define KB_CRC32C_SHORT 256

static uint32_t kb_crc32c_table[8][256];          /* slicing-by-8 */
static uint32_t kb_crc32c_long_shift[4][256];     /* append KB_CRC32C_LONG zero bytes */
static uint32_t kb_crc32c_short_shift[4][256];    /* append KB_CRC32C_SHORT zero bytes */
static int kb_crc32c_have_hw = 0;                 /* CPU supports SSE4.2 */
static int kb_crc32c_force_sw = 0;                /* test switch */
static int kb_crc32c_ready = 0;

/* Little-endian 64-bit load, independent of host endianness and alignment (one mov on x86). */
static inline uint64_t kb_load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) |
           ((uint64_t)p[7] << 56);
}

/* Raw register update (no pre/post inversion), slicing-by-8. */
static uint32_t kb_crc32c_sw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ kb_crc32c_table[0][(crc ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w = kb_load_le64(p) ^ crc;
        crc = kb_crc32c_table[7][w & 0xff] ^ kb_crc32c_table[6][(w >> 8) & 0xff] ^
              kb_crc32c_table[5][(w >> 16) & 0xff] ^ kb_crc32c_table[4][(w >> 24) & 0xff] ^
              kb_crc32c_table[3][(w >> 32) & 0xff] ^ kb_crc32c_table[2][(w >> 40) & 0xff] ^
              kb_crc32c_table[1][(w >> 48) & 0xff] ^ kb_crc32c_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ kb_crc32c_table[0][(crc ^ *p++) & 0xff];
    return crc;
}

/* Apply a zero-append operator stored as 4 byte-indexed tables. */
static inline uint32_t kb_crc32c_shift(uint32_t tab[4][256], uint32_t crc) {
    return tab[0][crc & 0xff] ^ tab[1][(crc >> 8) & 0xff] ^ tab[2][(crc >> 16) & 0xff] ^
           tab[3][crc >> 24];
}

/* Build the operator "feed nzeros zero bytes into the raw register" as tables.  The operator is
 * linear, so its image of each of the 32 basis registers determines it. */
static void kb_crc32c_build_shift(uint32_t tab[4][256], size_t nzeros) {
    static const unsigned char zeros[KB_CRC32C_LONG];  /* zero-initialised */
    uint32_t basis[32];
    for (int bit = 0; bit < 32; bit++) {
        uint32_t r = (uint32_t)1 << bit;
        size_t left = nzeros;
        while (left) {
            size_t k = left < sizeof zeros ? left : sizeof zeros;
            r = kb_crc32c_sw_raw(r, zeros, k);
            left -= k;
        }
        basis[bit] = r;
    }
    for (int byte = 0; byte < 4; byte++) {
        for (int v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1 << b)) r ^= basis[byte * 8 + b];
            tab[byte][v] = r;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KB_CRC32C_X86 1

/* Consume whole blocks of 3 * stream bytes as three interleaved streams: independent dependency
 * chains keep the crc32 unit busy every cycle, then the streams' CRCs are merged with ``shift``,
 * the "append ``stream`` zero bytes" operator.  Always inlined with constant arguments, so each
 * call compiles to the loop it would be if written out by hand. */
__attribute__((target("sse4.2"), always_inline))
static inline uint64_t kb_crc32c_hw_3way(uint64_t c0, const unsigned char **pp, size_t *np,
                                         size_t stream, uint32_t shift[4][256]) {
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * stream) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + stream;
        do {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + stream, 8);
            memcpy(&w2, p + 2 * stream, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
            p += 8;
        } while (p < end);
        c0 = kb_crc32c_shift(shift, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = kb_crc32c_shift(shift, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * stream;
        n -= 3 * stream;
    }
    *pp = p;
    *np = n;
    return c0;
}

__attribute__((target("sse4.2")))
static uint32_t kb_crc32c_hw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c0 = crc;
    /* Align to 8 so the 64-bit loads below never straddle cache lines needlessly. */
    while (n && ((uintptr_t)p & 7)) {
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
        n--;
    }
    /* LONG blocks amortise the merge; SHORT ones take most of what is left. */
    c0 = kb_crc32c_hw_3way(c0, &p, &n, KB_CRC32C_LONG, kb_crc32c_long_shift);
    c0 = kb_crc32c_hw_3way(c0, &p, &n, KB_CRC32C_SHORT, kb_crc32c_short_shift);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = __builtin_ia32_crc32di(c0, w);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#else
#define KB_CRC32C_X86 0
#endif

static void kb_crc32c_init(void) {
    if (kb_crc32c_ready) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ KB_CRC32C_POLY : c >> 1;
        kb_crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = kb_crc32c_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = (c >> 8) ^ kb_crc32c_table[0][c & 0xff];
            kb_crc32c_table[k][n] = c;
        }
    }
    kb_crc32c_build_shift(kb_crc32c_long_shift, KB_CRC32C_LONG);
    kb_crc32c_build_shift(kb_crc32c_short_shift, KB_CRC32C_SHORT);
#if KB_CRC32C_X86
    __builtin_cpu_init();
    kb_crc32c_have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    kb_crc32c_ready = 1;
}

/* CRC-32C of p[0..n) continuing from a finished CRC value ``crc`` (0 to start), like the crc32c
 * PyPI package and Java's Crc32C.update chaining. */
static inline uint32_t kb_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
#if KB_CRC32C_X86
    if (kb_crc32c_have_hw && !kb_crc32c_force_sw) return ~kb_crc32c_hw_raw(crc, p, n);
#endif
    return ~kb_crc32c_sw_raw(crc, p, n);
}

static inline void kb_crc32c_set_force_software(int on) { kb_crc32c_force_sw = on ? 1 : 0; }

/* 1 when the hardware path is what kb_crc32c() uses right now. */
static inline int kb_crc32c_using_hw(void) {
    return KB_CRC32C_X86 && kb_crc32c_have_hw && !kb_crc32c_force_sw;
}

#endif /* KBROKER_CRC32C_IMPL_H */
