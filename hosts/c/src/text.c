/* Growable strings and lists for the tokenizer (tokenizer.h), UTF-8 and White_Space. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR,
                  "out of memory while tokenizing; free memory or shorten the text");
}

/* Room for `more` items of `size` bytes in *items (capacity *cap), doubling. */
static int grow(void **items, size_t *cap, size_t used, size_t more, size_t size, oxf_error *err) {
  if (used + more <= *cap) return 0;
  size_t want = *cap < 16 ? 16 : *cap;
  while (want < used + more) {
    if (want > SIZE_MAX / 2 / size) return out_of_memory(err);
    want *= 2;
  }
  void *bigger = realloc(*items, want * size);
  if (bigger == NULL) return out_of_memory(err);
  *items = bigger;
  *cap = want;
  return 0;
}

int oxf_str_add(oxf_str *s, const char *bytes, size_t n, oxf_error *err) {
  if (n > SIZE_MAX - s->len - 1) return out_of_memory(err);
  if (grow((void **)&s->data, &s->cap, s->len, n + 1, 1, err) != 0) return -1;
  if (n > 0) memcpy(s->data + s->len, bytes, n);
  s->len += n;
  s->data[s->len] = '\0';
  return 0;
}

int oxf_str_add_char(oxf_str *s, uint32_t code, oxf_error *err) {
  char bytes[4];
  return oxf_str_add(s, bytes, oxf_utf8_put(code, bytes), err);
}

void oxf_str_clear(oxf_str *s) {
  s->len = 0;
  if (s->data != NULL) s->data[0] = '\0';
}

void oxf_str_free(oxf_str *s) {
  free(s->data);
  *s = (oxf_str){0};
}

int oxf_pieces_add(oxf_pieces *pieces, const char *bytes, size_t n, bool at_start, oxf_error *err) {
  if (grow((void **)&pieces->items, &pieces->cap, pieces->n, 1, sizeof *pieces->items, err) != 0) return -1;
  oxf_piece *piece = &pieces->items[pieces->n];
  *piece = (oxf_piece){.at_start = at_start};
  if (oxf_str_add(&piece->text, bytes, n, err) != 0) return -1;
  pieces->n++;
  return 0;
}

void oxf_pieces_free(oxf_pieces *pieces) {
  for (size_t i = 0; i < pieces->n; i++) oxf_str_free(&pieces->items[i].text);
  free(pieces->items);
  *pieces = (oxf_pieces){0};
}

int oxf_ids_add(oxf_idlist *ids, int64_t id, oxf_error *err) {
  if (grow((void **)&ids->items, &ids->cap, ids->n, 1, sizeof *ids->items, err) != 0) return -1;
  ids->items[ids->n++] = id;
  return 0;
}

void oxf_ids_free(oxf_idlist *ids) {
  free(ids->items);
  *ids = (oxf_idlist){0};
}

uint32_t oxf_utf8_next(const char *text, size_t *at) {
  const uint8_t *p = (const uint8_t *)text + *at;
  uint32_t code;
  size_t n;
  if (p[0] < 0x80) {
    code = p[0], n = 1;
  } else if (p[0] < 0xe0) {
    code = (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f), n = 2;
  } else if (p[0] < 0xf0) {
    code = (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f), n = 3;
  } else {
    code = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 | (uint32_t)(p[2] & 0x3f) << 6 |
           (p[3] & 0x3f);
    n = 4;
  }
  *at += n;
  return code;
}

size_t oxf_utf8_put(uint32_t code, char out[4]) {
  if (code < 0x80) {
    out[0] = (char)code;
    return 1;
  }
  if (code < 0x800) {
    out[0] = (char)(0xc0 | code >> 6);
    out[1] = (char)(0x80 | (code & 0x3f));
    return 2;
  }
  if (code < 0x10000) {
    out[0] = (char)(0xe0 | code >> 12);
    out[1] = (char)(0x80 | (code >> 6 & 0x3f));
    out[2] = (char)(0x80 | (code & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | code >> 18);
  out[1] = (char)(0x80 | (code >> 12 & 0x3f));
  out[2] = (char)(0x80 | (code >> 6 & 0x3f));
  out[3] = (char)(0x80 | (code & 0x3f));
  return 4;
}

size_t oxf_utf8_count(const char *text, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += ((uint8_t)text[i] & 0xc0) != 0x80;
  return count;
}

bool oxf_is_whitespace(uint32_t code) {
  /* Unicode's PropList.txt White_Space (stable since Unicode 6.3). */
  if (code <= 0x20) return code == 0x20 || (code >= 0x09 && code <= 0x0d);
  switch (code) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000: return true;
    default: return code >= 0x2000 && code <= 0x200a;
  }
}
