/* A model export: the task's graphs (manifest `graphs`), its KV-cache names (manifest `kv_cache`, one
 * "{i}" per layer, tensors laid out (batch, heads, sequence, head_dim)), its io names (manifest `io`) and
 * its generation defaults, read from the manifest (format 2) when it is opened; decoding.c runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* What a task runs (manifest `task`, runtime/manifest.py TASKS) and what it can feed each graph role: the
 * manifest's `io.<role>.inputs` names which of these the graph takes (runtime/manifest.py INPUT_NAMES). */
static const char *const TASK_NAMES[] = {"generate", "encode", "seq2seq"};
static const char *const TASK_ARTICLES[] = {"a", "an", "a"}; /* "an encode export" */
static const char *const ENCODER_FEEDS[] = {"input_ids", "attention_mask", "token_type_ids", NULL};
static const char *const DECODER_FEEDS[] = {"input_ids", "attention_mask", NULL};
static const char *const SEQ2SEQ_ENCODER_FEEDS[] = {"input_ids", "attention_mask", NULL};
static const char *const SEQ2SEQ_DECODER_FEEDS[] = {"decoder_input_ids", "decoder_attention_mask",
                                                    "encoder_attention_mask", NULL};

static char *expand(const char *pattern, size_t layer) {
  char number[24];
  int digits = snprintf(number, sizeof number, "%zu", layer);
  size_t size = strlen(pattern) + 1;
  for (const char *at = pattern; (at = strstr(at, "{i}")) != NULL; at += 3) size += (size_t)digits;
  char *name = malloc(size), *out = name;
  if (name == NULL) return NULL;
  for (const char *at = pattern; *at;) {
    if (strncmp(at, "{i}", 3) == 0) {
      memcpy(out, number, (size_t)digits);
      out += digits;
      at += 3;
    } else {
      *out++ = *at++;
    }
  }
  *out = 0;
  return name;
}

static void free_names(char **names, size_t n) {
  if (names == NULL) return;
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

static int cache_names(oxf_model *model, const cJSON *kv, const char *key_field, const char *value_field,
                       char ***names, oxf_error *err) {
  const cJSON *key = oxf_json_get(kv, key_field, cJSON_String, "kv_cache.", err);
  const cJSON *value = key ? oxf_json_get(kv, value_field, cJSON_String, "kv_cache.", err) : NULL;
  if (value == NULL) return -1;
  if (strstr(key->valuestring, "{i}") == NULL || strstr(value->valuestring, "{i}") == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: kv_cache.%s and %s must be names with '{i}'; re-export",
                    OXF_MANIFEST_NAME, key_field, value_field);
  *names = calloc(2 * model->layers, sizeof **names);
  if (*names == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t i = 0; i < model->layers; i++) {
    (*names)[2 * i] = expand(key->valuestring, i);
    (*names)[2 * i + 1] = expand(value->valuestring, i);
    if ((*names)[2 * i] == NULL || (*names)[2 * i + 1] == NULL)
      return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  }
  return 0;
}

/* Whether the JSON array `layout` holds exactly the `n` strings of `names`. */
static bool layout_is(const cJSON *layout, const char *const *names, int n) {
  if (!cJSON_IsArray(layout) || cJSON_GetArraySize(layout) != n) return false;
  int i = 0;
  for (const cJSON *item = layout->child; item; item = item->next, i++)
    if (!cJSON_IsString(item) || strcmp(item->valuestring, names[i]) != 0) return false;
  return true;
}

int oxf_cache_layout(const cJSON *manifest, bool *in_place, oxf_error *err) {
  static const char *const CONCAT[] = {"batch", "heads", "sequence", "head_dim"};
  static const char *const IN_PLACE[] = {"batch", "heads", "max_sequence", "head_dim"};
  *in_place = false;
  const cJSON *kv = cJSON_GetObjectItemCaseSensitive(manifest, "kv_cache");
  if (kv == NULL || cJSON_IsNull(kv)) return 0;
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(kv, "layout");
  *in_place = layout_is(layout, IN_PLACE, 4);
  if (!*in_place && !layout_is(layout, CONCAT, 4))
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "%s: kv_cache.layout must be [\"batch\", \"heads\", \"sequence\", \"head_dim\"] or "
        "[\"batch\", \"heads\", \"max_sequence\", \"head_dim\"]; re-export the folder with onnxformer",
        OXF_MANIFEST_NAME);
  return 0;
}

