/* tokenizer.json "normalizer", as the `tokenizers` library (0.23) normalizes: BertNormalizer, Precompiled
 * (SentencePiece's precompiled_charsmap), Sequence, Replace, NFC, NFD, NFKC, NFKD, Strip, StripAccents,
 * Lowercase, Prepend, Nmt and ByteLevel. Every step maps UTF-8 to UTF-8; a Sequence is flattened into its
 * steps when read.
 *
 * The library's Unicode tables are not one version, and not utf8proc's (Unicode 15.0):
 *   normalization forms and StripAccents' marks: Unicode 9.0 (unicode-normalization-alignments 0.1.12);
 *   BertNormalizer's Mn and Cf classes: Unicode 8.0 (unicode_categories 0.1.1);
 *   lowercase: Rust's char::to_lowercase (Unicode 17.0);
 *   Precompiled's grapheme clusters: unicode-segmentation 1.13 (Unicode 17.0, with rule GB9c).
 * The tables below are the differences from utf8proc 2.8 (they were measured against the library over every
 * code point), so that each class is the library's, not the newer or older one. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

typedef struct {
  uint32_t lo, hi;
} cp_range;
typedef struct {
  uint32_t lo, hi, as; /* the grapheme class of [lo, hi] is the one utf8proc gives `as` */
} cp_class;

