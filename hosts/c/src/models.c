/* tokenizer.json "model": BPE, WordPiece, WordLevel and Unigram, read and run as the `tokenizers` library
 * (0.23, tokenizers/src/models) reads and runs them, so that the ids are the library's. Every lookup goes
 * through a table built at parse time; a parsed model is never written again, so one model may serve several
 * threads at once (no cache, no global state). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define KNOWN_MODELS "BPE, WordPiece, WordLevel and Unigram"

static int out_of_memory(oxf_error *err) {
  return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory while reading the tokenizer; free memory");
}

static uint64_t hash_bytes(const char *bytes, size_t n) {
  uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)bytes[i]) * 0x100000001b3u;
  return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdu;
  x ^= x >> 33;
  return x;
}

static size_t table_size(size_t n) {
  size_t size = 16;
  while (size < 2 * n + 1) size *= 2;
  return size;
}

/* ---- a vocabulary: entries (strings) in one buffer, a hash table from string to entry, a table from id to
 * entry. Adding a string twice keeps the last one for lookups, as a Rust map insert does. ---- */
typedef struct {
  char *bytes;
  size_t *start, *length, *slots, *by_id; /* slots and by_id hold entry + 1, 0 for none */
  int64_t *ids;
  size_t n, used, mask, longest;
  int64_t size; /* largest id + 1 */
} vocab;

static int vocab_init(vocab *v, size_t n, size_t total, oxf_error *err) {
  v->mask = table_size(n) - 1;
  v->bytes = malloc(total + 1);
  v->start = malloc((n + 1) * sizeof *v->start);
  v->length = malloc((n + 1) * sizeof *v->length);
  v->ids = malloc((n + 1) * sizeof *v->ids);
  v->slots = calloc(v->mask + 1, sizeof *v->slots);
  if (v->bytes == NULL || v->start == NULL || v->length == NULL || v->ids == NULL || v->slots == NULL)
    return out_of_memory(err);
  return 0;
}

static int64_t vocab_find(const vocab *v, const char *text, size_t n) {
  if (v->slots == NULL) return -1;
  for (size_t at = hash_bytes(text, n) & v->mask;; at = (at + 1) & v->mask) {
    size_t entry = v->slots[at];
    if (entry == 0) return -1;
    entry--;
    if (v->length[entry] == n && memcmp(v->bytes + v->start[entry], text, n) == 0) return v->ids[entry];
  }
}

static void vocab_add(vocab *v, const char *text, size_t n, int64_t id) {
  size_t entry = v->n++;
  v->start[entry] = v->used;
  v->length[entry] = n;
  v->ids[entry] = id;
  memcpy(v->bytes + v->used, text, n);
  v->bytes[v->used + n] = '\0';
  v->used += n + 1;
  if (n > v->longest) v->longest = n;
  if (id >= v->size) v->size = id + 1;
  for (size_t at = hash_bytes(text, n) & v->mask;; at = (at + 1) & v->mask) {
    size_t old = v->slots[at];
    if (old == 0 || (v->length[old - 1] == n && memcmp(v->bytes + v->start[old - 1], text, n) == 0)) {
      v->slots[at] = entry + 1;
      return;
    }
  }
}

/* id -> entry; when two strings share an id the first is kept (the library keeps one of them). */
static int vocab_finish(vocab *v, oxf_error *err) {
  v->by_id = calloc(v->size > 0 ? (size_t)v->size : 1, sizeof *v->by_id);
  if (v->by_id == NULL) return out_of_memory(err);
  for (size_t i = 0; i < v->n; i++)
    if (v->by_id[v->ids[i]] == 0) v->by_id[v->ids[i]] = i + 1;
  return 0;
}

static void vocab_free(vocab *v) {
  free(v->bytes), free(v->start), free(v->length), free(v->ids), free(v->slots), free(v->by_id);
}

/* ---- BPE merges: (left id, right id) -> (rank, merged id) ---- */
typedef struct {
  uint64_t *keys;
  uint32_t *rank, *merged;
  uint8_t *used;
  size_t mask;
} merge_table;

static bool merge_find(const merge_table *m, uint32_t left, uint32_t right, uint32_t *rank,
                       uint32_t *merged) {
  if (m->used == NULL) return false;
  uint64_t key = (uint64_t)left << 32 | right;
  for (size_t at = hash_u64(key) & m->mask; m->used[at]; at = (at + 1) & m->mask) {
    if (m->keys[at] == key) {
      *rank = m->rank[at], *merged = m->merged[at];
      return true;
    }
  }
  return false;
}

/* A later merge of the same pair replaces the earlier one, as the library's map collect does. */
static void merge_put(merge_table *m, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
  uint64_t key = (uint64_t)left << 32 | right;
  size_t at = hash_u64(key) & m->mask;
  while (m->used[at] && m->keys[at] != key) at = (at + 1) & m->mask;
  m->used[at] = 1, m->keys[at] = key, m->rank[at] = rank, m->merged[at] = merged;
}

/* ---- Unigram pieces: a byte trie whose edges live in one hash table ---- */
typedef struct {
  uint64_t *keys; /* (node << 8 | byte) + 1, 0 for an empty slot */
  uint32_t *child;
  size_t mask;
  int64_t *leaf; /* node -> piece id, -1 when no piece ends there */
  size_t n_nodes;
} trie;