bool oxf_is_past_name(const cJSON *manifest, const char *name) {
  const cJSON *kv = cJSON_GetObjectItemCaseSensitive(manifest, "kv_cache");
  static const char *const FIELDS[] = {"past_key", "past_value"};
  for (size_t f = 0; f < 2; f++) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(kv, FIELDS[f]);
    const char *at = cJSON_IsString(pattern) ? strstr(pattern->valuestring, "{i}") : NULL;
    if (at == NULL) continue;
    size_t head = (size_t)(at - pattern->valuestring), tail = strlen(at + 3), n = strlen(name);
    if (n <= head + tail || strncmp(name, pattern->valuestring, head) != 0 ||
        strcmp(name + n - tail, at + 3) != 0)
      continue;
    bool digits = true;
    for (size_t i = head; i < n - tail; i++) digits &= name[i] >= '0' && name[i] <= '9';
    if (digits) return true;
  }
  return false;
}

static int read_layout(oxf_model *model, const cJSON *manifest, bool cross, oxf_error *err) {
  const cJSON *kv = oxf_json_get(manifest, "kv_cache", cJSON_Object, "", err);
  if (kv == NULL || oxf_cache_layout(manifest, &model->in_place, err) != 0) return -1;
  int64_t layers;
  if (oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "layers"), 1, 1024, &layers, "kv_cache.layers",
                   err) ||
      oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "kv_heads"), 1, 4096, &model->heads,
                   "kv_cache.kv_heads", err) ||
      oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "head_dim"), 1, 65536, &model->head_dim,
                   "kv_cache.head_dim", err))
    return -1;
  model->layers = (size_t)layers;
  if (cache_names(model, kv, "past_key", "past_value", &model->past, err) != 0) return -1;
  if (cache_names(model, kv, "present_key", "present_value", &model->present, err) != 0) return -1;
  if (cross && cache_names(model, kv, "cross_key", "cross_value", &model->cross, err) != 0) return -1;
  return 0;
}

/* generation (format 2: max_new_tokens, stop_tokens, decoder_start_token_id for seq2seq). */
static int read_generation(oxf_model *model, const cJSON *manifest, oxf_error *err) {
  const cJSON *generation = oxf_json_get(manifest, "generation", cJSON_Object, "", err);
  if (generation == NULL) return -1;
  if (oxf_json_int(cJSON_GetObjectItemCaseSensitive(generation, "max_new_tokens"), 0, 1 << 30,
                   &model->max_new_tokens, "generation.max_new_tokens", err) != 0)
    return -1;
  if (model->task == SEQ2SEQ &&
      oxf_json_int(cJSON_GetObjectItemCaseSensitive(generation, "decoder_start_token_id"), 0,
                   model->vocab_size - 1, &model->start_token, "generation.decoder_start_token_id", err) != 0)
    return -1;
  return oxf_json_ids(cJSON_GetObjectItemCaseSensitive(generation, "stop_tokens"), model->vocab_size,
                      &model->stop_tokens, &model->n_stop_tokens, "generation.stop_tokens", err);
}

/* A role's graph (manifest `graphs`) and its `io` entry; every input must be one the task feeds it. */
static int load_role(oxf_model *model, const cJSON *manifest, const char *role, const char *const *feedable,
                     graph_role *graph, oxf_error *err) {
  char where[64];
  snprintf(where, sizeof where, "io.%s.", role);
  const cJSON *graphs = oxf_json_get(manifest, "graphs", cJSON_Object, "", err);
  const cJSON *file = graphs ? oxf_json_get(graphs, role, cJSON_String, "graphs.", err) : NULL;
  const cJSON *io = file ? oxf_json_get(manifest, "io", cJSON_Object, "", err) : NULL;
  const cJSON *entry = io ? oxf_json_get(io, role, cJSON_Object, "io.", err) : NULL;
  const cJSON *inputs = entry ? oxf_json_get(entry, "inputs", cJSON_Array, where, err) : NULL;
  graph->outputs = inputs ? oxf_json_get(entry, "outputs", cJSON_Object, where, err) : NULL;
  if (graph->outputs == NULL) return -1;
  graph->n_inputs = (size_t)cJSON_GetArraySize(inputs);
  if ((graph->inputs = calloc(graph->n_inputs + 1, sizeof *graph->inputs)) == NULL)
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  size_t i = 0;
  for (const cJSON *name = inputs->child; name; name = name->next, i++) {
    bool known = false;
    for (const char *const *feed = feedable; cJSON_IsString(name) && *feed; feed++)
      known |= strcmp(*feed, name->valuestring) == 0;
    if (!known)
      return oxf_fail(err, OXF_MANIFEST_ERROR,
                      "%s: %sinputs names %.100s, which %s %s export's %s cannot be fed; re-export the "
                      "folder",
                      OXF_MANIFEST_NAME, where, cJSON_IsString(name) ? name->valuestring : "a non-string",
                      TASK_ARTICLES[model->task], TASK_NAMES[model->task], role);
    graph->inputs[i] = name->valuestring;
  }
  return oxf_session_create(model->folder, file->valuestring, &graph->session, err);
}

