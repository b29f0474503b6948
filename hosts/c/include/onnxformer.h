/*
 * onnxformer for C: open an onnxformer export folder, check it, run its goldens, decode greedily.
 *
 *     oxf_error err;
 *     oxf_model *model = oxf_model_open("exported/gpt", &err);
 *     if (model == NULL) { fprintf(stderr, "%s\n", err.message); return 1; }
 *     int64_t prompt[] = {1, 90, 263, 310};
 *     oxf_generation out;
 *     if (oxf_generate(model, prompt, 4, NULL, &out, &err) != 0) { ... }
 *     for (size_t i = 0; i < out.n_tokens; i++) printf("%lld ", (long long)out.tokens[i]);
 *     oxf_generation_free(&out);
 *     oxf_model_close(model);
 *
 * Every file is read through the folder: its manifest path must be a plain relative path inside the
 * folder, it is opened one folder at a time without following symbolic links, it must be a regular file
 * with one hard link, and its size and sha256 must be the manifest's before ONNX Runtime sees a byte.
 *
 * Functions that can fail return 0 on success (or a non-NULL pointer) and otherwise fill `err` (which may
 * be NULL) with a kind and a message that names the problem and the fix. Not thread-safe: use one model
 * per thread at most, and open and close models from one thread.
 */
#ifndef ONNXFORMER_H
#define ONNXFORMER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The kinds of the Python runtime's errors (onnxformer.runtime.errors). */
typedef enum {
  OXF_OK = 0,
  OXF_MANIFEST_ERROR = 1, /* the folder, its manifest or a listed file is wrong: re-export */
  OXF_INPUT_ERROR = 2,    /* the caller's arguments are wrong */
  OXF_GOLDEN_ERROR = 3,   /* the folder has no goldens to run */
  OXF_INFERENCE_ERROR = 4 /* ONNX Runtime failed (or memory ran out) */
} oxf_error_kind;

typedef struct {
  oxf_error_kind kind;
  char message[1024];
} oxf_error;

/* "ManifestError", "InputError", ... as the Python runtime names them. */
const char *oxf_error_kind_name(oxf_error_kind kind);

/* The ONNX Runtime version string of the loaded library ("1.21.0"). */
const char *oxf_onnxruntime_version(void);

/* ---- export folders ---------------------------------------------------------------------------- */

typedef struct oxf_folder oxf_folder;

/* Open `dir` through its manifest.json; every listed path is checked before anything else is read. */
oxf_folder *oxf_folder_open(const char *dir, oxf_error *err);
void oxf_folder_close(oxf_folder *folder);

/* The bytes of a listed file (malloc'd; free() them) after its size and sha256 matched the manifest. */
int oxf_folder_read(oxf_folder *folder, const char *relative, uint8_t **bytes, size_t *size, oxf_error *err);

/* Read and check every listed file; `n_files` (may be NULL) gets how many. */
int oxf_folder_check_all(oxf_folder *folder, size_t *n_files, oxf_error *err);

/* 0 when `relative` is a plain relative path of forward slashes that stays inside a folder. */
int oxf_check_path(const char *relative, oxf_error *err);

/* A TensorProto file (a golden input_i.pb / output_i.pb) the caller names, summarized. */
typedef struct {
  char *name;
  int data_type; /* onnx.TensorProto.DataType: 1 float, 7 int64, ... */
  size_t rank;
  int64_t dims[8];
  double max_abs; /* largest |value| */
} oxf_tensor_info;
int oxf_read_tensor_file(const char *path, oxf_tensor_info *info, oxf_error *err);
void oxf_tensor_info_free(oxf_tensor_info *info);

/* ---- tokenizers -------------------------------------------------------------------------------- */

/* An export's tokenizer.json, read as the Hugging Face `tokenizers` library reads it: WordPiece (BERT),
 * byte-level BPE (GPT-2, Llama 3, Qwen), SentencePiece-style BPE with byte fallback (Llama 2, Gemma) and
 * Unigram (T5, XLM-R), with their normalizers, pre-tokenizers, added tokens and decoders. A part of another
 * type is refused by name when the tokenizer is opened. */
typedef struct oxf_tokenizer oxf_tokenizer;

/* The tokenizer of an export folder (its tokenizer.json, checked through the manifest like every file), or
 * of a tokenizer.json file named directly. */
oxf_tokenizer *oxf_tokenizer_open(const char *path, oxf_error *err);
void oxf_tokenizer_close(oxf_tokenizer *tokenizer);
/* One more than the largest token id. */
int64_t oxf_tokenizer_size(const oxf_tokenizer *tokenizer);

/* The ids of `n` bytes of UTF-8 text (NUL bytes are characters; text that is not UTF-8 is refused), no
 * special tokens added: *ids is malloc'd (free() it; NULL when there are none). */
