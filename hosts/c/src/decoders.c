/* tokenizer.json "decoder": token strings back to text as the `tokenizers` library (0.23) does it, each
 * decoder's decode_chain over the list of strings, then the strings joined (Decoder::decode). A Sequence is
 * flattened into its steps at parse time (a Sequence's decode_chain is its decoders' one after another), so
 * decoding never recurses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define KNOWN_DECODERS \
  "ByteLevel, WordPiece, Metaspace, BPEDecoder, CTC, Sequence, Replace, Fuse, Strip and ByteFallback"

typedef enum {
  STEP_BYTE_LEVEL,
  STEP_WORDPIECE,
  STEP_METASPACE,
  STEP_BPE,
  STEP_CTC,
  STEP_REPLACE,
  STEP_FUSE,
  STEP_STRIP,
  STEP_BYTE_FALLBACK
} step_kind;

typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

typedef struct {
  step_kind kind;
  char *a, *b; /* WordPiece prefix; BPEDecoder suffix; CTC pad and word delimiter; Replace literal, content */
  size_t a_len, b_len;
  bool cleanup;
  uint32_t symbol; /* Metaspace replacement, Strip content */
  prepend_scheme scheme;
  size_t start, stop;
  oxf_regex *regex; /* Replace with a "Regex" pattern */
} step;

struct oxf_decoder {
  step *steps;
  size_t n, cap;
};

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory while decoding; free memory");
}

void oxf_decoder_free(oxf_decoder *decoder) {
  if (decoder == NULL) return;
  for (size_t i = 0; i < decoder->n; i++) {
    free(decoder->steps[i].a);
    free(decoder->steps[i].b);
    oxf_regex_free(decoder->steps[i].regex);
  }
  free(decoder->steps);
  free(decoder);
}

/* ---- parsing ---- */

static int bad_field(const char *type, const char *key, const char *what, oxf_error *err) {
  return oxf_fail(err, OXF_MANIFEST_ERROR,
                  "tokenizer.json decoder %s \"%s\" must be %s; re-export the folder", type, key, what);
}

/* A string field the library requires (serde has no default for it). */
static int need_string(const cJSON *json, const char *type, const char *key, char **out, size_t *n,
                       oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, key);
  if (!cJSON_IsString(item)) return bad_field(type, key, "a string", err);
  *n = strlen(item->valuestring);
  if ((*out = strdup(item->valuestring)) == NULL) return out_of_memory(err);
  return 0;
}

static int need_bool(const cJSON *json, const char *type, const char *key, bool *out, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, key);
  if (!cJSON_IsBool(item)) return bad_field(type, key, "true or false", err);
  *out = cJSON_IsTrue(item);
  return 0;
}

/* A Rust char: a string of exactly one character. */
static int need_char(const cJSON *json, const char *type, const char *key, uint32_t *out, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, key);
  if (!cJSON_IsString(item) || item->valuestring[0] == '\0')
    return bad_field(type, key, "one character", err);
  size_t at = 0;
  *out = oxf_utf8_next(item->valuestring, &at);
  if (item->valuestring[at] != '\0') return bad_field(type, key, "one character", err);
  return 0;
}

static int need_count(const cJSON *json, const char *type, const char *key, size_t *out, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, key);
  int64_t value;
  char where[64];
  snprintf(where, sizeof where, "decoder %s", type);
  if (item == NULL || cJSON_IsNull(item)) return bad_field(type, key, "a count", err);
  if (oxf_tok_int(json, key, 0, 0, INT64_MAX / 2, &value, where, err) != 0) return -1;
  *out = (size_t)value;
  return 0;
}

static int parse_into(oxf_decoder *decoder, const cJSON *json, oxf_error *err);