/* Room for the pieces of `total` bytes (their edges are fewer; the load stays under 2/3). */
static int trie_init(trie *t, size_t total, oxf_error *err) {
  t->mask = table_size(total - total / 4) - 1;
  t->keys = calloc(t->mask + 1, sizeof *t->keys);
  t->child = malloc((t->mask + 1) * sizeof *t->child);
  t->leaf = malloc((total + 1) * sizeof *t->leaf);
  if (t->keys == NULL || t->child == NULL || t->leaf == NULL) return out_of_memory(err);
  t->n_nodes = 1, t->leaf[0] = -1;
  return 0;
}

static size_t trie_child(const trie *t, size_t node, uint8_t byte) {
  uint64_t key = ((uint64_t)node << 8 | byte) + 1;
  for (size_t at = hash_u64(key) & t->mask; t->keys[at] != 0; at = (at + 1) & t->mask)
    if (t->keys[at] == key) return t->child[at];
  return 0; /* the root is nobody's child */
}

static void trie_add(trie *t, const char *piece, size_t n, int64_t id) {
  size_t node = 0;
  for (size_t i = 0; i < n; i++) {
    size_t next = trie_child(t, node, (uint8_t)piece[i]);
    if (next == 0) {
      next = t->n_nodes++;
      t->leaf[next] = -1;
      uint64_t key = ((uint64_t)node << 8 | (uint8_t)piece[i]) + 1;
      size_t at = hash_u64(key) & t->mask;
      while (t->keys[at] != 0) at = (at + 1) & t->mask;
      t->keys[at] = key, t->child[at] = (uint32_t)next;
    }
    node = next;
  }
  t->leaf[node] = id; /* the id the string maps to, which is the last entry of that string */
}

/* ---- the model ---- */
typedef enum { MODEL_BPE, MODEL_WORDPIECE, MODEL_WORDLEVEL, MODEL_UNIGRAM } model_kind;

struct oxf_tokmodel {
  model_kind kind;
  vocab vocab;
  char *unk_token, *prefix, *suffix; /* NULL when absent */
  int64_t unk_token_id;              /* -1 when absent from the vocabulary */
  size_t prefix_len, suffix_len;
  int64_t byte_ids[256]; /* the ids of "<0x00>" .. "<0xFF>", -1 when absent */
  /* BPE */
  merge_table merges;
  bool fuse_unk, byte_fallback, ignore_merges;
  /* WordPiece (and its trie, below) */
  int64_t max_chars;
  size_t prefix_node; /* SIZE_MAX when no entry starts with the prefix */
  /* Unigram */
  double *scores, unk_score;
  int64_t unk_id;
  trie trie;
};

void oxf_tokmodel_free(oxf_tokmodel *model) {
  if (model == NULL) return;
  vocab_free(&model->vocab);
  free(model->unk_token), free(model->prefix), free(model->suffix);
  free(model->merges.keys), free(model->merges.rank), free(model->merges.merged), free(model->merges.used);
  free(model->scores);
  free(model->trie.keys), free(model->trie.child), free(model->trie.leaf);
  free(model);
}

static int bad_field(const char *type, const char *key, const char *what, oxf_error *err) {
  return oxf_fail(err, OXF_MANIFEST_ERROR, "tokenizer.json model %s \"%s\" must be %s; re-export the folder",
                  type, key, what);
}

static char *copy_string(const char *text, oxf_error *err) {
  char *copy = text == NULL ? NULL : strdup(text);
  if (text != NULL && copy == NULL) out_of_memory(err);
  return copy;
}

/* A field the library requires: present and a string (null is refused, as serde refuses it). */
static int required_string(const cJSON *json, const char *type, const char *key, char **out, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, key);
  if (!cJSON_IsString(item)) return bad_field(type, key, "a string (the library requires it)", err);
  return (*out = copy_string(item->valuestring, err)) == NULL ? -1 : 0;
}

static int optional_string(const cJSON *json, const char *type, const char *key, char **out, oxf_error *err) {
  const char *value;
  if (oxf_tok_string(json, key, NULL, &value, type, err) != 0) return -1;
  *out = copy_string(value, err);
  return value != NULL && *out == NULL ? -1 : 0;
}

static void find_byte_ids(oxf_tokmodel *model) {
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    model->byte_ids[b] = vocab_find(&model->vocab, name, 6);
  }
}

/* "vocab": {token: id, ...} (BPE, WordPiece, WordLevel). */
static int parse_vocab_object(oxf_tokmodel *model, const cJSON *json, const char *type, oxf_error *err) {
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(json, "vocab");
  if (!cJSON_IsObject(items)) return bad_field(type, "vocab", "an object of token: id", err);
  size_t n = 0, total = 0;
  for (const cJSON *item = items->child; item != NULL; item = item->next)
    n++, total += strlen(item->string) + 1;
  if (vocab_init(&model->vocab, n, total, err) != 0) return -1;
  for (const cJSON *item = items->child; item != NULL; item = item->next) {
    double id = cJSON_IsNumber(item) ? item->valuedouble : -1;
    if (!(id >= 0 && id <= (double)UINT32_MAX) || id != floor(id))
      return bad_field(type, "vocab", "an object of token: id with ids in 0 .. 4294967295", err);
    vocab_add(&model->vocab, item->string, strlen(item->string), (int64_t)id);
  }
  if (vocab_finish(&model->vocab, err) != 0) return -1;
  find_byte_ids(model);
  return 0;
}

