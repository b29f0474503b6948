/* The C tokenizer's parts: an export's tokenizer.json read as the Hugging Face `tokenizers` library (0.23)
 * reads it, part by part (normalizer, pre-tokenizer, model, decoder), so that the ids equal the library's.
 * Nothing here is part of the public API (include/onnxformer.h).
 *
 *   text --added tokens--> segments --normalizer--> --pre-tokenizer--> pieces --model--> ids
 *   ids --model / added vocabulary--> token strings --decoder--> text
 *
 * Every function that can fail returns 0 (or a non-NULL pointer) on success and otherwise -1 with `err`
 * filled: OXF_MANIFEST_ERROR for a tokenizer.json this host cannot read (naming the part and its type),
 * OXF_INPUT_ERROR for bad text or ids, OXF_INFERENCE_ERROR for memory that ran out. All text is UTF-8
 * that the caller has already checked (oxf_valid_utf8); NUL bytes are ordinary characters, so every string
 * goes with its length. */
#ifndef ONNXFORMER_TOKENIZER_H
#define ONNXFORMER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* ---- text.c: growable strings, piece lists, id lists, UTF-8 and the Unicode classes used ---- */

/* A growable byte string; `data` is NUL-terminated whenever it is not NULL (len excludes the NUL). */
typedef struct {
  char *data;
  size_t len, cap;
} oxf_str;

int oxf_str_add(oxf_str *s, const char *bytes, size_t n, oxf_error *err);
int oxf_str_add_char(oxf_str *s, uint32_t code, oxf_error *err); /* one code point as UTF-8 */
void oxf_str_clear(oxf_str *s);                                  /* len = 0, memory kept */
void oxf_str_free(oxf_str *s);

/* One pre-tokenized piece: its text, and whether it starts where the whole input text starts (the
 * library's `offsets_original().0 == 0`, which Metaspace's prepend_scheme "first" looks at). */
typedef struct {
  oxf_str text;
  bool at_start;
} oxf_piece;

typedef struct {
  oxf_piece *items;
  size_t n, cap;
} oxf_pieces;

int oxf_pieces_add(oxf_pieces *pieces, const char *bytes, size_t n, bool at_start, oxf_error *err);
void oxf_pieces_free(oxf_pieces *pieces); /* frees every piece's text and the list */

typedef struct {
  int64_t *items;
  size_t n, cap;
} oxf_idlist;

int oxf_ids_add(oxf_idlist *ids, int64_t id, oxf_error *err);
void oxf_ids_free(oxf_idlist *ids);

/* The code point of valid UTF-8 at text + *at, moving *at past it. */
uint32_t oxf_utf8_next(const char *text, size_t *at);
/* The UTF-8 of `code` in out (1 to 4 bytes); returns how many. */
size_t oxf_utf8_put(uint32_t code, char out[4]);
/* How many code points the valid UTF-8 holds. */
size_t oxf_utf8_count(const char *text, size_t n);

/* Rust's char::is_whitespace (the `tokenizers` library is Rust): the White_Space property. */
bool oxf_is_whitespace(uint32_t code);

/* ---- normalizers.c: "normalizer" (BertNormalizer, Precompiled, Sequence, Replace, NFC, NFD, NFKC, NFKD,
 * Strip, StripAccents, Lowercase, Prepend, Nmt, ByteLevel) ---- */
typedef struct oxf_normalizer oxf_normalizer;

/* JSON null (or NULL) gives *out = NULL: no normalizer. */
int oxf_normalizer_parse(const cJSON *json, oxf_normalizer **out, oxf_error *err);
/* The normalized text of text[0..n) written to `out` (cleared first). */
int oxf_normalize(const oxf_normalizer *normalizer, const char *text, size_t n, oxf_str *out, oxf_error *err);
void oxf_normalizer_free(oxf_normalizer *normalizer);

/* ---- pretokenizers.c: "pre_tokenizer" (BertPreTokenizer, Sequence, Whitespace, WhitespaceSplit,
 * Metaspace, ByteLevel, Split, Punctuation, Digits, FixedLength, CharDelimiterSplit) ---- */
typedef struct oxf_pretokenizer oxf_pretokenizer;

/* The regex crate's \w as the library's pre-tokenizers and single_word added tokens see it. */
bool oxf_is_word_char(uint32_t code);
int oxf_pretokenizer_parse(const cJSON *json, oxf_pretokenizer **out, oxf_error *err);
/* Replace every piece by its parts, in order (an empty part is dropped, as the library drops it). */
int oxf_pretokenize(const oxf_pretokenizer *pretokenizer, oxf_pieces *pieces, oxf_error *err);
void oxf_pretokenizer_free(oxf_pretokenizer *pretokenizer);

/* ---- models.c: "model" (BPE, WordPiece, Unigram, WordLevel) ---- */
typedef struct oxf_tokmodel oxf_tokmodel;

