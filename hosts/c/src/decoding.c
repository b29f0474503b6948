/* Greedy decoding with the KV cache, step for step the Python runtime's loop (runtime/decoding.py) and the
 * Node host's: the first step feeds the whole prompt (generate) or the decoder start token (seq2seq) with
 * the empty cache (1, H, 0, Dh); every later step feeds the one token chosen with the previous step's
 * present.* as past_key_values.* and an attention mask of ones over past + new. A row ends at a stop token
 * (left out) or after `budget` tokens. Also the encoder of encode exports (embeddings). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int check_ids(const oxf_model *model, const int64_t *ids, size_t n, size_t limit, const char *what,
                     oxf_error *err) {
  if (ids == NULL || n == 0)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s must be a non-empty list of token ids", what);
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= model->vocab_size)
      return oxf_fail(err, OXF_INPUT_ERROR,
                      "%s has token id %jd outside the vocabulary 0 .. %jd; encode text with the export's "
                      "tokenizer",
                      what, (intmax_t)ids[i], (intmax_t)(model->vocab_size - 1));
  if (n > limit)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s has %zu tokens but the model's context is %zu; shorten it",
                    what, n, limit);
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
  if (oxf_ort_check(oxf_ort->GetTensorMutableData((OrtValue *)logits, (void **)&data), "reading the logits",
                    err))
    return -1;
  const float *row = data + (size_t)(dims[1] - 1) * (size_t)dims[2];
  int64_t best = 0;
  for (int64_t i = 1; i < dims[2]; i++)
    if (row[i] > row[best]) best = i;
  *token = best;
  return 0;
}

/* What a graph's io inputs are fed (runtime/manifest.py INPUT_NAMES): the step's token ids, ones over
 * `total` positions for an attention mask, zeros for token_type_ids, the source's mask for the decoder. */
typedef struct {
  const int64_t *ids;
  size_t n_ids, total;
  const OrtValue *encoder_mask; /* seq2seq decoder steps only */
} feed_values;

/* Fill values[0 .. n_inputs) for the role's inputs; owned[i] says whether values[i] must be released. */
static int make_feeds(const graph_role *graph, const feed_values *v, const OrtValue **values,
                      OrtValue **owned, oxf_error *err) {
  for (size_t i = 0; i < graph->n_inputs; i++) {
    const char *name = graph->inputs[i];
    int status = 0;
    owned[i] = NULL;
    if (strcmp(name, "input_ids") == 0 || strcmp(name, "decoder_input_ids") == 0)
      status = oxf_value_ids(v->ids, v->n_ids, &owned[i], err);
    else if (strcmp(name, "attention_mask") == 0 || strcmp(name, "decoder_attention_mask") == 0)
      status = oxf_value_ones(v->total, &owned[i], err);
    else if (strcmp(name, "token_type_ids") == 0)
      status = oxf_value_zeros_i64(v->n_ids, &owned[i], err);
    else if (strcmp(name, "encoder_attention_mask") == 0 && v->encoder_mask != NULL)
      values[i] = v->encoder_mask;
    else
      status = oxf_fail(err, OXF_MANIFEST_ERROR, "this host cannot feed %s here; re-export the folder", name);
    if (status != 0) return -1;
    if (owned[i] != NULL) values[i] = owned[i];
  }
  return 0;
}

/* Inputs of every decoder step: [io inputs..., cross keys/values (seq2seq)..., past cache...];
 * outputs: [logits, present...]. */
