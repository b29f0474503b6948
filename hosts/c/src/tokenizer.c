/* An export's tokenizer.json, end to end: the added tokens (split out of the text before anything else, as
 * the `tokenizers` library's AddedVocabulary does), then per segment the normalizer, the pre-tokenizer and
 * the model; decoding through the added vocabulary and the model back to token strings, then the decoder.
 * The parts themselves live in normalizers.c, pretokenizers.c, models.c and decoders.c (tokenizer.h).
 *
 * Like the Python runtime's TextTokenizer.encode, no special tokens are added: the manifest's framing is
 * applied by the caller (the framing was measured from the post-processor at import). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "tokenizer.h"

typedef struct {
  char *content; /* as written in tokenizer.json */
  size_t length;
  char *decoded; /* what decoding shows: the normalized content for a normalized token */
  size_t decoded_length;
  int64_t id;
  bool single_word, lstrip, rstrip, normalized, special;
} added_token;

struct oxf_tokenizer {
  cJSON *json;
  oxf_normalizer *normalizer;
  oxf_pretokenizer *pretokenizer;
  oxf_tokmodel *model;
  oxf_decoder *decoder;
  added_token *added;
  size_t n_added;
  int64_t size; /* ids are in [0, size) */
};

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR,
                  "out of memory while tokenizing; free memory or shorten the text");
}

/* ---- parsing helpers shared by the parts (tokenizer.h) ---- */

static const cJSON *member(const cJSON *object, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  return item == NULL || cJSON_IsNull(item) ? NULL : item;
}

int oxf_tok_string(const cJSON *object, const char *key, const char *fallback, const char **value,
                   const char *where, oxf_error *err) {
  const cJSON *item = member(object, key);
  if (item == NULL) {
    *value = fallback;
    return 0;
  }
  if (!cJSON_IsString(item))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json %s \"%s\" must be a string; re-export the folder", where, key);
  *value = item->valuestring;
  return 0;
}

int oxf_tok_bool(const cJSON *object, const char *key, bool fallback, bool *value, const char *where,
                 oxf_error *err) {
  const cJSON *item = member(object, key);
  if (item == NULL) {
    *value = fallback;
    return 0;
  }
  if (!cJSON_IsBool(item))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json %s \"%s\" must be true or false; re-export the folder", where, key);
  *value = cJSON_IsTrue(item);
  return 0;
}

int oxf_tok_int(const cJSON *object, const char *key, int64_t fallback, int64_t low, int64_t high,
                int64_t *value, const char *where, oxf_error *err) {
  const cJSON *item = member(object, key);
  if (item == NULL) {
    *value = fallback;
    return 0;
  }
  double number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
  if (!(number >= (double)low && number <= (double)high) || number != floor(number))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json %s \"%s\" must be an integer in %jd .. %jd; re-export the folder", where,
                    key, (intmax_t)low, (intmax_t)high);
  *value = (int64_t)number;
  return 0;
}

int oxf_tok_unknown(const char *part, const char *type, const char *known, oxf_error *err) {
  return oxf_fail(err, OXF_MANIFEST_ERROR,
                  "tokenizer.json has a %s of type \"%s\", which the C host does not read (it reads %s); "
                  "export the model with a tokenizer of those types",
                  part, type, known);
}

/* ---- the added vocabulary ---- */

static void free_added(oxf_tokenizer *t) {
  for (size_t i = 0; i < t->n_added; i++) {
    if (t->added[i].decoded != t->added[i].content) free(t->added[i].decoded);
    free(t->added[i].content);
  }
  free(t->added);
  t->added = NULL;
  t->n_added = 0;
}

static char *copy_bytes(const char *bytes, size_t n) {
  char *copy = malloc(n + 1);
  if (copy != NULL) {
    memcpy(copy, bytes, n);
    copy[n] = '\0';
  }
  return copy;
}

