/* A model export's text: its tokenizer (read from the folder on first use), the framing of its task's text
 * (manifest `framing`: special-token names before and after the text's tokens, `max_length`), and
 * generation and embeddings from text, as the Python runtime's TextGenerator, TextToText and TextEncoder
 * give them: the prompt framed and refused past the context, an embedded text cut to its first tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* Which framing a task's text has (runtime/manifest_schema.py TASKS: GPT prompt, BERT text, T5 source). */
static const char *const TEXT_KEYS[] = {"prompt", "text", "source"};

/* The ids of the special-token names of framing.<key>.<side>. */
static int framing_side(const cJSON *manifest, const cJSON *framing, const char *key, const char *side,
                        int64_t **ids, size_t *n, oxf_error *err) {
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(framing, side);
  const cJSON *special = cJSON_GetObjectItemCaseSensitive(manifest, "special_tokens");
  if (!cJSON_IsArray(names) || !cJSON_IsObject(special))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s: framing.%s.%s must list special-token names of special_tokens; re-export the folder",
                    OXF_MANIFEST_NAME, key, side);
  *n = (size_t)cJSON_GetArraySize(names);
  *ids = calloc(*n + 1, sizeof **ids);
  if (*ids == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  size_t i = 0;
  for (const cJSON *name = names->child; name; name = name->next, i++) {
    const cJSON *id =
        cJSON_IsString(name) ? cJSON_GetObjectItemCaseSensitive(special, name->valuestring) : NULL;
    char where[96];
    snprintf(where, sizeof where, "special_tokens.%.40s (framing.%s.%s)",
             cJSON_IsString(name) ? name->valuestring : "?", key, side);
    if (oxf_json_int(id, 0, INT32_MAX, &(*ids)[i], where, err) != 0) return -1;
  }
  return 0;
}

/* The tokenizer and the framing, read once. */
static int load_text(oxf_model *model, oxf_error *err) {
  if (model->tokenizer != NULL) return 0;
  const cJSON *manifest = model->folder->manifest;
  const char *key = TEXT_KEYS[model->task];
  const cJSON *framing = cJSON_GetObjectItemCaseSensitive(manifest, "framing");
  const cJSON *entry = cJSON_GetObjectItemCaseSensitive(framing, key);
  if (!cJSON_IsObject(entry))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s has no framing.%s; re-export the folder with onnxformer",
                    OXF_MANIFEST_NAME, key);
  const cJSON *max_length = cJSON_GetObjectItemCaseSensitive(entry, "max_length");
  model->max_length = model->max_len;
  if (max_length != NULL && !cJSON_IsNull(max_length)) {
    char where[64];
    snprintf(where, sizeof where, "framing.%s.max_length", key);
    if (oxf_json_int(max_length, 1, model->max_len, &model->max_length, where, err) != 0) return -1;
  }
  free(model->prefix);
  free(model->suffix);
  model->prefix = model->suffix = NULL;
  if (framing_side(manifest, entry, key, "prefix", &model->prefix, &model->n_prefix, err) != 0 ||
      framing_side(manifest, entry, key, "suffix", &model->suffix, &model->n_suffix, err) != 0)
    return -1;
  const cJSON *file = cJSON_GetObjectItemCaseSensitive(manifest, "tokenizer");
  if (!cJSON_IsString(file))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s has no tokenizer; pass token ids (oxf_generate, oxf_embed)",
                    model->folder->root);
  model->tokenizer = oxf_tokenizer_open_folder(model->folder, err);
  return model->tokenizer == NULL ? -1 : 0;
}

const oxf_tokenizer *oxf_model_tokenizer(oxf_model *model, oxf_error *err) {
  return load_text(model, err) == 0 ? model->tokenizer : NULL;
}

/* The text's ids framed; past `limit` ids either cut to the first tokens (`cut`) or refused. */
static int frame(oxf_model *model, const char *text, bool cut, int64_t **ids, size_t *n, oxf_error *err) {
  *ids = NULL;
  *n = 0;
  if (text == NULL)
    return oxf_fail(err, OXF_INPUT_ERROR, "the text is NULL; pass a NUL-terminated UTF-8 string");
  if (load_text(model, err) != 0) return -1;
  int64_t *tokens;
  size_t n_tokens;
  if (oxf_tokenize(model->tokenizer, text, strlen(text), &tokens, &n_tokens, err) != 0) return -1;
  size_t framing = model->n_prefix + model->n_suffix, limit = (size_t)model->max_length;
  if (n_tokens + framing > limit) {
    if (!cut) {
      free(tokens);
      return oxf_fail(err, OXF_INPUT_ERROR,
                      "the text is %zu tokens framed, but the model reads at most %zu; shorten the text",
                      n_tokens + framing, limit);
    }
    n_tokens = limit > framing ? limit - framing : 0;
  }
  *ids = malloc((n_tokens + framing + 1) * sizeof **ids);
  if (*ids == NULL) {
    free(tokens);
    return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  }
  if (model->n_prefix) memcpy(*ids, model->prefix, model->n_prefix * sizeof **ids);
  if (n_tokens) memcpy(*ids + model->n_prefix, tokens, n_tokens * sizeof **ids);
  if (model->n_suffix)
    memcpy(*ids + model->n_prefix + n_tokens, model->suffix, model->n_suffix * sizeof **ids);
  *n = n_tokens + framing;
  free(tokens);
  return 0;
}

int oxf_frame_text(oxf_model *model, const char *text, int64_t **ids, size_t *n, oxf_error *err) {
  return frame(model, text, model->task == ENCODE, ids, n, err);
}

int oxf_generate_text(oxf_model *model, const char *prompt, const oxf_generate_options *options,
                      oxf_text_generation *out, oxf_error *err) {
  memset(out, 0, sizeof *out);
  if (model->task == ENCODE)
    return oxf_fail(err, OXF_INPUT_ERROR,
                    "%s is an encode export (it embeds text); generation needs a generate or seq2seq export",
                    model->folder->root);
  int64_t *ids;
  size_t n_ids;
  if (frame(model, prompt, false, &ids, &n_ids, err) != 0) return -1;
  oxf_generation generation;
  int status = oxf_generate(model, ids, n_ids, options, &generation, err);
  free(ids);
  if (status != 0) return -1;
  size_t n_text;
  if (oxf_detokenize(model->tokenizer, generation.tokens, generation.n_tokens, &out->text, &n_text, err) !=
      0) {
    oxf_generation_free(&generation);
    return -1;
  }
  out->tokens = generation.tokens;
  out->n_tokens = generation.n_tokens;
  out->prompt_tokens = n_ids;
  out->finish_reason = generation.finish_reason;
  return 0;
}

void oxf_text_generation_free(oxf_text_generation *generation) {
  free(generation->text);
  free(generation->tokens);
  memset(generation, 0, sizeof *generation);
}

int oxf_embed_text(oxf_model *model, const char *text, const char *output, float **values, size_t *n_values,
                   oxf_error *err) {
  *values = NULL;
  *n_values = 0;
  if (model->task != ENCODE)
    return oxf_fail(err, OXF_INPUT_ERROR, "%s is a %s export; embeddings need an encode export",
                    model->folder->root, oxf_model_task(model));
  int64_t *ids;
  size_t n_ids;
  if (frame(model, text, true, &ids, &n_ids, err) != 0) return -1;
  int status = oxf_embed(model, ids, n_ids, output, values, n_values, err);
  free(ids);
  return status;
}
