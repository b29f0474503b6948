/* A model export: the family's graphs (manifest `graphs`), its KV-cache names (manifest `kv_cache`, one
 * "{i}" per layer, tensors laid out (batch, heads, sequence, head_dim)) and greedy decoding with the cache,
 * step for step the Python runtime's loop (runtime/decoding.py) and the Node host's (hosts/node):
 * the first step feeds the whole prompt (GPT) or the decoder start token (T5) with the empty cache; every
 * later step feeds the one token chosen with the previous step's present.* as past_key_values.* and an
 * attention mask of ones over past + new. A row ends at a stop token (left out) or after `budget` tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Graph input and output names the families use (the same as hosts/node and the Python runtime). */
typedef struct {
  const char *input_ids, *attention_mask, *token_type_ids;                      /* gpt, bert, t5 encoder */
  const char *decoder_input_ids, *decoder_attention_mask, *encoder_attention_mask; /* t5 decoder */
  const char *logits;
} io_names;
static const io_names IO = {"input_ids",         "attention_mask",         "token_type_ids",
                            "decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask",
                            "logits"};

struct oxf_model {
  oxf_folder *folder;
  char family[8];
  int64_t vocab_size, max_len;
  oxf_session encoder, decoder; /* the roles the family uses are set */
  size_t layers;
  int64_t heads, head_dim;
  char **past, **present, **cross; /* 2 * layers names each: layer by layer, key then value */
  int64_t *stop_tokens;
  size_t n_stop_tokens;
  int64_t max_new_tokens, start_token;
};

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

static int read_layout(oxf_model *model, const cJSON *manifest, bool cross, oxf_error *err) {
  const cJSON *kv = oxf_json_get(manifest, "kv_cache", cJSON_Object, "", err);
  if (kv == NULL) return -1;
  int64_t layers;
  if (oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "layers"), 1, 1024, &layers, "kv_cache.layers", err) ||
      oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "heads"), 1, 4096, &model->heads, "kv_cache.heads", err) ||
      oxf_json_int(cJSON_GetObjectItemCaseSensitive(kv, "head_dim"), 1, 65536, &model->head_dim,
                   "kv_cache.head_dim", err))
    return -1;
  model->layers = (size_t)layers;
  if (cache_names(model, kv, "past_key", "past_value", &model->past, err) != 0) return -1;
  if (cache_names(model, kv, "present_key", "present_value", &model->present, err) != 0) return -1;
  if (cross && cache_names(model, kv, "cross_key", "cross_value", &model->cross, err) != 0) return -1;
  return 0;
}

/* generation.<key> if present, else `fallback`. */
static int optional_int(const cJSON *object, const char *key, int64_t low, int64_t high, int64_t fallback,
                        int64_t *value, const char *where, oxf_error *err) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  if (item == NULL || cJSON_IsNull(item)) {
    *value = fallback;
    return 0;
  }
  return oxf_json_int(item, low, high, value, where, err);
}

static int read_generation(oxf_model *model, const cJSON *manifest, oxf_error *err) {
  const cJSON *generation = cJSON_GetObjectItemCaseSensitive(manifest, "generation");
  const cJSON *special = cJSON_GetObjectItemCaseSensitive(manifest, "special_tokens");
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(manifest, "config");
  int64_t eos, bos, config_start;
  if (optional_int(special, "eos", 0, model->vocab_size - 1, 2, &eos, "special_tokens.eos", err) ||
      optional_int(special, "bos", 0, model->vocab_size - 1, 1, &bos, "special_tokens.bos", err) ||
      optional_int(config, "decoder_start_token_id", 0, model->vocab_size - 1, bos, &config_start,
                   "config.decoder_start_token_id", err) ||
      optional_int(generation, "decoder_start_token_id", 0, model->vocab_size - 1, config_start,
                   &model->start_token, "generation.decoder_start_token_id", err) ||
      optional_int(generation, "max_new_tokens", 0, 1 << 30, model->max_len, &model->max_new_tokens,
                   "generation.max_new_tokens", err))
    return -1;
  const cJSON *stops = cJSON_GetObjectItemCaseSensitive(generation, "stop_tokens");
  if (stops != NULL && !cJSON_IsNull(stops))
    return oxf_json_ids(stops, model->vocab_size, &model->stop_tokens, &model->n_stop_tokens,
                        "generation.stop_tokens", err);
  if ((model->stop_tokens = malloc(sizeof *model->stop_tokens)) == NULL)
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  model->stop_tokens[0] = eos;
  model->n_stop_tokens = 1;
  return 0;
}

static int load_role(oxf_model *model, const cJSON *manifest, const char *role, oxf_session *session,
                     oxf_error *err) {
  const cJSON *graphs = oxf_json_get(manifest, "graphs", cJSON_Object, "", err);
  const cJSON *file = graphs ? oxf_json_get(graphs, role, cJSON_String, "graphs.", err) : NULL;
  if (file == NULL) return -1;
  return oxf_session_create(model->folder, file->valuestring, session, err);
}