static int greedy(oxf_model *model, const int64_t *first, size_t n_first, const OrtValue *encoder_mask,
                  OrtValue *const *cross, size_t budget, const int64_t *stops, size_t n_stops,
                  oxf_generation *out, oxf_error *err) {
  graph_role *graph = &model->decoder;
  size_t n_io = graph->n_inputs, n_cross = cross ? 2 * model->layers : 0, n_cache = 2 * model->layers;
  size_t n_in = n_io + n_cross + n_cache, n_out = 1 + n_cache;
  const char **in_names = calloc(n_in, sizeof *in_names), **out_names = calloc(n_out, sizeof *out_names);
  const OrtValue **inputs = calloc(n_in, sizeof *inputs);
  OrtValue **cache = calloc(n_cache, sizeof *cache), **outputs = calloc(n_out, sizeof *outputs);
  OrtValue **owned = calloc(n_io + 1, sizeof *owned);
  out->tokens = malloc((budget ? budget : 1) * sizeof *out->tokens);
  out->n_tokens = 0;
  out->finish_reason = "length";
  int status = 0;
  if (!in_names || !out_names || !inputs || !cache || !outputs || !owned || !out->tokens)
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  /* The empty cache: (1, H, 0, Dh); in place, zeroed buffers (1, H, L, Dh) with room for the prompt and one
   * position per step, each fed as a past input and given to ONNX Runtime as its present output, so that
   * every step writes its keys and values into the same memory (as the Python runtime's IO binding). */
  bool in_place = model->in_place && cross == NULL;
  int64_t empty[4] = {1, model->heads, in_place ? (int64_t)(n_first + (budget > 0 ? budget : 1)) : 0,
                      model->head_dim};
  size_t cache_bytes = (size_t)(empty[0] * empty[1] * empty[2] * empty[3]) * sizeof(float);
  float *zeros = in_place && status == 0 ? calloc(cache_bytes / sizeof(float) + 1, sizeof(float)) : NULL;
  if (in_place && status == 0 && zeros == NULL) status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t i = 0; status == 0 && i < n_cache; i++)
    status = oxf_value_create(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, empty, 4, zeros, 4, &cache[i], err);
  free(zeros);
  if (status == 0) {
    for (size_t i = 0; i < n_io; i++) in_names[i] = graph->inputs[i];
    for (size_t i = 0; i < n_cross; i++) in_names[n_io + i] = model->cross[i], inputs[n_io + i] = cross[i];
    for (size_t i = 0; i < n_cache; i++) in_names[n_io + n_cross + i] = model->past[i];
    if ((out_names[0] = oxf_output_name(graph, "logits", "decoder", err)) == NULL) status = -1;
    for (size_t i = 0; i < n_cache; i++) out_names[1 + i] = model->present[i];
  }
  feed_values v = {first, n_first, n_first, encoder_mask};
  int64_t token = 0;
  while (status == 0 && out->n_tokens < budget) {
    status = make_feeds(graph, &v, inputs, owned, err);
    for (size_t i = 0; status == 0 && i < n_cache; i++) inputs[n_io + n_cross + i] = cache[i];
    for (size_t i = 0; in_place && i < n_cache; i++) outputs[1 + i] = cache[i]; /* written in place */
    if (status == 0)
      status = oxf_run_into(&graph->session, in_names, inputs, n_in, out_names, n_out, outputs, err) ||
               last_argmax(outputs[0], &token, err);
    oxf_values_release(owned, n_io);
    if (in_place) memset(outputs + 1, 0, n_cache * sizeof *outputs); /* the cache owns them */
    if (status != 0) break;
    if (!in_place) {
      /* This step's present.* become the next step's past_key_values.*. */
      oxf_values_release(cache, n_cache);
      memcpy(cache, outputs + 1, n_cache * sizeof *cache);
      memset(outputs + 1, 0, n_cache * sizeof *outputs);
    }
    oxf_values_release(outputs, 1);
    bool stop = false;
    for (size_t i = 0; i < n_stops; i++) stop |= stops[i] == token;
    if (stop) {
      out->finish_reason = "stop";
      break;
    }
    out->tokens[out->n_tokens++] = token;
    v.ids = &out->tokens[out->n_tokens - 1];
    v.n_ids = 1;
    v.total += 1;
  }
  if (cache != NULL) oxf_values_release(cache, n_cache);
  if (outputs != NULL) oxf_values_release(outputs, n_out);
  free(in_names);
  free(out_names);
  free(inputs);
  free(cache);
  free(outputs);
  free(owned);
  if (status != 0) oxf_generation_free(out);
  return status ? -1 : 0;
}