/* Code points whose Mn class in Unicode 8.0 differs from utf8proc's: added since, or reclassified. */
static const cp_range MN_FLIP[] = {
    {0x07fd, 0x07fd},   {0x0898, 0x089f},   {0x08ca, 0x08e1},   {0x09fe, 0x09fe},   {0x0afa, 0x0aff},
    {0x0b55, 0x0b55},   {0x0c04, 0x0c04},   {0x0c3c, 0x0c3c},   {0x0d00, 0x0d00},   {0x0d3b, 0x0d3c},
    {0x0d81, 0x0d81},   {0x0eba, 0x0eba},   {0x0ece, 0x0ece},   {0x1734, 0x1734},   {0x180f, 0x180f},
    {0x1885, 0x1886},   {0x1abf, 0x1ace},   {0x1df6, 0x1dfb},   {0xa82c, 0xa82c},   {0xa8c5, 0xa8c5},
    {0xa8ff, 0xa8ff},   {0xa9bd, 0xa9bd},   {0x10d24, 0x10d27}, {0x10eab, 0x10eac}, {0x10efd, 0x10eff},
    {0x10f46, 0x10f50}, {0x10f82, 0x10f85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110c2, 0x110c2},
    {0x111c9, 0x111c9}, {0x111cf, 0x111cf}, {0x1123e, 0x1123e}, {0x11241, 0x11241}, {0x1133b, 0x1133b},
    {0x11438, 0x1143f}, {0x11442, 0x11444}, {0x11446, 0x11446}, {0x1145e, 0x1145e}, {0x1182f, 0x11837},
    {0x11839, 0x1183a}, {0x1193b, 0x1193c}, {0x1193e, 0x1193e}, {0x11943, 0x11943}, {0x119d4, 0x119d7},
    {0x119da, 0x119db}, {0x119e0, 0x119e0}, {0x11a01, 0x11a0a}, {0x11a33, 0x11a38}, {0x11a3b, 0x11a3e},
    {0x11a47, 0x11a47}, {0x11a51, 0x11a56}, {0x11a59, 0x11a5b}, {0x11a8a, 0x11a96}, {0x11a98, 0x11a99},
    {0x11c30, 0x11c36}, {0x11c38, 0x11c3d}, {0x11c3f, 0x11c3f}, {0x11c92, 0x11ca7}, {0x11caa, 0x11cb0},
    {0x11cb2, 0x11cb3}, {0x11cb5, 0x11cb6}, {0x11d31, 0x11d36}, {0x11d3a, 0x11d3a}, {0x11d3c, 0x11d3d},
    {0x11d3f, 0x11d45}, {0x11d47, 0x11d47}, {0x11d90, 0x11d91}, {0x11d95, 0x11d95}, {0x11d97, 0x11d97},
    {0x11ef3, 0x11ef4}, {0x11f00, 0x11f01}, {0x11f36, 0x11f3a}, {0x11f40, 0x11f40}, {0x11f42, 0x11f42},
    {0x13440, 0x13440}, {0x13447, 0x13455}, {0x16f4f, 0x16f4f}, {0x16fe4, 0x16fe4}, {0x1cf00, 0x1cf2d},
    {0x1cf30, 0x1cf46}, {0x1e000, 0x1e006}, {0x1e008, 0x1e018}, {0x1e01b, 0x1e021}, {0x1e023, 0x1e024},
    {0x1e026, 0x1e02a}, {0x1e08f, 0x1e08f}, {0x1e130, 0x1e136}, {0x1e2ae, 0x1e2ae}, {0x1e2ec, 0x1e2ef},
    {0x1e4ec, 0x1e4ef}, {0x1e944, 0x1e94a},
};
/* Code points whose General_Category=Mark in Unicode 9.0 differs from utf8proc's (StripAccents). */
static const cp_range MARK_FLIP[] = {
    {0x07fd, 0x07fd},   {0x0898, 0x089f},   {0x08ca, 0x08d3},   {0x09fe, 0x09fe},   {0x0afa, 0x0aff},
    {0x0b55, 0x0b55},   {0x0c04, 0x0c04},   {0x0c3c, 0x0c3c},   {0x0cf3, 0x0cf3},   {0x0d00, 0x0d00},
    {0x0d3b, 0x0d3c},   {0x0d81, 0x0d81},   {0x0eba, 0x0eba},   {0x0ece, 0x0ece},   {0x1715, 0x1715},
    {0x180f, 0x180f},   {0x1abf, 0x1ace},   {0x1cf2, 0x1cf3},   {0x1cf7, 0x1cf7},   {0x1df6, 0x1dfa},
    {0xa82c, 0xa82c},   {0xa8ff, 0xa8ff},   {0x10d24, 0x10d27}, {0x10eab, 0x10eac}, {0x10efd, 0x10eff},
    {0x10f46, 0x10f50}, {0x10f82, 0x10f85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110c2, 0x110c2},
    {0x11145, 0x11146}, {0x111c9, 0x111c9}, {0x111ce, 0x111cf}, {0x11241, 0x11241}, {0x1133b, 0x1133b},
    {0x1145e, 0x1145e}, {0x1182c, 0x1183a}, {0x11930, 0x11935}, {0x11937, 0x11938}, {0x1193b, 0x1193e},
    {0x11940, 0x11940}, {0x11942, 0x11943}, {0x119d1, 0x119d7}, {0x119da, 0x119e0}, {0x119e4, 0x119e4},
    {0x11a01, 0x11a0a}, {0x11a33, 0x11a39}, {0x11a3b, 0x11a3e}, {0x11a47, 0x11a47}, {0x11a51, 0x11a5b},
    {0x11a8a, 0x11a99}, {0x11d31, 0x11d36}, {0x11d3a, 0x11d3a}, {0x11d3c, 0x11d3d}, {0x11d3f, 0x11d45},
    {0x11d47, 0x11d47}, {0x11d8a, 0x11d8e}, {0x11d90, 0x11d91}, {0x11d93, 0x11d97}, {0x11ef3, 0x11ef6},
    {0x11f00, 0x11f01}, {0x11f03, 0x11f03}, {0x11f34, 0x11f3a}, {0x11f3e, 0x11f42}, {0x13440, 0x13440},
    {0x13447, 0x13455}, {0x16f4f, 0x16f4f}, {0x16f7f, 0x16f87}, {0x16fe4, 0x16fe4}, {0x16ff0, 0x16ff1},
    {0x1cf00, 0x1cf2d}, {0x1cf30, 0x1cf46}, {0x1e08f, 0x1e08f}, {0x1e130, 0x1e136}, {0x1e2ae, 0x1e2ae},
    {0x1e2ec, 0x1e2ef}, {0x1e4ec, 0x1e4ef},
};
/* Cf in Unicode 8.0 (BertNormalizer's control characters are Cc, Cf and Co; Cc and Co are stable). */
static const cp_range FORMAT_8[] = {
    {0x00ad, 0x00ad},   {0x0600, 0x0605},   {0x061c, 0x061c},   {0x06dd, 0x06dd},   {0x070f, 0x070f},
    {0x180e, 0x180e},   {0x200b, 0x200f},   {0x202a, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},
    {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
    {0xe0001, 0xe0001}, {0xe0020, 0xe007f},
};
/* Code points the library's Unicode 9.0 normalization does not know, among those utf8proc decomposes or
 * gives a combining class: for the library they have neither (and compose with nothing). */
static const cp_range NORM_UNKNOWN[] = {
    {0x07fd, 0x07fd},   {0x0898, 0x089f},   {0x08ca, 0x08d3},   {0x09fe, 0x09fe},   {0x0c3c, 0x0c3c},
    {0x0d3b, 0x0d3c},   {0x0eba, 0x0eba},   {0x1715, 0x1715},   {0x1abf, 0x1ace},   {0x1df6, 0x1dfa},
    {0x32ff, 0x32ff},   {0xa7f2, 0xa7f4},   {0xa82c, 0xa82c},   {0xab69, 0xab69},   {0x10781, 0x10785},
    {0x10787, 0x107b0}, {0x107b2, 0x107ba}, {0x10d24, 0x10d27}, {0x10eab, 0x10eac}, {0x10efd, 0x10eff},
    {0x10f46, 0x10f50}, {0x10f82, 0x10f85}, {0x11070, 0x11070}, {0x1133b, 0x1133b}, {0x1145e, 0x1145e},
    {0x11839, 0x1183a}, {0x11938, 0x11938}, {0x1193d, 0x1193e}, {0x11943, 0x11943}, {0x119e0, 0x119e0},
    {0x11a34, 0x11a34}, {0x11a47, 0x11a47}, {0x11a99, 0x11a99}, {0x11d42, 0x11d42}, {0x11d44, 0x11d45},
    {0x11d97, 0x11d97}, {0x11f41, 0x11f42}, {0x16ff0, 0x16ff1}, {0x1e030, 0x1e06d}, {0x1e08f, 0x1e08f},
    {0x1e130, 0x1e136}, {0x1e2ae, 0x1e2ae}, {0x1e2ec, 0x1e2ef}, {0x1e4ec, 0x1e4ef}, {0x1f16c, 0x1f16c},
    {0x1fbf0, 0x1fbf9},
};
/* Lowercase mappings added after Unicode 15.0: [lo, hi] maps to c + delta, or to `to` when not 0. */
static const struct {
  uint32_t lo, hi, to;
  int32_t delta;
} LOWER_ADDED[] = {
    {0x1c89, 0x1c89, 0, 1},      {0xa7cb, 0xa7cb, 0x0264, 0}, {0xa7cc, 0xa7cc, 0, 1},
    {0xa7ce, 0xa7ce, 0, 1},      {0xa7d2, 0xa7d2, 0, 1},      {0xa7d4, 0xa7d4, 0, 1},
    {0xa7da, 0xa7da, 0, 1},      {0xa7dc, 0xa7dc, 0x019b, 0}, {0x10d50, 0x10d65, 0, 0x20},
    {0x16ea0, 0x16eb8, 0, 0x1b},
};
/* Grapheme classes of unicode-segmentation 1.13 that differ from utf8proc's, each given as a code point
 * that has the class in utf8proc (A: Other, U+0001: Control, U+0300: Extend, U+0600: Prepend, U+0903:
 * SpacingMark, U+1161: V, U+1F600: Extended_Pictographic). */
static const cp_class GRAPHEME_AS[] = {
    {0x0897, 0x0897, 0x0300},    {0x0cc0, 0x0cc0, 0x0300},    {0x0cc7, 0x0cc8, 0x0300},
    {0x0cca, 0x0ccb, 0x0300},    {0x1715, 0x1715, 0x0300},    {0x1734, 0x1734, 0x0300},
    {0x1acf, 0x1add, 0x0300},    {0x1ae0, 0x1aeb, 0x0300},    {0x1b3b, 0x1b3b, 0x0300},
    {0x1b3d, 0x1b3d, 0x0300},    {0x1b43, 0x1b44, 0x0300},    {0x1baa, 0x1baa, 0x0300},
    {0x1bf2, 0x1bf3, 0x0300},    {0x2065, 0x2065, 0x0001},    {0x2388, 0x2388, 0x0041},
    {0x2605, 0x2605, 0x0041},    {0x2607, 0x260d, 0x0041},    {0x260f, 0x2610, 0x0041},
    {0x2612, 0x2612, 0x0041},    {0x2616, 0x2617, 0x0041},    {0x2619, 0x261c, 0x0041},
    {0x261e, 0x261f, 0x0041},    {0x2621, 0x2621, 0x0041},    {0x2624, 0x2625, 0x0041},
    {0x2627, 0x2629, 0x0041},    {0x262b, 0x262d, 0x0041},    {0x2630, 0x2637, 0x0041},
    {0x263b, 0x263f, 0x0041},    {0x2641, 0x2641, 0x0041},    {0x2643, 0x2647, 0x0041},
    {0x2654, 0x265e, 0x0041},    {0x2661, 0x2662, 0x0041},    {0x2664, 0x2664, 0x0041},
    {0x2667, 0x2667, 0x0041},    {0x2669, 0x267a, 0x0041},    {0x267c, 0x267d, 0x0041},
    {0x2680, 0x2685, 0x0041},    {0x2690, 0x2691, 0x0041},    {0x2698, 0x2698, 0x0041},
    {0x269a, 0x269a, 0x0041},    {0x269d, 0x269f, 0x0041},    {0x26a2, 0x26a6, 0x0041},
    {0x26a8, 0x26a9, 0x0041},    {0x26ac, 0x26af, 0x0041},    {0x26b2, 0x26bc, 0x0041},
    {0x26bf, 0x26c3, 0x0041},    {0x26c6, 0x26c7, 0x0041},    {0x26c9, 0x26cd, 0x0041},
    {0x26d0, 0x26d0, 0x0041},    {0x26d2, 0x26d2, 0x0041},    {0x26d5, 0x26e8, 0x0041},
    {0x26eb, 0x26ef, 0x0041},    {0x26f6, 0x26f6, 0x0041},    {0x26fb, 0x26fc, 0x0041},
    {0x26fe, 0x2701, 0x0041},    {0x2703, 0x2704, 0x0041},    {0x270e, 0x270e, 0x0041},
    {0x2710, 0x2711, 0x0041},    {0x2765, 0x2767, 0x0041},    {0xa953, 0xa953, 0x0300},
    {0xa9c0, 0xa9c0, 0x0300},    {0xfff0, 0xfff8, 0x0001},    {0x10d69, 0x10d6d, 0x0300},
    {0x10efa, 0x10efc, 0x0300},  {0x111c0, 0x111c0, 0x0300},  {0x11235, 0x11235, 0x0300},
    {0x1134d, 0x1134d, 0x0300},  {0x113b8, 0x113b8, 0x0300},  {0x113b9, 0x113ba, 0x0903},
    {0x113bb, 0x113c0, 0x0300},  {0x113c2, 0x113c2, 0x0300},  {0x113c5, 0x113c5, 0x0300},
    {0x113c7, 0x113c9, 0x0300},  {0x113ca, 0x113ca, 0x0903},  {0x113cc, 0x113cd, 0x0903},
    {0x113ce, 0x113d0, 0x0300},  {0x113d1, 0x113d1, 0x0600},  {0x113d2, 0x113d2, 0x0300},
    {0x113e1, 0x113e2, 0x0300},  {0x116b6, 0x116b6, 0x0300},  {0x1171e, 0x1171e, 0x0903},
    {0x1193d, 0x1193d, 0x0300},  {0x11a3a, 0x11a3a, 0x0041},  {0x11b60, 0x11b60, 0x0300},
    {0x11b61, 0x11b61, 0x0903},  {0x11b62, 0x11b64, 0x0300},  {0x11b65, 0x11b65, 0x0903},
    {0x11b66, 0x11b66, 0x0300},  {0x11b67, 0x11b67, 0x0903},  {0x11f41, 0x11f41, 0x0300},
    {0x11f5a, 0x11f5a, 0x0300},  {0x1611e, 0x16129, 0x0300},  {0x1612a, 0x1612c, 0x0903},
    {0x1612d, 0x1612f, 0x0300},  {0x16d63, 0x16d63, 0x1161},  {0x16d67, 0x16d6a, 0x1161},
    {0x16ff0, 0x16ff1, 0x0300},  {0x1d166, 0x1d166, 0x0300},  {0x1d16d, 0x1d16d, 0x0300},
    {0x1e5ee, 0x1e5ef, 0x0300},  {0x1e6e3, 0x1e6e3, 0x0300},  {0x1e6e6, 0x1e6e6, 0x0300},
    {0x1e6ee, 0x1e6ef, 0x0300},  {0x1e6f5, 0x1e6f5, 0x0300},  {0x1f000, 0x1f003, 0x0041},
    {0x1f005, 0x1f02b, 0x0041},  {0x1f02c, 0x1f02f, 0x1f600}, {0x1f030, 0x1f093, 0x0041},
    {0x1f094, 0x1f09f, 0x1f600}, {0x1f0a0, 0x1f0ae, 0x0041},  {0x1f0af, 0x1f0b0, 0x1f600},
    {0x1f0b1, 0x1f0bf, 0x0041},  {0x1f0c0, 0x1f0c0, 0x1f600}, {0x1f0c1, 0x1f0ce, 0x0041},
    {0x1f0d0, 0x1f0d0, 0x1f600}, {0x1f0d1, 0x1f0f5, 0x0041},  {0x1f0f6, 0x1f0ff, 0x1f600},
    {0x1f10d, 0x1f10f, 0x0041},  {0x1f12f, 0x1f12f, 0x0041},  {0x1f16c, 0x1f16f, 0x0041},
    {0x1f1ad, 0x1f1ad, 0x0041},  {0x1f1ae, 0x1f1e5, 0x1f600}, {0x1f203, 0x1f20f, 0x1f600},
    {0x1f23c, 0x1f23f, 0x1f600}, {0x1f249, 0x1f24f, 0x1f600}, {0x1f252, 0x1f25f, 0x1f600},
    {0x1f260, 0x1f265, 0x0041},  {0x1f266, 0x1f2ff, 0x1f600}, {0x1f322, 0x1f323, 0x0041},
    {0x1f394, 0x1f395, 0x0041},  {0x1f398, 0x1f398, 0x0041},  {0x1f39c, 0x1f39d, 0x0041},
    {0x1f3f1, 0x1f3f2, 0x0041},  {0x1f3f6, 0x1f3f6, 0x0041},  {0x1f4fe, 0x1f4fe, 0x0041},
    {0x1f546, 0x1f548, 0x0041},  {0x1f54f, 0x1f54f, 0x0041},  {0x1f568, 0x1f56e, 0x0041},
    {0x1f571, 0x1f572, 0x0041},  {0x1f57b, 0x1f586, 0x0041},  {0x1f588, 0x1f589, 0x0041},
    {0x1f58e, 0x1f58f, 0x0041},  {0x1f591, 0x1f594, 0x0041},  {0x1f597, 0x1f5a3, 0x0041},
    {0x1f5a6, 0x1f5a7, 0x0041},  {0x1f5a9, 0x1f5b0, 0x0041},  {0x1f5b3, 0x1f5bb, 0x0041},
    {0x1f5bd, 0x1f5c1, 0x0041},  {0x1f5c5, 0x1f5d0, 0x0041},  {0x1f5d4, 0x1f5db, 0x0041},
    {0x1f5df, 0x1f5e0, 0x0041},  {0x1f5e2, 0x1f5e2, 0x0041},  {0x1f5e4, 0x1f5e7, 0x0041},
    {0x1f5e9, 0x1f5ee, 0x0041},  {0x1f5f0, 0x1f5f2, 0x0041},  {0x1f5f4, 0x1f5f9, 0x0041},
    {0x1f6c6, 0x1f6ca, 0x0041},  {0x1f6d3, 0x1f6d4, 0x0041},  {0x1f6d8, 0x1f6db, 0x1f600},
    {0x1f6e6, 0x1f6e8, 0x0041},  {0x1f6ea, 0x1f6ea, 0x0041},  {0x1f6ed, 0x1f6ef, 0x1f600},
    {0x1f6f1, 0x1f6f2, 0x0041},  {0x1f6fd, 0x1f6ff, 0x1f600}, {0x1f774, 0x1f776, 0x0041},
    {0x1f77b, 0x1f77f, 0x0041},  {0x1f7d5, 0x1f7d9, 0x0041},  {0x1f7da, 0x1f7df, 0x1f600},
    {0x1f7ec, 0x1f7ef, 0x1f600}, {0x1f7f1, 0x1f7ff, 0x1f600}, {0x1f80c, 0x1f80f, 0x1f600},
    {0x1f848, 0x1f84f, 0x1f600}, {0x1f85a, 0x1f85f, 0x1f600}, {0x1f888, 0x1f88f, 0x1f600},
    {0x1f8ae, 0x1f8af, 0x1f600}, {0x1f8b0, 0x1f8b1, 0x0041},  {0x1f8bc, 0x1f8bf, 0x1f600},
    {0x1f8c2, 0x1f8cf, 0x1f600}, {0x1f8d9, 0x1f8ff, 0x1f600}, {0x1fa00, 0x1fa53, 0x0041},
    {0x1fa58, 0x1fa5f, 0x1f600}, {0x1fa60, 0x1fa6d, 0x0041},  {0x1fa6e, 0x1fa6f, 0x1f600},
    {0x1fa7d, 0x1fa7f, 0x1f600}, {0x1fa89, 0x1fa8f, 0x1f600}, {0x1fabe, 0x1fabe, 0x1f600},
    {0x1fac6, 0x1facd, 0x1f600}, {0x1fadc, 0x1fadf, 0x1f600}, {0x1fae9, 0x1faef, 0x1f600},
    {0x1faf9, 0x1faff, 0x1f600}, {0x1fc00, 0x1fffd, 0x1f600}, {0xe0000, 0xe0000, 0x0001},
    {0xe0002, 0xe001f, 0x0001},  {0xe0080, 0xe00ff, 0x0001},  {0xe01f0, 0xe0fff, 0x0001},
};
/* Indic_Conjunct_Break=Consonant and =Linker (Unicode 17.0; utf8proc 2.8 has no rule GB9c). */
static const cp_range INCB_CONSONANT[] = {
    {0x0915, 0x0939},   {0x0958, 0x095f},   {0x0978, 0x097f},   {0x0995, 0x09a8},   {0x09aa, 0x09b0},
    {0x09b2, 0x09b2},   {0x09b6, 0x09b9},   {0x09dc, 0x09dd},   {0x09df, 0x09df},   {0x09f0, 0x09f1},
    {0x0a95, 0x0aa8},   {0x0aaa, 0x0ab0},   {0x0ab2, 0x0ab3},   {0x0ab5, 0x0ab9},   {0x0af9, 0x0af9},
    {0x0b15, 0x0b28},   {0x0b2a, 0x0b30},   {0x0b32, 0x0b33},   {0x0b35, 0x0b39},   {0x0b5c, 0x0b5d},
    {0x0b5f, 0x0b5f},   {0x0b71, 0x0b71},   {0x0c15, 0x0c28},   {0x0c2a, 0x0c39},   {0x0c58, 0x0c5a},
    {0x0d15, 0x0d3a},   {0x1000, 0x102a},   {0x103f, 0x103f},   {0x1050, 0x1055},   {0x105a, 0x105d},
    {0x1061, 0x1061},   {0x1065, 0x1066},   {0x106e, 0x1070},   {0x1075, 0x1081},   {0x108e, 0x108e},
    {0x1780, 0x17b3},   {0x1a20, 0x1a54},   {0x1b0b, 0x1b0c},   {0x1b13, 0x1b33},   {0x1b45, 0x1b4c},
    {0x1b83, 0x1ba0},   {0x1bae, 0x1baf},   {0x1bbb, 0x1bbd},   {0xa989, 0xa98b},   {0xa98f, 0xa9b2},
    {0xa9e0, 0xa9e4},   {0xa9e7, 0xa9ef},   {0xa9fa, 0xa9fe},   {0xaa60, 0xaa6f},   {0xaa71, 0xaa73},
    {0xaa7a, 0xaa7a},   {0xaa7e, 0xaa7f},   {0xaae0, 0xaaea},   {0xabc0, 0xabda},   {0x10a00, 0x10a00},
    {0x10a10, 0x10a13}, {0x10a15, 0x10a17}, {0x10a19, 0x10a35}, {0x11103, 0x11126}, {0x11144, 0x11144},
    {0x11147, 0x11147}, {0x11380, 0x11389}, {0x1138b, 0x1138b}, {0x1138e, 0x1138e}, {0x11390, 0x113b5},
    {0x11900, 0x11906}, {0x11909, 0x11909}, {0x1190c, 0x11913}, {0x11915, 0x11916}, {0x11918, 0x1192f},
    {0x11a00, 0x11a00}, {0x11a0b, 0x11a32}, {0x11a50, 0x11a50}, {0x11a5c, 0x11a83}, {0x11f04, 0x11f10},
    {0x11f12, 0x11f33},
};
static const uint32_t INCB_LINKER[] = {0x094d,  0x09cd,  0x0acd,  0x0b4d,  0x0c4d,  0x0d4d, 0x1039,
                                       0x17d2,  0x1a60,  0x1b44,  0x1bab,  0xa9c0,  0xaaf6, 0x10a3f,
                                       0x11133, 0x113d0, 0x1193e, 0x11a47, 0x11a99, 0x11f42};

static bool in_ranges(const cp_range *ranges, size_t n, uint32_t c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c < ranges[mid].lo)
      hi = mid;
    else if (c > ranges[mid].hi)
      lo = mid + 1;
    else
      return true;
  }
  return false;
}
#define IN_TABLE(table, c) in_ranges(table, sizeof table / sizeof *table, c)

