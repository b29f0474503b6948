/* onnx.TensorProto files (the golden input_i.pb / output_i.pb), the fields a tensor needs, as
 * runtime/tensorproto.py reads them:
 *   dims = 1 (repeated int64)  data_type = 2  float_data = 4  int32_data = 5  int64_data = 7
 *   name = 8  raw_data = 9 (little-endian)  double_data = 10  data_location = 14 (EXTERNAL refused) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t item_size_of(int32_t data_type) {
  switch (data_type) {
    case 1: return 4;  /* float */
    case 2: return 1;  /* uint8 */
    case 3: return 1;  /* int8 */
    case 6: return 4;  /* int32 */
    case 7: return 8;  /* int64 */
    case 9: return 1;  /* bool */
    case 11: return 8; /* double */
    default: return 0;
  }
}

static int refuse(oxf_tensor *tensor, oxf_error *err, const char *source, const char *problem) {
  oxf_tensor_free(tensor);
  return oxf_fail(err, OXF_MANIFEST_ERROR, "%s is not a readable ONNX TensorProto (%s); re-export the folder",
                  source, problem);
}

static int push_dim(oxf_tensor *tensor, uint64_t dim, const char **problem) {
  if (tensor->rank >= OXF_MAX_RANK) {
    *problem = "it has more than 8 dims";
    return -1;
  }
  if ((int64_t)dim < 0) {
    *problem = "it has a negative dimension";
    return -1;
  }
  tensor->dims[tensor->rank++] = (int64_t)dim;
  return 0;
}

/* Append one typed value (float_data, int32_data, int64_data, double_data) to `tensor`. */
static int append(oxf_tensor *tensor, size_t *filled, size_t capacity, double real, int64_t integer,
                  bool is_real) {
  if (*filled >= capacity) return -1;
  uint8_t *at = tensor->data + *filled * tensor->item_size;
  switch (tensor->data_type) {
    case 1: {
      float value = is_real ? (float)real : (float)integer;
      memcpy(at, &value, 4);
      break;
    }
    case 11: {
      double value = is_real ? real : (double)integer;
      memcpy(at, &value, 8);
      break;
    }
    case 6: {
      int32_t value = (int32_t)integer;
      memcpy(at, &value, 4);
      break;
    }
    case 7: memcpy(at, &integer, 8); break;
    default: /* uint8, int8, bool ride in int32_data */ *at = (uint8_t)integer;
  }
  (*filled)++;
  return 0;
}

