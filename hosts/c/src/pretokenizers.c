/* tokenizer.json "pre_tokenizer", run as the `tokenizers` library (0.23, tokenizers/src/pre_tokenizers) runs
 * it. Every pre-tokenizer is a list of steps (a Sequence is flattened, BertPreTokenizer is two steps); a step
 * maps each piece to its parts. Most steps cut a piece into segments, matches and gaps, and join them as the
 * split behavior says, as NormalizedString::split does; an empty part is dropped.
 *
 * A piece also carries how many of its leading characters stand at the start of the whole text (the library's
 * offsets_original().0 == 0, which Metaspace's prepend_scheme "first" looks at): a character prepended to
 * such a piece (Metaspace, ByteLevel's add_prefix_space) is aligned with the first one, so it counts too. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

#define KNOWN_PRETOKENIZERS                                                                                  \
  "BertPreTokenizer, ByteLevel, CharDelimiterSplit, Digits, FixedLength, Metaspace, Punctuation, Sequence, " \
  "Split, Whitespace and WhitespaceSplit"
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef enum { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS } behavior;
static const char *const behavior_names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                             "Contiguous"};

typedef enum { SPACE, PUNCTUATION, NUMERIC, ONE_CHARACTER } char_class;
typedef enum { CHARACTERS, WHITESPACE, METASPACE, BYTE_LEVEL, SPLIT, FIXED_LENGTH } step_kind;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

typedef struct {
  step_kind kind;
  behavior behavior;
  char_class cls;         /* CHARACTERS: the characters that match */
  uint32_t code;          /* ONE_CHARACTER's character, Metaspace's replacement */
  bool invert;            /* SPLIT */
  oxf_regex *regex;       /* SPLIT, BYTE_LEVEL with use_regex */
  prepend_scheme prepend; /* METASPACE */
  bool split;             /* METASPACE */
  bool add_prefix_space;  /* BYTE_LEVEL */
  size_t length;          /* FIXED_LENGTH, in characters */
} step;

struct oxf_pretokenizer {
  step *steps;
  size_t n, cap;
};

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR,
                  "out of memory while tokenizing; free memory or shorten the text");
}

/* ---- the Unicode classes the library uses ---- */

static bool in_ranges(uint32_t c, const uint32_t (*ranges)[2], size_t n) {
  size_t low = 0, high = n;
  while (low < high) {
    size_t mid = (low + high) / 2;
    if (c < ranges[mid][0]) {
      high = mid;
    } else if (c > ranges[mid][1]) {
      low = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}
#define IN(c, table) in_ranges(c, table, sizeof table / sizeof *table)

/* The unicode_categories crate's punctuation (older Unicode) against utf8proc's (Unicode 15): what it lacks
 * and the two characters it still counts. Measured over all code points against the library. */
/* clang-format off */
static const uint32_t not_punctuation[][2] = {
    {0x61D, 0x61D}, {0x9FD, 0x9FD}, {0xA76, 0xA76}, {0xC77, 0xC77}, {0xC84, 0xC84}, {0x1B7D, 0x1B7E},
    {0x2E43, 0x2E4F}, {0x2E52, 0x2E5D}, {0x10EAD, 0x10EAD}, {0x10F55, 0x10F59}, {0x10F86, 0x10F89},
    {0x1144B, 0x1144F}, {0x1145A, 0x1145B}, {0x1145D, 0x1145D}, {0x11660, 0x1166C}, {0x116B9, 0x116B9},
    {0x1183B, 0x1183B}, {0x11944, 0x11946}, {0x119E2, 0x119E2}, {0x11A3F, 0x11A46}, {0x11A9A, 0x11A9C},
    {0x11A9E, 0x11AA2}, {0x11B00, 0x11B09}, {0x11C41, 0x11C45}, {0x11C70, 0x11C71}, {0x11EF7, 0x11EF8},
    {0x11F43, 0x11F4F}, {0x11FFF, 0x11FFF}, {0x12FF1, 0x12FF2}, {0x16E97, 0x16E9A}, {0x16FE2, 0x16FE2},
    {0x1E95E, 0x1E95F}};
/* clang-format on */
static const uint32_t old_punctuation[][2] = {{0x166D, 0x166D}, {0x111C9, 0x111C9}};
/* Numbers (Rust's char::is_numeric, Unicode 17) and word characters (the regex crate's \w, Unicode 16) that
 * utf8proc's Unicode 15 does not have yet. */
/* clang-format off */
static const uint32_t new_numeric[][2] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11DE0, 0x11DE9}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x16FF4, 0x16FF6}, {0x1CCF0, 0x1CCF9}, {0x1E5F1, 0x1E5FA}};
static const uint32_t new_word[][2] = {
    {0x897, 0x897}, {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3},
    {0x10D40, 0x10D65}, {0x10D69, 0x10D6D}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x10EFC, 0x10EFC},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113C0},
    {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA}, {0x113CC, 0x113D3}, {0x113E1, 0x113E2},
    {0x116D0, 0x116E3}, {0x11BC0, 0x11BE0}, {0x11BF0, 0x11BF9}, {0x11F5A, 0x11F5A}, {0x13460, 0x143FA},
    {0x16100, 0x16139}, {0x16D40, 0x16D6C}, {0x16D70, 0x16D79}, {0x18CFF, 0x18CFF}, {0x1CCF0, 0x1CCF9},
    {0x1E5D0, 0x1E5FA}, {0x2EBF0, 0x2EE5D}};