static bool is_mn(uint32_t c) {
  return (utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN) != IN_TABLE(MN_FLIP, c);
}

static bool is_mark(uint32_t c) {
  utf8proc_category_t category = utf8proc_category((utf8proc_int32_t)c);
  bool mark = category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC ||
              category == UTF8PROC_CATEGORY_ME;
  return mark != IN_TABLE(MARK_FLIP, c);
}

/* BertNormalizer's control test: Cc, Cf or Co, except tab, newline and carriage return. */
static bool is_bert_control(uint32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  utf8proc_category_t category = utf8proc_category((utf8proc_int32_t)c);
  return category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CO || IN_TABLE(FORMAT_8, c);
}

static bool is_chinese(uint32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
         (c >= 0x2a700 && c <= 0x2b73f) || (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
         (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* Rust's char::to_lowercase: one code point, or two for U+0130 (the only full mapping of two). */
static size_t to_lower(uint32_t c, uint32_t out[2]) {
  if (c == 0x130) {
    out[0] = 'i', out[1] = 0x307;
    return 2;
  }
  if (c >= 0x1c89)
    for (size_t i = 0; i < sizeof LOWER_ADDED / sizeof *LOWER_ADDED; i++)
      if (c >= LOWER_ADDED[i].lo && c <= LOWER_ADDED[i].hi) {
        out[0] = LOWER_ADDED[i].to != 0 ? LOWER_ADDED[i].to : (uint32_t)((int32_t)c + LOWER_ADDED[i].delta);
        return 1;
      }
  out[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
  return 1;
}

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR,
                  "out of memory while normalizing; free memory or shorten the text");
}

/* ---- the steps ---- */

typedef enum {
  BERT,
  PRECOMPILED,
  REPLACE,
  NFC,
  NFD,
  NFKC,
  NFKD,
  STRIP,
  STRIP_ACCENTS,
  LOWERCASE,
  PREPEND,
  NMT,
  BYTE_LEVEL
} step_kind;

typedef struct {
  step_kind kind;
  bool clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
  bool left, right;                                   /* Strip */
  char *text;                                         /* Prepend's string, Replace's content */
  char *literal;                                      /* Replace {"String": ...} */
  oxf_regex *regex;                                   /* Replace {"Regex": ...} */
  uint32_t *trie;                                     /* Precompiled: the double array ... */
  size_t trie_n;
  char *replacements; /* ... and the NUL-separated normalized strings its leaves point into */
  size_t replacements_n;
} step;

struct oxf_normalizer {
  step *steps;
  size_t n;
};

/* A growable list of code points; a normalization form keeps each one's combining class in bits 24-31. */
typedef struct {
  uint32_t *items;
  size_t n, cap;
} cp_list;

static int cps_add(cp_list *list, uint32_t value, oxf_error *err) {
  if (list->n == list->cap) {
    size_t cap = list->cap < 64 ? 64 : list->cap;
    if (cap > SIZE_MAX / 2 / sizeof *list->items) return out_of_memory(err);
    uint32_t *bigger = realloc(list->items, cap * 2 * sizeof *list->items);
    if (bigger == NULL) return out_of_memory(err);
    list->items = bigger;
    list->cap = cap * 2;
  }
  list->items[list->n++] = value;
  return 0;
}

/* ---- NFD, NFKD, NFC, NFKC (Unicode 9.0) ---- */

#define CLASS(v) ((v) >> 24)
#define CODE(v) ((v)&0xffffff)

static bool norm_known(uint32_t c) {
  return !IN_TABLE(NORM_UNKNOWN, c);
}

static uint32_t with_class(uint32_t c) {
  uint32_t ccc = norm_known(c) ? (uint32_t)utf8proc_get_property((utf8proc_int32_t)c)->combining_class : 0;
  return ccc << 24 | c;
}

/* Sort each run of non-starters by combining class, keeping the text's order within a class (canonical
 * ordering); a counting sort for long runs, so that a run of 100,000 marks stays linear. */
static int reorder(cp_list *list, oxf_error *err) {
  uint32_t *scratch = NULL;
  for (size_t i = 0; i < list->n;) {
    if (CLASS(list->items[i]) == 0) {
      i++;
      continue;
    }
    size_t end = i;
    while (end < list->n && CLASS(list->items[end]) != 0) end++;
    uint32_t *run = list->items + i;
    size_t len = end - i;
    if (len <= 32) {
      for (size_t k = 1; k < len; k++) {
        uint32_t v = run[k];
        size_t j = k;
        for (; j > 0 && CLASS(run[j - 1]) > CLASS(v); j--) run[j] = run[j - 1];
        run[j] = v;
      }
    } else {
      size_t start[257] = {0};
      if (scratch == NULL && (scratch = malloc(list->n * sizeof *scratch)) == NULL) return out_of_memory(err);
      for (size_t k = 0; k < len; k++) start[CLASS(run[k]) + 1]++;
      for (size_t c = 1; c <= 256; c++) start[c] += start[c - 1];
      for (size_t k = 0; k < len; k++) scratch[start[CLASS(run[k])]++] = run[k];
      memcpy(run, scratch, len * sizeof *run);
    }
    i = end;
  }
  free(scratch);
  return 0;
}

/* The primary composite of a starter and the next code point, if any (0 when none). */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= 0x1100 && a < 0x1100 + 19 && b >= 0x1161 && b < 0x1161 + 21)
    return 0xac00 + ((a - 0x1100) * 21 + (b - 0x1161)) * 28;
  if (a >= 0xac00 && a < 0xac00 + 11172)
    return (a - 0xac00) % 28 == 0 && b > 0x11a7 && b < 0x11a7 + 28 ? a + (b - 0x11a7) : 0;
  if (a >= 0x1100 && a < 0x1100 + 19) return 0; /* (utf8proc 2.8 would also compose LV + U+11A7) */
  if (!norm_known(a) || !norm_known(b)) return 0;
  utf8proc_int32_t pair[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
  if (utf8proc_normalize_utf32(pair, 2, UTF8PROC_COMPOSE | UTF8PROC_STABLE) != 1) return 0;
  return norm_known((uint32_t)pair[0]) ? (uint32_t)pair[0] : 0;
}

/* Canonical composition in place, as the library's recomposition iterates: the last starter takes each
 * following code point it composes with unless a code point in between has a class as high or is a starter.
 */
static void compose(cp_list *list) {
  size_t w = 0, starter = 0;
  bool have_starter = false;
  uint32_t last_class = 0; /* 0: nothing left between the starter and the next code point */
  for (size_t r = 0; r < list->n; r++) {
    uint32_t v = list->items[r], class = CLASS(v);
    if (have_starter && (last_class == 0 || last_class < class)) {
      uint32_t composite = compose_pair(CODE(list->items[starter]), CODE(v));
      if (composite != 0) {
        list->items[starter] = with_class(composite);
        continue;
      }
    }
    list->items[w] = v;
    if (class == 0) {
      have_starter = true, starter = w, last_class = 0;
    } else if (have_starter) {
      last_class = class;
    }
    w++;
  }
  list->n = w;
}

static int unicode_form(const char *text, size_t n, bool compat, bool composed, oxf_str *out,
                        oxf_error *err) {
  cp_list list = {0};
  int status = -1;
  utf8proc_option_t options = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
  for (size_t at = 0; at < n;) {
    uint32_t c = oxf_utf8_next(text, &at);
    utf8proc_int32_t parts[32];
    utf8proc_ssize_t k = 1;
    parts[0] = (utf8proc_int32_t)c;
    if (norm_known(c)) {
      utf8proc_int32_t bound = 0;
      k = utf8proc_decompose_char((utf8proc_int32_t)c, parts, 32, options, &bound);
      if (k < 1 || k > 32) {
        oxf_fail(err, OXF_INPUT_ERROR, "U+%04X cannot be decomposed: %s", c, utf8proc_errmsg(k));
        goto done;
      }
    }
    for (utf8proc_ssize_t i = 0; i < k; i++)
      if (cps_add(&list, with_class((uint32_t)parts[i]), err) != 0) goto done;
  }
  if (reorder(&list, err) != 0) goto done;
  if (composed) compose(&list);
  for (size_t i = 0; i < list.n; i++)
    if (oxf_str_add_char(out, CODE(list.items[i]), err) != 0) goto done;
  status = 0;
done:
  free(list.items);
  return status;
}

/* ---- Precompiled: SentencePiece's double-array trie of UTF-8 keys ---- */

/* The value of the shortest key that is a prefix of key[0..n) (up to a NUL byte), as spm_precompiled's
 * common_prefix_search()[0]: 1 with *value, 0 when none, -1 when the trie points outside itself (the library
 * panics there; every node the key reaches is checked, as the library reads them). */
static int trie_prefix(const step *s, const uint8_t *key, size_t n, uint32_t *value, oxf_error *err) {
  int found = 0;
  size_t pos = 0;
  if (s->trie_n == 0) goto broken;
  uint32_t unit = s->trie[0];
#define OFFSET(u) ((size_t)((u) >> 10) << (((u) & (1u << 9)) >> 6))
  pos ^= OFFSET(unit);
  for (size_t i = 0; i < n && key[i] != 0; i++) {
    pos ^= key[i];
    if (pos >= s->trie_n) goto broken;
    unit = s->trie[pos];
    if ((unit & (0x80000000u | 0xff)) != key[i]) break;
    pos ^= OFFSET(unit);
    if (unit >> 8 & 1) {
      if (pos >= s->trie_n) goto broken;
      if (!found) *value = s->trie[pos] & 0x7fffffff, found = 1;
    }
  }
#undef OFFSET
  return found;
broken:
  return oxf_fail(err, OXF_MANIFEST_ERROR,
                  "tokenizer.json normalizer Precompiled: the precompiled_charsmap trie is broken (it points "
                  "past its end); re-export the folder");
}

/* Append the replacement of key[0..n) when the trie has one: 1 if so, 0 if not. */
static int precompiled_put(const step *s, const char *key, size_t n, oxf_str *out, oxf_error *err) {
  uint32_t index = 0;
  int found = trie_prefix(s, (const uint8_t *)key, n, &index, err);
  if (found <= 0) return found;
  if (index > s->replacements_n ||
      (index < s->replacements_n && ((uint8_t)s->replacements[index] & 0xc0) == 0x80))
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "tokenizer.json normalizer Precompiled: the precompiled_charsmap points outside its strings; "
        "re-export the folder");
  const char *start = s->replacements + index;
  const char *nul = memchr(start, 0, s->replacements_n - index);
  size_t len = nul != NULL ? (size_t)(nul - start) : s->replacements_n - index;
  return oxf_str_add(out, start, len, err) != 0 ? -1 : 1;
}