int oxf_model_from_folder(oxf_folder *folder, oxf_model **out, oxf_error *err) {
  const cJSON *manifest = folder->manifest;
  const cJSON *kind = oxf_json_get(manifest, "export_kind", cJSON_String, "", err);
  if (kind == NULL) return -1;
  if (strcmp(kind->valuestring, "model") != 0)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s is a \"%.20s\" export, not a model; open the folder `onnxformer export` wrote (a blocks "
                    "export can only be verified: onnxformer-c verify DIR)",
                    folder->root, kind->valuestring);
  const cJSON *family = oxf_json_get(manifest, "family", cJSON_String, "", err);
  if (family == NULL) return -1;
  bool gpt = strcmp(family->valuestring, "gpt") == 0, t5 = strcmp(family->valuestring, "t5") == 0,
       bert = strcmp(family->valuestring, "bert") == 0;
  if (!gpt && !t5 && !bert)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s holds family \"%.20s\"; this host runs gpt, t5, bert",
                    folder->root, family->valuestring);
  oxf_model *model = calloc(1, sizeof *model);
  if (model == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  model->folder = folder;
  snprintf(model->family, sizeof model->family, "%s", family->valuestring);
  const cJSON *config = oxf_json_get(manifest, "config", cJSON_Object, "", err);
  int status = config == NULL ? -1 : oxf_engine_acquire(err);
  if (status != 0) {
    free(model);
    return -1;
  }
  status = oxf_json_int(cJSON_GetObjectItemCaseSensitive(config, "vocab_size"), 1, (int64_t)1 << 31,
                        &model->vocab_size, "config.vocab_size", err) ||
           oxf_json_int(cJSON_GetObjectItemCaseSensitive(config, "max_len"), 1, (int64_t)1 << 24, &model->max_len,
                        "config.max_len", err);
  if (status == 0 && !bert) status = read_layout(model, manifest, t5, err) || read_generation(model, manifest, err);
  if (status == 0 && (t5 || bert)) status = load_role(model, manifest, "encoder", &model->encoder, err);
  if (status == 0 && (t5 || gpt)) status = load_role(model, manifest, "decoder", &model->decoder, err);
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
  if (model->encoder.session) oxf_session_release(&model->encoder);
  if (model->decoder.session) oxf_session_release(&model->decoder);
  free_names(model->past, 2 * model->layers);
  free_names(model->present, 2 * model->layers);
  free_names(model->cross, 2 * model->layers);
  free(model->stop_tokens);
  free(model);
  oxf_engine_release();
}

void oxf_model_close(oxf_model *model) {
  if (model == NULL) return;
  oxf_folder *folder = model->folder;
  oxf_model_detach(model);
  oxf_folder_close(folder);
}

const char *oxf_model_family(const oxf_model *model) { return model->family; }

/* ---- decoding ---- */

static int check_ids(const oxf_model *model, const int64_t *ids, size_t n, size_t limit, const char *what,
                     oxf_error *err) {
  if (ids == NULL || n == 0) return oxf_fail(err, OXF_INPUT_ERROR, "%s must be a non-empty list of token ids", what);
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= model->vocab_size)
      return oxf_fail(err, OXF_INPUT_ERROR,
                      "%s has token id %jd outside the vocabulary 0 .. %jd; encode text with the export's "
                      "tokenizer",
                      what, (intmax_t)ids[i], (intmax_t)(model->vocab_size - 1));
  if (n > limit)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s has %zu tokens but the model's context is %zu; shorten it", what, n,
                    limit);
  return 0;
}