int oxf_tensor_parse(const uint8_t *bytes, size_t size, const char *source, oxf_tensor *tensor,
                     oxf_error *err) {
  memset(tensor, 0, sizeof *tensor);
  const uint8_t *raw = NULL;
  size_t raw_size = 0;
  bool has_raw = false, has_type = false;
  const char *problem = "";
  oxf_pb_reader reader = {bytes, bytes + size};
  oxf_pb_field field;
  int more;
  /* First pass: dims, type, name, raw_data. */
  while ((more = oxf_pb_next(&reader, &field, &problem)) == 1) {
    if (field.number == 1 && field.wire == 0) {
      if (push_dim(tensor, field.value, &problem) != 0) return refuse(tensor, err, source, problem);
    } else if (field.number == 1 && field.wire == 2) {
      oxf_pb_reader packed = {field.bytes, field.bytes + field.length};
      uint64_t dim;
      while (packed.at < packed.end) {
        if (oxf_pb_varint(&packed, &dim) != 0)
          return refuse(tensor, err, source, "packed dims are cut short");
        if (push_dim(tensor, dim, &problem) != 0) return refuse(tensor, err, source, problem);
      }
    } else if (field.number == 2 && field.wire == 0) {
      tensor->data_type = (int32_t)field.value;
      has_type = true;
    } else if (field.number == 8 && field.wire == 2) {
      free(tensor->name);
      tensor->name = malloc(field.length + 1);
      if (tensor->name == NULL) {
        oxf_tensor_free(tensor);
        return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory reading %s", source);
      }
      memcpy(tensor->name, field.bytes, field.length);
      tensor->name[field.length] = 0;
      if (strlen(tensor->name) != field.length || !oxf_valid_utf8(field.bytes, field.length))
        return refuse(tensor, err, source, "the name is not UTF-8 text without NUL");
    } else if (field.number == 9 && field.wire == 2) {
      raw = field.bytes;
      raw_size = field.length;
      has_raw = true;
    } else if (field.number == 14 && field.wire == 0 && field.value == 1) {
      return refuse(tensor, err, source, "it points at external data, which goldens never use");
    }
  }
  if (more < 0) return refuse(tensor, err, source, problem);
  if (tensor->name == NULL && (tensor->name = calloc(1, 1)) == NULL)
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory reading %s", source);
  tensor->item_size = has_type ? item_size_of(tensor->data_type) : 0;
  if (tensor->item_size == 0) {
    oxf_tensor_free(tensor);
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s holds data_type %d, which the C host does not read; re-export", source,
                    tensor->data_type);
  }
  size_t count = 1;
  for (size_t i = 0; i < tensor->rank; i++) {
    if (tensor->dims[i] > 0 && count > SIZE_MAX / 16 / (size_t)tensor->dims[i])
      return refuse(tensor, err, source, "the shape is too large");
    count *= (size_t)tensor->dims[i];
  }
  tensor->count = count;
  /* What the message can hold bounds what is allocated: raw_data exactly, typed values a byte each at
   * least, so a tiny file claiming a huge shape is refused before any allocation. */
  if (has_raw && raw_size != count * tensor->item_size)
    return refuse(tensor, err, source, "raw_data does not hold shape x item size bytes");
  if (!has_raw && count > size) return refuse(tensor, err, source, "it holds fewer values than its shape");
  if (count > 0 && (tensor->data = calloc(count, tensor->item_size)) == NULL) {
    oxf_tensor_free(tensor);
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory reading %s", source);
  }
  if (has_raw) {
    if (raw_size > 0) memcpy(tensor->data, raw, raw_size); /* x86-64 and aarch64 are little-endian */
    return 0;
  }
  /* Second pass: typed values. */
  size_t filled = 0;
  reader = (oxf_pb_reader){bytes, bytes + size};
  while (oxf_pb_next(&reader, &field, &problem) == 1) {
    int status = 0;
    if (field.number == 4 || field.number == 10) {
      size_t width = field.number == 4 ? 4 : 8;
      const uint8_t *at = field.bytes;
      size_t n = field.length / width;
      if (field.wire != 2 && field.wire != (width == 4 ? 5u : 1u))
        return refuse(tensor, err, source, "float_data or double_data has the wrong wire type");
      if (field.wire != 2) { /* one unpacked value */
        n = 1;
        at = NULL;
      } else if (field.length % width != 0) {
        return refuse(tensor, err, source, "packed float_data is cut short");
      }
      for (size_t i = 0; i < n && status == 0; i++) {
        double value;
        if (width == 4) {
          uint32_t word = at ? (uint32_t)at[4 * i] | (uint32_t)at[4 * i + 1] << 8 |
                                   (uint32_t)at[4 * i + 2] << 16 | (uint32_t)at[4 * i + 3] << 24
                             : (uint32_t)field.value;
          float single;
          memcpy(&single, &word, 4);
          value = single;
        } else {
          uint64_t word = field.value;
          if (at) {
            word = 0;
            for (int b = 0; b < 8; b++) word |= (uint64_t)at[8 * i + b] << (8 * b);
          }
          memcpy(&value, &word, 8);
        }
        status = append(tensor, &filled, count, value, 0, true);
      }
    } else if (field.number == 5 || field.number == 7) {
      if (field.wire == 0) {
        status = append(tensor, &filled, count, 0, (int64_t)field.value, false);
      } else if (field.wire == 2) {
        oxf_pb_reader packed = {field.bytes, field.bytes + field.length};
        uint64_t value;
        while (packed.at < packed.end && status == 0) {
          if (oxf_pb_varint(&packed, &value) != 0)
            return refuse(tensor, err, source, "packed integers are cut short");
          status = append(tensor, &filled, count, 0, (int64_t)value, false);
        }
      }
    }
    if (status != 0) return refuse(tensor, err, source, "it holds more values than its shape");
  }
  if (filled != count) return refuse(tensor, err, source, "it holds fewer values than its shape");
  return 0;
}

double oxf_tensor_value(const oxf_tensor *tensor, size_t i) {
  const uint8_t *at = tensor->data + i * tensor->item_size;
  switch (tensor->data_type) {
    case 1: {
      float value;
      memcpy(&value, at, 4);
      return value;
    }
    case 11: {
      double value;
      memcpy(&value, at, 8);
      return value;
    }
    case 6: {
      int32_t value;
      memcpy(&value, at, 4);
      return value;
    }
    case 7: {
      int64_t value;
      memcpy(&value, at, 8);
      return (double)value;
    }
    case 3: return (int8_t)*at;
    default: return *at;
  }
}

void oxf_tensor_free(oxf_tensor *tensor) {
  free(tensor->name);
  free(tensor->data);
  memset(tensor, 0, sizeof *tensor);
}

int oxf_read_tensor_file(const char *path, oxf_tensor_info *info, oxf_error *err) {
  memset(info, 0, sizeof *info);
  FILE *file = fopen(path, "rb");
  if (file == NULL) return oxf_fail(err, OXF_INPUT_ERROR, "cannot open %s: %s", path, strerror(errno));
  size_t size = 0, capacity = 1 << 16;
  uint8_t *bytes = malloc(capacity);
  size_t got;
  while (bytes != NULL && (got = fread(bytes + size, 1, capacity - size, file)) > 0) {
    size += got;
    if (size == capacity) {
      uint8_t *grown = capacity <= (SIZE_MAX >> 1) ? realloc(bytes, capacity * 2) : NULL;
      if (grown == NULL) free(bytes);
      bytes = grown;
      capacity *= 2;
    }
  }
  fclose(file);
  if (bytes == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory reading %s", path);
  oxf_tensor tensor;
  int status = oxf_tensor_parse(bytes, size, path, &tensor, err);
  free(bytes);
  if (status != 0) return -1;
  info->data_type = tensor.data_type;
  info->rank = tensor.rank;
  memcpy(info->dims, tensor.dims, sizeof info->dims);
  for (size_t i = 0; i < tensor.count; i++)
    info->max_abs = fmax(info->max_abs, fabs(oxf_tensor_value(&tensor, i)));
  info->name = tensor.name; /* handed over */
  tensor.name = NULL;
  oxf_tensor_free(&tensor);
  return 0;
}

void oxf_tensor_info_free(oxf_tensor_info *info) {
  free(info->name);
  info->name = NULL;
}