/* utf8proc's stand-in for c in grapheme breaking (so that the classes are unicode-segmentation's). */
static utf8proc_int32_t grapheme_as(uint32_t c) {
  size_t lo = 0, hi = sizeof GRAPHEME_AS / sizeof *GRAPHEME_AS;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c < GRAPHEME_AS[mid].lo)
      hi = mid;
    else if (c > GRAPHEME_AS[mid].hi)
      lo = mid + 1;
    else
      return (utf8proc_int32_t)GRAPHEME_AS[mid].as;
  }
  return (utf8proc_int32_t)c;
}

static bool is_linker(uint32_t c) {
  for (size_t i = 0; i < sizeof INCB_LINKER / sizeof *INCB_LINKER; i++)
    if (INCB_LINKER[i] == c) return true;
  return false;
}

/* Indic_Conjunct_Break=Extend: Extend and ZWJ but the linkers and U+200C. */
static bool is_incb_extend(uint32_t c) {
  if (c == 0x200c || c == 0x200d) return c == 0x200d;
  const utf8proc_property_t *p = utf8proc_get_property(grapheme_as(c));
  return p->boundclass == UTF8PROC_BOUNDCLASS_EXTEND && !is_linker(c);
}

/* One grapheme cluster: replaced whole, when under 6 bytes and the trie has a prefix of it (the rest of the
 * cluster is then dropped, as SentencePiece does), or else code point by code point. */