static int parse_step(oxf_decoder *decoder, const char *type, const cJSON *json, oxf_error *err) {
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "decoders");
    if (!cJSON_IsArray(list)) return bad_field(type, "decoders", "a list of decoders", err);
    for (const cJSON *item = list->child; item != NULL; item = item->next)
      if (parse_into(decoder, item, err) != 0) return -1;
    return 0;
  }
  if (decoder->n == decoder->cap) {
    size_t cap = decoder->cap < 4 ? 4 : decoder->cap * 2;
    step *bigger = realloc(decoder->steps, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    decoder->steps = bigger, decoder->cap = cap;
  }
  step *s = &decoder->steps[decoder->n++];
  *s = (step){0};
  if (strcmp(type, "ByteLevel") == 0) {
    bool unused;
    s->kind = STEP_BYTE_LEVEL;
    return need_bool(json, type, "add_prefix_space", &unused, err) != 0 ||
                   need_bool(json, type, "trim_offsets", &unused, err) != 0
               ? -1
               : 0;
  }
  if (strcmp(type, "WordPiece") == 0) {
    s->kind = STEP_WORDPIECE;
    if (need_string(json, type, "prefix", &s->a, &s->a_len, err) != 0) return -1;
    return need_bool(json, type, "cleanup", &s->cleanup, err);
  }
  if (strcmp(type, "Metaspace") == 0) {
    s->kind = STEP_METASPACE;
    const char *scheme;
    bool add_prefix_space;
    if (need_char(json, type, "replacement", &s->symbol, err) != 0 ||
        oxf_tok_string(json, "prepend_scheme", "always", &scheme, "decoder Metaspace", err) != 0 ||
        oxf_tok_bool(json, "add_prefix_space", true, &add_prefix_space, "decoder Metaspace", err) != 0)
      return -1;
    if (strcmp(scheme, "always") == 0) {
      s->scheme = PREPEND_ALWAYS;
    } else if (strcmp(scheme, "first") == 0) {
      s->scheme = PREPEND_FIRST;
    } else if (strcmp(scheme, "never") == 0) {
      s->scheme = PREPEND_NEVER;
    } else {
      return bad_field(type, "prepend_scheme", "\"always\", \"first\" or \"never\"", err);
    }
    if (!add_prefix_space && s->scheme != PREPEND_NEVER) /* the library refuses this pair */
      return bad_field(type, "prepend_scheme", "\"never\" when add_prefix_space is false", err);
    return 0;
  }
  if (strcmp(type, "BPEDecoder") == 0) {
    s->kind = STEP_BPE;
    return need_string(json, type, "suffix", &s->a, &s->a_len, err);
  }
  if (strcmp(type, "CTC") == 0) {
    s->kind = STEP_CTC;
    if (need_string(json, type, "pad_token", &s->a, &s->a_len, err) != 0 ||
        need_string(json, type, "word_delimiter_token", &s->b, &s->b_len, err) != 0)
      return -1;
    return need_bool(json, type, "cleanup", &s->cleanup, err);
  }
  if (strcmp(type, "Replace") == 0) {
    s->kind = STEP_REPLACE;
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(json, "pattern");
    const cJSON *literal = cJSON_GetObjectItemCaseSensitive(pattern, "String");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    if (!cJSON_IsObject(pattern) || cJSON_GetArraySize(pattern) != 1 ||
        !(cJSON_IsString(literal) || cJSON_IsString(regex)))
      return bad_field(type, "pattern", "{\"String\": ...} or {\"Regex\": ...}", err);
    if (need_string(json, type, "content", &s->b, &s->b_len, err) != 0) return -1;
    if (literal != NULL) {
      s->a_len = strlen(literal->valuestring);
      return (s->a = strdup(literal->valuestring)) == NULL ? out_of_memory(err) : 0;
    }
    return oxf_regex_parse(pattern, &s->regex, "tokenizer.json decoder Replace", err);
  }
  if (strcmp(type, "Fuse") == 0) {
    s->kind = STEP_FUSE;
    return 0;
  }
  if (strcmp(type, "Strip") == 0) {
    s->kind = STEP_STRIP;
    if (need_char(json, type, "content", &s->symbol, err) != 0 ||
        need_count(json, type, "start", &s->start, err) != 0)
      return -1;
    return need_count(json, type, "stop", &s->stop, err);
  }
  if (strcmp(type, "ByteFallback") == 0) {
    s->kind = STEP_BYTE_FALLBACK;
    return 0;
  }
  decoder->n--;
  return oxf_tok_unknown("decoder", type, KNOWN_DECODERS, err);
}

/* Steps from `keep` on dropped (a failed attempt). */
static void drop_steps(oxf_decoder *decoder, size_t keep) {
  while (decoder->n > keep) {
    step *s = &decoder->steps[--decoder->n];
    free(s->a), free(s->b), oxf_regex_free(s->regex);
  }
}