/* The index of the largest logit at the last position of (1, T, V), the first one on ties (numpy's). */
static int last_argmax(const OrtValue *logits, int64_t *token, oxf_error *err) {
  int64_t dims[OXF_MAX_RANK];
  size_t rank, count;
  ONNXTensorElementDataType type;
  if (oxf_value_shape(logits, dims, &rank, &type, &count, err) != 0) return -1;
  if (rank != 3 || dims[0] != 1 || dims[1] < 1 || dims[2] < 1 || type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
    return oxf_fail(err, OXF_INFERENCE_ERROR, "the logits are not a float32 (1, T, V) tensor; re-export");
  float *data;
  if (oxf_ort_check(oxf_ort->GetTensorMutableData((OrtValue *)logits, (void **)&data), "reading the logits", err))
    return -1;
  const float *row = data + (size_t)(dims[1] - 1) * (size_t)dims[2];
  int64_t best = 0;
  for (int64_t i = 1; i < dims[2]; i++)
    if (row[i] > row[best]) best = i;
  *token = best;
  return 0;
}

/* Inputs of every step: [ids, mask, fixed..., past cache...]; outputs: [logits, present...]. */
typedef struct {
  oxf_session *graph;
  const char *ids_name, *mask_name;
  const char *const *fixed_names;
  OrtValue *const *fixed;
  size_t n_fixed;
} step_graph;

static int greedy(oxf_model *model, const step_graph *g, const int64_t *first, size_t n_first, size_t budget,
                  const int64_t *stops, size_t n_stops, oxf_generation *out, oxf_error *err) {
  size_t n_cache = 2 * model->layers, n_in = 2 + g->n_fixed + n_cache, n_out = 1 + n_cache;
  const char **in_names = calloc(n_in, sizeof *in_names), **out_names = calloc(n_out, sizeof *out_names);
  const OrtValue **inputs = calloc(n_in, sizeof *inputs);
  OrtValue **cache = calloc(n_cache, sizeof *cache), **outputs = calloc(n_out, sizeof *outputs);
  out->tokens = malloc((budget ? budget : 1) * sizeof *out->tokens);
  out->n_tokens = 0;
  out->finish_reason = "length";
  OrtValue *ids = NULL, *mask = NULL;
  int status = 0;
  if (!in_names || !out_names || !inputs || !cache || !outputs || !out->tokens)
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  /* The empty cache: (1, H, 0, Dh). */
  int64_t empty[4] = {1, model->heads, 0, model->head_dim};
  for (size_t i = 0; status == 0 && i < n_cache; i++)
    status = oxf_value_create(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, empty, 4, NULL, 4, &cache[i], err);
  if (status == 0) {
    in_names[0] = g->ids_name;
    in_names[1] = g->mask_name;
    for (size_t i = 0; i < g->n_fixed; i++) in_names[2 + i] = g->fixed_names[i], inputs[2 + i] = g->fixed[i];
    for (size_t i = 0; i < n_cache; i++) in_names[2 + g->n_fixed + i] = model->past[i];
    out_names[0] = IO.logits;
    for (size_t i = 0; i < n_cache; i++) out_names[1 + i] = model->present[i];
  }
  const int64_t *step_ids = first;
  size_t n_step = n_first, total = n_first;
  int64_t token = 0;
  while (status == 0 && out->n_tokens < budget) {
    status = oxf_value_ids(step_ids, n_step, &ids, err) || oxf_value_ones(total, &mask, err);
    if (status != 0) break;
    inputs[0] = ids;
    inputs[1] = mask;
    for (size_t i = 0; i < n_cache; i++) inputs[2 + g->n_fixed + i] = cache[i];
    status = oxf_run(g->graph, in_names, inputs, n_in, out_names, n_out, outputs, err) ||
             last_argmax(outputs[0], &token, err);
    oxf_values_release(&ids, 1);
    oxf_values_release(&mask, 1);
    if (status != 0) break;
    /* This step's present.* become the next step's past_key_values.*. */
    oxf_values_release(cache, n_cache);
    memcpy(cache, outputs + 1, n_cache * sizeof *cache);
    memset(outputs + 1, 0, n_cache * sizeof *outputs);
    oxf_values_release(outputs, 1);
    bool stop = false;
    for (size_t i = 0; i < n_stops; i++) stop |= stops[i] == token;
    if (stop) {
      out->finish_reason = "stop";
      break;
    }
    out->tokens[out->n_tokens++] = token;
    step_ids = &out->tokens[out->n_tokens - 1];
    n_step = 1;
    total += 1;
  }
  if (cache != NULL) oxf_values_release(cache, n_cache);
  if (outputs != NULL) oxf_values_release(outputs, n_out);
  free(in_names);
  free(out_names);
  free(inputs);
  free(cache);
  free(outputs);
  if (status != 0) oxf_generation_free(out);
  return status;
}

/* T5: encode once; the encoder mask and every layer's cross keys/values (1, H, S, Dh) feed every step. */
static int generate_t5(oxf_model *model, const int64_t *source, size_t n, size_t budget, const int64_t *stops,
                       size_t n_stops, oxf_generation *out, oxf_error *err) {
  size_t n_cross = 2 * model->layers;
  OrtValue *ids = NULL, *mask = NULL;
  OrtValue **fixed = calloc(1 + n_cross, sizeof *fixed);
  const char **fixed_names = calloc(1 + n_cross, sizeof *fixed_names);
  if (fixed == NULL || fixed_names == NULL) {
    free(fixed);
    free(fixed_names);
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  }
  int status = oxf_value_ids(source, n, &ids, err) || oxf_value_ones(n, &mask, err);
  if (status == 0) {
    const char *names[2] = {IO.input_ids, IO.attention_mask};
    const OrtValue *inputs[2] = {ids, mask};
    status = oxf_run(&model->encoder, names, inputs, 2, (const char *const *)model->cross, n_cross, fixed + 1, err);
  }
  if (status == 0) {
    fixed[0] = mask;
    mask = NULL;
    fixed_names[0] = IO.encoder_attention_mask;
    for (size_t i = 0; i < n_cross; i++) fixed_names[1 + i] = model->cross[i];
    step_graph g = {&model->decoder, IO.decoder_input_ids, IO.decoder_attention_mask, fixed_names, fixed,
                    1 + n_cross};
    status = greedy(model, &g, &model->start_token, 1, budget, stops, n_stops, out, err);
  }
  oxf_values_release(&ids, 1);
  oxf_values_release(&mask, 1);
  oxf_values_release(fixed, 1 + n_cross);
  free(fixed);
  free(fixed_names);
  return status;
}

int oxf_generate(oxf_model *model, const int64_t *ids, size_t n_ids, const oxf_generate_options *options,
                 oxf_generation *out, oxf_error *err) {
  memset(out, 0, sizeof *out);
  bool t5 = strcmp(model->family, "t5") == 0;
  if (!t5 && strcmp(model->family, "gpt") != 0)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s is a %s export, which embeds text; generation needs gpt or t5",
                    model->folder->root, model->family);
  int64_t max_new = options && options->max_new_tokens >= 0 ? options->max_new_tokens : model->max_new_tokens;
  const int64_t *stops = model->stop_tokens;
  size_t n_stops = model->n_stop_tokens;
  if (options && options->has_stop_tokens) {
    stops = options->stop_tokens;
    n_stops = options->n_stop_tokens;
    for (size_t i = 0; i < n_stops; i++)
      if (stops[i] < 0 || stops[i] >= model->vocab_size)
        return oxf_fail(err, OXF_INPUT_ERROR, "stop token %jd is outside the vocabulary 0 .. %jd",
                        (intmax_t)stops[i], (intmax_t)(model->vocab_size - 1));
  }
  size_t limit = (size_t)model->max_len;
  if (check_ids(model, ids, n_ids, limit, t5 ? "the source" : "the prompt", err) != 0) return -1;
  if (t5) {
    /* The decoder's context is max_len positions, the start token included. */
    size_t budget = (size_t)max_new < limit ? (size_t)max_new : limit;
    return generate_t5(model, ids, n_ids, budget, stops, n_stops, out, err);
  }
  /* The last token generated needs no position: at most max_len - prompt + 1 new tokens. */
  size_t room = limit - n_ids + 1, budget = (size_t)max_new < room ? (size_t)max_new : room;
  step_graph g = {&model->decoder, IO.input_ids, IO.attention_mask, NULL, NULL, 0};
  return greedy(model, &g, ids, n_ids, budget, stops, n_stops, out, err);
}