static int precompiled_cluster(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  int done = n < 6 ? precompiled_put(s, text, n, out, err) : 0;
  for (size_t at = 0; done == 0 && at < n;) {
    size_t next = at;
    oxf_utf8_next(text, &next);
    int put = precompiled_put(s, text + at, next - at, out, err);
    if (put < 0 || (put == 0 && oxf_str_add(out, text + at, next - at, err) != 0)) return -1;
    at = next;
  }
  return done < 0 ? -1 : 0;
}

static int precompiled(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  if (n == 0) return 0;
  size_t start = 0, at = 0;
  utf8proc_int32_t state = 0;
  int conjunct = 0; /* rule GB9c: 1 after an InCB consonant (and Extends), 2 once a linker followed it */
  uint32_t prev = 0;
  for (bool first = true; at < n; first = false) {
    size_t here = at;
    uint32_t c = oxf_utf8_next(text, &at);
    bool boundary = false;
    if (!first) {
      boundary = utf8proc_grapheme_break_stateful(grapheme_as(prev), grapheme_as(c), &state);
      if (boundary && conjunct == 2 && IN_TABLE(INCB_CONSONANT, c)) boundary = false;
    }
    if (IN_TABLE(INCB_CONSONANT, c))
      conjunct = 1;
    else if (conjunct != 0 && is_linker(c))
      conjunct = 2;
    else if (!is_incb_extend(c))
      conjunct = 0;
    prev = c;
    if (boundary) {
      if (precompiled_cluster(s, text + start, here - start, out, err) != 0) return -1;
      start = here;
    }
  }
  return precompiled_cluster(s, text + start, n - start, out, err);
}