static int parse_added(oxf_tokenizer *t, const cJSON *list, oxf_error *err) {
  if (list == NULL || cJSON_IsNull(list)) return 0;
  if (!cJSON_IsArray(list))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json \"added_tokens\" must be a list; re-export the folder");
  size_t n = (size_t)cJSON_GetArraySize(list);
  t->added = calloc(n == 0 ? 1 : n, sizeof *t->added);
  if (t->added == NULL) return out_of_memory(err);
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    added_token *token = &t->added[t->n_added];
    const char *content;
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%zu]", t->n_added);
    if (!cJSON_IsObject(item))
      return oxf_fail(err, OXF_MANIFEST_ERROR,
                      "tokenizer.json %s must be an object with \"content\" and \"id\"; re-export the folder",
                      where);
    if (oxf_tok_string(item, "content", NULL, &content, where, err) != 0 ||
        oxf_tok_int(item, "id", -1, 0, INT32_MAX, &token->id, where, err) != 0 ||
        oxf_tok_bool(item, "single_word", false, &token->single_word, where, err) != 0 ||
        oxf_tok_bool(item, "lstrip", false, &token->lstrip, where, err) != 0 ||
        oxf_tok_bool(item, "rstrip", false, &token->rstrip, where, err) != 0 ||
        oxf_tok_bool(item, "normalized", true, &token->normalized, where, err) != 0 ||
        oxf_tok_bool(item, "special", false, &token->special, where, err) != 0)
      return -1;
    if (content == NULL || token->id < 0)
      return oxf_fail(err, OXF_MANIFEST_ERROR,
                      "tokenizer.json added_tokens[%zu] needs \"content\" and \"id\"; re-export the folder",
                      t->n_added);
    size_t length = strlen(content);
    if (length == 0) continue; /* the library ignores an empty added token */
    token->content = copy_bytes(content, length);
    if (token->content == NULL) return out_of_memory(err);
    token->length = length;
    token->decoded = token->content;
    token->decoded_length = length;
    t->n_added++;
    if (token->normalized && t->normalizer != NULL) {
      /* Matched (and decoded) in its normalized form, as the library caches it. */
      oxf_str normed = {0};
      if (oxf_normalize(t->normalizer, content, length, &normed, err) != 0) {
        oxf_str_free(&normed);
        return -1;
      }
      if (normed.len != length || memcmp(normed.data, content, length) != 0) {
        token->decoded = normed.data != NULL ? normed.data : copy_bytes("", 0);
        token->decoded_length = normed.len;
        if (token->decoded == NULL) return out_of_memory(err);
      } else {
        oxf_str_free(&normed);
      }
    }
  }
  return 0;
}

/* The code point that ends text[0..at) (at > 0). */
static uint32_t char_before(const char *text, size_t at) {
  size_t start = at - 1;
  while (start > 0 && ((uint8_t)text[start] & 0xc0) == 0x80) start--;
  return oxf_utf8_next(text, &start);
}

/* The longest added token (of the normalized or the raw kind) that matches at text + at, or NULL. */
static const added_token *match_at(const oxf_tokenizer *t, bool normalized, const char *text, size_t n,
                                   size_t at) {
  const added_token *best = NULL;
  for (size_t i = 0; i < t->n_added; i++) {
    const added_token *token = &t->added[i];
    if (token->normalized != normalized) continue;
    size_t length = normalized ? token->decoded_length : token->length;
    const char *pattern = normalized ? token->decoded : token->content;
    if (length > n - at || (best != NULL && length <= (normalized ? best->decoded_length : best->length)))
      continue;
    if (memcmp(text + at, pattern, length) == 0) best = token;
  }
  return best;
}

typedef struct {
  size_t start, end;
  const added_token *token; /* NULL: text */
} segment;

typedef struct {
  segment *items;
  size_t n, cap;
} segments;

