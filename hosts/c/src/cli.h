/* What the command's files (cli.c, cli_text.c) share. */
#ifndef ONNXFORMER_CLI_H
#define ONNXFORMER_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "onnxformer.h"

/* Print "onnxformer-c: Kind: message" to stderr; returns exit status 2. */
int cli_fail(const oxf_error *err);
/* "1,90,263" -> ids (malloc'd); "" -> none. 0 or -1. */
int cli_parse_ids(const char *text, int64_t **ids, size_t *n);
/* Any bytes as a JSON string. */
void cli_print_json_string(const char *text, size_t n);

/* Generate from a prompt and print {"text", "output_ids", "finish_reason", "prompt_tokens"}; exit status. */
int cli_generate_text(oxf_model *model, const char *prompt, const oxf_generate_options *options);
int cli_embed(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_detokenize(int argc, char **argv);

#endif
