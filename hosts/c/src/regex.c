/* tokenizer.json regular expressions over PCRE2. The `tokenizers` library compiles a {"Regex": ...} pattern
 * with Oniguruma 6.9.10 (Ruby syntax, UTF-8, Unicode 16), so each pattern is translated into a PCRE2 pattern
 * that matches the same text: \s, \w, \d, \h and \b become explicit classes with Oniguruma's meaning, \p{..}
 * gets the code points Unicode 15 and 16 assigned (PCRE2 10.42 knows Unicode 14), an isolated (?i) covers the
 * rest of its group as in Oniguruma, (?m) is dot-all. A construct the two engines read differently and that
 * cannot be rewritten exactly is refused by name. {"String": ...} patterns are literal (PCRE2_LITERAL). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

struct oxf_regex {
  pcre2_code *code;
  pcre2_match_data *match; /* reused: a tokenizer runs on one thread at a time */
};

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR,
                  "out of memory while compiling a regular expression; free memory");
}

/* ---- Unicode general categories as Oniguruma 6.9.10 (Unicode 16) has them ---- */

/* clang-format off */
enum { LU, LL, LT, LM, LO, MN, MC, ME, ND, NL, NO, PC, PD, PS, PE, PI, PF, PO, SM, SC, SK, SO, ZS, ZL, ZP,
       CC, CF, CS, CO, CN, N_CATEGORIES };