int oxf_tokenize(const oxf_tokenizer *tokenizer, const char *text, size_t n, int64_t **ids, size_t *n_ids,
                 oxf_error *err);
/* The text of `ids` (special tokens left out), malloc'd and NUL-terminated (free() it); *n_text its length.
 */
int oxf_detokenize(const oxf_tokenizer *tokenizer, const int64_t *ids, size_t n_ids, char **text,
                   size_t *n_text, oxf_error *err);

/* ---- models ------------------------------------------------------------------------------------ */

typedef struct oxf_model oxf_model;

/* A model export (manifest task generate, encode or seq2seq) with its graphs loaded. */
oxf_model *oxf_model_open(const char *dir, oxf_error *err);
void oxf_model_close(oxf_model *model);
const char *oxf_model_family(const oxf_model *model); /* informational, e.g. "gpt" */
const char *oxf_model_task(const oxf_model *model);   /* "generate", "encode" or "seq2seq" */

typedef struct {
  int64_t max_new_tokens;     /* < 0: the manifest's generation.max_new_tokens */
  const int64_t *stop_tokens; /* used when has_stop_tokens (may then be empty) */
  size_t n_stop_tokens;
  int has_stop_tokens; /* 0: the manifest's generation.stop_tokens */
} oxf_generate_options;

typedef struct {
  int64_t *tokens; /* the new tokens, the stop token left out */
  size_t n_tokens;
  const char *finish_reason; /* "stop" or "length" */
} oxf_generation;

/* Greedy decoding with the KV cache from framed ids (the manifest's framing applied, as in the goldens'
 * input_ids): a generate export (GPT) continues `ids` (<s> included), a seq2seq export (T5) decodes from
 * the source `ids` (</s> included). `options` may be NULL (the manifest's generation defaults). */
int oxf_generate(oxf_model *model, const int64_t *ids, size_t n_ids, const oxf_generate_options *options,
                 oxf_generation *out, oxf_error *err);
void oxf_generation_free(oxf_generation *generation);

/* An encode export (BERT): one (1, D) output of the encoder by its io key (NULL: "sentence_embedding")
 * for framed ids (<cls> ... <sep>), as D floats. */
int oxf_embed(oxf_model *model, const int64_t *ids, size_t n_ids, const char *output, float **values,
              size_t *n_values, oxf_error *err);

/* The model's tokenizer (read from the folder on first use, owned by the model), or NULL with `err`. */
const oxf_tokenizer *oxf_model_tokenizer(oxf_model *model, oxf_error *err);

typedef struct {
  char *text;      /* the new text (malloc'd, NUL-terminated), the stop token left out */
  int64_t *tokens; /* its token ids */
  size_t n_tokens;
  size_t prompt_tokens;      /* the framed prompt's length */
  const char *finish_reason; /* "stop" or "length" */
} oxf_text_generation;

/* `oxf_generate` from text: the prompt (NUL-terminated UTF-8) tokenized and framed as the manifest says
 * (<s> + text for GPT, text + </s> for T5's source), the new tokens decoded. A prompt longer than the model
 * reads is refused. */
int oxf_generate_text(oxf_model *model, const char *prompt, const oxf_generate_options *options,
                      oxf_text_generation *out, oxf_error *err);
void oxf_text_generation_free(oxf_text_generation *generation);

/* `oxf_embed` from text (NUL-terminated UTF-8), tokenized and framed as the manifest says; a text longer than
 * the model reads keeps its first tokens, as the Python runtime's TextEncoder does. */
int oxf_embed_text(oxf_model *model, const char *text, const char *output, float **values, size_t *n_values,
                   oxf_error *err);

/* ---- goldens ----------------------------------------------------------------------------------- */

typedef struct {
  const char *check;  /* "graph", "greedy", "embedding" */
  const char *file;   /* the ONNX file, or the end-to-end goldens file */
  const char *label;  /* the case ("cached step B=3 P=9 T=1") or the prompt */
  const char *output; /* the output compared, or "" */
  int ok;
  double max_abs_diff; /* NaN when no difference was measured (shape mismatch, exact checks) */
  double allowed;      /* atol + rtol * max |golden|, NaN for exact checks */
  const char *detail;  /* why it failed, or "" */
} oxf_result;

typedef void (*oxf_result_fn)(const oxf_result *result, void *user);

typedef struct {
  size_t files_checked;
  size_t passed;
  size_t failed;
} oxf_verify_summary;

/* Check every file of `dir`, then run all its goldens, calling `on_result` for each result. Returns 0
 * when the goldens could be run (look at summary->failed), -1 when the folder could not be checked. */
int oxf_verify(const char *dir, oxf_result_fn on_result, void *user, oxf_verify_summary *summary,
               oxf_error *err);

#ifdef __cplusplus
}
#endif

#endif
