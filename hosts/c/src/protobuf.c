/* The protobuf wire format, as much as the goldens (TensorProto) and the external-data check of ONNX
 * files (ModelProto) need: every length is checked against the bytes that are left. */
#include "internal.h"

int oxf_pb_varint(oxf_pb_reader *reader, uint64_t *value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (reader->at >= reader->end) return -1;
    uint8_t byte = *reader->at++;
    result |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      *value = result;
      return 0;
    }
  }
  return -1;
}

int oxf_pb_next(oxf_pb_reader *reader, oxf_pb_field *field, const char **problem) {
  if (reader->at >= reader->end) return 0;
  uint64_t key;
  if (oxf_pb_varint(reader, &key) != 0) {
    *problem = "a field key is cut short";
    return -1;
  }
  field->number = (uint32_t)(key >> 3);
  field->wire = (uint32_t)(key & 7);
  field->bytes = NULL;
  field->length = 0;
  field->value = 0;
  if (field->number == 0 || key >> 3 > 0x1fffffff) {
    *problem = "a field number is out of range";
    return -1;
  }
  size_t left;
  switch (field->wire) {
    case 0:
      if (oxf_pb_varint(reader, &field->value) != 0) {
        *problem = "a varint is cut short";
        return -1;
      }
      return 1;
    case 1:
    case 5: {
      size_t width = field->wire == 1 ? 8 : 4;
      if ((size_t)(reader->end - reader->at) < width) {
        *problem = "a fixed-width value is cut short";
        return -1;
      }
      for (size_t i = 0; i < width; i++) field->value |= (uint64_t)reader->at[i] << (8 * i);
      reader->at += width;
      return 1;
    }
    case 2: {
      uint64_t length;
      if (oxf_pb_varint(reader, &length) != 0) {
        *problem = "a length is cut short";
        return -1;
      }
      left = (size_t)(reader->end - reader->at);
      if (length > left) {
        *problem = "a length-delimited field runs past the end";
        return -1;
      }
      field->bytes = reader->at;
      field->length = (size_t)length;
      reader->at += length;
      return 1;
    }
    default: *problem = "a field has an unsupported wire type (groups are not used by ONNX)"; return -1;
  }
}

/* Where a TensorProto can sit in a serialized ModelProto (onnx.proto field numbers), as in
 * runtime/folder.py: message kind -> {field number: kind of the message it holds}. TensorProto fields 13
 * (external_data) and 14 (data_location, 1 = EXTERNAL) mark external data. */
enum { MODEL, GRAPH, NODE, ATTRIBUTE, FUNCTION, SPARSE, TENSOR, TRAINING, KINDS };
typedef struct {
  uint32_t number;
  int kind;
} holds;
static const holds HOLDS[KINDS][7] = {
    [MODEL] = {{7, GRAPH}, {20, TRAINING}, {25, FUNCTION}},
    [TRAINING] = {{1, GRAPH}, {2, GRAPH}},
    [GRAPH] = {{1, NODE}, {5, TENSOR}, {15, SPARSE}},
    [NODE] = {{5, ATTRIBUTE}},
    [ATTRIBUTE] = {{5, TENSOR}, {6, GRAPH}, {10, TENSOR}, {11, GRAPH}, {22, SPARSE}, {23, SPARSE}},
    [FUNCTION] = {{7, NODE}, {11, ATTRIBUTE}},
    [SPARSE] = {{1, TENSOR}, {2, TENSOR}},
    [TENSOR] = {{0, 0}},
};
#define MAX_DEPTH 64 /* subgraphs nest (If, Loop, Scan); no real model nests this deep */

/* 1: external data found, 0: none, -1: malformed. */
static int uses_external_data(const uint8_t *data, size_t size, int kind, int depth, const char **problem) {
  if (depth > MAX_DEPTH) {
    *problem = "messages nest more than 64 deep";
    return -1;
  }
  oxf_pb_reader reader = {data, data + size};
  oxf_pb_field field;
  int more;
  while ((more = oxf_pb_next(&reader, &field, problem)) == 1) {
    if (kind == TENSOR && (field.number == 13 || (field.number == 14 && field.wire == 0 && field.value != 0)))
      return 1;
    for (size_t i = 0; i < 7 && HOLDS[kind][i].number != 0; i++) {
      if (HOLDS[kind][i].number != field.number) continue;
      if (field.wire != 2) {
        *problem = "a message field has the wrong wire type";
        return -1;
      }
      int found = uses_external_data(field.bytes, field.length, HOLDS[kind][i].kind, depth + 1, problem);
      if (found != 0) return found;
    }
  }
  return more;
}

int oxf_refuse_external_data(const uint8_t *data, size_t size, const char *name, oxf_error *err) {
  const char *problem = "";
  int found = uses_external_data(data, size, MODEL, 0, &problem);
  if (found < 0)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s is not a valid ONNX model (%s); re-export the folder", name,
                    problem);
  if (found > 0)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s keeps tensor data in an external file; onnxformer exports never do, and external "
                    "data could read files outside the folder, so the model is refused; re-export the folder",
                    name);
  return 0;
}