static int parse_into(oxf_decoder *decoder, const cJSON *json, oxf_error *err) {
  static const char *const tagged[] = {"ByteLevel", "WordPiece", "Metaspace", "BPEDecoder", "CTC",
                                       "Sequence",  "Replace",   "Fuse",      "Strip",      "ByteFallback"};
  /* Without a known "type" the library tries these in turn, which read their fields whatever "type" says. */
  static const char *const untagged[] = {"BPEDecoder", "WordPiece", "CTC", "Replace", "Strip"};
  if (!cJSON_IsObject(json))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json \"decoder\" must be an object; re-export the folder");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
  for (size_t i = 0; cJSON_IsString(type) && i < sizeof tagged / sizeof tagged[0]; i++)
    if (strcmp(type->valuestring, tagged[i]) == 0) return parse_step(decoder, tagged[i], json, err);
  for (size_t i = 0; i < sizeof untagged / sizeof untagged[0]; i++) {
    size_t keep = decoder->n;
    oxf_error attempt = {0};
    if (parse_step(decoder, untagged[i], json, &attempt) == 0) return 0;
    drop_steps(decoder, keep);
    if (attempt.kind == OXF_INFERENCE_ERROR) return oxf_fail(err, attempt.kind, "%s", attempt.message);
  }
  if (cJSON_IsString(type)) return oxf_tok_unknown("decoder", type->valuestring, KNOWN_DECODERS, err);
  return oxf_fail(err, OXF_MANIFEST_ERROR,
                  "tokenizer.json decoder needs a \"type\" (one of " KNOWN_DECODERS
                  "); re-export the folder");
}

int oxf_decoder_parse(const cJSON *json, oxf_decoder **out, oxf_error *err) {
  *out = NULL;
  if (json == NULL || cJSON_IsNull(json)) return 0;
  oxf_decoder *decoder = calloc(1, sizeof *decoder);
  if (decoder == NULL) return out_of_memory(err);
  if (parse_into(decoder, json, err) != 0) {
    oxf_decoder_free(decoder);
    return -1;
  }
  *out = decoder;
  return 0;
}

/* ---- the steps: each turns `in` into `out` (cleared first) ---- */

/* The first occurrence of needle (not empty) in text[0..n), or NULL. */
static const char *find_bytes(const char *text, size_t n, const char *needle, size_t m) {
  for (const char *at = text; m <= n - (size_t)(at - text);) {
    const char *hit = memchr(at, needle[0], n - (size_t)(at - text) - m + 1);
    if (hit == NULL) return NULL;
    if (memcmp(hit, needle, m) == 0) return hit;
    at = hit + 1;
  }
  return NULL;
}

/* Rust's str::replace: every non-overlapping match from the left; an empty pattern matches at every
 * character boundary, both ends included. */
static int replace_all(const char *text, size_t n, const char *from, size_t from_n, const char *to,
                       size_t to_n, oxf_str *out, oxf_error *err) {
  size_t at = 0;
  if (from_n == 0) {
    if (oxf_str_add(out, to, to_n, err) != 0) return -1;
    while (at < n) {
      size_t next = at;
      oxf_utf8_next(text, &next);
      if (oxf_str_add(out, text + at, next - at, err) != 0 || oxf_str_add(out, to, to_n, err) != 0) return -1;
      at = next;
    }
    return 0;
  }
  while (at < n) {
    const char *hit = n - at >= from_n ? find_bytes(text + at, n - at, from, from_n) : NULL;
    size_t stop = hit != NULL ? (size_t)(hit - text) : n;
    if (oxf_str_add(out, text + at, stop - at, err) != 0) return -1;
    if (hit == NULL) break;
    if (oxf_str_add(out, to, to_n, err) != 0) return -1;
    at = stop + from_n;
  }
  return out->data != NULL ? 0 : oxf_str_add(out, "", 0, err);
}

/* In place: `s` replaced by s with `from` replaced by `to`. */
static int replace_in(oxf_str *s, const char *from, const char *to, oxf_error *err) {
  oxf_str out = {0};
  if (replace_all(s->data != NULL ? s->data : "", s->len, from, strlen(from), to, strlen(to), &out, err) !=
      0) {
    oxf_str_free(&out);
    return -1;
  }
  oxf_str_free(s);
  *s = out;
  return 0;
}

