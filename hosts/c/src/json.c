/* JSON for the manifest and the end-to-end goldens: cJSON (Debian's libcjson), with what it would read
 * differently from Python's json refused first, and typed accessors whose errors name the field. Errors of
 * the library (oxf_fail) live here too. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_JSON_DEPTH 64

int oxf_fail(oxf_error *err, oxf_error_kind kind, const char *format, ...) {
  if (err != NULL) {
    err->kind = kind;
    va_list args;
    va_start(args, format);
    vsnprintf(err->message, sizeof err->message, format, args);
    va_end(args);
  }
  return -1;
}

const char *oxf_error_kind_name(oxf_error_kind kind) {
  switch (kind) {
    case OXF_OK: return "ok";
    case OXF_MANIFEST_ERROR: return "ManifestError";
    case OXF_INPUT_ERROR: return "InputError";
    case OXF_GOLDEN_ERROR: return "GoldenError";
    case OXF_INFERENCE_ERROR: return "InferenceError";
  }
  return "Error";
}

bool oxf_valid_utf8(const uint8_t *text, size_t size) {
  for (size_t i = 0; i < size;) {
    uint8_t byte = text[i];
    size_t extra = byte < 0x80 ? 0 : (byte >> 5) == 6 ? 1 : (byte >> 4) == 14 ? 2 : (byte >> 3) == 30 ? 3 : 9;
    if (extra == 9 || i + extra >= size) return false;
    uint32_t code = extra == 0 ? byte : byte & (0x3f >> extra);
    for (size_t k = 1; k <= extra; k++) {
      if ((text[i + k] & 0xc0) != 0x80) return false;
      code = code << 6 | (text[i + k] & 0x3f);
    }
    static const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (code < least[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

static int by_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key twice in one object (sorting the keys: a hostile object may hold millions), or NULL. */
static const char *duplicate_key(const cJSON *object) {
  size_t n = 0;
  for (const cJSON *child = object->child; child != NULL; child = child->next) n++;
  if (n < 2) return NULL;
  const char **keys = malloc(n * sizeof *keys);
  if (keys == NULL) return "(out of memory)";
  size_t i = 0;
  for (const cJSON *child = object->child; child != NULL; child = child->next) keys[i++] = child->string;
  qsort(keys, n, sizeof *keys, by_key);
  const char *found = NULL;
  for (i = 1; i < n && found == NULL; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) found = keys[i];
  free(keys);
  return found;
}

/* Refuse what cJSON and Python's json would read differently: a key twice in one object (Python keeps the
 * last, cJSON finds the first) and nesting past MAX_JSON_DEPTH. */
static int check_json_tree(const cJSON *item, int depth, const char *shown, oxf_error *err) {
  if (depth > MAX_JSON_DEPTH)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s nests deeper than %d levels; re-export the folder", shown,
                    MAX_JSON_DEPTH);
  const char *twice = cJSON_IsObject(item) ? duplicate_key(item) : NULL;
  if (twice != NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s has the key \"%.100s\" twice in one object; re-export",
                    shown, twice);
  for (const cJSON *child = item->child; child != NULL; child = child->next)
    if (check_json_tree(child, depth + 1, shown, err) != 0) return -1;
  return 0;
}

static const char *type_name(int type) {
  switch (type) {
    case cJSON_Object: return "an object";
    case cJSON_Array: return "a list";
    case cJSON_String: return "a string";
    case cJSON_Number: return "a number";
    default: return "a value";
  }
}

const cJSON *oxf_json_get(const cJSON *object, const char *key, int type, const char *where, oxf_error *err) {
  const cJSON *item = cJSON_IsObject(object) ? cJSON_GetObjectItemCaseSensitive(object, key) : NULL;
  if (item == NULL || (item->type & 0xff) != type) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s%s %s %s; re-export the folder with onnxformer",
             OXF_MANIFEST_NAME, where, key, item == NULL ? "is missing, it must be" : "must be",
             type_name(type));
    return NULL;
  }
  return item;
}

int oxf_json_int(const cJSON *item, int64_t low, int64_t high, int64_t *value, const char *where,
                 oxf_error *err) {
  double number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
  if (!(number >= (double)low && number <= (double)high) || number != floor(number))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s must be an integer in %jd .. %jd; re-export the folder",
                    OXF_MANIFEST_NAME, where, (intmax_t)low, (intmax_t)high);
  *value = (int64_t)number;
  return 0;
}

int oxf_json_ids(const cJSON *array, int64_t high, int64_t **ids, size_t *n_ids, const char *where,
                 oxf_error *err) {
  *ids = NULL;
  *n_ids = 0;
  if (!cJSON_IsArray(array))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s must be a list of token ids; re-export the folder",
                    OXF_MANIFEST_NAME, where);
  size_t n = (size_t)cJSON_GetArraySize(array);
  if (n == 0) return 0;
  int64_t *values = calloc(n, sizeof *values);
  if (values == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  size_t i = 0;
  for (const cJSON *item = array->child; item != NULL; item = item->next, i++) {
    if (oxf_json_int(item, 0, high - 1, &values[i], where, err) != 0) {
      free(values);
      return -1;
    }
  }
  *ids = values;
  *n_ids = n;
  return 0;
}

cJSON *oxf_json_parse(const uint8_t *text, size_t size, const char *shown, oxf_error *err) {
  /* Strict UTF-8, no NUL (cJSON's strings end at one, so "a\u0000/../x" would silently become "a"). */
  bool nul = memchr(text, 0, size) != NULL;
  for (size_t i = 0; !nul && i + 6 <= size; i++)
    nul = text[i] == '\\' && text[i + 1] == 'u' && memcmp(text + i + 2, "0000", 4) == 0;
  if (!oxf_valid_utf8(text, size)) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s is not UTF-8 text; re-export the folder", shown);
    return NULL;
  }
  if (nul) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s holds a NUL character; re-export the folder", shown);
    return NULL;
  }
  cJSON *tree = cJSON_ParseWithLength((const char *)text, size);
  if (tree == NULL) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s is not valid JSON; re-export the folder", shown);
    return NULL;
  }
  if (check_json_tree(tree, 0, shown, err) != 0) {
    cJSON_Delete(tree);
    return NULL;
  }
  return tree;
}