/* One merge "a b" or ["a", "b"]: the pieces' ids and the merged piece's id (a + b without the continuing
 * prefix's bytes, as the library builds it). */
static int add_merge(oxf_tokmodel *model, const char *a, size_t a_len, const char *b, size_t b_len,
                     uint32_t rank, char *buffer, oxf_error *err) {
  int64_t a_id = vocab_find(&model->vocab, a, a_len), b_id = vocab_find(&model->vocab, b, b_len);
  int64_t merged = -1;
  if (a_id >= 0 && b_id >= 0 && b_len >= model->prefix_len) {
    memcpy(buffer, a, a_len);
    memcpy(buffer + a_len, b + model->prefix_len, b_len - model->prefix_len);
    merged = vocab_find(&model->vocab, buffer, a_len + b_len - model->prefix_len);
  }
  if (merged < 0)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json model BPE merge %u (\"%.*s\" + \"%.*s\") uses a piece that is not in the "
                    "vocabulary; re-export the folder",
                    (unsigned)rank, (int)(a_len > 64 ? 64 : a_len), a, (int)(b_len > 64 ? 64 : b_len), b);
  merge_put(&model->merges, (uint32_t)a_id, (uint32_t)b_id, rank, (uint32_t)merged);
  return 0;
}

static int parse_merges(oxf_tokmodel *model, const cJSON *list, oxf_error *err) {
  if (!cJSON_IsArray(list)) return bad_field("BPE", "merges", "a list", err);
  size_t n = (size_t)cJSON_GetArraySize(list);
  bool pairs = true, strings = true;
  for (const cJSON *item = list->child; item != NULL; item = item->next) {
    strings &= cJSON_IsString(item);
    pairs &= cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 && cJSON_IsString(item->child) &&
             cJSON_IsString(item->child->next);
  }
  if (!pairs && !strings)
    return bad_field("BPE", "merges", "a list of \"a b\" strings or of [\"a\", \"b\"] pairs", err);
  merge_table *m = &model->merges;
  m->mask = table_size(n) - 1;
  m->keys = malloc((m->mask + 1) * sizeof *m->keys);
  m->rank = malloc((m->mask + 1) * sizeof *m->rank);
  m->merged = malloc((m->mask + 1) * sizeof *m->merged);
  m->used = calloc(m->mask + 1, 1);
  char *buffer = malloc(2 * model->vocab.longest + 1);
  if (m->keys == NULL || m->rank == NULL || m->merged == NULL || m->used == NULL || buffer == NULL) {
    free(buffer);
    return out_of_memory(err);
  }
  uint32_t rank = 0;
  int status = 0;
  for (const cJSON *item = list->child; status == 0 && item != NULL; item = item->next) {
    if (pairs) {
      const char *a = item->child->valuestring, *b = item->child->next->valuestring;
      status = add_merge(model, a, strlen(a), b, strlen(b), rank++, buffer, err);
      continue;
    }
    const char *line = item->valuestring, *space = strchr(line, ' ');
    if (strncmp(line, "#version", 8) == 0) continue; /* a merges.txt header, not counted as a rank */
    if (space == NULL || strchr(space + 1, ' ') != NULL) {
      status = oxf_fail(err, OXF_MANIFEST_ERROR,
                        "tokenizer.json model BPE merges[%u] must be two pieces with one space between them; "
                        "re-export the folder",
                        (unsigned)rank);
      break;
    }
    status =
        add_merge(model, line, (size_t)(space - line), space + 1, strlen(space + 1), rank++, buffer, err);
  }
  free(buffer);
  return status;
}

static int parse_bpe(oxf_tokmodel *model, const cJSON *json, oxf_error *err) {
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(json, "dropout");
  if (dropout != NULL && !cJSON_IsNull(dropout)) {
    float p = cJSON_IsNumber(dropout) ? (float)dropout->valuedouble : -1; /* the library keeps an f32 */
    if (!(p >= 0 && p <= 1)) return bad_field("BPE", "dropout", "null or a number in 0 .. 1", err);
    if (p != 0)
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "tokenizer.json model BPE has dropout %g: its merges are random, which the C host does not "
          "reproduce; export the tokenizer with \"dropout\": null",
          dropout->valuedouble);
  }
  if (optional_string(json, "BPE", "unk_token", &model->unk_token, err) != 0 ||
      optional_string(json, "BPE", "continuing_subword_prefix", &model->prefix, err) != 0 ||
      optional_string(json, "BPE", "end_of_word_suffix", &model->suffix, err) != 0 ||
      oxf_tok_bool(json, "fuse_unk", false, &model->fuse_unk, "model BPE", err) != 0 ||
      oxf_tok_bool(json, "byte_fallback", false, &model->byte_fallback, "model BPE", err) != 0 ||
      oxf_tok_bool(json, "ignore_merges", false, &model->ignore_merges, "model BPE", err) != 0)
    return -1;
  model->prefix_len = model->prefix != NULL ? strlen(model->prefix) : 0;
  model->suffix_len = model->suffix != NULL ? strlen(model->suffix) : 0;
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(json, "merges");
  if (merges == NULL) return bad_field("BPE", "merges", "present (the library requires it)", err);
  if (parse_vocab_object(model, json, "BPE", err) != 0) return -1;
  return parse_merges(model, merges, err);
}