/* clang-format on */
#define BIT(c) ((uint32_t)1 << (c))
#define ALL_CATEGORIES (BIT(N_CATEGORIES) - 1)
static const char category_names[N_CATEGORIES][3] = {
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
static const struct {
  char name[2];
  uint32_t mask;
} category_groups[] = {{"L", BIT(LU) | BIT(LL) | BIT(LT) | BIT(LM) | BIT(LO)},
                       {"M", BIT(MN) | BIT(MC) | BIT(ME)},
                       {"N", BIT(ND) | BIT(NL) | BIT(NO)},
                       {"P", BIT(PC) | BIT(PD) | BIT(PS) | BIT(PE) | BIT(PI) | BIT(PF) | BIT(PO)},
                       {"S", BIT(SM) | BIT(SC) | BIT(SK) | BIT(SO)},
                       {"Z", BIT(ZS) | BIT(ZL) | BIT(ZP)},
                       {"C", BIT(CC) | BIT(CF) | BIT(CS) | BIT(CO) | BIT(CN)}};

/* Every code point whose category in Unicode 16 differs from PCRE2 10.42's Unicode 14 (measured over all code
 * points against the library): `now` is Oniguruma's, `before` PCRE2's. On a newer PCRE2 these are no-ops. */
/* clang-format off */
static const struct {
  uint32_t low, high;
  uint8_t now, before;
} recategorized[] = {
    {0x897, 0x897, MN, CN}, {0xCF3, 0xCF3, MC, CN}, {0xECE, 0xECE, MN, CN}, {0x1B4E, 0x1B4F, PO, CN},
    {0x1B7F, 0x1B7F, PO, CN}, {0x1C89, 0x1C89, LU, CN}, {0x1C8A, 0x1C8A, LL, CN}, {0x2427, 0x2429, SO, CN},
    {0x2FFC, 0x2FFF, SO, CN}, {0x31E4, 0x31E5, SO, CN}, {0x31EF, 0x31EF, SO, CN}, {0xA7CB, 0xA7CC, LU, CN},
    {0xA7CD, 0xA7CD, LL, CN}, {0xA7DA, 0xA7DA, LU, CN}, {0xA7DB, 0xA7DB, LL, CN}, {0xA7DC, 0xA7DC, LU, CN},
    {0x105C0, 0x105F3, LO, CN}, {0x10D40, 0x10D49, ND, CN}, {0x10D4A, 0x10D4D, LO, CN},
    {0x10D4E, 0x10D4E, LM, CN}, {0x10D4F, 0x10D4F, LO, CN}, {0x10D50, 0x10D65, LU, CN},
    {0x10D69, 0x10D6D, MN, CN}, {0x10D6E, 0x10D6E, PD, CN}, {0x10D6F, 0x10D6F, LM, CN},
    {0x10D70, 0x10D85, LL, CN}, {0x10D8E, 0x10D8F, SM, CN}, {0x10EC2, 0x10EC4, LO, CN},
    {0x10EFC, 0x10EFF, MN, CN}, {0x1123F, 0x11240, LO, CN}, {0x11241, 0x11241, MN, CN},
    {0x11380, 0x11389, LO, CN}, {0x1138B, 0x1138B, LO, CN}, {0x1138E, 0x1138E, LO, CN},
    {0x11390, 0x113B5, LO, CN}, {0x113B7, 0x113B7, LO, CN}, {0x113B8, 0x113BA, MC, CN},
    {0x113BB, 0x113C0, MN, CN}, {0x113C2, 0x113C2, MC, CN}, {0x113C5, 0x113C5, MC, CN},
    {0x113C7, 0x113CA, MC, CN}, {0x113CC, 0x113CD, MC, CN}, {0x113CE, 0x113CE, MN, CN},
    {0x113CF, 0x113CF, MC, CN}, {0x113D0, 0x113D0, MN, CN}, {0x113D1, 0x113D1, LO, CN},
    {0x113D2, 0x113D2, MN, CN}, {0x113D3, 0x113D3, LO, CN}, {0x113D4, 0x113D5, PO, CN},
    {0x113D7, 0x113D8, PO, CN}, {0x113E1, 0x113E2, MN, CN}, {0x116D0, 0x116E3, ND, CN},
    {0x1171E, 0x1171E, MC, MN}, {0x11B00, 0x11B09, PO, CN}, {0x11BC0, 0x11BE0, LO, CN},
    {0x11BE1, 0x11BE1, PO, CN}, {0x11BF0, 0x11BF9, ND, CN}, {0x11F00, 0x11F01, MN, CN},
    {0x11F02, 0x11F02, LO, CN}, {0x11F03, 0x11F03, MC, CN}, {0x11F04, 0x11F10, LO, CN},
    {0x11F12, 0x11F33, LO, CN}, {0x11F34, 0x11F35, MC, CN}, {0x11F36, 0x11F3A, MN, CN},
    {0x11F3E, 0x11F3F, MC, CN}, {0x11F40, 0x11F40, MN, CN}, {0x11F41, 0x11F41, MC, CN},
    {0x11F42, 0x11F42, MN, CN}, {0x11F43, 0x11F4F, PO, CN}, {0x11F50, 0x11F59, ND, CN},
    {0x11F5A, 0x11F5A, MN, CN}, {0x1342F, 0x1342F, LO, CN}, {0x13439, 0x1343F, CF, CN},
    {0x13440, 0x13440, MN, CN}, {0x13441, 0x13446, LO, CN}, {0x13447, 0x13455, MN, CN},
    {0x13460, 0x143FA, LO, CN}, {0x16100, 0x1611D, LO, CN}, {0x1611E, 0x16129, MN, CN},
    {0x1612A, 0x1612C, MC, CN}, {0x1612D, 0x1612F, MN, CN}, {0x16130, 0x16139, ND, CN},
    {0x16D40, 0x16D42, LM, CN}, {0x16D43, 0x16D6A, LO, CN}, {0x16D6B, 0x16D6C, LM, CN},
    {0x16D6D, 0x16D6F, PO, CN}, {0x16D70, 0x16D79, ND, CN}, {0x18CFF, 0x18CFF, LO, CN},
    {0x1B132, 0x1B132, LO, CN}, {0x1B155, 0x1B155, LO, CN}, {0x1CC00, 0x1CCEF, SO, CN},
    {0x1CCF0, 0x1CCF9, ND, CN}, {0x1CD00, 0x1CEB3, SO, CN}, {0x1D2C0, 0x1D2D3, NO, CN},
    {0x1DF25, 0x1DF2A, LL, CN}, {0x1E030, 0x1E06D, LM, CN}, {0x1E08F, 0x1E08F, MN, CN},
    {0x1E4D0, 0x1E4EA, LO, CN}, {0x1E4EB, 0x1E4EB, LM, CN}, {0x1E4EC, 0x1E4EF, MN, CN},
    {0x1E4F0, 0x1E4F9, ND, CN}, {0x1E5D0, 0x1E5ED, LO, CN}, {0x1E5EE, 0x1E5EF, MN, CN},
    {0x1E5F0, 0x1E5F0, LO, CN}, {0x1E5F1, 0x1E5FA, ND, CN}, {0x1E5FF, 0x1E5FF, PO, CN},
    {0x1F6DC, 0x1F6DC, SO, CN}, {0x1F774, 0x1F776, SO, CN}, {0x1F77B, 0x1F77F, SO, CN},
    {0x1F7D9, 0x1F7D9, SO, CN}, {0x1F8B2, 0x1F8BB, SO, CN}, {0x1F8C0, 0x1F8C1, SO, CN},
    {0x1FA75, 0x1FA77, SO, CN}, {0x1FA87, 0x1FA89, SO, CN}, {0x1FA8F, 0x1FA8F, SO, CN},
    {0x1FAAD, 0x1FAAF, SO, CN}, {0x1FABB, 0x1FABF, SO, CN}, {0x1FAC6, 0x1FAC6, SO, CN},
    {0x1FACE, 0x1FACF, SO, CN}, {0x1FADA, 0x1FADC, SO, CN}, {0x1FADF, 0x1FADF, SO, CN},
    {0x1FAE8, 0x1FAE9, SO, CN}, {0x1FAF7, 0x1FAF8, SO, CN}, {0x1FBCB, 0x1FBEF, SO, CN},
    {0x2B739, 0x2B739, LO, CN}, {0x2EBF0, 0x2EE5D, LO, CN}, {0x31350, 0x323AF, LO, CN}};
/* clang-format on */

/* Oniguruma's property names for the categories (compared without case, spaces, '_' and '-'). */
/* clang-format off */
static const struct {
  const char *name;
  const char *categories; /* category or group names, or "" for Any */
} property_names[] = {
    {"any", ""}, {"l", "L"}, {"letter", "L"}, {"lc", "Lu Ll Lt"}, {"casedletter", "Lu Ll Lt"},
    {"lu", "Lu"}, {"uppercaseletter", "Lu"}, {"ll", "Ll"}, {"lowercaseletter", "Ll"}, {"lt", "Lt"},
    {"titlecaseletter", "Lt"}, {"lm", "Lm"}, {"modifierletter", "Lm"}, {"lo", "Lo"}, {"otherletter", "Lo"},
    {"m", "M"}, {"mark", "M"}, {"combiningmark", "M"}, {"mn", "Mn"}, {"nonspacingmark", "Mn"}, {"mc", "Mc"},
    {"spacingmark", "Mc"}, {"me", "Me"}, {"enclosingmark", "Me"}, {"n", "N"}, {"number", "N"}, {"nd", "Nd"},
    {"decimalnumber", "Nd"}, {"nl", "Nl"}, {"letternumber", "Nl"}, {"no", "No"}, {"othernumber", "No"},
    {"p", "P"}, {"punctuation", "P"}, {"pc", "Pc"}, {"connectorpunctuation", "Pc"}, {"pd", "Pd"},
    {"dashpunctuation", "Pd"}, {"ps", "Ps"}, {"openpunctuation", "Ps"}, {"pe", "Pe"},
    {"closepunctuation", "Pe"}, {"pi", "Pi"}, {"initialpunctuation", "Pi"}, {"pf", "Pf"},
    {"finalpunctuation", "Pf"}, {"po", "Po"}, {"otherpunctuation", "Po"}, {"s", "S"}, {"symbol", "S"},
    {"sm", "Sm"}, {"mathsymbol", "Sm"}, {"sc", "Sc"}, {"currencysymbol", "Sc"}, {"sk", "Sk"},
    {"modifiersymbol", "Sk"}, {"so", "So"}, {"othersymbol", "So"}, {"z", "Z"}, {"separator", "Z"},
    {"zs", "Zs"}, {"spaceseparator", "Zs"}, {"zl", "Zl"}, {"lineseparator", "Zl"}, {"zp", "Zp"},
    {"paragraphseparator", "Zp"}, {"c", "C"}, {"other", "C"}, {"cc", "Cc"}, {"control", "Cc"}, {"cf", "Cf"},
    {"format", "Cf"}, {"cs", "Cs"}, {"surrogate", "Cs"}, {"co", "Co"}, {"privateuse", "Co"}, {"cn", "Cn"},
    {"unassigned", "Cn"}};
/* clang-format on */

/* Oniguruma's \s (White_Space) and the part of its \w that is not a category (No and So code points). */
#define SPACE_RANGES                                                                                       \
  "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{" \
  "3000}"
#define WORD_CLASS_EXTRA "\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}"
#define WORD_EXTRA "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}" WORD_CLASS_EXTRA
#define WORD_CATEGORIES (category_groups[0].mask | category_groups[1].mask | BIT(ND) | BIT(NL) | BIT(PC))

/* Case pairs new in Unicode 15 and 16: PCRE2 10.42 does not fold them, Oniguruma does. */
/* clang-format off */
static const uint32_t new_case_pairs[][2] = {{0x19B, 0x19B},     {0x264, 0x264},     {0x1C89, 0x1C8A},
                                              {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x10D50, 0x10D65},
                                              {0x10D70, 0x10D85}};
/* clang-format on */
/* Where the characters with a case folding of several characters are. */
static const uint32_t multi_fold_blocks[][2] = {{0xDF, 0x587}, {0x1E96, 0x1FFC}, {0xFB00, 0xFB17}};

/* ---- character sets: [simple] plus items (set - removed, or its complement) for what a class cannot hold
 * ---- */

typedef struct {
  oxf_str set, removed;
  bool negated;
} set_item;

typedef struct {
  oxf_str simple;
  set_item *items;
  size_t n, cap;
} char_set;

static void char_set_free(char_set *cs) {
  for (size_t i = 0; i < cs->n; i++) oxf_str_free(&cs->items[i].set), oxf_str_free(&cs->items[i].removed);
  free(cs->items);
  oxf_str_free(&cs->simple);
  *cs = (char_set){0};
}

static int add_code(oxf_str *s, uint32_t code, oxf_error *err) {
  char text[16];
  snprintf(text, sizeof text, "\\x{%X}", (unsigned)code);
  return oxf_str_add(s, text, strlen(text), err);
}

static int add_range(oxf_str *s, uint32_t low, uint32_t high, oxf_error *err) {
  if (add_code(s, low, err) != 0) return -1;
  if (high == low) return 0;
  return oxf_str_add(s, "-", 1, err) == 0 && add_code(s, high, err) == 0 ? 0 : -1;
}

/* Take `item` into the set (freed on failure). */
static int push_item(char_set *cs, set_item *item, oxf_error *err) {
  if (cs->n == cs->cap) {
    size_t cap = cs->cap < 4 ? 4 : cs->cap * 2;
    set_item *bigger = realloc(cs->items, cap * sizeof *bigger);
    if (bigger == NULL) {
      oxf_str_free(&item->set), oxf_str_free(&item->removed);
      return out_of_memory(err);
    }
    cs->items = bigger, cs->cap = cap;
  }
  cs->items[cs->n++] = *item;
  *item = (set_item){0};
  return 0;
}

/* The categories of `mask` (as Unicode 16 has them), plus the ranges `extra`, or their complement. */
static int add_categories(char_set *cs, uint32_t mask, const char *extra, bool negated, oxf_error *err) {
  set_item item = {.negated = negated};
  int status = 0;
  if (mask == ALL_CATEGORIES) {
    status = oxf_str_add(&item.set, "\\x{0}-\\x{10FFFF}", 16, err);
  } else {
    uint32_t left = mask;
    char name[8];
    for (size_t g = 0; g < sizeof category_groups / sizeof *category_groups && status == 0; g++)
      if ((left & category_groups[g].mask) == category_groups[g].mask) {
        snprintf(name, sizeof name, "\\p{%.1s}", category_groups[g].name);
        status = oxf_str_add(&item.set, name, strlen(name), err);
        left &= ~category_groups[g].mask;
      }
    for (int c = 0; c < N_CATEGORIES && status == 0; c++)
      if (left & BIT(c)) {
        snprintf(name, sizeof name, "\\p{%.2s}", category_names[c]);
        status = oxf_str_add(&item.set, name, strlen(name), err);
      }
    for (size_t i = 0; i < sizeof recategorized / sizeof *recategorized && status == 0; i++) {
      bool now = mask & BIT(recategorized[i].now), before = mask & BIT(recategorized[i].before);
      if (now != before)
        status = add_range(now ? &item.set : &item.removed, recategorized[i].low, recategorized[i].high, err);
    }
  }
  if (status == 0 && extra != NULL) status = oxf_str_add(&item.set, extra, strlen(extra), err);
  if (status == 0 && item.removed.len == 0 && !negated) {
    status = oxf_str_add(&cs->simple, item.set.data != NULL ? item.set.data : "", item.set.len, err);
  } else if (status == 0) {
    return push_item(cs, &item, err);
  }
  oxf_str_free(&item.set);
  oxf_str_free(&item.removed);
  return status;
}

static const char *text_of(const oxf_str *s) {
  return s->data != NULL ? s->data : "";
}

/* The PCRE2 text matching one character of the set (or, negated, one character outside it). */
static int emit_set(oxf_str *out, const char_set *cs, bool negated, oxf_error *err) {
  bool plain = cs->n == 0;
  bool one_complement =
      cs->n == 1 && cs->simple.len == 0 && cs->items[0].negated && cs->items[0].removed.len == 0;
  if (plain || one_complement) {
    const oxf_str *inside = plain ? &cs->simple : &cs->items[0].set;
    if (inside->len == 0) /* the empty set */
      return oxf_str_add(out, negated ? "(?s:.)" : "(?!)", negated ? 6 : 4, err);
    bool invert = negated != one_complement;
    return oxf_str_add(out, invert ? "[^" : "[", invert ? 2 : 1, err) == 0 &&
                   oxf_str_add(out, inside->data, inside->len, err) == 0 && oxf_str_add(out, "]", 1, err) == 0
               ? 0
               : -1;
  }
  /* The general form: an alternation of one-character matches, or a lookahead that refuses all of them. */
  oxf_str alt = {0};
  int status = oxf_str_add(&alt, negated ? "(?:(?!(?:" : "(?:", negated ? 9 : 3, err);
  bool first = true;
  if (status == 0 && cs->simple.len > 0) {
    status = oxf_str_add(&alt, "[", 1, err) || oxf_str_add(&alt, cs->simple.data, cs->simple.len, err) ||
             oxf_str_add(&alt, "]", 1, err);
    first = false;
  }
  for (size_t i = 0; i < cs->n && status == 0; i++, first = false) {
    const set_item *item = &cs->items[i];
    if (!first) status = oxf_str_add(&alt, "|", 1, err);
    if (status == 0 && !item->negated && item->removed.len > 0)
      status = oxf_str_add(&alt, "(?![", 4, err) ||
               oxf_str_add(&alt, item->removed.data, item->removed.len, err) ||
               oxf_str_add(&alt, "])", 2, err);
    if (status == 0)
      status = oxf_str_add(&alt, item->negated ? "[^" : "[", item->negated ? 2 : 1, err) ||
               oxf_str_add(&alt, text_of(&item->set), item->set.len, err) || oxf_str_add(&alt, "]", 1, err);
    if (status == 0 && item->negated && item->removed.len > 0)
      status = oxf_str_add(&alt, "|[", 2, err) ||
               oxf_str_add(&alt, item->removed.data, item->removed.len, err) ||
               oxf_str_add(&alt, "]", 1, err);
  }
  if (status == 0) status = oxf_str_add(&alt, negated ? "))(?s:.))" : ")", negated ? 9 : 1, err);
  if (status == 0) status = oxf_str_add(out, alt.data, alt.len, err);
  oxf_str_free(&alt);
  return status ? -1 : 0;
}

/* ---- the translation ---- */

typedef struct {
  bool caseless, dotall;
  unsigned closes; /* groups opened by isolated options, closed with this group */
  /* Oniguruma refuses to repeat an assertion, which a lookaround is, and so is a (?:...) holding just one. */
  bool lookaround, transparent, alternation, single_assertion;
  unsigned items;
} frame;

typedef struct {
  const char *src;
  size_t n, at;
  oxf_str out;
  frame *frames;
  size_t depth, cap;
  /* Whether the item before (`literal_before`) and the last item (`after_literal`) was a case-insensitive
   * character, folded to `last_fold`: Oniguruma also matches a character that folds to several with them. */
  bool literal_before, after_literal;
  bool after_assertion;
  int32_t last_fold;
  int32_t fold_pairs[128][2]; /* the first two characters of the multi-character foldings, found once */
  int n_fold_pairs;           /* -1 until found */
  const char *where;
  oxf_error *err;
} translator;

/* How much of a pattern an error message shows: up to 120 bytes, cut between characters. */
static int shown(const char *source) {
  size_t n = strlen(source);
  if (n <= 120) return (int)n;
  n = 120;
  while (n > 0 && ((uint8_t)source[n] & 0xc0) == 0x80) n--;
  return (int)n;
}

static int refuse(translator *t, const char *what) {
  return oxf_fail(t->err, OXF_MANIFEST_ERROR,
                  "tokenizer.json %s: the regular expression \"%.*s\" uses %s, which the C host cannot match "
                  "as the tokenizers library (Oniguruma) does; export a tokenizer without it",
                  t->where, shown(t->src), t->src, what);
}

static frame *top(translator *t) {
  return &t->frames[t->depth];
}

/* One more item in the group: an assertion (^, \b, a lookaround, ...) or something else. */
static void item(translator *t, bool assertion) {
  t->after_assertion = assertion;
  top(t)->items++;
  top(t)->single_assertion = assertion;
}

static int push_frame(translator *t, frame f) {
  if (t->depth + 1 == t->cap) {
    size_t cap = t->cap * 2;
    frame *bigger = realloc(t->frames, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(t->err);
    t->frames = bigger, t->cap = cap;
  }
  t->frames[++t->depth] = f;
  return 0;
}

static bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The full case folding of `code`: its first code point, and how many it has. */
static int case_fold(uint32_t code, int32_t *first) {
  utf8proc_int32_t folded[4];
  utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)code, folded, 4, UTF8PROC_CASEFOLD, NULL);
  *first = n >= 1 ? folded[0] : (int32_t)code;
  return n < 1 ? 1 : (int)n;
}