void oxf_generation_free(oxf_generation *generation) {
  free(generation->tokens);
  generation->tokens = NULL;
  generation->n_tokens = 0;
}

int oxf_embed(oxf_model *model, const int64_t *ids, size_t n_ids, const char *output, float **values,
              size_t *n_values, oxf_error *err) {
  *values = NULL;
  *n_values = 0;
  if (strcmp(model->family, "bert") != 0)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s is a %s export; embeddings need a bert export", model->folder->root,
                    model->family);
  if (check_ids(model, ids, n_ids, (size_t)model->max_len, "the text", err) != 0) return -1;
  const char *name = output ? output : "sentence_embedding";
  OrtValue *inputs[3] = {NULL, NULL, NULL}, *result = NULL;
  int status = oxf_value_ids(ids, n_ids, &inputs[0], err) || oxf_value_ones(n_ids, &inputs[1], err) ||
               oxf_value_zeros_i64(n_ids, &inputs[2], err);
  const char *names[3] = {IO.input_ids, IO.attention_mask, IO.token_type_ids};
  if (status == 0)
    status = oxf_run(&model->encoder, names, (const OrtValue *const *)inputs, 3, &name, 1, &result, err);
  int64_t dims[OXF_MAX_RANK];
  size_t rank = 0, count = 0;
  ONNXTensorElementDataType type;
  if (status == 0) status = oxf_value_shape(result, dims, &rank, &type, &count, err);
  if (status == 0 && (rank != 2 || dims[0] != 1 || type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT))
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "%s is not a float32 (1, D) output; re-export", name);
  float *data = NULL;
  if (status == 0) status = oxf_ort_check(oxf_ort->GetTensorMutableData(result, (void **)&data), "reading", err);
  if (status == 0 && (*values = malloc((count ? count : 1) * sizeof **values)) == NULL)
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  if (status == 0) {
    memcpy(*values, data, count * sizeof **values);
    *n_values = count;
  }
  oxf_values_release(inputs, 3);
  oxf_values_release(&result, 1);
  return status;
}