/* ---- Replace ---- */

/* The next match at or after `from`, as for oxf_regex_find. A {"String": ...} pattern is matched literally
 * (the library escapes it into a regular expression, which matches the same places). */
static int find_next(const step *s, const char *text, size_t n, size_t from, size_t *start, size_t *end,
                     oxf_error *err) {
  if (s->regex != NULL) return oxf_regex_find(s->regex, text, n, from, start, end, err);
  size_t len = strlen(s->literal);
  const char *hit = len == 0          ? text + from
                    : len <= n - from ? memmem(text + from, n - from, s->literal, len)
                                      : NULL;
  if (hit == NULL) return 0;
  *start = (size_t)(hit - text), *end = *start + len;
  return 1;
}

/* Matches as the Oniguruma binding iterates them: an empty match right where the previous match ended is
 * skipped by one code point; an empty text has no match at all. */
static int replace(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  size_t copied = 0, from = 0, last_end = 0;
  bool matched = false;
  while (n > 0 && from <= n) {
    size_t start, end;
    int found = find_next(s, text, n, from, &start, &end, err);
    if (found < 0) return -1;
    if (found == 0) break;
    if (start == end && matched && end == last_end) {
      if (from < n)
        oxf_utf8_next(text, &from);
      else
        from = n + 1;
      continue;
    }
    if (oxf_str_add(out, text + copied, start - copied, err) != 0 ||
        oxf_str_add(out, s->text, strlen(s->text), err) != 0)
      return -1;
    copied = from = last_end = end;
    matched = true;
  }
  return oxf_str_add(out, text + copied, n - copied, err);
}

/* ---- the per-code-point steps ---- */

static int bert(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  oxf_str cleaned = {0}, decomposed = {0};
  int status = -1;
  for (size_t at = 0; at < n;) {
    uint32_t c = oxf_utf8_next(text, &at);
    if (s->clean_text) {
      if (c == 0 || c == 0xfffd || is_bert_control(c)) continue;
      if (c == '\t' || c == '\n' || c == '\r' || oxf_is_whitespace(c)) c = ' ';
    }
    bool spaced = s->chinese && is_chinese(c);
    if ((spaced && oxf_str_add(&cleaned, " ", 1, err) != 0) || oxf_str_add_char(&cleaned, c, err) != 0 ||
        (spaced && oxf_str_add(&cleaned, " ", 1, err) != 0))
      goto done;
  }
  const oxf_str *source = &cleaned;
  if (s->strip_accents) {
    if (unicode_form(cleaned.data, cleaned.len, false, false, &decomposed, err) != 0) goto done;
    source = &decomposed;
  }
  for (size_t at = 0; at < source->len;) {
    uint32_t c = oxf_utf8_next(source->data, &at), lower[2];
    if (s->strip_accents && is_mn(c)) continue;
    size_t k = s->lowercase ? to_lower(c, lower) : (lower[0] = c, 1);
    for (size_t i = 0; i < k; i++)
      if (oxf_str_add_char(out, lower[i], err) != 0) goto done;
  }
  status = 0;
done:
  oxf_str_free(&cleaned);
  oxf_str_free(&decomposed);
  return status;
}

static int strip(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  size_t start = 0, end = n;
  if (s->left)
    for (size_t at = 0; at < n;) {
      if (!oxf_is_whitespace(oxf_utf8_next(text, &at))) break;
      start = at;
    }
  if (s->right)
    while (end > start) {
      size_t back = end - 1;
      while (back > start && ((uint8_t)text[back] & 0xc0) == 0x80) back--;
      size_t at = back;
      if (!oxf_is_whitespace(oxf_utf8_next(text, &at))) break;
      end = back;
    }
  return oxf_str_add(out, text + start, end - start, err);
}

