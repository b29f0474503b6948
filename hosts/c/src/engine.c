/* ONNX Runtime through its C API: one OrtEnv per process, sessions built from checked bytes
 * (CreateSessionFromArray: the engine never opens a file itself), tensors in and out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const OrtApi *oxf_ort = NULL;
static OrtEnv *env = NULL;
static int users = 0;

int oxf_ort_check(OrtStatus *status, const char *what, oxf_error *err) {
  if (status == NULL) return 0;
  oxf_fail(err, OXF_INFERENCE_ERROR, "ONNX Runtime failed %s: %s", what, oxf_ort->GetErrorMessage(status));
  oxf_ort->ReleaseStatus(status);
  return -1;
}

const char *oxf_onnxruntime_version(void) {
  return OrtGetApiBase()->GetVersionString();
}

int oxf_engine_acquire(oxf_error *err) {
  if (users > 0) {
    users++;
    return 0;
  }
  /* The header's API version (ORT_API_VERSION) must be one the library serves: a library older than the
   * headers returns NULL here. */
  oxf_ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (oxf_ort == NULL)
    return oxf_fail(
        err, OXF_INFERENCE_ERROR,
        "the ONNX Runtime library (%s) does not serve C API version %d, which this host was built "
        "with; build against the library's own headers (hosts/c/setup.sh)",
        oxf_onnxruntime_version(), ORT_API_VERSION);
  if (oxf_ort_check(oxf_ort->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "onnxformer-c", &env),
                    "creating its environment", err) != 0)
    return -1;
  users = 1;
  return 0;
}

void oxf_engine_release(void) {
  if (users == 0 || --users > 0) return;
  oxf_ort->ReleaseEnv(env);
  env = NULL;
}

int oxf_session_create(oxf_folder *folder, const char *file, oxf_session *session, oxf_error *err) {
  memset(session, 0, sizeof *session);
  uint8_t *bytes = NULL;
  size_t size = 0;
  if (oxf_folder_read(folder, file, &bytes, &size, err) != 0) return -1;
  if ((session->file = strdup(file)) == NULL) {
    free(bytes);
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  }
  OrtSessionOptions *options = NULL;
  char what[512];
  snprintf(what, sizeof what, "loading %s", file);
  int status = oxf_ort_check(oxf_ort->CreateSessionOptions(&options), what, err);
  /* One thread: the hosts' tests share small machines, and results do not depend on it. */
  if (status == 0) status = oxf_ort_check(oxf_ort->SetIntraOpNumThreads(options, 1), what, err);
  if (status == 0) status = oxf_ort_check(oxf_ort->SetInterOpNumThreads(options, 1), what, err);
  if (status == 0)
    status = oxf_ort_check(oxf_ort->CreateSessionFromArray(env, bytes, size, options, &session->session),
                           what, err);
  if (options != NULL) oxf_ort->ReleaseSessionOptions(options);
  free(bytes);
  if (status != 0) {
    free(session->file);
    session->file = NULL;
  }
  return status;
}

void oxf_session_release(oxf_session *session) {
  if (session->session != NULL) oxf_ort->ReleaseSession(session->session);
  free(session->file);
  memset(session, 0, sizeof *session);
}

int oxf_value_create(ONNXTensorElementDataType type, const int64_t *dims, size_t rank, const void *data,
                     size_t item_size, OrtValue **value, oxf_error *err) {
  OrtAllocator *allocator;
  if (oxf_ort_check(oxf_ort->GetAllocatorWithDefaultOptions(&allocator), "getting its allocator", err) != 0)
    return -1;
  if (oxf_ort_check(oxf_ort->CreateTensorAsOrtValue(allocator, dims, rank, type, value), "creating a tensor",
                    err) != 0)
    return -1;
  size_t count = 1;
  for (size_t i = 0; i < rank; i++) count *= (size_t)dims[i];
  if (count > 0 && data != NULL) {
    void *target;
    if (oxf_ort_check(oxf_ort->GetTensorMutableData(*value, &target), "filling a tensor", err) != 0) {
      oxf_ort->ReleaseValue(*value);
      *value = NULL;
      return -1;
    }
    memcpy(target, data, count * item_size);
  }
  return 0;
}

static int value_i64(size_t n, const int64_t *ids, int64_t fill, OrtValue **value, oxf_error *err) {
  int64_t *row = malloc((n ? n : 1) * sizeof *row);
  if (row == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (size_t i = 0; i < n; i++) row[i] = ids ? ids[i] : fill;
  int64_t dims[2] = {1, (int64_t)n};
  int status = oxf_value_create(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, dims, 2, row, 8, value, err);
  free(row);
  return status;
}

int oxf_value_ids(const int64_t *ids, size_t n, OrtValue **value, oxf_error *err) {
  return value_i64(n, ids, 0, value, err);
}
int oxf_value_ones(size_t n, OrtValue **value, oxf_error *err) {
  return value_i64(n, NULL, 1, value, err);
}
int oxf_value_zeros_i64(size_t n, OrtValue **value, oxf_error *err) {
  return value_i64(n, NULL, 0, value, err);
}

int oxf_value_shape(const OrtValue *value, int64_t *dims, size_t *rank, ONNXTensorElementDataType *type,
                    size_t *count, oxf_error *err) {
  OrtTensorTypeAndShapeInfo *info;
  if (oxf_ort_check(oxf_ort->GetTensorTypeAndShape(value, &info), "describing an output", err) != 0)
    return -1;
  size_t n = 0;
  int status = oxf_ort_check(oxf_ort->GetDimensionsCount(info, &n), "describing an output", err);
  if (status == 0 && n > OXF_MAX_RANK)
    status =
        oxf_fail(err, OXF_INFERENCE_ERROR, "an output has %zu dimensions, more than %d", n, OXF_MAX_RANK);
  if (status == 0) status = oxf_ort_check(oxf_ort->GetDimensions(info, dims, n), "describing an output", err);
  if (status == 0)
    status = oxf_ort_check(oxf_ort->GetTensorElementType(info, type), "describing an output", err);
  if (status == 0)
    status = oxf_ort_check(oxf_ort->GetTensorShapeElementCount(info, count), "describing an output", err);
  *rank = n;
  oxf_ort->ReleaseTensorTypeAndShapeInfo(info);
  return status;
}

void oxf_values_release(OrtValue **values, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (values[i] != NULL) oxf_ort->ReleaseValue(values[i]);
    values[i] = NULL;
  }
}

int oxf_run(const oxf_session *session, const char *const *input_names, const OrtValue *const *inputs,
            size_t n_in, const char *const *output_names, size_t n_out, OrtValue **outputs, oxf_error *err) {
  for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
  return oxf_run_into(session, input_names, inputs, n_in, output_names, n_out, outputs, err);
}

int oxf_run_into(const oxf_session *session, const char *const *input_names, const OrtValue *const *inputs,
                 size_t n_in, const char *const *output_names, size_t n_out, OrtValue **outputs,
                 oxf_error *err) {
  char what[512];
  snprintf(what, sizeof what, "running %s", session->file);
  return oxf_ort_check(
      oxf_ort->Run(session->session, NULL, input_names, inputs, n_in, output_names, n_out, outputs), what,
      err);
}