/* clang-format on */

/* char::is_ascii_punctuation || UnicodeCategories::is_punctuation. */
static bool is_punctuation(uint32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) ||
           (c >= 0x7b && c <= 0x7e);
  utf8proc_category_t category = utf8proc_category((utf8proc_int32_t)c);
  if (category >= UTF8PROC_CATEGORY_PC && category <= UTF8PROC_CATEGORY_PO) return !IN(c, not_punctuation);
  return IN(c, old_punctuation);
}

static bool is_numeric(uint32_t c) {
  utf8proc_category_t category = utf8proc_category((utf8proc_int32_t)c);
  return (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO) || IN(c, new_numeric);
}

/* The regex crate's \w: Alphabetic, marks, decimal numbers, connector punctuation, Join_Control. */
bool oxf_is_word_char(uint32_t c) {
  switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: /* Other_Alphabetic symbols (circled letters), ZWNJ and ZWJ */
      return c == 0x200c || c == 0x200d || (c >= 0x24b6 && c <= 0x24e9) || (c >= 0x1f130 && c <= 0x1f149) ||
             (c >= 0x1f150 && c <= 0x1f169) || (c >= 0x1f170 && c <= 0x1f189) || IN(c, new_word);
  }
}

static bool in_class(const step *s, uint32_t c) {
  switch (s->cls) {
    case SPACE: return oxf_is_whitespace(c);
    case PUNCTUATION: return is_punctuation(c);
    case NUMERIC: return is_numeric(c);
    default: return c == s->code;
  }
}

/* GPT-2's map from bytes to printable characters: printable Latin-1 bytes stand for themselves, the other 68
 * bytes for U+0100 onwards, in byte order. */
static uint32_t byte_char(uint8_t b) {
  if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) return b;
  if (b <= 0x20) return 0x100 + b;
  if (b <= 0xa0) return 0x100 + 33 + (b - 0x7f);
  return 0x100 + 67; /* 0xad */
}

/* ---- pieces with their count of leading characters at the text's start ---- */

typedef struct {
  oxf_pieces list;
  size_t *start_chars;
  size_t cap;
} parts;

typedef struct {
  size_t start, end;
  bool match;
} segment;

typedef struct {
  segment *items;
  size_t n, cap;
} segments;

static void parts_free(parts *p) {
  oxf_pieces_free(&p->list);
  free(p->start_chars);
  *p = (parts){0};
}