static int add_segment(segments *list, size_t start, size_t end, const added_token *token, oxf_error *err) {
  if (list->n == list->cap) {
    size_t cap = list->cap < 8 ? 8 : list->cap * 2;
    segment *bigger = realloc(list->items, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    list->items = bigger;
    list->cap = cap;
  }
  list->items[list->n++] = (segment){start, end, token};
  return 0;
}

/* The library's find_matches: leftmost-longest matches, left to right without overlap; a single_word token
 * that touches a word character is passed over (its text stays text), lstrip / rstrip take the spaces
 * beside the token into it. */
static int split_added(const oxf_tokenizer *t, bool normalized, const char *text, size_t n, segments *out,
                       oxf_error *err) {
  size_t done = 0, at = 0;
  while (at < n) {
    const added_token *token = match_at(t, normalized, text, n, at);
    if (token == NULL) {
      at++;
      continue;
    }
    size_t start = at, stop = at + (normalized ? token->decoded_length : token->length);
    at = stop;
    if (token->single_word) {
      bool word_before = start > 0 && oxf_is_word_char(char_before(text, start));
      size_t next = stop;
      bool word_after = stop < n && oxf_is_word_char(oxf_utf8_next(text, &next));
      if (word_before || word_after) continue;
    }
    if (token->lstrip) {
      while (start > done && oxf_is_whitespace(char_before(text, start))) {
        uint32_t c = char_before(text, start);
        char bytes[4];
        start -= oxf_utf8_put(c, bytes);
      }
    }
    if (token->rstrip) {
      while (stop < n) {
        size_t next = stop;
        if (!oxf_is_whitespace(oxf_utf8_next(text, &next))) break;
        stop = next;
      }
      at = stop;
    }
    if (done < start && add_segment(out, done, start, NULL, err) != 0) return -1;
    if (add_segment(out, start, stop, token, err) != 0) return -1;
    done = stop;
  }
  if (done < n) return add_segment(out, done, n, NULL, err);
  return 0;
}

/* ---- opening ---- */

static int parse_parts(oxf_tokenizer *t, oxf_error *err) {
  const cJSON *json = t->json;
  if (!cJSON_IsObject(json))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "tokenizer.json must hold a JSON object; re-export the folder");
  const cJSON *model = member(json, "model");
  if (model == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "tokenizer.json has no \"model\"; re-export the folder");
  /* "truncation" and "padding" are not read: the caller bounds and pads lengths, as the Python runtime
   * does (it removes them from the library's tokenizer). */
  if (oxf_normalizer_parse(member(json, "normalizer"), &t->normalizer, err) != 0 ||
      oxf_pretokenizer_parse(member(json, "pre_tokenizer"), &t->pretokenizer, err) != 0 ||
      oxf_tokmodel_parse(model, &t->model, err) != 0 ||
      oxf_decoder_parse(member(json, "decoder"), &t->decoder, err) != 0 ||
      parse_added(t, member(json, "added_tokens"), err) != 0)
    return -1;
  t->size = oxf_tokmodel_size(t->model);
  for (size_t i = 0; i < t->n_added; i++)
    if (t->added[i].id >= t->size) t->size = t->added[i].id + 1;
  return 0;
}

oxf_tokenizer *oxf_tokenizer_from_bytes(const uint8_t *bytes, size_t size, const char *shown,
                                        oxf_error *err) {
  oxf_tokenizer *t = calloc(1, sizeof *t);
  if (t == NULL) {
    out_of_memory(err);
    return NULL;
  }
  t->json = oxf_json_parse(bytes, size, shown, err);
  if (t->json == NULL || parse_parts(t, err) != 0) {
    oxf_tokenizer_close(t);
    return NULL;
  }
  return t;
}

void oxf_tokenizer_close(oxf_tokenizer *t) {
  if (t == NULL) return;
  free_added(t);
  oxf_normalizer_free(t->normalizer);
  oxf_pretokenizer_free(t->pretokenizer);
  oxf_tokmodel_free(t->model);
  oxf_decoder_free(t->decoder);
  cJSON_Delete(t->json);
  free(t);
}

int64_t oxf_tokenizer_size(const oxf_tokenizer *t) {
  return t->size;
}

/* ---- encoding ---- */

static int check_text(const char *text, size_t n, oxf_error *err) {
  if (text == NULL && n > 0) return oxf_fail(err, OXF_INPUT_ERROR, "text is NULL; pass UTF-8 text");
  if (n > 0 && !oxf_valid_utf8((const uint8_t *)text, n))
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "the text (%zu bytes) is not valid UTF-8; pass UTF-8 text (decode other encodings first, "
                    "replacing what is not text)",
                    n);
  return 0;
}

/* One text segment's pieces: normalized, split on the normalized added tokens, pre-tokenized; the model's
 * ids (and the added tokens' ids) appended to `ids` in order. When `stages` is not NULL, the normalized text
 * and the pieces are kept there instead of being tokenized (for `onnxformer-c tokenize --stages`). */