/* SentencePiece's NMT rules: control characters dropped, some spaces and separators made a space. */
static int nmt(const char *text, size_t n, oxf_str *out, oxf_error *err) {
  for (size_t at = 0; at < n;) {
    uint32_t c = oxf_utf8_next(text, &at);
    if ((c >= 1 && c <= 8) || c == 0x0b || (c >= 0x0e && c <= 0x1f) || c == 0x7f || c == 0x8f || c == 0x9f)
      continue;
    if (c == '\t' || c == '\n' || c == 0x0c || c == '\r' || c == 0x1680 || (c >= 0x200b && c <= 0x200f) ||
        c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xfeff || c == 0xfffd)
      c = ' ';
    if (oxf_str_add_char(out, c, err) != 0) return -1;
  }
  return 0;
}

/* GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others for U+0100 on. */
static int byte_level(const char *text, size_t n, oxf_str *out, oxf_error *err) {
  for (size_t i = 0; i < n; i++) {
    uint32_t b = (uint8_t)text[i];
    uint32_t c = b <= 32 ? 256 + b : b >= 127 && b <= 160 ? b + 162 : b == 173 ? 323 : b;
    if (oxf_str_add_char(out, c, err) != 0) return -1;
  }
  return 0;
}

static int run_step(const step *s, const char *text, size_t n, oxf_str *out, oxf_error *err) {
  switch (s->kind) {
    case BERT: return bert(s, text, n, out, err);
    case PRECOMPILED: return precompiled(s, text, n, out, err);
    case REPLACE: return replace(s, text, n, out, err);
    case NFC: return unicode_form(text, n, false, true, out, err);
    case NFD: return unicode_form(text, n, false, false, out, err);
    case NFKC: return unicode_form(text, n, true, true, out, err);
    case NFKD: return unicode_form(text, n, true, false, out, err);
    case STRIP: return strip(s, text, n, out, err);
    case NMT: return nmt(text, n, out, err);
    case BYTE_LEVEL: return byte_level(text, n, out, err);
    case PREPEND:
      if (n > 0 && oxf_str_add(out, s->text, strlen(s->text), err) != 0) return -1;
      return oxf_str_add(out, text, n, err);
    case STRIP_ACCENTS:
    case LOWERCASE:
      for (size_t at = 0; at < n;) {
        uint32_t c = oxf_utf8_next(text, &at), lower[2];
        if (s->kind == STRIP_ACCENTS && is_mark(c)) continue;
        size_t k = s->kind == LOWERCASE ? to_lower(c, lower) : (lower[0] = c, 1);
        for (size_t i = 0; i < k; i++)
          if (oxf_str_add_char(out, lower[i], err) != 0) return -1;
      }
      return 0;
  }
  return 0;
}

int oxf_normalize(const oxf_normalizer *normalizer, const char *text, size_t n, oxf_str *out,
                  oxf_error *err) {
  oxf_str_clear(out);
  if (text == NULL) text = "", n = 0;
  if (normalizer == NULL || normalizer->n == 0) return oxf_str_add(out, text, n, err);
  oxf_str buffers[2] = {{0}, {0}};
  int status = 0;
  for (size_t i = 0; status == 0 && i < normalizer->n; i++) {
    oxf_str *into = i + 1 == normalizer->n ? out : &buffers[i % 2];
    oxf_str_clear(into);
    status = run_step(&normalizer->steps[i], text, n, into, err);
    if (status == 0) status = oxf_str_add(into, "", 0, err); /* never NULL data */
    text = into->data, n = into->len;
  }
  oxf_str_free(&buffers[0]);
  oxf_str_free(&buffers[1]);
  return status;
}

/* ---- reading tokenizer.json ---- */

#define KNOWN_TYPES                                                                                        \
  "BertNormalizer, Precompiled, Sequence, Replace, NFC, NFD, NFKC, NFKD, Strip, StripAccents, Lowercase, " \
  "Prepend, Nmt and ByteLevel"

static void free_step(step *s) {
  free(s->text);
  free(s->literal);
  oxf_regex_free(s->regex);
  free(s->trie);
  free(s->replacements);
}

void oxf_normalizer_free(oxf_normalizer *normalizer) {
  if (normalizer == NULL) return;
  for (size_t i = 0; i < normalizer->n; i++) free_step(&normalizer->steps[i]);
  free(normalizer->steps);
  free(normalizer);
}

/* A member the library requires (it refuses the file without it), of cJSON type `kind`. */
static const cJSON *required(const cJSON *object, const char *key, int kind, const char *type,
                             const char *what, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  if (item == NULL || (item->type & 0xff) != kind) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "tokenizer.json normalizer %s needs \"%s\" (%s); re-export the folder",
             type, key, what);
    return NULL;
  }
  return item;
}

static int required_bool(const cJSON *object, const char *key, const char *type, bool *value,
                         oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  if (!cJSON_IsBool(item))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json normalizer %s needs \"%s\" (true or false); re-export the folder", type,
                    key);
  *value = cJSON_IsTrue(item);
  return 0;
}

static int copy_string(const char *text, char **copy, oxf_error *err) {
  *copy = strdup(text);
  return *copy == NULL ? out_of_memory(err) : 0;
}

