/* Running an export's golden test vectors (docs/goldens.md), as runtime/goldens.py and hosts/node do.
 *
 * Graph goldens: each case's input_i.pb are fed to the graph and every output_i.pb is compared; a case
 * passes when each output has the golden's shape and max |got - golden| <= atol + rtol * max |golden|
 * (the manifest's per-graph atol and rtol). End-to-end goldens (goldens/end_to_end.json of a model
 * export): greedy generations from the golden token ids must give exactly the golden tokens and finish
 * reason; sentence embeddings must be within the listed tolerance, their texts framed by this host's
 * tokenizer giving exactly the golden input ids; the tokenizer goldens' texts must give exactly their ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

typedef struct {
  oxf_result_fn on_result;
  void *user;
  oxf_verify_summary *summary;
} sink;

static void emit(sink *out, oxf_result *result) {
  if (result->ok)
    out->summary->passed++;
  else
    out->summary->failed++;
  if (out->on_result != NULL) out->on_result(result, out->user);
}

static double max_abs(const oxf_tensor *tensor) {
  double largest = 0;
  for (size_t i = 0; i < tensor->count; i++) largest = fmax(largest, fabs(oxf_tensor_value(tensor, i)));
  return largest;
}

static double ort_value_at(ONNXTensorElementDataType type, const void *data, size_t i) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return ((const float *)data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return ((const double *)data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return (double)((const int64_t *)data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return ((const int32_t *)data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return ((const int8_t *)data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return ((const uint8_t *)data)[i];
    default: return NAN;
  }
}

/* A golden tensor file of a case, its name checked against the manifest's. */
static int read_tensor(oxf_folder *folder, const char *dir, const char *kind, size_t index, const char *name,
                       oxf_tensor *tensor, oxf_error *err) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s_%zu.pb", dir, kind, index);
  uint8_t *bytes;
  size_t size;
  if (oxf_folder_read(folder, path, &bytes, &size, err) != 0) return -1;
  int status = oxf_tensor_parse(bytes, size, path, tensor, err);
  free(bytes);
  if (status == 0 && tensor->name[0] != 0 && strcmp(tensor->name, name) != 0) {
    status = oxf_fail(err, OXF_MANIFEST_ERROR,
                      "%s holds tensor '%.100s' but the manifest says '%.100s'; re-export", path,
                      tensor->name, name);
    oxf_tensor_free(tensor);
  }
  return status;
}

static int string_list(const cJSON *list, const char ***names, size_t *n, const char *where, oxf_error *err) {
  if (!cJSON_IsArray(list))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s must be a list of names; re-export", OXF_MANIFEST_NAME,
                    where);
  *n = (size_t)cJSON_GetArraySize(list);
  *names = calloc(*n ? *n : 1, sizeof **names);
  if (*names == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  size_t i = 0;
  for (const cJSON *item = list->child; item; item = item->next, i++) {
    if (!cJSON_IsString(item)) {
      free(*names);
      return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s must be a list of names; re-export", OXF_MANIFEST_NAME,
                      where);
    }
    (*names)[i] = item->valuestring;
  }
  return 0;
}

static size_t element_size(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return 1;
    default: return 0;
  }
}

/* A past (B, H, P, Dh) followed by `room` zero positions: the buffer an in-place decoder writes the step's
 * keys and values into (runtime/decoding.py with_room), so that its presents have the goldens' shape. */
static int with_room(oxf_tensor *past, int64_t room, oxf_error *err) {
  if (past->rank != 4 || past->item_size != 4 || room <= 0) return 0;
  size_t outer = (size_t)(past->dims[0] * past->dims[1]), inner = (size_t)(past->dims[2] * past->dims[3]);
  size_t extra = (size_t)room * (size_t)past->dims[3];
  uint8_t *data = calloc(outer * (inner + extra) + 1, 4);
  if (data == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t i = 0; i < outer && inner > 0; i++)
    memcpy(data + i * (inner + extra) * 4, past->data + i * inner * 4, inner * 4);
  free(past->data);
  past->data = data;
  past->dims[2] += room;
  past->count = outer * (inner + extra);
  return 0;
}

/* Run a case one row at a time and join the rows' outputs along the batch axis: ONNX Runtime's
 * GroupQueryAttention takes batch 1 when a step has both a past and several new tokens, which the runtime's
 * own steps never have (runtime/goldens.py run_case). */