/* A case-insensitive range of characters: refused where the engines fold differently. */
static int check_caseless(translator *t, uint32_t low, uint32_t high) {
  for (size_t k = 0; k < sizeof new_case_pairs / sizeof *new_case_pairs; k++)
    if (low <= new_case_pairs[k][1] && high >= new_case_pairs[k][0])
      return refuse(t, "a case-insensitive letter whose case pair is new in Unicode 16");
  for (size_t k = 0; k < sizeof multi_fold_blocks / sizeof *multi_fold_blocks; k++)
    for (uint32_t c = low > multi_fold_blocks[k][0] ? low : multi_fold_blocks[k][0];
         c <= high && c <= multi_fold_blocks[k][1]; c++) {
      int32_t first;
      if (case_fold(c, &first) > 1)
        return refuse(t, "a case-insensitive character that folds to several characters (as \xc3\x9f to ss)");
    }
  return 0;
}

/* Whether some character folds to several characters starting with a, b: Oniguruma matches it with "ab". */
static bool folds_from_pair(translator *t, int32_t a, int32_t b) {
  if (t->n_fold_pairs < 0) {
    t->n_fold_pairs = 0;
    for (size_t k = 0; k < sizeof multi_fold_blocks / sizeof *multi_fold_blocks; k++)
      for (uint32_t c = multi_fold_blocks[k][0]; c <= multi_fold_blocks[k][1] && t->n_fold_pairs < 128; c++) {
        utf8proc_int32_t folded[4];
        if (utf8proc_decompose_char((utf8proc_int32_t)c, folded, 4, UTF8PROC_CASEFOLD, NULL) >= 2) {
          t->fold_pairs[t->n_fold_pairs][0] = folded[0], t->fold_pairs[t->n_fold_pairs][1] = folded[1];
          t->n_fold_pairs++;
        }
      }
  }
  for (int i = 0; i < t->n_fold_pairs; i++)
    if (t->fold_pairs[i][0] == a && t->fold_pairs[i][1] == b) return true;
  return false;
}