static int parse_wordpiece(oxf_tokmodel *model, const cJSON *json, oxf_error *err) {
  const cJSON *max = cJSON_GetObjectItemCaseSensitive(json, "max_input_chars_per_word");
  if (max == NULL || cJSON_IsNull(max))
    return bad_field("WordPiece", "max_input_chars_per_word", "a count (the library requires it)", err);
  if (oxf_tok_int(json, "max_input_chars_per_word", 100, 0, INT64_MAX / 2, &model->max_chars,
                  "model WordPiece", err) != 0 ||
      required_string(json, "WordPiece", "unk_token", &model->unk_token, err) != 0 ||
      required_string(json, "WordPiece", "continuing_subword_prefix", &model->prefix, err) != 0)
    return -1;
  model->prefix_len = strlen(model->prefix);
  if (parse_vocab_object(model, json, "WordPiece", err) != 0 ||
      trie_init(&model->trie, model->vocab.used, err) != 0)
    return -1;
  const vocab *v = &model->vocab;
  for (size_t i = 0; i < v->n; i++) trie_add(&model->trie, v->bytes + v->start[i], v->length[i], v->ids[i]);
  /* Where every piece after the first starts its walk: the node of the prefix, if any entry has it. */
  model->prefix_node = 0;
  for (size_t i = 0; i < model->prefix_len && model->prefix_node != SIZE_MAX; i++) {
    size_t next = trie_child(&model->trie, model->prefix_node, (uint8_t)model->prefix[i]);
    model->prefix_node = next == 0 ? SIZE_MAX : next;
  }
  return 0;
}

static int parse_wordlevel(oxf_tokmodel *model, const cJSON *json, oxf_error *err) {
  if (required_string(json, "WordLevel", "unk_token", &model->unk_token, err) != 0) return -1;
  return parse_vocab_object(model, json, "WordLevel", err);
}

/* The double serde_json (without its float_roundtrip feature, as the library builds it) reads for a JSON
 * number: the decimal digits as an integer, converted to a double, then multiplied or divided by a power of
 * ten, two roundings where strtod (cJSON) makes one. The digits are the shortest that give `value` back,
 * which is how serde_json and Python write a tokenizer.json's scores. */
static double pow10_double(int k) {
  if (k <= 22) {
    double p = 1;
    for (int i = 0; i < k; i++) p *= 10; /* exact up to 1e22 */
    return p;
  }
  char text[16];
  snprintf(text, sizeof text, "1e%d", k);
  return strtod(text, NULL);
}

/* The shortest decimal digits that give `value` (> 0) back, the slow way (printf and strtod): up to 15
 * digits they are the 15-digit rounding less its trailing zeros, past that the 16- or 17-digit rounding. */
static void shortest_digits_slow(double value, uint64_t *significand, int *exponent) {
  for (int digits = 15; digits <= 17; digits++) {
    char text[48];
    snprintf(text, sizeof text, "%.*e", digits - 1, value);
    uint64_t d = 0;
    const char *at = text;
    for (; *at != 'e' && *at != '\0'; at++)
      if (*at >= '0' && *at <= '9') d = d * 10 + (uint64_t)(*at - '0');
    *significand = d;
    *exponent = (*at == 'e' ? atoi(at + 1) : 0) - (digits - 1);
    /* Read back without a decimal point, which the locale could change. */
    snprintf(text, sizeof text, "%llue%d", (unsigned long long)d, *exponent);
    if (strtod(text, NULL) == value) return;
  }
}

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 u128;