static int run_by_row(oxf_session *session, const char **in_names, const oxf_tensor *tensors, size_t n_in,
                      const char **out_names, size_t n_out, size_t batch, OrtValue **outputs,
                      oxf_error *err) {
  OrtValue **row_in = calloc(n_in + 1, sizeof *row_in), **row_out = calloc(n_out + 1, sizeof *row_out);
  uint8_t **joined = calloc(n_out + 1, sizeof *joined);
  int64_t(*dims)[OXF_MAX_RANK] = calloc(n_out + 1, sizeof *dims);
  size_t *rank = calloc(n_out + 1, sizeof *rank), *row_bytes = calloc(n_out + 1, sizeof *row_bytes);
  ONNXTensorElementDataType *types = calloc(n_out + 1, sizeof *types);
  int status = row_in && row_out && joined && dims && rank && row_bytes && types
                   ? 0
                   : oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t r = 0; status == 0 && r < batch; r++) {
    for (size_t i = 0; status == 0 && i < n_in; i++) {
      int64_t one[OXF_MAX_RANK];
      memcpy(one, tensors[i].dims, sizeof one);
      one[0] = 1;
      size_t per_row = tensors[i].count / batch * tensors[i].item_size;
      status = oxf_value_create((ONNXTensorElementDataType)tensors[i].data_type, one, tensors[i].rank,
                                tensors[i].data + r * per_row, tensors[i].item_size, &row_in[i], err);
    }
    if (status == 0)
      status =
          oxf_run(session, in_names, (const OrtValue *const *)row_in, n_in, out_names, n_out, row_out, err);
    for (size_t i = 0; status == 0 && i < n_out; i++) {
      size_t count = 0;
      void *data = NULL;
      status = oxf_value_shape(row_out[i], dims[i], &rank[i], &types[i], &count, err);
      if (status == 0 && (rank[i] < 1 || dims[i][0] != 1 || element_size(types[i]) == 0))
        status = oxf_fail(err, OXF_INFERENCE_ERROR, "%s of one row is not a batch-1 tensor", out_names[i]);
      if (status == 0 && count > 0)
        status = oxf_ort_check(oxf_ort->GetTensorMutableData(row_out[i], &data), "reading an output", err);
      if (status != 0) break;
      size_t bytes = count * element_size(types[i]);
      if (r == 0) {
        row_bytes[i] = bytes;
        if ((joined[i] = malloc(bytes * batch + 1)) == NULL)
          status = oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
      } else if (bytes != row_bytes[i]) {
        status = oxf_fail(err, OXF_INFERENCE_ERROR, "%s has another shape for row %zu", out_names[i], r);
      }
      if (status == 0 && bytes > 0) memcpy(joined[i] + r * bytes, data, bytes);
    }
    oxf_values_release(row_in, n_in);
    oxf_values_release(row_out, n_out);
  }
  for (size_t i = 0; status == 0 && i < n_out; i++) {
    dims[i][0] = (int64_t)batch;
    status =
        oxf_value_create(types[i], dims[i], rank[i], joined[i], element_size(types[i]), &outputs[i], err);
  }
  for (size_t i = 0; joined && i < n_out; i++) free(joined[i]);
  free(row_in), free(row_out), free(joined), free(dims), free(rank), free(row_bytes), free(types);
  return status;
}