static int emit(translator *t, const char *text) {
  return oxf_str_add(&t->out, text, strlen(text), t->err);
}

/* One literal character, outside a class. */
static int emit_literal(translator *t, uint32_t code) {
  if (top(t)->caseless) {
    int32_t fold;
    if (check_caseless(t, code, code) != 0) return -1;
    case_fold(code, &fold);
    if (t->literal_before && folds_from_pair(t, t->last_fold, fold))
      return refuse(
          t, "case-insensitive letters that Oniguruma also matches as one character (as ss and \xc3\x9f)");
    t->after_literal = true, t->last_fold = fold;
  }
  if (code < 0x80 && is_alnum((char)code)) {
    char c = (char)code;
    return oxf_str_add(&t->out, &c, 1, t->err);
  }
  if (code < 0x80) return add_code(&t->out, code, t->err);
  return oxf_str_add_char(&t->out, code, t->err);
}

/* A character escape after the backslash at t->at (\t \n \r \f \v \a \e \xHH \x{H..} \uHHHH \0oo \cX):
 * 1 with *code, 0 when the escape is not one (nothing read), -1 when refused. */
static int char_escape(translator *t, uint32_t *code) {
  char c = t->src[t->at];
  static const char simple[] = "tnrfvae";
  static const uint32_t values[] = {0x9, 0xA, 0xD, 0xC, 0xB, 0x7, 0x1B};
  const char *hit = c != '\0' ? strchr(simple, c) : NULL;
  if (hit != NULL) {
    *code = values[hit - simple];
    t->at++;
    return 1;
  }
  size_t at = t->at + 1;
  uint32_t value = 0;
  if (c == 'x' && at < t->n && t->src[at] == '{') {
    size_t digits = 0;
    for (at++; at < t->n && hex_value(t->src[at]) >= 0 && digits < 8; at++, digits++)
      value = value * 16 + (uint32_t)hex_value(t->src[at]);
    if (digits == 0 || at >= t->n || t->src[at] != '}')
      return refuse(t, "a \\x{...} escape that is not one code point");
    at++;
  } else if (c == 'x') {
    size_t digits = 0;
    for (; at < t->n && hex_value(t->src[at]) >= 0 && digits < 2; at++, digits++)
      value = value * 16 + (uint32_t)hex_value(t->src[at]);
    if (digits == 0) return refuse(t, "\\x without hexadecimal digits");
    if (value >= 0x80) return refuse(t, "a \\xHH escape above 7F (a single byte of UTF-8 in Oniguruma)");
  } else if (c == 'u') {
    size_t digits = 0;
    for (; at < t->n && hex_value(t->src[at]) >= 0 && digits < 4; at++, digits++)
      value = value * 16 + (uint32_t)hex_value(t->src[at]);
    if (digits != 4) return refuse(t, "a \\u escape without four hexadecimal digits");
  } else if (c == '0') {
    for (size_t digits = 0; at < t->n && t->src[at] >= '0' && t->src[at] <= '7' && digits < 2; at++, digits++)
      value = value * 8 + (uint32_t)(t->src[at] - '0');
  } else if (c == 'c') {
    if (at >= t->n || !((t->src[at] >= 'a' && t->src[at] <= 'z') || (t->src[at] >= 'A' && t->src[at] <= 'Z')))
      return refuse(t, "a \\c control escape of something other than a letter");
    value = (uint32_t)t->src[at++] & 0x1f;
  } else {
    return 0;
  }
  if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF))
    return refuse(t, "an escape of a value that is not a Unicode scalar value");
  *code = value;
  t->at = at;
  return 1;
}