static uint64_t pow10_u64(int n) {
  uint64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

/* The same digits in exact integer arithmetic, for 1e-5 <= value < 1e17 (a tokenizer's scores); false
 * outside that range. value = M * 2^E; T = floor(value * 10^p), 19 digits, and whether anything was cut
 * (sticky) give every rounding to 15, 16 or 17 digits; a candidate D * 10^k gives value back when it lies
 * within half a unit in the last place (the smaller half below a power of two; an exact tie keeps an even
 * M), all compared scaled by 10^p * 2^shift so that every quantity is an integer. */
static bool shortest_digits_fast(double value, uint64_t *significand, int *exponent) {
  if (!(value >= 1e-5 && value < 1e17)) return false;
  uint64_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint64_t m = (bits & (((uint64_t)1 << 52) - 1)) | (uint64_t)1 << 52;
  int e = (int)(bits >> 52 & 0x7ff) - 1075, p = 18 - (int)floor(log10(value)), shift, up;
  u128 five, n;
  uint64_t t;
  bool sticky;
  for (;;) {
    if (p < 0 || p > 26) return false;
    five = 1;
    for (int i = 0; i < p; i++) five *= 5;
    n = (u128)m * five;
    up = e + p > 0 ? e + p : 0, shift = e + p < 0 ? -(e + p) : 0;
    if (up > 16 || shift > 60) return false; /* keeps every product below 2^127 */
    u128 scaled = (n << up) >> shift;
    sticky = shift > 0 && (n & (((u128)1 << shift) - 1)) != 0;
    if (scaled >= (u128)10000000000000000000u) {
      p--;
    } else if (scaled < (u128)1000000000000000000u) {
      p++;
    } else {
      t = (uint64_t)scaled;
      break;
    }
  }
  u128 target = n << up, ulp = five << up; /* value and its ulp, times 10^p * 2^shift */
  for (int digits = 15; digits <= 17; digits++) {
    uint64_t q = pow10_u64(19 - digits), d = t / q, r = t % q;
    if (r > q / 2 || (r == q / 2 && (sticky || (d & 1)))) d++;
    int carry = d == pow10_u64(digits);
    if (carry) d /= 10;
    *significand = d, *exponent = 18 - p + carry - (digits - 1);
    if (digits == 17) return true;
    u128 candidate = ((u128)d * pow10_u64(19 - digits + carry)) << shift;
    u128 diff = candidate > target ? candidate - target : target - candidate;
    u128 twice = candidate < target && m == (uint64_t)1 << 52 ? 4 * diff : 2 * diff;
    if (twice < ulp || (twice == ulp && (m & 1) == 0)) return true;
  }
  return true;
}
#else
static bool shortest_digits_fast(double value, uint64_t *significand, int *exponent) {
  (void)value, (void)significand, (void)exponent;
  return false;
}
#endif

static double serde_json_double(double value) {
  if (!isfinite(value) || value == 0) return value;
  uint64_t d;
  int k;
  if (!shortest_digits_fast(fabs(value), &d, &k)) shortest_digits_slow(fabs(value), &d, &k);
  while (d != 0 && d % 10 == 0) d /= 10, k++;
  int length = 1;
  for (uint64_t rest = d; rest >= 10; rest /= 10) length++;
  if (k >= 0 && length + k <= 16) { /* an integer is written with ".0": one more digit */
    for (int i = 0; i <= k; i++) d *= 10;
    k = -1;
  }
  if (d <= (uint64_t)1 << 53 && k >= -22 && k <= 22) return value; /* one rounding: strtod's */
  double f = (double)d;
  while (k < -308 && f != 0) f /= 1e308, k += 308;
  if (k >= 0) {
    f *= pow10_double(k);
  } else if (k >= -308) {
    f /= pow10_double(-k);
  }
  return value < 0 ? -f : f;
}

static int parse_unigram(oxf_tokmodel *model, const cJSON *json, oxf_error *err) {
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(json, "vocab");
  const cJSON *fallback = cJSON_GetObjectItemCaseSensitive(json, "byte_fallback");
  if (fallback != NULL && !cJSON_IsBool(fallback))
    return bad_field("Unigram", "byte_fallback", "true or false", err);
  model->byte_fallback = cJSON_IsTrue(fallback);
  if (!cJSON_IsArray(items)) return bad_field("Unigram", "vocab", "a list of [piece, score]", err);
  size_t n = 0, total = 0;
  for (const cJSON *item = items->child; item != NULL; item = item->next, n++) {
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2 || !cJSON_IsString(item->child) ||
        !cJSON_IsNumber(item->child->next))
      return bad_field("Unigram", "vocab", "a list of [piece, score]", err);
    total += strlen(item->child->valuestring) + 1;
  }
  if (oxf_tok_int(json, "unk_id", -1, 0, n == 0 ? -1 : (int64_t)n - 1, &model->unk_id, "model Unigram",
                  err) != 0)
    return -1;
  model->scores = malloc((n + 1) * sizeof *model->scores);
  trie *t = &model->trie;
  if (model->scores == NULL) return out_of_memory(err);
  if (trie_init(t, total, err) != 0 || vocab_init(&model->vocab, n, total, err) != 0) return -1;
  double min_score = INFINITY;
  for (const cJSON *item = items->child; item != NULL; item = item->next) {
    const char *piece = item->child->valuestring;
    size_t id = model->vocab.n, length = strlen(piece);
    vocab_add(&model->vocab, piece, length, (int64_t)id);
    trie_add(t, piece, length, (int64_t)id); /* a later duplicate takes the leaf, as it takes the lookup */
    model->scores[id] = serde_json_double(item->child->next->valuedouble);
    if (model->scores[id] < min_score) min_score = model->scores[id];
  }
  model->unk_score = min_score - 10.0;
  if (vocab_finish(&model->vocab, err) != 0) return -1;
  find_byte_ids(model);
  return 0;
}

static int parse_kind(model_kind kind, const cJSON *json, oxf_tokmodel **out, oxf_error *err) {
  oxf_tokmodel *model = calloc(1, sizeof *model);
  if (model == NULL) return out_of_memory(err);
  model->kind = kind;
  model->unk_id = -1;
  int status = kind == MODEL_BPE         ? parse_bpe(model, json, err)
               : kind == MODEL_WORDPIECE ? parse_wordpiece(model, json, err)
               : kind == MODEL_WORDLEVEL ? parse_wordlevel(model, json, err)
                                         : parse_unigram(model, json, err);
  if (status != 0) {
    oxf_tokmodel_free(model);
    return -1;
  }
  model->unk_token_id =
      model->unk_token != NULL ? vocab_find(&model->vocab, model->unk_token, strlen(model->unk_token)) : -1;
  *out = model;
  return 0;
}