/* Seq2seq: encode once; the source mask and every layer's cross keys/values (1, H, S, Dh) feed every step. */
static int generate_seq2seq(oxf_model *model, const int64_t *source, size_t n, size_t budget,
                            const int64_t *stops, size_t n_stops, oxf_generation *out, oxf_error *err) {
  size_t n_cross = 2 * model->layers, n_io = model->encoder.n_inputs;
  OrtValue *mask = NULL, **cross = calloc(n_cross, sizeof *cross), **owned = calloc(n_io + 1, sizeof *owned);
  const OrtValue **inputs = calloc(n_io + 1, sizeof *inputs);
  int status = cross && owned && inputs ? 0 : oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  feed_values v = {source, n, n, NULL};
  if (status == 0) status = make_feeds(&model->encoder, &v, inputs, owned, err);
  if (status == 0)
    status = oxf_run(&model->encoder.session, model->encoder.inputs, inputs, n_io,
                     (const char *const *)model->cross, n_cross, cross, err);
  if (status == 0) status = oxf_value_ones(n, &mask, err);
  if (status == 0)
    status = greedy(model, &model->start_token, 1, mask, cross, budget, stops, n_stops, out, err);
  if (owned) oxf_values_release(owned, n_io);
  if (cross) oxf_values_release(cross, n_cross);
  oxf_values_release(&mask, 1);
  free(cross);
  free(owned);
  free(inputs);
  return status ? -1 : 0;
}

int oxf_generate(oxf_model *model, const int64_t *ids, size_t n_ids, const oxf_generate_options *options,
                 oxf_generation *out, oxf_error *err) {
  memset(out, 0, sizeof *out);
  if (model->task == ENCODE)
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "%s is an encode export (it embeds text); generation needs a generate "
                    "or seq2seq export",
                    model->folder->root);
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
  bool seq2seq = model->task == SEQ2SEQ;
  if (check_ids(model, ids, n_ids, limit, seq2seq ? "the source" : "the prompt", err) != 0) return -1;
  if (seq2seq) {
    /* The decoder's context is max_len positions, the start token included. */
    size_t budget = (size_t)max_new < limit ? (size_t)max_new : limit;
    return generate_seq2seq(model, ids, n_ids, budget, stops, n_stops, out, err);
  }
  /* The last token generated needs no position: at most max_len - prompt + 1 new tokens. */
  size_t room = limit - n_ids + 1, budget = (size_t)max_new < room ? (size_t)max_new : room;
  return greedy(model, ids, n_ids, NULL, NULL, budget, stops, n_stops, out, err);
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
  if (model->task != ENCODE)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s is a %s export; embeddings need an encode export",
                    model->folder->root, oxf_model_task(model));
  if (check_ids(model, ids, n_ids, (size_t)model->max_len, "the text", err) != 0) return -1;
  const char *name = oxf_output_name(&model->encoder, output ? output : "sentence_embedding", "encoder", err);
  if (name == NULL) return -1;
  size_t n_io = model->encoder.n_inputs;
  OrtValue **owned = calloc(n_io + 1, sizeof *owned), *result = NULL;
  const OrtValue **inputs = calloc(n_io + 1, sizeof *inputs);
  int status = owned && inputs ? 0 : oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  feed_values v = {ids, n_ids, n_ids, NULL};
  if (status == 0) status = make_feeds(&model->encoder, &v, inputs, owned, err);
  if (status == 0)
    status = oxf_run(&model->encoder.session, model->encoder.inputs, inputs, n_io, &name, 1, &result, err);
  int64_t dims[OXF_MAX_RANK];
  size_t rank = 0, count = 0;
  ONNXTensorElementDataType type;
  if (status == 0) status = oxf_value_shape(result, dims, &rank, &type, &count, err);
  if (status == 0 && (rank != 2 || dims[0] != 1 || type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT))
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "%s is not a float32 (1, D) output; re-export", name);
  float *data = NULL;
  if (status == 0)
    status = oxf_ort_check(oxf_ort->GetTensorMutableData(result, (void **)&data), "reading", err);
  if (status == 0 && (*values = malloc((count ? count : 1) * sizeof **values)) == NULL)
    status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  if (status == 0) {
    memcpy(*values, data, count * sizeof **values);
    *n_values = count;
  }
  if (owned) oxf_values_release(owned, n_io);
  oxf_values_release(&result, 1);
  free(owned);
  free(inputs);
  return status ? -1 : 0;
}