/* A class escape after the backslash at t->at (\s \S \w \W \d \D \h \H \p{..} \P{..}) added to `cs`: 1 done,
 * 0 when the escape is not one, -1 when refused. */
static int class_escape(translator *t, char_set *cs, bool in_class) {
  char c = t->src[t->at];
  bool negated = c >= 'A' && c <= 'Z';
  uint32_t mask = 0;
  const char *extra = NULL;
  switch (c) {
    case 's':
    case 'S': extra = SPACE_RANGES; break;
    case 'w':
    case 'W': /* Oniguruma's \w counts ² ³ ¹ ¼ ½ ¾ as word characters, but not inside a class */
      mask = WORD_CATEGORIES, extra = in_class ? WORD_CLASS_EXTRA : WORD_EXTRA;
      break;
    case 'd':
    case 'D': mask = BIT(ND); break;
    case 'h':
    case 'H': extra = "0-9A-Fa-f"; break; /* Oniguruma's \h is a hexadecimal digit */
    case 'p':
    case 'P': {
      size_t at = t->at + 1;
      if (at >= t->n || t->src[at] != '{')
        return refuse(t, "\\p without braces (Oniguruma reads the letter p)");
      at++;
      if (at < t->n && t->src[at] == '^') negated = !negated, at++;
      char name[40];
      size_t length = 0, start = at;
      for (; at < t->n && t->src[at] != '}' && length + 1 < sizeof name; at++) {
        char k = t->src[at];
        if (k != ' ' && k != '_' && k != '-') name[length++] = (char)(k >= 'A' && k <= 'Z' ? k + 32 : k);
      }
      if (at >= t->n || t->src[at] != '}') return refuse(t, "an unclosed or unknown \\p{...}");
      name[length] = '\0';
      const char *categories = NULL;
      for (size_t i = 0; i < sizeof property_names / sizeof *property_names; i++)
        if (strcmp(property_names[i].name, name) == 0) categories = property_names[i].categories;
      if (categories == NULL) {
        char what[120];
        snprintf(what, sizeof what, "the property \\p{%.*s} (the C host reads general categories and Any)",
                 (int)(at - start > 60 ? 60 : at - start), t->src + start);
        return refuse(t, what);
      }
      if (in_class && top(t)->caseless)
        return refuse(t, "a \\p{...} inside a case-insensitive class (Oniguruma folds it, PCRE2 does not)");
      mask = *categories == '\0' ? ALL_CATEGORIES : 0;
      for (const char *p = categories; *p != '\0';) {
        size_t size = strcspn(p, " ");
        for (size_t g = 0; g < sizeof category_groups / sizeof *category_groups; g++)
          if (size == 1 && category_groups[g].name[0] == p[0]) mask |= category_groups[g].mask;
        for (int k = 0; k < N_CATEGORIES; k++)
          if (size == 2 && memcmp(category_names[k], p, 2) == 0) mask |= BIT(k);
        p += size + (p[size] == ' ');
      }
      t->at = at;
      break;
    }
    default: return 0;
  }
  t->at++;
  return add_categories(cs, mask, extra, negated, t->err) == 0 ? 1 : -1;
}