int oxf_tokmodel_parse(const cJSON *json, oxf_tokmodel **out, oxf_error *err) {
  static const char *const names[] = {"BPE", "WordPiece", "WordLevel", "Unigram"};
  *out = NULL;
  if (!cJSON_IsObject(json))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "tokenizer.json \"model\" must be an object; re-export the folder");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
  if (type != NULL) {
    for (int kind = 0; kind < 4; kind++)
      if (cJSON_IsString(type) && strcmp(type->valuestring, names[kind]) == 0)
        return parse_kind((model_kind)kind, json, out, err);
    return oxf_tok_unknown("model", cJSON_IsString(type) ? type->valuestring : "(not a string)", KNOWN_MODELS,
                           err);
  }
  /* No "type" (older files): the library takes the first of these that reads the object. */
  oxf_error as_bpe = {0};
  for (int kind = 0; kind < 4; kind++) {
    oxf_error attempt = {0};
    if (parse_kind((model_kind)kind, json, out, &attempt) == 0) return 0;
    if (attempt.kind == OXF_INFERENCE_ERROR) return oxf_fail(err, attempt.kind, "%s", attempt.message);
    if (kind == MODEL_BPE) as_bpe = attempt;
  }
  if (cJSON_GetObjectItemCaseSensitive(json, "merges") != NULL) /* meant as a BPE: say why it is not one */
    return oxf_fail(err, as_bpe.kind, "%s", as_bpe.message);
  return oxf_fail(err, OXF_MANIFEST_ERROR,
                  "tokenizer.json \"model\" has no \"type\" and reads as none of " KNOWN_MODELS
                  "; re-export the folder");
}

/* ---- encoding one piece ---- */

static int fail_unknown(const oxf_tokmodel *model, oxf_error *err) {
  if (model->kind == MODEL_UNIGRAM)
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "the text has a character the Unigram vocabulary lacks and the model has no unk_id");
  return oxf_fail(err, OXF_INPUT_ERROR,
                  "the text has a piece the vocabulary lacks and the model's unk_token \"%s\" is not in it",
                  model->unk_token != NULL ? model->unk_token : "");
}

static size_t char_length(const char *text, size_t at) {
  uint8_t b = (uint8_t)text[at];
  return b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}

typedef struct {
  uint32_t id;
  ptrdiff_t prev, next;
  size_t len; /* bytes; 0 once merged into its left neighbour */
} symbol;

typedef struct {
  uint32_t rank, merged;
  size_t pos;
} merge_entry;

typedef struct {
  merge_entry *items;
  size_t n, cap;
} merge_heap;

static bool merge_before(const merge_entry *a, const merge_entry *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(merge_heap *h, merge_entry entry, oxf_error *err) {
  if (h->n == h->cap) {
    size_t cap = h->cap < 16 ? 16 : h->cap * 2;
    merge_entry *bigger = realloc(h->items, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    h->items = bigger, h->cap = cap;
  }
  size_t at = h->n++;
  while (at > 0 && merge_before(&entry, &h->items[(at - 1) / 2])) {
    h->items[at] = h->items[(at - 1) / 2];
    at = (at - 1) / 2;
  }
  h->items[at] = entry;
  return 0;
}

static merge_entry heap_pop(merge_heap *h) {
  merge_entry top = h->items[0], last = h->items[--h->n];
  size_t at = 0;
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= h->n) break;
    if (child + 1 < h->n && merge_before(&h->items[child + 1], &h->items[child])) child++;
    if (!merge_before(&h->items[child], &last)) break;
    h->items[at] = h->items[child];
    at = child;
  }
  if (h->n > 0) h->items[at] = last;
  return top;
}

static int push_pair(const oxf_tokmodel *model, merge_heap *heap, const symbol *symbols, size_t left,
                     size_t right, oxf_error *err) {
  uint32_t rank, merged;
  if (!merge_find(&model->merges, symbols[left].id, symbols[right].id, &rank, &merged)) return 0;
  return heap_push(heap, (merge_entry){rank, merged, left}, err);
}

/* The library's Word::merge_all: the lowest-ranked pair first (the leftmost among equals), a queued pair
 * dropped when its left symbol has since changed into something the pair does not make. */
static int merge_all(const oxf_tokmodel *model, symbol *symbols, size_t n, oxf_error *err) {
  merge_heap heap = {0};
  int status = 0;
  for (size_t i = 0; status == 0 && i + 1 < n; i++) status = push_pair(model, &heap, symbols, i, i + 1, err);
  while (status == 0 && heap.n > 0) {
    merge_entry top = heap_pop(&heap);
    symbol *left = &symbols[top.pos];
    if (left->len == 0 || left->next < 0) continue;
    symbol right = symbols[left->next];
    uint32_t rank, merged;
    if (!merge_find(&model->merges, left->id, right.id, &rank, &merged) || merged != top.merged) continue;
    symbols[left->next].len = 0;
    left->id = top.merged, left->len += right.len, left->next = right.next;
    if (right.next >= 0) symbols[right.next].prev = (ptrdiff_t)top.pos;
    if (left->prev >= 0) status = push_pair(model, &heap, symbols, (size_t)left->prev, top.pos, err);
    if (status == 0 && left->next >= 0)
      status = push_pair(model, &heap, symbols, top.pos, (size_t)left->next, err);
  }
  free(heap.items);
  return status;
}