static int encode_segment(const oxf_tokenizer *t, const char *text, size_t n, bool at_start, oxf_idlist *ids,
                          oxf_str *normalized_out, oxf_pieces *pieces_out, oxf_error *err) {
  oxf_str normalized = {0};
  segments parts = {0};
  oxf_pieces pieces = {0};
  int status = -1;
  const char *norm = text;
  size_t norm_n = n;
  if (t->normalizer != NULL) {
    if (oxf_normalize(t->normalizer, text, n, &normalized, err) != 0) goto done;
    norm = normalized.data != NULL ? normalized.data : "";
    norm_n = normalized.len;
  }
  if (normalized_out != NULL && oxf_str_add(normalized_out, norm, norm_n, err) != 0) goto done;
  if (split_added(t, true, norm, norm_n, &parts, err) != 0) goto done;
  for (size_t i = 0; i < parts.n; i++) {
    const segment *part = &parts.items[i];
    if (part->token != NULL) {
      if (ids != NULL && oxf_ids_add(ids, part->token->id, err) != 0) goto done;
      continue;
    }
    oxf_pieces_free(&pieces);
    if (oxf_pieces_add(&pieces, norm + part->start, part->end - part->start, at_start && part->start == 0,
                       err) != 0)
      goto done;
    if (t->pretokenizer != NULL && oxf_pretokenize(t->pretokenizer, &pieces, err) != 0) goto done;
    for (size_t k = 0; k < pieces.n; k++) {
      const oxf_str *piece = &pieces.items[k].text;
      if (piece->len == 0) continue;
      if (pieces_out != NULL &&
          oxf_pieces_add(pieces_out, piece->data, piece->len, pieces.items[k].at_start, err) != 0)
        goto done;
      if (ids != NULL && oxf_tokmodel_tokenize(t->model, piece->data, piece->len, ids, err) != 0) goto done;
    }
  }
  status = 0;
done:
  oxf_pieces_free(&pieces);
  free(parts.items);
  oxf_str_free(&normalized);
  return status;
}

int oxf_tokenizer_run(const oxf_tokenizer *t, const char *text, size_t n, oxf_idlist *ids,
                      oxf_str *normalized, oxf_pieces *pieces, oxf_error *err) {
  if (check_text(text, n, err) != 0) return -1;
  segments parts = {0};
  int status = split_added(t, false, text == NULL ? "" : text, n, &parts, err);
  for (size_t i = 0; status == 0 && i < parts.n; i++) {
    const segment *part = &parts.items[i];
    if (part->token != NULL) {
      if (ids != NULL) status = oxf_ids_add(ids, part->token->id, err);
      continue;
    }
    status = encode_segment(t, text + part->start, part->end - part->start, part->start == 0, ids, normalized,
                            pieces, err);
  }
  free(parts.items);
  return status;
}

int oxf_tokenize(const oxf_tokenizer *t, const char *text, size_t n, int64_t **ids, size_t *n_ids,
                 oxf_error *err) {
  oxf_idlist list = {0};
  *ids = NULL;
  *n_ids = 0;
  if (oxf_tokenizer_run(t, text, n, &list, NULL, NULL, err) != 0) {
    oxf_ids_free(&list);
    return -1;
  }
  *ids = list.items;
  *n_ids = list.n;
  return 0;
}

/* ---- decoding ---- */

static const added_token *added_by_id(const oxf_tokenizer *t, int64_t id) {
  for (size_t i = t->n_added; i-- > 0;)
    if (t->added[i].id == id) return &t->added[i];
  return NULL;
}

static bool is_special_text(const oxf_tokenizer *t, const char *text, size_t n) {
  for (size_t i = 0; i < t->n_added; i++)
    if (t->added[i].special && t->added[i].length == n && memcmp(t->added[i].content, text, n) == 0)
      return true;
  return false;
}