/* A set outside a class (\s, \p{L}, ...): case-insensitivity does not reach it in Oniguruma. */
static int emit_standalone(translator *t, char_set *cs) {
  bool caseless = top(t)->caseless;
  int status = caseless ? emit(t, "(?-i:") : 0;
  if (status == 0) status = emit_set(&t->out, cs, false, t->err);
  if (status == 0 && caseless) status = emit(t, ")");
  char_set_free(cs);
  return status;
}

/* One character of a class (after a backslash or not): 1 with *code, 2 when a class escape was added, -1. */
static int class_member(translator *t, char_set *cs, uint32_t *code) {
  if (t->src[t->at] != '\\') {
    *code = oxf_utf8_next(t->src, &t->at);
    return 1;
  }
  t->at++;
  if (t->at >= t->n) return refuse(t, "a trailing backslash");
  if (t->src[t->at] == 'b') {
    t->at++;
    *code = 0x8;
    return 1;
  }
  int r = char_escape(t, code);
  if (r != 0) return r;
  if ((r = class_escape(t, cs, true)) != 0) return r < 0 ? -1 : 2;
  if (is_alnum(t->src[t->at]))
    return refuse(t, "an escape that Oniguruma and PCRE2 read differently in a class");
  *code = oxf_utf8_next(t->src, &t->at);
  return 1;
}

static int parse_class_body(translator *t, char_set *cs, bool *negated, int depth);

/* A class inside a class (Oniguruma takes the union, as BLOOM's pattern needs), merged into `cs`. */
static int nested_class(translator *t, char_set *cs, int depth) {
  if (t->at < t->n && t->src[t->at] == ':') return refuse(t, "a POSIX bracket ([:alpha:])");
  if (depth >= 3) return refuse(t, "classes nested more than three deep");
  char_set inner = {0};
  bool negated;
  int status = parse_class_body(t, &inner, &negated, depth + 1);
  if (status == 0 && negated && top(t)->caseless)
    status = refuse(t, "a negated class inside a case-insensitive class (Oniguruma folds its complement)");
  if (status == 0 && !negated) {
    status = oxf_str_add(&cs->simple, text_of(&inner.simple), inner.simple.len, t->err);
    for (size_t i = 0; i < inner.n && status == 0; i++) status = push_item(cs, &inner.items[i], t->err);
  } else if (status == 0 && inner.n == 0) {
    set_item item = {.negated = inner.simple.len > 0};
    status = inner.simple.len > 0 ? oxf_str_add(&item.set, inner.simple.data, inner.simple.len, t->err)
                                  : oxf_str_add(&item.set, "\\x{0}-\\x{10FFFF}", 16, t->err);
    if (status == 0) status = push_item(cs, &item, t->err);
    oxf_str_free(&item.set);
  } else if (status == 0) {
    status = refuse(t, "a negated class inside a class with \\S, \\W or \\P{...} in it");
  }
  char_set_free(&inner);
  return status;
}

/* From after '[' to after its ']'. */
static int parse_class_body(translator *t, char_set *cs, bool *negated, int depth) {
  bool first = true;
  *negated = t->at < t->n && t->src[t->at] == '^';
  if (*negated) t->at++;
  for (;;) {
    if (t->at >= t->n) return refuse(t, "an unclosed [");
    if (t->src[t->at] == ']' && !first) {
      t->at++;
      return 0;
    }
    if (t->src[t->at] == '&' && t->at + 1 < t->n && t->src[t->at + 1] == '&')
      return refuse(t, "a class intersection (&&)");
    first = false;
    uint32_t low, high;
    int kind = 2;
    if (t->src[t->at] == '[') {
      t->at++;
      if (nested_class(t, cs, depth) != 0) return -1;
    } else {
      kind = class_member(t, cs, &low);
    }
    bool dash = t->at + 1 < t->n && t->src[t->at] == '-' && t->src[t->at + 1] != ']';
    if (kind < 0) return -1;
    if (kind == 2) {
      if (dash) return refuse(t, "a range from a class escape or a class");
      continue;
    }
    high = low;
    if (dash) {
      t->at++;
      int end = t->src[t->at] == '[' ? 2 : class_member(t, cs, &high);
      if (end < 0) return -1;
      if (end == 2 || high < low) return refuse(t, "a range that is not from one character to a later one");
      if (t->at + 1 < t->n && t->src[t->at] == '-' && t->src[t->at + 1] != ']')
        return refuse(t, "a '-' right after a range");
    }
    if (top(t)->caseless && check_caseless(t, low, high) != 0) return -1;
    if (add_range(&cs->simple, low, high, t->err) != 0) return -1;
  }
}

static int parse_class(translator *t) {
  char_set cs = {0};
  bool negated;
  int status = parse_class_body(t, &cs, &negated, 0);
  if (status == 0) status = emit_set(&t->out, &cs, negated, t->err);
  char_set_free(&cs);
  return status;
}