/* The graph output name of `key` (io.<role>.outputs), or NULL with `err` filled. */
const char *oxf_output_name(const graph_role *graph, const char *key, const char *role, oxf_error *err) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(graph->outputs, key);
  if (!cJSON_IsString(name)) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s: io.%s.outputs has no %.100s; re-export the folder",
             OXF_MANIFEST_NAME, role, key);
    return NULL;
  }
  return name->valuestring;
}

int oxf_model_from_folder(oxf_folder *folder, oxf_model **out, oxf_error *err) {
  const cJSON *manifest = folder->manifest;
  const cJSON *kind = oxf_json_get(manifest, "export_kind", cJSON_String, "", err);
  if (kind == NULL) return -1;
  if (strcmp(kind->valuestring, "model") != 0)
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "%s is a \"%.20s\" export, not a model; open the folder `onnxformer export` wrote (a blocks "
        "export can only be verified: onnxformer-c verify DIR)",
        folder->root, kind->valuestring);
  const cJSON *task = oxf_json_get(manifest, "task", cJSON_String, "", err);
  if (task == NULL) return -1;
  int found = -1;
  for (int i = 0; i < 3; i++)
    if (strcmp(task->valuestring, TASK_NAMES[i]) == 0) found = i;
  if (found < 0)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s has task \"%.20s\"; this host runs generate, encode, seq2seq", folder->root,
                    task->valuestring);
  oxf_model *model = calloc(1, sizeof *model);
  if (model == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  model->folder = folder;
  model->task = (task_kind)found;
  const cJSON *family = cJSON_GetObjectItemCaseSensitive(manifest, "family");
  snprintf(model->family, sizeof model->family, "%s", cJSON_IsString(family) ? family->valuestring : "");
  const cJSON *config = oxf_json_get(manifest, "config", cJSON_Object, "", err);
  if (config == NULL || oxf_engine_acquire(err) != 0) {
    free(model);
    return -1;
  }
  int status = oxf_json_int(cJSON_GetObjectItemCaseSensitive(config, "vocab_size"), 1, (int64_t)1 << 31,
                            &model->vocab_size, "config.vocab_size", err) ||
               oxf_json_int(cJSON_GetObjectItemCaseSensitive(config, "max_len"), 1, (int64_t)1 << 24,
                            &model->max_len, "config.max_len", err);
  if (status == 0 && model->task != ENCODE)
    status =
        read_layout(model, manifest, model->task == SEQ2SEQ, err) || read_generation(model, manifest, err);
  if (status == 0 && model->task == ENCODE)
    status = load_role(model, manifest, "encoder", ENCODER_FEEDS, &model->encoder, err);
  if (status == 0 && model->task == SEQ2SEQ)
    status = load_role(model, manifest, "encoder", SEQ2SEQ_ENCODER_FEEDS, &model->encoder, err) ||
             load_role(model, manifest, "decoder", SEQ2SEQ_DECODER_FEEDS, &model->decoder, err);
  if (status == 0 && model->task == GENERATE)
    status = load_role(model, manifest, "decoder", DECODER_FEEDS, &model->decoder, err);
  if (status == 0 && model->task != ENCODE &&
      oxf_output_name(&model->decoder, "logits", "decoder", err) == NULL)
    status = -1;
  if (status != 0) {
    oxf_model_detach(model);
    return -1;
  }
  *out = model;
  return 0;
}

oxf_model *oxf_model_open(const char *dir, oxf_error *err) {
  oxf_folder *folder = oxf_folder_open(dir, err);
  oxf_model *model = NULL;
  if (folder == NULL) return NULL;
  if (oxf_model_from_folder(folder, &model, err) != 0) {
    oxf_folder_close(folder);
    return NULL;
  }
  return model;
}

void oxf_model_detach(oxf_model *model) {
  if (model == NULL) return;
  oxf_session_release(&model->encoder.session);
  oxf_session_release(&model->decoder.session);
  free(model->encoder.inputs);
  free(model->decoder.inputs);
  free_names(model->past, 2 * model->layers);
  free_names(model->present, 2 * model->layers);
  free_names(model->cross, 2 * model->layers);
  free(model->stop_tokens);
  oxf_tokenizer_close(model->tokenizer);
  free(model->prefix);
  free(model->suffix);
  free(model);
  oxf_engine_release();
}

void oxf_model_close(oxf_model *model) {
  if (model == NULL) return;
  oxf_folder *folder = model->folder;
  oxf_model_detach(model);
  oxf_folder_close(folder);
}

const char *oxf_model_family(const oxf_model *model) {
  return model->family;
}
const char *oxf_model_task(const oxf_model *model) {
  return TASK_NAMES[model->task];
}