int oxf_detokenize(const oxf_tokenizer *t, const int64_t *ids, size_t n_ids, char **text, size_t *n_text,
                   oxf_error *err) {
  *text = NULL;
  *n_text = 0;
  if (ids == NULL && n_ids > 0) return oxf_fail(err, OXF_INPUT_ERROR, "ids is NULL; pass token ids");
  for (size_t i = 0; i < n_ids; i++)
    if (ids[i] < 0 || ids[i] >= t->size)
      return oxf_fail(err, OXF_INPUT_ERROR, "token id %lld (at %zu) is outside the vocabulary 0 .. %lld",
                      (long long)ids[i], i, (long long)(t->size - 1));
  oxf_pieces tokens = {0};
  oxf_str out = {0};
  int status = 0;
  for (size_t i = 0; status == 0 && i < n_ids; i++) {
    const added_token *added = added_by_id(t, ids[i]);
    const char *piece;
    size_t length;
    if (added != NULL) {
      piece = added->decoded, length = added->decoded_length;
    } else {
      piece = oxf_tokmodel_token(t->model, ids[i], &length);
      if (piece == NULL) continue; /* a hole in the vocabulary: the library leaves it out */
    }
    /* Special tokens are left out, by their text as the library checks them. */
    if (is_special_text(t, piece, length)) continue;
    status = oxf_pieces_add(&tokens, piece, length, tokens.n == 0, err);
  }
  if (status == 0) status = oxf_decode_tokens(t->decoder, &tokens, &out, err);
  oxf_pieces_free(&tokens);
  if (status != 0) {
    oxf_str_free(&out);
    return -1;
  }
  if (out.data == NULL && oxf_str_add(&out, "", 0, err) != 0) return -1;
  *text = out.data;
  *n_text = out.len;
  return 0;
}

/* ---- opening a folder's tokenizer or a tokenizer.json file ---- */

#define MAX_TOKENIZER_BYTES ((size_t)1 << 30)

/* A tokenizer.json the user names: a regular file, read whole. */
static oxf_tokenizer *open_file(const char *path, oxf_error *err) {
  FILE *file = fopen(path, "rb");
  if (file == NULL) {
    oxf_fail(err, OXF_INPUT_ERROR, "cannot open %s (%s); name an export folder or a tokenizer.json", path,
             strerror(errno));
    return NULL;
  }
  struct stat info;
  uint8_t *bytes = NULL;
  oxf_tokenizer *t = NULL;
  if (fstat(fileno(file), &info) != 0 || !S_ISREG(info.st_mode)) {
    oxf_fail(err, OXF_INPUT_ERROR, "%s is not a regular file; name an export folder or a tokenizer.json",
             path);
  } else if ((uint64_t)info.st_size > MAX_TOKENIZER_BYTES) {
    oxf_fail(err, OXF_INPUT_ERROR,
             "%s is %lld bytes, more than a tokenizer.json holds (1 GiB); name the right file", path,
             (long long)info.st_size);
  } else if ((bytes = malloc((size_t)info.st_size + 1)) == NULL) {
    out_of_memory(err);
  } else if (fread(bytes, 1, (size_t)info.st_size, file) != (size_t)info.st_size) {
    oxf_fail(err, OXF_INPUT_ERROR, "cannot read %s; check the file", path);
  } else {
    t = oxf_tokenizer_from_bytes(bytes, (size_t)info.st_size, path, err);
  }
  free(bytes);
  fclose(file);
  return t;
}

oxf_tokenizer *oxf_tokenizer_open_folder(oxf_folder *folder, oxf_error *err) {
  const cJSON *file = cJSON_GetObjectItemCaseSensitive(folder->manifest, "tokenizer");
  if (!cJSON_IsString(file)) {
    oxf_fail(err, OXF_MANIFEST_ERROR,
             "%s has no tokenizer in its manifest; export the model with its tokenizer", folder->root);
    return NULL;
  }
  uint8_t *bytes;
  size_t size;
  if (oxf_folder_read(folder, file->valuestring, &bytes, &size, err) != 0) return NULL;
  char shown[512];
  snprintf(shown, sizeof shown, "%s/%s", folder->root, file->valuestring);
  oxf_tokenizer *t = oxf_tokenizer_from_bytes(bytes, size, shown, err);
  free(bytes);
  return t;
}

oxf_tokenizer *oxf_tokenizer_open(const char *path, oxf_error *err) {
  struct stat info;
  if (path == NULL) {
    oxf_fail(err, OXF_INPUT_ERROR, "path is NULL; name an export folder or a tokenizer.json");
    return NULL;
  }
  if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) {
    oxf_folder *folder = oxf_folder_open(path, err);
    if (folder == NULL) return NULL;
    oxf_tokenizer *t = oxf_tokenizer_open_folder(folder, err);
    oxf_folder_close(folder);
    return t;
  }
  return open_file(path, err);
}