/* After '(' : a group, an option group, isolated options or a comment. */
static int parse_group(translator *t) {
  frame inner = *top(t);
  inner.closes = 0, inner.items = 0;
  inner.lookaround = inner.transparent = inner.alternation = inner.single_assertion = false;
  if (t->at >= t->n || t->src[t->at] != '?') return push_frame(t, inner) || emit(t, "(?:");
  t->at++;
  char c = t->at < t->n ? t->src[t->at] : '\0', d = t->at + 1 < t->n ? t->src[t->at + 1] : '\0';
  if (c == ':' || c == '=' || c == '!' || c == '>' || (c == '<' && (d == '=' || d == '!'))) {
    char text[5] = {'(', '?', c, c == '<' ? d : '\0', '\0'};
    t->at += c == '<' ? 2 : 1;
    inner.lookaround = c != ':' && c != '>', inner.transparent = c == ':';
    return push_frame(t, inner) || emit(t, text);
  }
  if (c == '<' || c == '\'') { /* a named group: nothing refers to it (back-references are refused) */
    const char *close = memchr(t->src + t->at + 1, c == '<' ? '>' : '\'', t->n - t->at - 1);
    if (close == NULL) return refuse(t, "an unclosed group name");
    t->at = (size_t)(close - t->src) + 1;
    return push_frame(t, inner) || emit(t, "(?:");
  }
  if (c == '#') {
    const char *close = memchr(t->src + t->at, ')', t->n - t->at);
    if (close == NULL) return refuse(t, "an unclosed comment");
    t->at = (size_t)(close - t->src) + 1;
    return 0;
  }
  char options[16] = "(?";
  size_t length = 2;
  bool on = true;
  for (; t->at < t->n && t->src[t->at] != ':' && t->src[t->at] != ')'; t->at++) {
    char k = t->src[t->at];
    if (k == '-' && on) {
      on = false;
    } else if ((k == 'i' || k == 'm') && length < 12) {
      if (k == 'i') inner.caseless = on;
      if (k == 'm') inner.dotall = on; /* Oniguruma's (?m) is dot-all: PCRE2's (?s) */
    } else {
      char what[80];
      snprintf(what, sizeof what, "the group construct (?%c (only (?i) and (?m) options are read)", k);
      return refuse(t, what);
    }
    options[length++] = k == 'm' ? 's' : k;
  }
  if (t->at >= t->n) return refuse(t, "an unclosed group");
  memcpy(options + length, ":", 2);
  if (t->src[t->at++] == ':') return push_frame(t, inner) || emit(t, options);
  /* Isolated options reach to the end of the enclosing group, its later alternatives included. */
  top(t)->caseless = inner.caseless, top(t)->dotall = inner.dotall;
  top(t)->closes++;
  top(t)->transparent = false;
  return emit(t, options);
}

/* After '{': an Oniguruma interval ({n}, {n,}, {n,m}, {,n}) or a literal brace. */
static int parse_interval(translator *t) {
  size_t at = t->at;
  long low = -1, high = -1;
  bool comma = false;
  for (; at < t->n && t->src[at] >= '0' && t->src[at] <= '9'; at++)
    low = low < 0 ? t->src[at] - '0' : (low > 1000000 ? low : low * 10 + (t->src[at] - '0'));
  if (at < t->n && t->src[at] == ',') {
    comma = true;
    for (at++; at < t->n && t->src[at] >= '0' && t->src[at] <= '9'; at++)
      high = high < 0 ? t->src[at] - '0' : (high > 1000000 ? high : high * 10 + (t->src[at] - '0'));
  }
  if (at >= t->n || t->src[at] != '}' || (low < 0 && high < 0)) {
    item(t, false);
    return emit(t, "\\{");
  }
  if (t->after_assertion) return refuse(t, "a repeated assertion (Oniguruma refuses it)");
  if (low > 65535 || high > 65535) return refuse(t, "a repeat count above 65535");
  at++;
  if (at < t->n && t->src[at] == '+')
    return refuse(t, "{n,m}+ (a repeat of a repeat in Oniguruma, possessive in PCRE2)");
  if (!comma && at < t->n && t->src[at] == '?')
    return refuse(t, "{n}? (optional in Oniguruma, lazy in PCRE2)");
  char text[32];
  if (!comma) {
    snprintf(text, sizeof text, "{%ld}", low);
  } else if (high < 0) {
    snprintf(text, sizeof text, "{%ld,}", low);
  } else {
    snprintf(text, sizeof text, "{%ld,%ld}", low < 0 ? 0 : low, high);
  }
  t->at = at;
  return emit(t, text);
}

static int parse_escape(translator *t) {
  if (t->at >= t->n) return refuse(t, "a trailing backslash");
  uint32_t code;
  int r = char_escape(t, &code);
  if (r != 0) return r < 0 ? -1 : emit_literal(t, code);
  char_set cs = {0};
  if ((r = class_escape(t, &cs, false)) != 0) {
    if (r < 0) {
      char_set_free(&cs);
      return -1;
    }
    return emit_standalone(t, &cs);
  }
  char c = t->src[t->at];
  switch (c) {
    case 'A':
    case 'z':
    case 'Z':
    case 'G': {
      char text[3] = {'\\', c, '\0'};
      t->at++;
      return emit(t, text);
    }
    case 'b':
    case 'B': { /* word boundaries with Oniguruma's \w */
      char_set word = {0};
      int status = add_categories(&word, WORD_CATEGORIES, WORD_EXTRA, false, t->err);
      const char *w = text_of(&word.simple);
      size_t need = 4 * word.simple.len + 64;
      char *text = status == 0 ? malloc(need) : NULL;
      if (status == 0 && text == NULL) status = out_of_memory(t->err);
      if (status == 0) {
        if (c == 'b')
          snprintf(text, need, "(?-i:(?<=[%s])(?![%s])|(?<![%s])(?=[%s]))", w, w, w, w);
        else
          snprintf(text, need, "(?-i:(?<=[%s])(?=[%s])|(?<![%s])(?![%s]))", w, w, w, w);
        status = emit(t, text);
      }
      free(text);
      char_set_free(&word);
      t->at++;
      return status;
    }
    case 'R': t->at++; return emit(t, "(?>\\x{D}\\x{A}|[\\x{A}-\\x{D}\\x{85}\\x{2028}\\x{2029}])");
    case 'N': t->at++; return emit(t, "[^\\x{A}]");
    case 'O': t->at++; return emit(t, "(?s:.)");
    default: break;
  }
  if (is_alnum(c)) {
    char what[96];
    snprintf(what, sizeof what,
             "the escape \\%c (back-references, \\k, \\g, \\X, \\K, \\y, \\Q and others are not read)", c);
    return refuse(t, what);
  }
  return emit_literal(t, oxf_utf8_next(t->src, &t->at));
}