static int add_part(parts *p, const char *bytes, size_t n, size_t start_chars, oxf_error *err) {
  if (n == 0) return 0;
  if (p->list.n == p->cap) {
    size_t cap = p->cap < 16 ? 16 : p->cap * 2;
    size_t *bigger = realloc(p->start_chars, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    p->start_chars = bigger, p->cap = cap;
  }
  if (oxf_pieces_add(&p->list, bytes, n, start_chars > 0, err) != 0) return -1;
  p->start_chars[p->list.n - 1] = start_chars;
  return 0;
}

/* How many of the leading characters at the text's start remain for the part from byte `at` on (bounded by
 * `start_chars`, which is small, so the walk is short). */
static size_t start_chars_at(const char *text, size_t at, size_t start_chars) {
  size_t i = 0, chars = 0;
  while (i < at && chars < start_chars) oxf_utf8_next(text, &i), chars++;
  return start_chars - chars;
}

static int add_segment(segments *s, size_t start, size_t end, bool match, oxf_error *err) {
  if (s->n == s->cap) {
    size_t cap = s->cap < 16 ? 16 : s->cap * 2;
    segment *bigger = realloc(s->items, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    s->items = bigger, s->cap = cap;
  }
  s->items[s->n++] = (segment){start, end, match};
  return 0;
}

/* Each character of the class is a match of its own; the characters between are one gap. */
static int class_segments(const step *s, const char *text, size_t n, segments *out, oxf_error *err) {
  size_t gap = 0;
  for (size_t at = 0; at < n;) {
    size_t start = at;
    if (!in_class(s, oxf_utf8_next(text, &at))) continue;
    if ((gap < start && add_segment(out, gap, start, false, err) != 0) ||
        add_segment(out, start, at, true, err) != 0)
      return -1;
    gap = at;
  }
  return gap < n ? add_segment(out, gap, n, false, err) : 0;
}

static int regex_segments(const oxf_regex *regex, bool invert, const char *text, size_t n, segments *out,
                          oxf_error *err) {
  oxf_regex_cursor cursor = {0};
  size_t gap = 0, start, end;
  int r;
  while ((r = oxf_regex_next(regex, text, n, &cursor, &start, &end, err)) == 1) {
    if ((gap < start && add_segment(out, gap, start, invert, err) != 0) ||
        add_segment(out, start, end, !invert, err) != 0)
      return -1;
    gap = end;
  }
  if (r < 0) return -1;
  return gap < n ? add_segment(out, gap, n, invert, err) : 0;
}

/* The library's Whitespace: runs of \w and runs of what is neither \w nor space, the spaces dropped. */
static int word_segments(const char *text, size_t n, segments *out, oxf_error *err) {
  size_t at = 0;
  while (at < n) {
    size_t start = at, next = at;
    uint32_t c = oxf_utf8_next(text, &next);
    if (oxf_is_whitespace(c)) {
      at = next;
      continue;
    }
    bool word = oxf_is_word_char(c);
    at = next;
    while (at < n) {
      next = at;
      c = oxf_utf8_next(text, &next);
      if (oxf_is_whitespace(c) || oxf_is_word_char(c) != word) break;
      at = next;
    }
    if (add_segment(out, start, at, false, err) != 0) return -1;
  }
  return 0;
}

/* NormalizedString::split's joining of matches and gaps. */
static int join_segments(behavior how, const char *text, size_t start_chars, const segments *s, parts *out,
                         oxf_error *err) {
  size_t from = 0, to = 0;
  bool open = false, previous = false;
#define PUT(a, b) add_part(out, text + (a), (b) - (a), start_chars_at(text, a, start_chars), err)
  for (size_t i = 0; i < s->n; i++) {
    const segment *g = &s->items[i];
    switch (how) {
      case REMOVED:
        if (!g->match && PUT(g->start, g->end) != 0) return -1;
        break;
      case ISOLATED:
        if (PUT(g->start, g->end) != 0) return -1;
        break;
      case MERGED_WITH_NEXT:
        if (g->match && i + 1 < s->n && !s->items[i + 1].match) {
          if (PUT(g->start, s->items[i + 1].end) != 0) return -1;
          i++;
        } else if (PUT(g->start, g->end) != 0) {
          return -1;
        }
        break;
      case CONTIGUOUS:
      case MERGED_WITH_PREVIOUS: {
        bool join = how == CONTIGUOUS ? g->match == previous : g->match && !previous;
        if (open && join) {
          to = g->end;
        } else {
          if (open && PUT(from, to) != 0) return -1;
          from = g->start, to = g->end, open = true;
        }
        previous = g->match;
        break;
      }
    }
  }
  return open ? PUT(from, to) : 0;
#undef PUT
}

/* ---- the steps ---- */

static int prepend(oxf_str *text, uint32_t code, size_t *start_chars, oxf_error *err) {
  char bytes[4];
  size_t length = oxf_utf8_put(code, bytes);
  if (oxf_str_add(text, bytes, length, err) != 0) return -1;
  memmove(text->data + length, text->data, text->len - length);
  memcpy(text->data, bytes, length);
  if (*start_chars > 0) ++*start_chars;
  return 0;
}

static bool starts_with(const oxf_str *text, uint32_t code) {
  size_t at = 0;
  return text->len > 0 && oxf_utf8_next(text->data, &at) == code;
}

/* One piece through one step, its parts appended to `out`. */
static int run_step(const step *s, const char *text, size_t n, size_t start_chars, segments *seg,
                    oxf_str *work, parts *out, oxf_error *err) {
  seg->n = 0;
  switch (s->kind) {
    case CHARACTERS:
      return class_segments(s, text, n, seg, err) ||
             join_segments(s->behavior, text, start_chars, seg, out, err);
    case WHITESPACE:
      return word_segments(text, n, seg, err) || join_segments(REMOVED, text, start_chars, seg, out, err);
    case SPLIT:
      return regex_segments(s->regex, s->invert, text, n, seg, err) ||
             join_segments(s->behavior, text, start_chars, seg, out, err);
    case FIXED_LENGTH:
      for (size_t at = 0; at < n;) {
        size_t start = at;
        for (size_t k = 0; k < s->length && at < n; k++) oxf_utf8_next(text, &at);
        if (add_part(out, text + start, at - start, start_chars_at(text, start, start_chars), err) != 0)
          return -1;
      }
      return 0;
    case METASPACE: {
      oxf_str_clear(work);
      for (size_t at = 0; at < n;) {
        size_t start = at;
        uint32_t c = oxf_utf8_next(text, &at);
        if ((c == ' ' ? oxf_str_add_char(work, s->code, err)
                      : oxf_str_add(work, text + start, at - start, err)) != 0)
          return -1;
      }
      bool want = s->prepend == PREPEND_ALWAYS || (s->prepend == PREPEND_FIRST && start_chars > 0);
      if (want && !starts_with(work, s->code) && prepend(work, s->code, &start_chars, err) != 0) return -1;
      if (!s->split) return add_part(out, work->data, work->len, start_chars, err);
      step by_replacement = {.kind = CHARACTERS, .cls = ONE_CHARACTER, .code = s->code};
      return class_segments(&by_replacement, work->data, work->len, seg, err) ||
             join_segments(MERGED_WITH_NEXT, work->data, start_chars, seg, out, err);
    }
    case BYTE_LEVEL: {
      oxf_str_clear(work);
      if (oxf_str_add(work, text, n, err) != 0) return -1;
      if (s->add_prefix_space && !starts_with(work, ' ') && prepend(work, ' ', &start_chars, err) != 0)
        return -1;
      parts split = {0};
      int status = 0;
      if (s->regex != NULL) {
        status = regex_segments(s->regex, false, work->data, work->len, seg, err) ||
                 join_segments(ISOLATED, work->data, start_chars, seg, &split, err);
      } else {
        status = add_part(&split, work->data, work->len, start_chars, err);
      }
      oxf_str mapped = {0};
      for (size_t i = 0; i < split.list.n && status == 0; i++) {
        const oxf_str *piece = &split.list.items[i].text;
        size_t chars = split.start_chars[i], mapped_chars = 0;
        oxf_str_clear(&mapped);
        for (size_t at = 0; at < piece->len && status == 0;) {
          size_t start = at;
          oxf_utf8_next(piece->data, &at);
          if (chars > 0) chars--, mapped_chars += at - start; /* each byte is a character aligned with it */
          for (size_t b = start; b < at && status == 0; b++)
            status = oxf_str_add_char(&mapped, byte_char((uint8_t)piece->data[b]), err);
        }
        if (status == 0) status = add_part(out, mapped.data, mapped.len, mapped_chars, err);
      }
      oxf_str_free(&mapped);
      parts_free(&split);
      return status;
    }
  }
  return 0;
}

int oxf_pretokenize(const oxf_pretokenizer *pretokenizer, oxf_pieces *pieces, oxf_error *err) {
  if (pretokenizer == NULL) return 0;
  parts current = {0}, next = {0};
  segments seg = {0};
  oxf_str work = {0};
  int status = 0;
  for (size_t i = 0; i < pieces->n && status == 0; i++) {
    const oxf_piece *piece = &pieces->items[i];
    status = add_part(&current, piece->text.data, piece->text.len, piece->at_start ? 1 : 0, err);
  }
  for (size_t k = 0; k < pretokenizer->n && status == 0; k++) {
    for (size_t i = 0; i < current.list.n && status == 0; i++) {
      const oxf_str *text = &current.list.items[i].text;
      status = run_step(&pretokenizer->steps[k], text->data, text->len, current.start_chars[i], &seg, &work,
                        &next, err);
    }
    parts_free(&current);
    current = next;
    next = (parts){0};
  }
  free(seg.items);
  oxf_str_free(&work);
  parts_free(&next);
  if (status != 0) {
    parts_free(&current);
    return -1;
  }
  oxf_pieces_free(pieces);
  *pieces = current.list;
  free(current.start_chars);
  return 0;
}

/* ---- parsing ---- */

static int add_step(oxf_pretokenizer *p, step s, oxf_error *err) {
  if (p->n == p->cap) {
    size_t cap = p->cap < 4 ? 4 : p->cap * 2;
    step *bigger = realloc(p->steps, cap * sizeof *bigger);
    if (bigger == NULL) {
      oxf_regex_free(s.regex);
      return out_of_memory(err);
    }
    p->steps = bigger, p->cap = cap;
  }
  p->steps[p->n++] = s;
  return 0;
}

/* How much of a tokenizer.json value an error message shows: up to 60 bytes, cut between characters. */
static int shown(const char *value) {
  size_t n = strlen(value);
  if (n <= 60) return (int)n;
  n = 60;
  while (n > 0 && ((uint8_t)value[n] & 0xc0) == 0x80) n--;
  return (int)n;
}

static int parse_behavior(const cJSON *json, const char *fallback, behavior *out, const char *where,
                          oxf_error *err) {
  const char *name;
  if (oxf_tok_string(json, "behavior", fallback, &name, where, err) != 0) return -1;
  if (name == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "tokenizer.json %s needs a \"behavior\"; re-export the folder",
                    where);
  for (size_t i = 0; i < sizeof behavior_names / sizeof *behavior_names; i++)
    if (strcmp(name, behavior_names[i]) == 0) {
      *out = (behavior)i;
      return 0;
    }
  return oxf_fail(
      err, OXF_MANIFEST_ERROR,
      "tokenizer.json %s has the behavior \"%.*s\", which the C host does not know (it reads Removed, "
      "Isolated, MergedWithPrevious, MergedWithNext and Contiguous)",
      where, shown(name), name);
}

/* A field holding exactly one character (a Rust char). */
static int parse_char(const cJSON *json, const char *key, uint32_t *code, const char *where, oxf_error *err) {
  const char *text;
  if (oxf_tok_string(json, key, NULL, &text, where, err) != 0) return -1;
  size_t at = 0, n = text != NULL ? strlen(text) : 0;
  if (n > 0) *code = oxf_utf8_next(text, &at);
  if (n == 0 || at != n)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json %s \"%s\" must be one character; re-export the folder", where, key);
  return 0;
}

static int parse_into(oxf_pretokenizer *p, const cJSON *json, oxf_error *err) {
  const char *type;
  if (!cJSON_IsObject(json))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json \"pre_tokenizer\" must be an object; re-export the folder");
  if (oxf_tok_string(json, "type", NULL, &type, "pre_tokenizer", err) != 0) return -1;
  if (type == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json pre_tokenizer has no \"type\"; re-export the folder");
  step s = {.kind = CHARACTERS, .behavior = ISOLATED};
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers"), *item;
    if (!cJSON_IsArray(list))
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "tokenizer.json pre_tokenizer Sequence needs a \"pretokenizers\" list; re-export the folder");
    cJSON_ArrayForEach(item, list) {
      if (parse_into(p, item, err) != 0) return -1; /* as deep as the JSON, which is bounded */
    }
    return 0;
  }
  if (strcmp(type, "BertPreTokenizer") == 0) {
    s.cls = SPACE, s.behavior = REMOVED;
    if (add_step(p, s, err) != 0) return -1;
    s.cls = PUNCTUATION, s.behavior = ISOLATED;
  } else if (strcmp(type, "WhitespaceSplit") == 0) {
    s.cls = SPACE, s.behavior = REMOVED;
  } else if (strcmp(type, "Whitespace") == 0) {
    s.kind = WHITESPACE;
  } else if (strcmp(type, "Punctuation") == 0) {
    s.cls = PUNCTUATION;
    if (parse_behavior(json, "Isolated", &s.behavior, "pre_tokenizer Punctuation", err) != 0) return -1;
  } else if (strcmp(type, "Digits") == 0) {
    bool individual;
    if (oxf_tok_bool(json, "individual_digits", false, &individual, "pre_tokenizer Digits", err) != 0)
      return -1;
    s.cls = NUMERIC, s.behavior = individual ? ISOLATED : CONTIGUOUS;
  } else if (strcmp(type, "CharDelimiterSplit") == 0) {
    s.cls = ONE_CHARACTER, s.behavior = REMOVED;
    if (parse_char(json, "delimiter", &s.code, "pre_tokenizer CharDelimiterSplit", err) != 0) return -1;
  } else if (strcmp(type, "FixedLength") == 0) {
    int64_t length;
    if (oxf_tok_int(json, "length", 5, 1, INT32_MAX, &length, "pre_tokenizer FixedLength", err) != 0)
      return -1;
    s.kind = FIXED_LENGTH, s.length = (size_t)length;
  } else if (strcmp(type, "Split") == 0) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(json, "pattern");
    s.kind = SPLIT;
    if (parse_behavior(json, NULL, &s.behavior, "pre_tokenizer Split", err) != 0 ||
        oxf_tok_bool(json, "invert", false, &s.invert, "pre_tokenizer Split", err) != 0 ||
        oxf_regex_parse(pattern, &s.regex, "pre_tokenizer Split", err) != 0)
      return -1;
  } else if (strcmp(type, "Metaspace") == 0) {
    const char *scheme;
    bool add_prefix_space;
    const char *where = "pre_tokenizer Metaspace";
    s.kind = METASPACE;
    if (parse_char(json, "replacement", &s.code, where, err) != 0 ||
        oxf_tok_string(json, "prepend_scheme", "always", &scheme, where, err) != 0 ||
        oxf_tok_bool(json, "split", true, &s.split, where, err) != 0 ||
        oxf_tok_bool(json, "add_prefix_space", true, &add_prefix_space, where, err) != 0)
      return -1;
    if (strcmp(scheme, "always") == 0) {
      s.prepend = PREPEND_ALWAYS;
    } else if (strcmp(scheme, "first") == 0) {
      s.prepend = PREPEND_FIRST;
    } else if (strcmp(scheme, "never") == 0) {
      s.prepend = PREPEND_NEVER;
    } else {
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "tokenizer.json %s has the prepend_scheme \"%.*s\", which the C host does not know (it reads "
          "always, first and never)",
          where, shown(scheme), scheme);
    }
    if (!add_prefix_space && s.prepend != PREPEND_NEVER) /* the library refuses this pair too */
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "tokenizer.json %s has add_prefix_space false with prepend_scheme \"%s\"; the library reads "
          "this as an error: set prepend_scheme to \"never\"",
          where, scheme);
  } else if (strcmp(type, "ByteLevel") == 0) {
    bool use_regex, trim_offsets; /* trim_offsets moves offsets only, never ids */
    const char *where = "pre_tokenizer ByteLevel";
    s.kind = BYTE_LEVEL;
    if (oxf_tok_bool(json, "add_prefix_space", true, &s.add_prefix_space, where, err) != 0 ||
        oxf_tok_bool(json, "trim_offsets", true, &trim_offsets, where, err) != 0 ||
        oxf_tok_bool(json, "use_regex", true, &use_regex, where, err) != 0)
      return -1;
    if (use_regex && oxf_regex_compile(GPT2_PATTERN, false, &s.regex, where, err) != 0) return -1;
  } else {
    return oxf_tok_unknown("pre_tokenizer", type, KNOWN_PRETOKENIZERS, err);
  }
  return add_step(p, s, err);
}

int oxf_pretokenizer_parse(const cJSON *json, oxf_pretokenizer **out, oxf_error *err) {
  *out = NULL;
  if (json == NULL || cJSON_IsNull(json)) return 0;
  oxf_pretokenizer *p = calloc(1, sizeof *p);
  if (p == NULL) return out_of_memory(err);
  if (parse_into(p, json, err) != 0) {
    oxf_pretokenizer_free(p);
    return -1;
  }
  *out = p;
  return 0;
}

void oxf_pretokenizer_free(oxf_pretokenizer *pretokenizer) {
  if (pretokenizer == NULL) return;
  for (size_t i = 0; i < pretokenizer->n; i++) oxf_regex_free(pretokenizer->steps[i].regex);
  free(pretokenizer->steps);
  free(pretokenizer);
}