/* The library's wordpiece::cleanup, one replacement after another. */
static int cleanup(oxf_str *s, oxf_error *err) {
  static const char *const pairs[][2] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
    if (replace_in(s, pairs[i][0], pairs[i][1], err) != 0) return -1;
  return 0;
}

/* GPT-2's table, read backwards: the byte a character of the byte-level alphabet stands for, or -1. */
static int byte_of_char(uint32_t c) {
  if ((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff)) return (int)c;
  if (c < 0x100 || c >= 0x100 + 68) return -1;
  uint32_t n = c - 0x100; /* the bytes outside those ranges, in order, from U+0100 on */
  return n < 33 ? (int)n : n < 67 ? (int)(0x7f + n - 33) : 0xad;
}

/* Rust's String::from_utf8_lossy: each maximal invalid subsequence (the Unicode practice of substituting
 * maximal subparts) becomes one U+FFFD. */
static int utf8_lossy(const uint8_t *bytes, size_t n, oxf_str *out, oxf_error *err) {
  size_t at = 0;
  while (at < n) {
    uint8_t b = bytes[at];
    size_t need = b < 0x80                 ? 0
                  : b >= 0xc2 && b <= 0xdf ? 1
                  : b >= 0xe0 && b <= 0xef ? 2
                  : b >= 0xf0 && b <= 0xf4 ? 3
                                           : 9;
    if (need == 0 || need == 9) {
      if (need == 0 ? oxf_str_add(out, (const char *)bytes + at, 1, err) : oxf_str_add_char(out, 0xfffd, err))
        return -1;
      at++;
      continue;
    }
    /* The second byte's range excludes overlong forms, surrogates and code points past U+10FFFF. */
    uint8_t low = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
    uint8_t high = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
    size_t got = 1;
    while (got <= need && at + got < n) {
      uint8_t c = bytes[at + got];
      if (got == 1 ? (c < low || c > high) : (c < 0x80 || c > 0xbf)) break;
      got++;
    }
    if (got == need + 1) {
      if (oxf_str_add(out, (const char *)bytes + at, got, err) != 0) return -1;
    } else if (oxf_str_add_char(out, 0xfffd, err) != 0) {
      return -1;
    }
    at += got;
  }
  return 0;
}

static int byte_level(oxf_pieces *in, oxf_pieces *out, oxf_error *err) {
  oxf_str bytes = {0}, text = {0};
  int status = 0;
  for (size_t i = 0; status == 0 && i < in->n; i++) {
    const oxf_str *token = &in->items[i].text;
    size_t start = bytes.len, at = 0;
    bool mapped = true;
    while (status == 0 && mapped && at < token->len) {
      int b = byte_of_char(oxf_utf8_next(token->data, &at));
      char c = (char)b;
      if (b < 0)
        mapped = false;
      else
        status = oxf_str_add(&bytes, &c, 1, err);
    }
    if (status == 0 && !mapped) { /* a character outside the table: the token's own UTF-8 */
      bytes.len = start;
      status = oxf_str_add(&bytes, token->data, token->len, err);
    }
  }
  if (status == 0) status = utf8_lossy((const uint8_t *)bytes.data, bytes.len, &text, err);
  if (status == 0) status = oxf_pieces_add(out, text.data != NULL ? text.data : "", text.len, true, err);
  oxf_str_free(&bytes), oxf_str_free(&text);
  return status;
}