static int translate(translator *t) {
  while (t->at < t->n) {
    char c = t->src[t->at++];
    bool quantifier = c == '*' || c == '+' || c == '?' || c == '{';
    /* Oniguruma joins letters across (?:...) into one string, which a character folding to several can match.
     */
    if (!quantifier && c != '(' && c != ')') t->literal_before = t->after_literal, t->after_literal = false;
    if (quantifier && c != '{' && t->after_assertion)
      return refuse(t, "a repeated assertion (Oniguruma refuses it)");
    int status;
    switch (c) {
      case '\\': {
        bool assertion = t->at < t->n && strchr("AzZGbB", t->src[t->at]) != NULL;
        status = parse_escape(t);
        item(t, assertion);
        break;
      }
      case '[':
        status = parse_class(t);
        item(t, false);
        break;
      case '(': status = parse_group(t); break;
      case ')': {
        if (t->depth == 0) return refuse(t, "an unmatched )");
        status = 0;
        for (unsigned k = 0; k < top(t)->closes && status == 0; k++) status = emit(t, ")");
        if (status == 0) status = emit(t, ")");
        frame inner = *top(t);
        t->depth--;
        item(t, inner.lookaround ||
                    (inner.transparent && !inner.alternation && inner.items == 1 && inner.single_assertion));
        break;
      }
      case '{': status = parse_interval(t); break;
      case '|':
      case '.':
      case '^':
      case '$':
      case '*':
      case '+':
      case '?': {
        char text[2] = {c, '\0'};
        status = emit(t, text);
        if (c == '|') t->after_assertion = false, top(t)->alternation = true;
        if (c == '.' || c == '^' || c == '$') item(t, c != '.');
        break;
      }
      default:
        t->at--;
        status = emit_literal(t, oxf_utf8_next(t->src, &t->at));
        item(t, false);
        break;
    }
    if (status != 0) return -1;
  }
  if (t->depth != 0) return refuse(t, "an unclosed (");
  for (unsigned k = 0; k < top(t)->closes; k++)
    if (emit(t, ")") != 0) return -1;
  return 0;
}

/* ---- compiling and matching ---- */

int oxf_regex_compile(const char *source, bool literal, oxf_regex **out, const char *where, oxf_error *err) {
  *out = NULL;
  translator t = {
      .src = source, .n = strlen(source), .where = where, .err = err, .cap = 8, .n_fold_pairs = -1};
  uint32_t options = PCRE2_UTF;
  const char *pattern = source;
  size_t length = t.n;
  if (!literal) {
    t.frames = calloc(t.cap, sizeof *t.frames);
    if (t.frames == NULL) return out_of_memory(err);
    int status = translate(&t);
    free(t.frames);
    if (status == 0 && t.out.data == NULL) status = oxf_str_add(&t.out, "", 0, err);
    if (status != 0) {
      oxf_str_free(&t.out);
      return -1;
    }
    pattern = t.out.data, length = t.out.len;
    options |= PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C;
  } else {
    options |= PCRE2_LITERAL;
  }
  oxf_regex *regex = calloc(1, sizeof *regex);
  pcre2_compile_context *context = pcre2_compile_context_create(NULL);
  int code = 0;
  PCRE2_SIZE offset = 0;
  if (regex != NULL && context != NULL && pcre2_set_newline(context, PCRE2_NEWLINE_LF) == 0)
    regex->code = pcre2_compile((PCRE2_SPTR)pattern, length, options, &code, &offset, context);
  pcre2_compile_context_free(context);
  int status = 0;
  if (regex == NULL || context == NULL || (regex->code == NULL && code == PCRE2_ERROR_NOMEMORY)) {
    status = out_of_memory(err);
  } else if (regex->code == NULL) {
    PCRE2_UCHAR message[160];
    pcre2_get_error_message(code, message, sizeof message);
    status =
        oxf_fail(err, OXF_MANIFEST_ERROR,
                 "tokenizer.json %s: the regular expression \"%.*s\" does not compile (%s); fix the pattern",
                 where, shown(source), source, (const char *)message);
  } else {
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE); /* without JIT the interpreter runs it */
    regex->match = pcre2_match_data_create(1, NULL);
    if (regex->match == NULL) status = out_of_memory(err);
  }
  oxf_str_free(&t.out);
  if (status != 0) {
    oxf_regex_free(regex);
    return -1;
  }
  *out = regex;
  return 0;
}

int oxf_regex_parse(const cJSON *pattern, oxf_regex **out, const char *where, oxf_error *err) {
  *out = NULL;
  const cJSON *string = cJSON_GetObjectItemCaseSensitive(pattern, "String");
  const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
  if (!cJSON_IsObject(pattern) || cJSON_GetArraySize(pattern) != 1 ||
      (!cJSON_IsString(string) && !cJSON_IsString(regex)))
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "tokenizer.json %s \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}; re-export the folder",
        where);
  return cJSON_IsString(string) ? oxf_regex_compile(string->valuestring, true, out, where, err)
                                : oxf_regex_compile(regex->valuestring, false, out, where, err);
}

int oxf_regex_find(const oxf_regex *regex, const char *text, size_t n, size_t from, size_t *start,
                   size_t *end, oxf_error *err) {
  if (from > n) return 0;
  PCRE2_SPTR subject = (PCRE2_SPTR)(text != NULL ? text : "");
  /* The text is valid UTF-8 (checked once by the caller): checking it again per call would be quadratic. */
  int rc = pcre2_match(regex->code, subject, n, from, PCRE2_NO_UTF_CHECK, regex->match, NULL);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its backtracking on the heap */
    rc = pcre2_match(regex->code, subject, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, regex->match, NULL);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc == PCRE2_ERROR_NOMEMORY) return out_of_memory(err);
  if (rc < 0) {
    PCRE2_UCHAR message[160];
    pcre2_get_error_message(rc, message, sizeof message);
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "a tokenizer regular expression gave up on this text (%s); shorten the text",
                    (const char *)message);
  }
  const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(regex->match);
  *start = ovector[0], *end = ovector[1];
  return 1;
}

int oxf_regex_next(const oxf_regex *regex, const char *text, size_t n, oxf_regex_cursor *cursor,
                   size_t *start, size_t *end, oxf_error *err) {
  for (;;) {
    if (cursor->at > n) return 0;
    int r = oxf_regex_find(regex, text, n, cursor->at, start, end, err);
    if (r <= 0) return r;
    if (*start == *end && cursor->matched && cursor->last_end == *end) {
      /* An empty match where the last one ended: step over one character and search again. */
      size_t at = cursor->at;
      if (at < n) {
        oxf_utf8_next(text, &at);
      } else {
        at++;
      }
      cursor->at = at;
      continue;
    }
    cursor->at = cursor->last_end = *end;
    cursor->matched = true;
    return 1;
  }
}

void oxf_regex_free(oxf_regex *regex) {
  if (regex == NULL) return;
  pcre2_match_data_free(regex->match);
  pcre2_code_free(regex->code);
  free(regex);
}