/* One golden case: its inputs fed, each output compared (one result per output). */
static int run_case(oxf_folder *folder, oxf_session *session, const char *file, double atol, double rtol,
                    bool in_place, const cJSON *golden, sink *out, oxf_error *err) {
  const cJSON *dir = oxf_json_get(golden, "dir", cJSON_String, "goldens.graphs[].cases[].", err);
  const cJSON *label =
      dir ? oxf_json_get(golden, "label", cJSON_String, "goldens.graphs[].cases[].", err) : NULL;
  if (label == NULL) return -1;
  const char **in_names = NULL, **out_names = NULL;
  size_t n_in = 0, n_out = 0;
  if (string_list(cJSON_GetObjectItemCaseSensitive(golden, "inputs"), &in_names, &n_in, "cases[].inputs",
                  err))
    return -1;
  if (string_list(cJSON_GetObjectItemCaseSensitive(golden, "outputs"), &out_names, &n_out, "cases[].outputs",
                  err)) {
    free(in_names);
    return -1;
  }
  const cJSON *allowed = cJSON_GetObjectItemCaseSensitive(golden, "allowed");
  if (allowed != NULL && !cJSON_IsNull(allowed)) {
    bool valid = cJSON_IsArray(allowed) && (size_t)cJSON_GetArraySize(allowed) == n_out;
    for (const cJSON *item = valid ? allowed->child : NULL; item; item = item->next)
      valid = valid && cJSON_IsNumber(item) && item->valuedouble >= 0;
    if (!valid) {
      free(in_names);
      free(out_names);
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "%s: goldens.graphs[].cases[].allowed of %s must be one number >= 0 per output; re-export",
          OXF_MANIFEST_NAME, file);
    }
  } else {
    allowed = NULL;
  }
  OrtValue **inputs = calloc(n_in ? n_in : 1, sizeof *inputs),
           **outputs = calloc(n_out ? n_out : 1, sizeof *outputs);
  oxf_tensor *tensors = calloc(n_in ? n_in : 1, sizeof *tensors);
  int status = inputs && outputs && tensors ? 0 : oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  size_t read = 0;
  for (; status == 0 && read < n_in; read++)
    if ((status =
             read_tensor(folder, dir->valuestring, "input", read, in_names[read], &tensors[read], err)) != 0)
      break;
  /* An in-place decoder: each past gets room for the step's tokens (runtime/goldens.py run_case). */
  int64_t new_tokens = 0, past = 0, batch = 0;
  for (size_t i = 0; in_place && status == 0 && i < n_in; i++)
    if (strcmp(in_names[i], "input_ids") == 0 && tensors[i].rank == 2)
      batch = tensors[i].dims[0], new_tokens = tensors[i].dims[1];
  for (size_t i = 0; in_place && status == 0 && i < n_in; i++)
    if (oxf_is_past_name(folder->manifest, in_names[i])) {
      past = tensors[i].rank == 4 ? tensors[i].dims[2] : 0;
      status = with_room(&tensors[i], new_tokens, err);
    }
  bool by_row = in_place && new_tokens > 1 && past > 0 && batch > 1;
  /* onnx.TensorProto.DataType numbers are ONNX Runtime's element types. */
  for (size_t i = 0; status == 0 && !by_row && i < n_in; i++)
    status = oxf_value_create((ONNXTensorElementDataType)tensors[i].data_type, tensors[i].dims,
                              tensors[i].rank, tensors[i].data, tensors[i].item_size, &inputs[i], err);
  oxf_result result = {"graph", file, label->valuestring, "", 0, NAN, NAN, ""};
  oxf_error run_error;
  if (status == 0 && (by_row ? run_by_row(session, in_names, tensors, n_in, out_names, n_out, (size_t)batch,
                                          outputs, &run_error)
                             : oxf_run(session, in_names, (const OrtValue *const *)inputs, n_in, out_names,
                                       n_out, outputs, &run_error)) != 0) {
    result.detail = run_error.message; /* the case fails; the other cases still run */
    emit(out, &result);
    n_out = 0;
  }
  for (size_t i = 0; i < read; i++) oxf_tensor_free(&tensors[i]);
  free(tensors);
  for (size_t i = 0; status == 0 && i < n_out; i++) {
    oxf_tensor want;
    if ((status = read_tensor(folder, dir->valuestring, "output", i, out_names[i], &want, err)) != 0) break;
    int64_t dims[OXF_MAX_RANK];
    size_t rank = 0, count = 0;
    ONNXTensorElementDataType type;
    void *data = NULL;
    status = oxf_value_shape(outputs[i], dims, &rank, &type, &count, err);
    if (status == 0 && count > 0)
      status = oxf_ort_check(oxf_ort->GetTensorMutableData(outputs[i], &data), "reading an output", err);
    if (status != 0) {
      oxf_tensor_free(&want);
      break;
    }
    /* At most 8 dims of at most 21 characters each per shape: the text always fits. */
    char detail[512] = "";
    /* The case's own allowance for this output (float64-reference exports), else atol + rtol x max. */
    const cJSON *own = allowed ? cJSON_GetArrayItem(allowed, (int)i) : NULL;
    double limit = cJSON_IsNumber(own) ? own->valuedouble : atol + rtol * max_abs(&want);
    result = (oxf_result){"graph", file, label->valuestring, out_names[i], 0, NAN, limit, ""};
    bool same_shape = rank == want.rank && memcmp(dims, want.dims, rank * sizeof *dims) == 0;
    if (!same_shape) {
      size_t at = (size_t)snprintf(detail, sizeof detail, "shape [");
      for (size_t d = 0; d < rank; d++)
        at += (size_t)snprintf(detail + at, sizeof detail - at, "%s%jd", d ? "," : "", (intmax_t)dims[d]);
      at += (size_t)snprintf(detail + at, sizeof detail - at, "], golden [");
      for (size_t d = 0; d < want.rank; d++)
        at +=
            (size_t)snprintf(detail + at, sizeof detail - at, "%s%jd", d ? "," : "", (intmax_t)want.dims[d]);
      snprintf(detail + at, sizeof detail - at, "]");
    } else {
      double diff = 0;
      for (size_t k = 0; k < want.count; k++) {
        double delta = fabs(ort_value_at(type, data, k) - oxf_tensor_value(&want, k));
        if (!(delta <= diff)) diff = delta; /* NaN wins, and then fails */
      }
      result.max_abs_diff = diff;
      result.ok = diff <= result.allowed;
    }
    result.detail = detail;
    emit(out, &result);
    oxf_tensor_free(&want);
  }
  if (inputs) oxf_values_release(inputs, n_in);
  if (outputs) oxf_values_release(outputs, n_out);
  free(inputs);
  free(outputs);
  free(in_names);
  free(out_names);
  return status;
}

