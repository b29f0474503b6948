/* The README's example: greedy ids from an export folder (hosts/c/README.md). */
#include <stdio.h>

#include "onnxformer.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: example-generate DIR (a gpt export)\n");
    return 2;
  }
  oxf_error err;
  oxf_model *model = oxf_model_open(argv[1], &err);
  if (model == NULL) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  int64_t prompt[] = {1, 90, 263, 310}; /* <s> "the cat" */
  oxf_generation out;
  if (oxf_generate(model, prompt, 4, NULL, &out, &err) != 0) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  for (size_t i = 0; i < out.n_tokens; i++) printf("%lld ", (long long)out.tokens[i]);
  printf("(%s)\n", out.finish_reason);
  oxf_generation_free(&out);
  oxf_model_close(model);
  return 0;
}