static int base64_digit(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* Standard base64 with its padding, as the library's decoder requires (no stray bits in the last digit). */
static int base64_decode(const char *text, uint8_t **bytes, size_t *n) {
  size_t len = strlen(text), pad = 0;
  if (len % 4 != 0) return -1;
  while (pad < 2 && pad < len && text[len - 1 - pad] == '=') pad++;
  *n = len / 4 * 3 - pad;
  *bytes = malloc(*n + 1);
  if (*bytes == NULL) return -2;
  uint32_t bits = 0;
  for (size_t i = 0; i < len - pad; i++) {
    int digit = base64_digit(text[i]);
    if (digit < 0) return -1;
    bits = bits << 6 | (uint32_t)digit;
    if (i % 4 == 3) {
      (*bytes)[i / 4 * 3] = (uint8_t)(bits >> 16), (*bytes)[i / 4 * 3 + 1] = (uint8_t)(bits >> 8);
      (*bytes)[i / 4 * 3 + 2] = (uint8_t)bits, bits = 0;
    }
  }
  size_t at = (len - pad) / 4 * 3;
  if (pad == 2) {
    if (bits & 0xf) return -1;
    (*bytes)[at] = (uint8_t)(bits >> 4);
  } else if (pad == 1) {
    if (bits & 0x3) return -1;
    (*bytes)[at] = (uint8_t)(bits >> 10), (*bytes)[at + 1] = (uint8_t)(bits >> 2);
  }
  return 0;
}

/* precompiled_charsmap: base64 of [u32 trie size in bytes][trie of u32 units][normalized strings (UTF-8)]. */
static int parse_precompiled(const cJSON *json, step *s, oxf_error *err) {
  const cJSON *item = required(json, "precompiled_charsmap", cJSON_String, "Precompiled", "base64", err);
  if (item == NULL) return -1;
  uint8_t *bytes = NULL;
  size_t n = 0;
  int decoded = base64_decode(item->valuestring, &bytes, &n);
  int status = -1;
  const char *problem = NULL;
  if (decoded == -2) {
    status = out_of_memory(err);
    goto done;
  }
  uint32_t trie_size = 0;
  if (decoded == 0 && n >= 4)
    trie_size =
        (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
  s->trie_n = trie_size / 4;
  if (decoded != 0)
    problem = "is not base64";
  else if (n < 4 || s->trie_n > (n - 4) / 4)
    problem = "is shorter than its trie";
  else if (s->trie_n == 0)
    problem = "has an empty trie";
  else if (!oxf_valid_utf8(bytes + 4 + s->trie_n * 4, n - 4 - s->trie_n * 4))
    problem = "has normalized strings that are not UTF-8";
  if (problem != NULL) {
    status = oxf_fail(err, OXF_MANIFEST_ERROR,
                      "tokenizer.json normalizer Precompiled: precompiled_charsmap %s; re-export the folder",
                      problem);
    goto done;
  }
  s->replacements_n = n - 4 - s->trie_n * 4;
  s->trie = malloc(s->trie_n * sizeof *s->trie);
  s->replacements = malloc(s->replacements_n + 1);
  if (s->trie == NULL || s->replacements == NULL) {
    status = out_of_memory(err);
    goto done;
  }
  for (size_t i = 0; i < s->trie_n; i++) {
    const uint8_t *p = bytes + 4 + 4 * i;
    s->trie[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  }
  memcpy(s->replacements, bytes + 4 + s->trie_n * 4, s->replacements_n);
  s->replacements[s->replacements_n] = '\0';
  status = 0;
done:
  free(bytes);
  return status;
}

static int parse_replace(const cJSON *json, step *s, oxf_error *err) {
  const cJSON *pattern =
      required(json, "pattern", cJSON_Object, "Replace", "{\"String\": ...} or {\"Regex\": ...}", err);
  const cJSON *content =
      pattern == NULL ? NULL : required(json, "content", cJSON_String, "Replace", "a string", err);
  if (content == NULL) return -1;
  const cJSON *only = pattern->child;
  if (only == NULL || only->next != NULL || !cJSON_IsString(only) ||
      (strcmp(only->string, "String") != 0 && strcmp(only->string, "Regex") != 0))
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "tokenizer.json normalizer Replace \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}; "
        "re-export the folder");
  if (copy_string(content->valuestring, &s->text, err) != 0) return -1;
  if (strcmp(only->string, "String") == 0) return copy_string(only->valuestring, &s->literal, err);
  return oxf_regex_compile(only->valuestring, false, &s->regex, "normalizer Replace", err);
}

static int parse_fields(const cJSON *json, const char *type, step *s, oxf_error *err) {
  static const struct {
    const char *name;
    step_kind kind;
  } PLAIN[] = {{"NFC", NFC},
               {"NFD", NFD},
               {"NFKC", NFKC},
               {"NFKD", NFKD},
               {"Lowercase", LOWERCASE},
               {"StripAccents", STRIP_ACCENTS},
               {"Nmt", NMT},
               {"ByteLevel", BYTE_LEVEL}};
  for (size_t i = 0; i < sizeof PLAIN / sizeof *PLAIN; i++)
    if (strcmp(type, PLAIN[i].name) == 0) {
      s->kind = PLAIN[i].kind;
      return 0;
    }
  if (strcmp(type, "BertNormalizer") == 0 || strcmp(type, "Bert") == 0) {
    s->kind = BERT;
    const cJSON *accents = cJSON_GetObjectItemCaseSensitive(json, "strip_accents");
    if (required_bool(json, "clean_text", "BertNormalizer", &s->clean_text, err) != 0 ||
        required_bool(json, "handle_chinese_chars", "BertNormalizer", &s->chinese, err) != 0 ||
        required_bool(json, "lowercase", "BertNormalizer", &s->lowercase, err) != 0)
      return -1;
    if (accents != NULL && !cJSON_IsNull(accents) && !cJSON_IsBool(accents))
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "tokenizer.json normalizer BertNormalizer \"strip_accents\" must be true, false or null; "
          "re-export the folder");
    /* null: accents are stripped when the text is lowercased */
    s->strip_accents = accents == NULL || cJSON_IsNull(accents) ? s->lowercase : cJSON_IsTrue(accents);
    return 0;
  }
  if (strcmp(type, "Strip") == 0) {
    s->kind = STRIP;
    if (required_bool(json, "strip_left", "Strip", &s->left, err) != 0) return -1;
    return required_bool(json, "strip_right", "Strip", &s->right, err);
  }
  if (strcmp(type, "Prepend") == 0) {
    s->kind = PREPEND;
    const cJSON *prepend = required(json, "prepend", cJSON_String, "Prepend", "a string", err);
    return prepend == NULL ? -1 : copy_string(prepend->valuestring, &s->text, err);
  }
  if (strcmp(type, "Replace") == 0) {
    s->kind = REPLACE;
    return parse_replace(json, s, err);
  }
  if (strcmp(type, "Precompiled") == 0) {
    s->kind = PRECOMPILED;
    return parse_precompiled(json, s, err);
  }
  return oxf_tok_unknown("normalizer", type, KNOWN_TYPES, err);
}

/* Append the steps of one normalizer object. */
static int parse_step(const cJSON *json, oxf_normalizer *normalizer, oxf_error *err) {
  if (!cJSON_IsObject(json))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json \"normalizer\" must be an object or null; re-export the folder");
  const cJSON *type_item = cJSON_GetObjectItemCaseSensitive(json, "type");
  const char *type;
  if (type_item == NULL) {
    /* the library's older untagged form: a BertNormalizer or a Strip is recognized by its fields */
    type = cJSON_HasObjectItem(json, "clean_text")   ? "BertNormalizer"
           : cJSON_HasObjectItem(json, "strip_left") ? "Strip"
                                                     : NULL;
    if (type == NULL)
      return oxf_fail(err, OXF_MANIFEST_ERROR,
                      "tokenizer.json has a normalizer without a \"type\"; re-export the folder");
  } else if (cJSON_IsString(type_item)) {
    type = type_item->valuestring;
  } else {
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json normalizer \"type\" must be a string; re-export the folder");
  }
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = required(json, "normalizers", cJSON_Array, "Sequence", "a list", err), *item;
    if (list == NULL) return -1;
    /* a Sequence's steps become the parent's; the depth is bounded by the JSON reader's nesting limit */
    cJSON_ArrayForEach(item, list) if (parse_step(item, normalizer, err) != 0) return -1;
    return 0;
  }
  step s = {0};
  if (parse_fields(json, type, &s, err) != 0) {
    free_step(&s);
    return -1;
  }
  if (normalizer->n % 8 == 0) {
    step *bigger = realloc(normalizer->steps, (normalizer->n + 8) * sizeof *bigger);
    if (bigger == NULL) {
      free_step(&s);
      return out_of_memory(err);
    }
    normalizer->steps = bigger;
  }
  normalizer->steps[normalizer->n++] = s;
  return 0;
}

int oxf_normalizer_parse(const cJSON *json, oxf_normalizer **out, oxf_error *err) {
  *out = NULL;
  if (json == NULL || cJSON_IsNull(json)) return 0;
  oxf_normalizer *normalizer = calloc(1, sizeof *normalizer);
  if (normalizer == NULL) return out_of_memory(err);
  if (parse_step(json, normalizer, err) != 0) {
    oxf_normalizer_free(normalizer);
    return -1;
  }
  *out = normalizer;
  return 0;
}