typedef struct {
  symbol *items;
  size_t n, cap;
} symbols;

static int add_symbol(symbols *word, int64_t id, size_t len, oxf_error *err) {
  if (word->n == word->cap) {
    size_t cap = word->cap < 16 ? 16 : word->cap * 2;
    symbol *bigger = realloc(word->items, cap * sizeof *bigger);
    if (bigger == NULL) return out_of_memory(err);
    word->items = bigger, word->cap = cap;
  }
  if (word->n > 0) word->items[word->n - 1].next = (ptrdiff_t)word->n;
  word->items[word->n] = (symbol){(uint32_t)id, (ptrdiff_t)word->n - 1, -1, len};
  word->n++;
  return 0;
}

/* The library's BPE::merge_word: one symbol per character (with the continuing prefix after the first and
 * the end-of-word suffix on the last), its bytes as "<0xXX>" pieces or the unknown piece when the
 * vocabulary lacks it, then every merge. */
static int bpe_tokenize(const oxf_tokmodel *model, const char *word, size_t n, oxf_idlist *ids,
                        oxf_error *err) {
  if (model->ignore_merges) {
    int64_t id = vocab_find(&model->vocab, word, n);
    if (id >= 0) return oxf_ids_add(ids, id, err);
  }
  symbols parts = {0};
  char *piece = malloc(model->prefix_len + 4 + model->suffix_len);
  int status = piece == NULL ? out_of_memory(err) : 0;
  size_t unk_len = 0;
  bool pending_unk = false;
  for (size_t at = 0; status == 0 && at < n;) {
    size_t len = char_length(word, at), used = 0;
    if (at > 0 && model->prefix != NULL)
      memcpy(piece, model->prefix, model->prefix_len), used = model->prefix_len;
    memcpy(piece + used, word + at, len), used += len;
    if (at + len == n && model->suffix != NULL)
      memcpy(piece + used, model->suffix, model->suffix_len), used += model->suffix_len;
    at += len;
    int64_t id = vocab_find(&model->vocab, piece, used);
    if (id >= 0) {
      if (pending_unk) status = add_symbol(&parts, model->unk_token_id, unk_len, err), pending_unk = false;
      if (status == 0) status = add_symbol(&parts, id, len, err);
      continue;
    }
    bool all_bytes = model->byte_fallback;
    for (size_t i = 0; all_bytes && i < used; i++) all_bytes = model->byte_ids[(uint8_t)piece[i]] >= 0;
    if (all_bytes) {
      /* As in the library, the bytes go in ahead of a pending unknown piece. */
      for (size_t i = 0; status == 0 && i < used; i++)
        status = add_symbol(&parts, model->byte_ids[(uint8_t)piece[i]], 1, err);
    } else if (model->unk_token != NULL) {
      if (model->unk_token_id < 0) {
        status = fail_unknown(model, err);
      } else if (pending_unk && model->fuse_unk) {
        unk_len += len;
      } else {
        if (pending_unk) status = add_symbol(&parts, model->unk_token_id, unk_len, err);
        pending_unk = true, unk_len = len;
      }
    }
  }
  if (status == 0 && pending_unk) status = add_symbol(&parts, model->unk_token_id, unk_len, err);
  if (status == 0) status = merge_all(model, parts.items, parts.n, err);
  for (size_t i = 0; status == 0 && i < parts.n; i++)
    if (parts.items[i].len != 0) status = oxf_ids_add(ids, parts.items[i].id, err);
  free(piece);
  free(parts.items);
  return status;
}

/* The library's WordPiece::tokenize: greedy longest match from the left, the continuing prefix on every
 * piece after the first, the unknown piece for the whole word when a position matches nothing. The longest
 * entry is the deepest one on a walk down the trie (one pass, where the library tries every end). */
static int wordpiece_tokenize(const oxf_tokmodel *model, const char *word, size_t n, oxf_idlist *ids,
                              oxf_error *err) {
  size_t first = ids->n;
  bool bad = (int64_t)oxf_utf8_count(word, n) > model->max_chars;
  for (size_t start = 0; !bad && start < n;) {
    size_t node = start == 0 ? 0 : model->prefix_node, end = start;
    int64_t id = -1;
    for (size_t at = start; node != SIZE_MAX && at < n;) {
      node = trie_child(&model->trie, node, (uint8_t)word[at++]);
      if (node == 0) break;
      if (model->trie.leaf[node] >= 0) id = model->trie.leaf[node], end = at;
    }
    if (id < 0) {
      bad = true;
    } else if (oxf_ids_add(ids, id, err) != 0) {
      return -1;
    }
    start = end;
  }
  if (!bad) return 0;
  ids->n = first;
  if (model->unk_token_id < 0)
    return oxf_fail(err, OXF_INPUT_ERROR, "WordPiece: the unk_token \"%s\" is not in the vocabulary",
                    model->unk_token);
  return oxf_ids_add(ids, model->unk_token_id, err);
}