static int run_graph(oxf_folder *folder, const cJSON *graph, sink *out, oxf_error *err) {
  const cJSON *file = oxf_json_get(graph, "file", cJSON_String, "goldens.graphs[].", err);
  const cJSON *atol = file ? oxf_json_get(graph, "atol", cJSON_Number, "goldens.graphs[].", err) : NULL;
  const cJSON *rtol = atol ? oxf_json_get(graph, "rtol", cJSON_Number, "goldens.graphs[].", err) : NULL;
  const cJSON *cases = rtol ? oxf_json_get(graph, "cases", cJSON_Array, "goldens.graphs[].", err) : NULL;
  if (cases == NULL) return -1;
  if (!(atol->valuedouble >= 0) || !(rtol->valuedouble >= 0))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: the goldens of %s need atol and rtol >= 0; re-export",
                    OXF_MANIFEST_NAME, file->valuestring);
  bool in_place = false;
  if (oxf_cache_layout(folder->manifest, &in_place, err) != 0) return -1;
  const cJSON *decoder = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(folder->manifest, "graphs"), "decoder");
  in_place = in_place && cJSON_IsString(decoder) && strcmp(decoder->valuestring, file->valuestring) == 0;
  oxf_session session;
  if (oxf_session_create(folder, file->valuestring, &session, err) != 0) return -1;
  int status = 0;
  for (const cJSON *golden = cases->child; status == 0 && golden; golden = golden->next)
    status = run_case(folder, &session, file->valuestring, atol->valuedouble, rtol->valuedouble, in_place,
                      golden, out, err);
  oxf_session_release(&session);
  return status;
}

static bool same_ids(const int64_t *a, size_t n_a, const int64_t *b, size_t n_b) {
  return n_a == n_b && (n_a == 0 || memcmp(a, b, n_a * sizeof *a) == 0);
}

static int run_greedy(oxf_model *model, const char *file, const cJSON *item, int64_t vocab, sink *out,
                      oxf_error *err) {
  const char *where = "end_to_end greedy[].";
  const cJSON *prompt = oxf_json_get(item, "prompt", cJSON_String, where, err);
  const cJSON *budget = prompt ? oxf_json_get(item, "max_new_tokens", cJSON_Number, where, err) : NULL;
  const cJSON *reason = budget ? oxf_json_get(item, "finish_reason", cJSON_String, where, err) : NULL;
  if (reason == NULL) return -1;
  int64_t *ids = NULL, *stops = NULL, *want = NULL, max_new;
  size_t n_ids = 0, n_stops = 0, n_want = 0;
  int status = oxf_json_ids(cJSON_GetObjectItemCaseSensitive(item, "input_ids"), vocab, &ids, &n_ids,
                            "input_ids", err) ||
               oxf_json_ids(cJSON_GetObjectItemCaseSensitive(item, "stop_tokens"), vocab, &stops, &n_stops,
                            "stop_tokens", err) ||
               oxf_json_ids(cJSON_GetObjectItemCaseSensitive(item, "output_ids"), vocab, &want, &n_want,
                            "output_ids", err) ||
               oxf_json_int(budget, 0, 1 << 30, &max_new, "max_new_tokens", err);
  if (status == 0) {
    oxf_generate_options options = {max_new, stops, n_stops, 1};
    oxf_generation got;
    oxf_error run_error;
    char detail[1100] = "";
    oxf_result result = {"greedy", file, prompt->valuestring, "", 0, NAN, NAN, detail};
    if (oxf_generate(model, ids, n_ids, &options, &got, &run_error) != 0) {
      snprintf(detail, sizeof detail, "%s", run_error.message);
    } else {
      result.ok = same_ids(got.tokens, got.n_tokens, want, n_want) &&
                  strcmp(got.finish_reason, reason->valuestring) == 0;
      if (!result.ok) {
        size_t first = 0;
        while (first < got.n_tokens && first < n_want && got.tokens[first] == want[first]) first++;
        snprintf(detail, sizeof detail,
                 "first difference at new token %zu: got %zu tokens (%s), golden %zu (%s)", first,
                 got.n_tokens, got.finish_reason, n_want, reason->valuestring);
      }
      oxf_generation_free(&got);
    }
    emit(out, &result);
  }
  free(ids);
  free(stops);
  free(want);
  return status;
}

