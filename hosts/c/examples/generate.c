/* The README's example: greedy text from an export folder (hosts/c/README.md). */
#include <stdio.h>

#include "onnxformer.h"

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(
        stderr,
        "usage: example-generate DIR [PROMPT] (a gpt or t5 export; the prompt defaults to \"the cat\")\n");
    return 2;
  }
  oxf_error err;
  oxf_model *model = oxf_model_open(argv[1], &err);
  if (model == NULL) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  oxf_text_generation out;
  if (oxf_generate_text(model, argc == 3 ? argv[2] : "the cat", NULL, &out, &err) != 0) {
    fprintf(stderr, "%s\n", err.message);
    oxf_model_close(model);
    return 1;
  }
  printf("%s\n", out.text);
  for (size_t i = 0; i < out.n_tokens; i++) printf("%lld ", (long long)out.tokens[i]);
  printf("(%s)\n", out.finish_reason);
  oxf_text_generation_free(&out);
  oxf_model_close(model);
  return 0;
}