/* The library's Unigram::encode_optimized: the best-scoring path over the characters (a piece ending at a
 * position replaces the best so far only with a strictly higher score, so among equals the one that starts
 * earliest wins), a character no single piece covers scored min_score - 10 as unknown; then
 * runs of unknown pieces fused into one, and each piece looked up (its bytes as "<0xXX>" with
 * byte_fallback, else unk_id). */
static int unigram_tokenize(const oxf_tokmodel *model, const char *text, size_t n, oxf_idlist *ids,
                            oxf_error *err) {
  double *best = malloc((n + 1) * sizeof *best);
  size_t *from = malloc((n + 1) * sizeof *from);
  int64_t *piece_id = malloc((n + 1) * sizeof *piece_id);
  int status = best == NULL || from == NULL || piece_id == NULL ? out_of_memory(err) : 0;
  for (size_t i = 0; status == 0 && i <= n; i++) best[i] = 0, from[i] = SIZE_MAX, piece_id[i] = 0;
  for (size_t start = 0; status == 0 && start < n;) {
    size_t mblen = char_length(text, start), node = 0;
    bool single = false;
    for (size_t end = start; end < n;) {
      node = trie_child(&model->trie, node, (uint8_t)text[end++]);
      if (node == 0) break;
      int64_t id = model->trie.leaf[node];
      if (id < 0) continue;
      double score = model->scores[id] + best[start];
      if (from[end] == SIZE_MAX || score > best[end])
        best[end] = score, from[end] = start, piece_id[end] = id;
      single |= end - start == mblen;
    }
    if (!single) {
      double score = model->unk_score + best[start];
      size_t end = start + mblen;
      if (from[end] == SIZE_MAX || score > best[end]) {
        if (model->unk_id < 0) status = fail_unknown(model, err);
        best[end] = score, from[end] = start, piece_id[end] = model->unk_id;
      }
    }
    start += mblen;
  }
  /* The path, walked back into `from` as forward links (reusing the array: from[start] = end). */
  size_t at = n;
  while (status == 0 && at > 0) {
    size_t start = from[at];
    if (start == SIZE_MAX) {
      status = fail_unknown(model, err);
      break;
    }
    from[at] = SIZE_MAX;
    best[start] = (double)at; /* exact: positions are far below 2^53 */
    at = start;
  }
  for (size_t start = 0; status == 0 && start < n;) {
    size_t end = (size_t)best[start];
    bool unknown = model->unk_id >= 0 && piece_id[end] == model->unk_id;
    while (unknown && end < n && piece_id[(size_t)best[end]] == model->unk_id) end = (size_t)best[end];
    int64_t id = vocab_find(&model->vocab, text + start, end - start);
    if (id >= 0) {
      status = oxf_ids_add(ids, id, err);
    } else {
      bool all_bytes = model->byte_fallback;
      for (size_t i = start; all_bytes && i < end; i++) all_bytes = model->byte_ids[(uint8_t)text[i]] >= 0;
      for (size_t i = start; all_bytes && status == 0 && i < end; i++)
        status = oxf_ids_add(ids, model->byte_ids[(uint8_t)text[i]], err);
      if (!all_bytes)
        status = model->unk_id >= 0 ? oxf_ids_add(ids, model->unk_id, err) : fail_unknown(model, err);
    }
    start = end;
  }
  free(best), free(from), free(piece_id);
  return status;
}

int oxf_tokmodel_tokenize(const oxf_tokmodel *model, const char *piece, size_t n, oxf_idlist *ids,
                          oxf_error *err) {
  if (n == 0) return 0;
  switch (model->kind) {
    case MODEL_BPE: return bpe_tokenize(model, piece, n, ids, err);
    case MODEL_WORDPIECE: return wordpiece_tokenize(model, piece, n, ids, err);
    case MODEL_UNIGRAM: return unigram_tokenize(model, piece, n, ids, err);
    default: {
      int64_t id = vocab_find(&model->vocab, piece, n);
      if (id < 0 && model->unk_token_id < 0)
        return oxf_fail(err, OXF_INPUT_ERROR, "WordLevel: the unk_token \"%s\" is not in the vocabulary",
                        model->unk_token);
      return oxf_ids_add(ids, id >= 0 ? id : model->unk_token_id, err);
    }
  }
}

const char *oxf_tokmodel_token(const oxf_tokmodel *model, int64_t id, size_t *n) {
  if (id < 0 || id >= model->vocab.size || model->vocab.by_id[id] == 0) return NULL;
  size_t entry = model->vocab.by_id[id] - 1;
  *n = model->vocab.length[entry];
  return model->vocab.bytes + model->vocab.start[entry];
}

int64_t oxf_tokmodel_id(const oxf_tokmodel *model, const char *token, size_t n) {
  return vocab_find(&model->vocab, token, n);
}

int64_t oxf_tokmodel_size(const oxf_tokmodel *model) {
  return model->vocab.size;
}