static int hex_digit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* "<0xXX>" as Rust's u8::from_str_radix(XX, 16) reads XX (which takes "+F" as 15), or -1. */
static int fallback_byte(const oxf_str *token) {
  if (token->len != 6 || memcmp(token->data, "<0x", 3) != 0 || token->data[5] != '>') return -1;
  if (token->data[3] == '+') return hex_digit(token->data[4]);
  int high = hex_digit(token->data[3]), low = hex_digit(token->data[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

static int flush_bytes(oxf_str *bytes, oxf_pieces *out, oxf_error *err) {
  if (bytes->len == 0) return 0;
  int status = 0;
  if (oxf_valid_utf8((const uint8_t *)bytes->data, bytes->len)) {
    status = oxf_pieces_add(out, bytes->data, bytes->len, false, err);
  } else {
    for (size_t i = 0; status == 0 && i < bytes->len; i++)
      status = oxf_pieces_add(out, "\xef\xbf\xbd", 3, false, err);
  }
  oxf_str_clear(bytes);
  return status;
}

static int byte_fallback(oxf_pieces *in, oxf_pieces *out, oxf_error *err) {
  oxf_str bytes = {0};
  int status = 0;
  for (size_t i = 0; status == 0 && i < in->n; i++) {
    const oxf_str *token = &in->items[i].text;
    int b = fallback_byte(token);
    char c = (char)b;
    if (b >= 0) {
      status = oxf_str_add(&bytes, &c, 1, err);
    } else if ((status = flush_bytes(&bytes, out, err)) == 0) {
      status = oxf_pieces_add(out, token->data, token->len, false, err);
    }
  }
  if (status == 0) status = flush_bytes(&bytes, out, err);
  oxf_str_free(&bytes);
  return status;
}

static int strip(const step *s, const oxf_str *token, oxf_pieces *out, oxf_error *err) {
  size_t n_chars = oxf_utf8_count(token->data, token->len), start_cut = 0, stop_cut = n_chars;
  size_t head = 0, tail = token->len; /* byte offsets of start_cut and stop_cut */
  for (size_t i = 0, at = 0; i < s->start && i < n_chars; i++) {
    size_t next = at;
    if (oxf_utf8_next(token->data, &next) != s->symbol) break;
    start_cut = i + 1, head = at = next;
  }
  for (size_t i = 0, at = token->len; i < s->stop; i++) {
    if (i >= n_chars)
      return oxf_fail(err, OXF_INPUT_ERROR,
                      "the Strip decoder fails on this token, as the library does (it "
                      "strips more characters than the token has)");
    size_t before = at - 1;
    while (before > 0 && ((uint8_t)token->data[before] & 0xc0) == 0x80) before--;
    size_t probe = before;
    if (oxf_utf8_next(token->data, &probe) != s->symbol) break;
    stop_cut = n_chars - i - 1, tail = at = before;
  }
  if (start_cut > stop_cut)
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "the Strip decoder fails on this token, as the library does (its start "
                    "and stop cuts cross)");
  return oxf_pieces_add(out, token->data + head, tail - head, false, err);
}

/* The library's Replace::decode_chain: an empty token stays empty; otherwise every match of the pattern
 * (for a regular expression, an empty match right where the last match ended is skipped) becomes the
 * content. */
static int replace_token(const step *s, const oxf_str *token, oxf_pieces *out, oxf_error *err) {
  oxf_str text = {0};
  int status = 0;
  if (s->regex == NULL) {
    status = token->len == 0
                 ? oxf_str_add(&text, "", 0, err)
                 : replace_all(token->data, token->len, s->a, s->a_len, s->b, s->b_len, &text, err);
  } else {
    size_t from = 0, done = 0, last_end = 0;
    bool matched = false;
    status = oxf_str_add(&text, "", 0, err);
    while (status == 0 && token->len > 0 && from <= token->len) {
      size_t start, end;
      int found = oxf_regex_find(s->regex, token->data, token->len, from, &start, &end, err);
      if (found <= 0) {
        status = found;
        break;
      }
      if (start == end && matched && end == last_end) {
        if (from >= token->len) break;
        oxf_utf8_next(token->data, &from);
        continue;
      }
      status = oxf_str_add(&text, token->data + done, start - done, err);
      if (status == 0) status = oxf_str_add(&text, s->b, s->b_len, err);
      done = from = last_end = end, matched = true;
    }
    if (status == 0) status = oxf_str_add(&text, token->data + done, token->len - done, err);
  }
  if (status == 0) status = oxf_pieces_add(out, text.data, text.len, false, err);
  oxf_str_free(&text);
  return status;
}

static int run_step(const step *s, oxf_pieces *in, oxf_pieces *out, oxf_error *err) {
  switch (s->kind) {
    case STEP_BYTE_LEVEL: return byte_level(in, out, err);
    case STEP_BYTE_FALLBACK: return byte_fallback(in, out, err);
    case STEP_FUSE: {
      oxf_str all = {0};
      int status = oxf_str_add(&all, "", 0, err);
      for (size_t i = 0; status == 0 && i < in->n; i++)
        status = oxf_str_add(&all, in->items[i].text.data, in->items[i].text.len, err);
      if (status == 0) status = oxf_pieces_add(out, all.data, all.len, false, err);
      oxf_str_free(&all);
      return status;
    }
    default: break;
  }
  for (size_t i = 0; i < in->n; i++) {
    oxf_str *token = &in->items[i].text;
    if (token->data == NULL && oxf_str_add(token, "", 0, err) != 0) return -1;
    switch (s->kind) {
      case STEP_WORDPIECE: {
        oxf_str text = {0};
        bool prefixed = token->len >= s->a_len && memcmp(token->data, s->a, s->a_len) == 0;
        int status =
            i == 0     ? oxf_str_add(&text, token->data, token->len, err)
            : prefixed ? oxf_str_add(&text, token->data + s->a_len, token->len - s->a_len, err)
                       : oxf_str_add(&text, " ", 1, err) || oxf_str_add(&text, token->data, token->len, err);
        if (status == 0 && s->cleanup) status = cleanup(&text, err);
        if (status == 0) status = oxf_pieces_add(out, text.data, text.len, false, err);
        oxf_str_free(&text);
        if (status != 0) return -1;
        break;
      }
      case STEP_METASPACE: {
        oxf_str text = {0};
        int status = oxf_str_add(&text, "", 0, err);
        for (size_t at = 0; status == 0 && at < token->len;) {
          uint32_t c = oxf_utf8_next(token->data, &at);
          if (c != s->symbol)
            status = oxf_str_add_char(&text, c, err);
          else if (i != 0 || s->scheme == PREPEND_NEVER)
            status = oxf_str_add(&text, " ", 1, err);
        }
        if (status == 0) status = oxf_pieces_add(out, text.data, text.len, false, err);
        oxf_str_free(&text);
        if (status != 0) return -1;
        break;
      }
      case STEP_BPE: {
        oxf_str text = {0};
        const char *space = i + 1 == in->n ? "" : " ";
        int status = replace_all(token->data, token->len, s->a, s->a_len, space, strlen(space), &text, err);
        if (status == 0) status = oxf_pieces_add(out, text.data, text.len, false, err);
        oxf_str_free(&text);
        if (status != 0) return -1;
        break;
      }
      case STEP_CTC: {
        if (i > 0 && in->items[i - 1].text.len == token->len &&
            memcmp(in->items[i - 1].text.data, token->data, token->len) == 0)
          break; /* consecutive duplicates are one token */
        oxf_str text = {0};
        int status = replace_all(token->data, token->len, s->a, s->a_len, "", 0, &text, err);
        if (status == 0 && s->cleanup) status = cleanup(&text, err);
        if (status == 0 && s->cleanup) status = replace_in(&text, s->b, " ", err);
        if (status == 0 && text.len > 0) status = oxf_pieces_add(out, text.data, text.len, false, err);
        oxf_str_free(&text);
        if (status != 0) return -1;
        break;
      }
      case STEP_REPLACE:
        if (replace_token(s, token, out, err) != 0) return -1;
        break;
      case STEP_STRIP:
        if (strip(s, token, out, err) != 0) return -1;
        break;
      default: break;
    }
  }
  return 0;
}

int oxf_decode_tokens(const oxf_decoder *decoder, oxf_pieces *tokens, oxf_str *out, oxf_error *err) {
  oxf_str_clear(out);
  if (oxf_str_add(out, "", 0, err) != 0) return -1;
  for (size_t k = 0; decoder != NULL && k < decoder->n; k++) {
    oxf_pieces next = {0};
    if (run_step(&decoder->steps[k], tokens, &next, err) != 0) {
      oxf_pieces_free(&next);
      return -1;
    }
    oxf_pieces_free(tokens);
    *tokens = next;
  }
  for (size_t i = 0; i < tokens->n; i++) {
    if (decoder == NULL && i > 0 && oxf_str_add(out, " ", 1, err) != 0) return -1;
    if (oxf_str_add(out, tokens->items[i].text.data, tokens->items[i].text.len, err) != 0) return -1;
  }
  return 0;
}
