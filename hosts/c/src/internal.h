/* What the library's files share; nothing here is part of the public API (include/onnxformer.h). */
#ifndef ONNXFORMER_INTERNAL_H
#define ONNXFORMER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <onnxruntime/onnxruntime_c_api.h>

#include "onnxformer.h"

#define OXF_MANIFEST_NAME "manifest.json"
#define OXF_FORMAT_VERSION 2

/* Fill `err` (if not NULL) and return -1. */
int oxf_fail(oxf_error *err, oxf_error_kind kind, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- sha256.c: FIPS 180-4 SHA-256 ---- */
void oxf_sha256_hex(const uint8_t *data, size_t size, char hex[65]);

/* ---- folder.c ---- */
typedef struct {
  char *path;
  char sha256[65];
  uint64_t size;
} oxf_file_entry;

struct oxf_folder {
  char *root;            /* as the caller named it, for messages */
  int root_fd;           /* the folder, opened once: every file is reached from it */
  cJSON *manifest;       /* the parsed, checked manifest */
  oxf_file_entry *files; /* manifest "files" */
  size_t n_files;
};

/* Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF. */
bool oxf_valid_utf8(const uint8_t *text, size_t size);
/* Parse JSON bytes: strict UTF-8, no NUL, no key twice in an object, bounded nesting. */
cJSON *oxf_json_parse(const uint8_t *text, size_t size, const char *shown, oxf_error *err);
/* A manifest object's member of the given kind, or NULL with `err` filled ("where" names it). */
const cJSON *oxf_json_get(const cJSON *object, const char *key, int type, const char *where, oxf_error *err);
/* A JSON number that is an integer in [low, high], or -1 with `err` filled. */
int oxf_json_int(const cJSON *item, int64_t low, int64_t high, int64_t *value, const char *where,
                 oxf_error *err);
/* An array of integer ids in [0, high); *ids is malloc'd (NULL when empty). */
int oxf_json_ids(const cJSON *array, int64_t high, int64_t **ids, size_t *n_ids, const char *where,
                 oxf_error *err);

/* Refuse a serialized ONNX model whose tensors keep their data in external files. */
int oxf_refuse_external_data(const uint8_t *data, size_t size, const char *name, oxf_error *err);

/* ---- tensorproto.c: golden input_i.pb / output_i.pb ---- */
#define OXF_MAX_RANK 8
typedef struct {
  char *name;
  int32_t data_type; /* onnx.TensorProto.DataType */
  size_t rank;
  int64_t dims[OXF_MAX_RANK];
  size_t count;     /* product of dims */
  size_t item_size; /* bytes per element */
  uint8_t *data;    /* count * item_size bytes, native little-endian (malloc'd, NULL when empty) */
} oxf_tensor;

int oxf_tensor_parse(const uint8_t *bytes, size_t size, const char *source, oxf_tensor *tensor,
                     oxf_error *err);
void oxf_tensor_free(oxf_tensor *tensor);
/* Element i as a double. */
double oxf_tensor_value(const oxf_tensor *tensor, size_t i);

/* Protobuf wire format (protobuf.c). */
typedef struct {
  const uint8_t *at, *end;
} oxf_pb_reader;
typedef struct {
  uint32_t number;
  uint32_t wire;        /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
  uint64_t value;       /* varint or fixed value */
  const uint8_t *bytes; /* length-delimited payload */
  size_t length;
} oxf_pb_field;
/* 1: a field was read, 0: end of message, -1: malformed (`problem` says why). */
int oxf_pb_next(oxf_pb_reader *reader, oxf_pb_field *field, const char **problem);
int oxf_pb_varint(oxf_pb_reader *reader, uint64_t *value);

/* ---- engine.c: ONNX Runtime ---- */
typedef struct {
  OrtSession *session;
  char *file;
} oxf_session;

extern const OrtApi *oxf_ort;
/* Take a reference on the process's OrtEnv (created on first use) / drop it. */
int oxf_engine_acquire(oxf_error *err);
void oxf_engine_release(void);
/* A session on checked bytes. */
int oxf_session_create(oxf_folder *folder, const char *file, oxf_session *session, oxf_error *err);
void oxf_session_release(oxf_session *session);
/* Convert an OrtStatus into `err` (releasing it); 0 when `status` is NULL. */
int oxf_ort_check(OrtStatus *status, const char *what, oxf_error *err);
/* A tensor owning a copy of `data`. */
int oxf_value_create(ONNXTensorElementDataType type, const int64_t *dims, size_t rank, const void *data,
                     size_t item_size, OrtValue **value, oxf_error *err);
int oxf_value_ids(const int64_t *ids, size_t n, OrtValue **value, oxf_error *err); /* (1, n) int64 */
int oxf_value_ones(size_t n, OrtValue **value, oxf_error *err);                    /* (1, n) int64 */
int oxf_value_zeros_i64(size_t n, OrtValue **value, oxf_error *err);               /* (1, n) int64 */
int oxf_value_shape(const OrtValue *value, int64_t *dims, size_t *rank, ONNXTensorElementDataType *type,
                    size_t *count, oxf_error *err);
void oxf_values_release(OrtValue **values, size_t n);
int oxf_run(const oxf_session *session, const char *const *input_names, const OrtValue *const *inputs,
            size_t n_in, const char *const *output_names, size_t n_out, OrtValue **outputs, oxf_error *err);
/* oxf_run into the outputs that are not NULL (ONNX Runtime writes into them; an in-place cache). */
int oxf_run_into(const oxf_session *session, const char *const *input_names, const OrtValue *const *inputs,
                 size_t n_in, const char *const *output_names, size_t n_out, OrtValue **outputs,
                 oxf_error *err);

/* ---- model.c (loading), decoding.c (running) ---- */
typedef enum { GENERATE, ENCODE, SEQ2SEQ } task_kind;

/* One graph role: its session and its `io` entry (names owned by the manifest's cJSON tree). */
typedef struct {
  oxf_session session;
  const char **inputs;
  size_t n_inputs;
  const cJSON *outputs; /* output key -> graph output name */
} graph_role;

struct oxf_model {
  oxf_folder *folder;
  task_kind task;
  char family[32];
  int64_t vocab_size, max_len;
  graph_role encoder, decoder; /* the roles the task uses are loaded */
  size_t layers;
  int64_t heads, head_dim;
  char **past, **present, **cross; /* 2 * layers names each: layer by layer, key then value */
  int64_t *stop_tokens;
  size_t n_stop_tokens;
  int64_t max_new_tokens, start_token;
  bool in_place; /* the decoder writes its cache in place (kv_cache.layout max_sequence) */
  /* Read on first use of text (model_text.c): the tokenizer and the framing of the task's text. */
  struct oxf_tokenizer *tokenizer;
  int64_t *prefix, *suffix; /* special-token ids before and after the text's tokens */
  size_t n_prefix, n_suffix;
  int64_t max_length; /* the most ids a framed text may have */
};

/* The graph output name of `key` (io.<role>.outputs), or NULL with `err` filled. */
const char *oxf_output_name(const graph_role *graph, const char *key, const char *role, oxf_error *err);
int oxf_model_from_folder(oxf_folder *folder, oxf_model **model, oxf_error *err);
/* A manifest's kv_cache.layout (when it has a kv_cache): past in and past + new out, or (`onnxformer
   optimize`'s default) one buffer of max_sequence positions bound as both past and present, which the step
   writes in place (*in_place). Another layout is refused before any session is made. */
int oxf_cache_layout(const cJSON *manifest, bool *in_place, oxf_error *err);
/* Whether `name` is a past key or value input of the manifest's kv_cache ("{i}" a layer number). */
bool oxf_is_past_name(const cJSON *manifest, const char *name);
void oxf_model_detach(oxf_model *model); /* close without closing the folder */
/* The text framed as the task's text (model_text.c): a prompt or source past the context is refused, an
 * encode export's text cut to its first tokens. *ids malloc'd. */
int oxf_frame_text(oxf_model *model, const char *text, int64_t **ids, size_t *n, oxf_error *err);

#endif