static int run_embeddings(oxf_model *model, const char *file, const cJSON *embeddings, int64_t vocab,
                          sink *out, oxf_error *err) {
  const char *where = "end_to_end embeddings.";
  const cJSON *output = oxf_json_get(embeddings, "output", cJSON_String, where, err);
  const cJSON *atol = output ? oxf_json_get(embeddings, "atol", cJSON_Number, where, err) : NULL;
  const cJSON *rtol = atol ? oxf_json_get(embeddings, "rtol", cJSON_Number, where, err) : NULL;
  const cJSON *items = rtol ? oxf_json_get(embeddings, "items", cJSON_Array, where, err) : NULL;
  if (items == NULL) return -1;
  for (const cJSON *item = items->child; item; item = item->next) {
    const cJSON *text = oxf_json_get(item, "text", cJSON_String, "embeddings.items[].", err);
    const cJSON *want =
        text ? oxf_json_get(item, "embedding", cJSON_Array, "embeddings.items[].", err) : NULL;
    if (want == NULL) return -1;
    int64_t *ids;
    size_t n_ids;
    if (oxf_json_ids(cJSON_GetObjectItemCaseSensitive(item, "input_ids"), vocab, &ids, &n_ids, "input_ids",
                     err))
      return -1;
    float *got = NULL;
    size_t n_got = 0;
    oxf_error run_error;
    char detail[1100] = "";
    oxf_result result = {"embedding", file, text->valuestring, output->valuestring, 0, NAN, NAN, detail};
    int64_t *framed = NULL;
    size_t n_framed = 0;
    if (oxf_frame_text(model, text->valuestring, &framed, &n_framed, &run_error) != 0) {
      snprintf(detail, sizeof detail, "%s", run_error.message);
    } else if (n_framed != n_ids || memcmp(framed, ids, n_ids * sizeof *ids) != 0) {
      snprintf(detail, sizeof detail, "the text framed by this host's tokenizer is not the golden input_ids");
    } else if (oxf_embed(model, ids, n_ids, output->valuestring, &got, &n_got, &run_error) != 0) {
      snprintf(detail, sizeof detail, "%s", run_error.message);
    } else if (n_got != (size_t)cJSON_GetArraySize(want)) {
      snprintf(detail, sizeof detail, "%zu values, golden %d", n_got, cJSON_GetArraySize(want));
    } else {
      double largest = 0, diff = 0;
      size_t k = 0;
      for (const cJSON *value = want->child; value; value = value->next, k++) {
        double golden = cJSON_IsNumber(value) ? value->valuedouble : NAN;
        largest = fmax(largest, fabs(golden));
        double delta = fabs((double)got[k] - golden);
        if (!(delta <= diff)) diff = delta;
      }
      result.allowed = atol->valuedouble + rtol->valuedouble * largest;
      result.max_abs_diff = diff;
      result.ok = diff <= result.allowed;
    }
    emit(out, &result);
    free(framed);
    free(got);
    free(ids);
  }
  return 0;
}

