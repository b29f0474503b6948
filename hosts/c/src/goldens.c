/* Running an export's golden test vectors (docs/goldens.md), as runtime/goldens.py and hosts/node do.
 *
 * Graph goldens: each case's input_i.pb are fed to the graph and every output_i.pb is compared; a case
 * passes when each output has the golden's shape and max |got - golden| <= atol + rtol * max |golden|
 * (the manifest's per-graph atol and rtol). End-to-end goldens (goldens/end_to_end.json of a model
 * export): greedy generations from the golden token ids must give exactly the golden tokens and finish
 * reason; sentence embeddings must be within the listed tolerance. The tokenizer goldens need a tokenizer,
 * which this host does not have (it takes token ids): they are counted as not run, never as passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* One golden case: its inputs fed, each output compared (one result per output). */
static int run_case(oxf_folder *folder, oxf_session *session, const char *file, double atol, double rtol,
                    const cJSON *golden, sink *out, oxf_error *err) {
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
      return oxf_fail(err, OXF_MANIFEST_ERROR,
                      "%s: goldens.graphs[].cases[].allowed of %s must be one number >= 0 per output; re-export",
                      OXF_MANIFEST_NAME, file);
    }
  } else {
    allowed = NULL;
  }
  OrtValue **inputs = calloc(n_in ? n_in : 1, sizeof *inputs),
           **outputs = calloc(n_out ? n_out : 1, sizeof *outputs);
  int status = inputs && outputs ? 0 : oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t i = 0; status == 0 && i < n_in; i++) {
    oxf_tensor tensor;
    if ((status = read_tensor(folder, dir->valuestring, "input", i, in_names[i], &tensor, err)) != 0) break;
    /* onnx.TensorProto.DataType numbers are ONNX Runtime's element types. */
    status = oxf_value_create((ONNXTensorElementDataType)tensor.data_type, tensor.dims, tensor.rank,
                              tensor.data, tensor.item_size, &inputs[i], err);
    oxf_tensor_free(&tensor);
  }
  oxf_result result = {"graph", file, label->valuestring, "", 0, NAN, NAN, ""};
  oxf_error run_error;
  if (status == 0 && oxf_run(session, in_names, (const OrtValue *const *)inputs, n_in, out_names, n_out,
                             outputs, &run_error) != 0) {
    result.detail = run_error.message; /* the case fails; the other cases still run */
    emit(out, &result);
    n_out = 0;
  }
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
  oxf_session session;
  if (oxf_session_create(folder, file->valuestring, &session, err) != 0) return -1;
  int status = 0;
  for (const cJSON *golden = cases->child; status == 0 && golden; golden = golden->next)
    status =
        run_case(folder, &session, file->valuestring, atol->valuedouble, rtol->valuedouble, golden, out, err);
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
    if (oxf_embed(model, ids, n_ids, output->valuestring, &got, &n_got, &run_error) != 0) {
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
    free(got);
    free(ids);
  }
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
  out->summary->tokenizer_not_run += cJSON_IsArray(tokenizer) ? (size_t)cJSON_GetArraySize(tokenizer) : 0;
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
  if (status == 0) status = oxf_check_cache_layout(folder->manifest, err);
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