int oxf_tokmodel_parse(const cJSON *json, oxf_tokmodel **out, oxf_error *err);
/* Append the ids of one pre-tokenized piece. */
int oxf_tokmodel_tokenize(const oxf_tokmodel *model, const char *piece, size_t n, oxf_idlist *ids,
                          oxf_error *err);
/* The vocabulary entry of `id` (NUL-terminated, owned by the model; *n its length), or NULL. */
const char *oxf_tokmodel_token(const oxf_tokmodel *model, int64_t id, size_t *n);
/* The id of a vocabulary entry, or -1. */
int64_t oxf_tokmodel_id(const oxf_tokmodel *model, const char *token, size_t n);
/* One more than the largest id of the vocabulary. */
int64_t oxf_tokmodel_size(const oxf_tokmodel *model);
void oxf_tokmodel_free(oxf_tokmodel *model);

/* ---- decoders.c: "decoder" (ByteLevel, WordPiece, Metaspace, BPEDecoder, CTC, Sequence, Replace, Fuse,
 * Strip, ByteFallback) ---- */
typedef struct oxf_decoder oxf_decoder;

int oxf_decoder_parse(const cJSON *json, oxf_decoder **out, oxf_error *err);
/* The text of the token strings, as the library's Decoder::decode gives it: the decoder chain over the
 * list, then the parts joined. A NULL decoder joins the tokens with " " (the library's default). The list
 * may be changed in place. */
int oxf_decode_tokens(const oxf_decoder *decoder, oxf_pieces *tokens, oxf_str *out, oxf_error *err);
void oxf_decoder_free(oxf_decoder *decoder);

/* ---- tokenizer.c: the whole tokenizer (the public oxf_tokenizer of onnxformer.h) ---- */

/* A tokenizer from tokenizer.json bytes (`shown` names them in errors). */
oxf_tokenizer *oxf_tokenizer_from_bytes(const uint8_t *bytes, size_t size, const char *shown, oxf_error *err);
/* The tokenizer.json of a checked folder (read through its manifest). */
oxf_tokenizer *oxf_tokenizer_open_folder(oxf_folder *folder, oxf_error *err);
/* Encode `text`: its ids appended to `ids`; when not NULL, each segment's normalized text appended to
 * `normalized` and the model's pieces to `pieces` (for `onnxformer-c tokenize --stages`). */
int oxf_tokenizer_run(const oxf_tokenizer *tokenizer, const char *text, size_t n, oxf_idlist *ids,
                      oxf_str *normalized, oxf_pieces *pieces, oxf_error *err);

/* ---- shared by the parts' parsers ---- */

/* A tokenizer.json object's member "key" as a string / bool / integer / number, with `fallback` when the key
 * is absent or null; -1 with an OXF_MANIFEST_ERROR naming `where` and the key for any other type. */
int oxf_tok_string(const cJSON *object, const char *key, const char *fallback, const char **value,
                   const char *where, oxf_error *err);
int oxf_tok_bool(const cJSON *object, const char *key, bool fallback, bool *value, const char *where,
                 oxf_error *err);
int oxf_tok_int(const cJSON *object, const char *key, int64_t fallback, int64_t low, int64_t high,
                int64_t *value, const char *where, oxf_error *err);
/* A part of a type this host does not read: the error names the part, its type and the types it reads. */
int oxf_tok_unknown(const char *part, const char *type, const char *known, oxf_error *err);

/* A compiled regular expression (PCRE2 with UTF and Unicode properties), for Split, Replace and the
 * ByteLevel pre-tokenizer; `pattern` is the tokenizer.json's {"String": ...} (taken literally) or
 * {"Regex": ...} (an Oniguruma pattern, which PCRE2 reads the same for every pattern the exports use). */
typedef struct oxf_regex oxf_regex;
int oxf_regex_parse(const cJSON *pattern, oxf_regex **out, const char *where, oxf_error *err);
int oxf_regex_compile(const char *source, bool literal, oxf_regex **out, const char *where, oxf_error *err);
/* The next match in text[0..n) at or after `from`: 1 with [*start, *end), 0 when none, -1 on error. */
int oxf_regex_find(const oxf_regex *regex, const char *text, size_t n, size_t from, size_t *start,
                   size_t *end, oxf_error *err);
/* The library's way through all matches (rust-onig's find_iter, which Split, Replace and ByteLevel use): an
 * empty match where the previous match ended is stepped over. Start with a zeroed cursor; 1 with the next
 * match, 0 at the end, -1 on error. */
typedef struct {
  size_t at, last_end;
  bool matched;
} oxf_regex_cursor;
int oxf_regex_next(const oxf_regex *regex, const char *text, size_t n, oxf_regex_cursor *cursor,
                   size_t *start, size_t *end, oxf_error *err);
void oxf_regex_free(oxf_regex *regex);

#endif