/* A tokenizer golden: the text's ids, exactly. */
static int run_tokenizer(oxf_model *model, const char *file, const cJSON *item, sink *out, oxf_error *err) {
  const cJSON *text = oxf_json_get(item, "text", cJSON_String, "end_to_end tokenizer[].", err);
  const cJSON *want = text ? oxf_json_get(item, "ids", cJSON_Array, "end_to_end tokenizer[].", err) : NULL;
  if (want == NULL) return -1;
  char detail[1100] = "";
  oxf_result result = {"tokenizer", file, text->valuestring, "", 0, NAN, NAN, detail};
  oxf_error run_error;
  const oxf_tokenizer *tokenizer = oxf_model_tokenizer(model, &run_error);
  int64_t *ids = NULL;
  size_t n_ids = 0;
  if (tokenizer == NULL ||
      oxf_tokenize(tokenizer, text->valuestring, strlen(text->valuestring), &ids, &n_ids, &run_error) != 0) {
    snprintf(detail, sizeof detail, "%s", run_error.message);
  } else {
    size_t i = 0;
    const cJSON *id = want->child;
    while (i < n_ids && id != NULL && cJSON_IsNumber(id) && id->valuedouble == (double)ids[i])
      i++, id = id->next;
    result.ok = i == n_ids && id == NULL;
    if (!result.ok)
      snprintf(detail, sizeof detail, "%zu ids, golden %d; they first differ at id %zu", n_ids,
               cJSON_GetArraySize(want), i);
  }
  emit(out, &result);
  free(ids);
  return 0;
}

static int run_end_to_end(oxf_folder *folder, const char *file, sink *out, oxf_error *err) {
  uint8_t *bytes;
  size_t size;
  if (oxf_folder_read(folder, file, &bytes, &size, err) != 0) return -1;
  cJSON *golden = oxf_json_parse(bytes, size, file, err);
  free(bytes);
  if (golden == NULL) return -1;
  oxf_model *model = NULL;
  int status = oxf_model_from_folder(folder, &model, err);
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(folder->manifest, "config");
  int64_t vocab = 0;
  if (status == 0)
    status = oxf_json_int(cJSON_GetObjectItemCaseSensitive(config, "vocab_size"), 1, (int64_t)1 << 31, &vocab,
                          "config.vocab_size", err);
  const cJSON *tokenizer = cJSON_GetObjectItemCaseSensitive(golden, "tokenizer");
  for (const cJSON *item = cJSON_IsArray(tokenizer) ? tokenizer->child : NULL; status == 0 && item;
       item = item->next)
    status = run_tokenizer(model, file, item, out, err);
  const cJSON *greedy = cJSON_GetObjectItemCaseSensitive(golden, "greedy");
  for (const cJSON *item = cJSON_IsArray(greedy) ? greedy->child : NULL; status == 0 && item;
       item = item->next)
    status = run_greedy(model, file, item, vocab, out, err);
  const cJSON *embeddings = cJSON_GetObjectItemCaseSensitive(golden, "embeddings");
  if (status == 0 && embeddings != NULL && !cJSON_IsNull(embeddings))
    status = run_embeddings(model, file, embeddings, vocab, out, err);
  oxf_model_detach(model);
  cJSON_Delete(golden);
  return status;
}

int oxf_verify(const char *dir, oxf_result_fn on_result, void *user, oxf_verify_summary *summary,
               oxf_error *err) {
  oxf_verify_summary ignored;
  if (summary == NULL) summary = &ignored;
  memset(summary, 0, sizeof *summary);
  oxf_folder *folder = oxf_folder_open(dir, err);
  if (folder == NULL) return -1;
  sink out = {on_result, user, summary};
  int status = oxf_folder_check_all(folder, &summary->files_checked, err);
  bool in_place;
  if (status == 0) status = oxf_cache_layout(folder->manifest, &in_place, err);
  const cJSON *goldens = cJSON_GetObjectItemCaseSensitive(folder->manifest, "goldens");
  const cJSON *graphs = cJSON_GetObjectItemCaseSensitive(goldens, "graphs");
  if (status == 0 && !cJSON_IsArray(graphs))
    status = oxf_fail(err, OXF_GOLDEN_ERROR,
                      "%s/%s has no goldens; re-export with an onnxformer that writes golden test data", dir,
                      OXF_MANIFEST_NAME);
  if (status == 0 && (status = oxf_engine_acquire(err)) == 0) {
    for (const cJSON *graph = graphs->child; status == 0 && graph; graph = graph->next)
      status = run_graph(folder, graph, &out, err);
    const cJSON *end_to_end = cJSON_GetObjectItemCaseSensitive(goldens, "end_to_end");
    if (status == 0 && cJSON_IsString(end_to_end))
      status = run_end_to_end(folder, end_to_end->valuestring, &out, err);
    oxf_engine_release();
  }
  oxf_folder_close(folder);
  return status ? -1 : 0;
}
