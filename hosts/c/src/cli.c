/* onnxformer-c: the C host's command.
 *
 *   onnxformer-c verify DIR [DIR ...]      every file checked, every golden run; one line per result
 *   onnxformer-c check DIR [DIR ...]       every file's path, size and sha256 checked (no engine)
 *   onnxformer-c generate DIR --ids 1,90,263 [--max-new-tokens N] [--stop-tokens 2,5 | --stop-tokens ""]
 *                                          greedy ids as JSON: {"output_ids": [...], "finish_reason": ...}
 *   onnxformer-c generate DIR "text" [...]  the same from text: {"text": ..., "output_ids": ..., ...}
 *   onnxformer-c embed DIR "text"          an encode export's sentence embedding: {"embedding": [...]}
 *   onnxformer-c bench DIR [...]           decode step time, greedy: {"ms_per_token": ...}
 *   onnxformer-c check-path PATH           whether a manifest path would be accepted
 *   onnxformer-c tensor FILE.pb [...]      a golden TensorProto's name, type, shape and largest value
 *   onnxformer-c tokenize / detokenize ... text <-> ids with an export's tokenizer (cli_text.c)
 *
 * Exit status: 0 when everything passed, 1 when a golden failed, 2 when a folder cannot be used at all
 * (missing, altered, hostile, without goldens) or the arguments are wrong. */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define USAGE                                                                                       \
  "usage: onnxformer-c verify DIR [DIR ...]\n"                                                      \
  "       onnxformer-c check DIR [DIR ...]\n"                                                       \
  "       onnxformer-c generate DIR --ids 1,90,263 [--max-new-tokens N] [--stop-tokens 2,5|\"\"]\n" \
  "       onnxformer-c generate DIR \"text\" [--max-new-tokens N] [--stop-tokens 2,5|\"\"]\n"       \
  "       onnxformer-c embed DIR \"text\" [--output KEY]\n"                                         \
  "       onnxformer-c bench DIR [--ids 1,90,263,310] [--tokens 64] [--runs 5]\n"                   \
  "       onnxformer-c check-path PATH\n"                                                           \
  "       onnxformer-c tensor FILE.pb [FILE.pb ...]\n"                                              \
  "       onnxformer-c tokenize PATH \"text\" | --hex [--stages]\n"                                 \
  "       onnxformer-c detokenize PATH --ids 46,75,82 | --lines\n"

int cli_fail(const oxf_error *err) {
  fprintf(stderr, "onnxformer-c: %s: %s\n", oxf_error_kind_name(err->kind), err->message);
  return 2;
}

/* `text` with control characters as \xNN, so one result stays one line. */
static void print_escaped(const char *text) {
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c < 32 || *c == 127)
      printf("\\x%02x", *c);
    else
      putchar(*c);
  }
}

/* The largest difference seen per file, for the closing table. */
typedef struct {
  char file[256];
  double worst, allowed;
  size_t results;
} file_diff;

typedef struct {
  file_diff files[64];
  size_t n_files;
} report;

static void print_result(const oxf_result *result, void *user) {
  report *seen = user;
  /* Names come from the folder: escaped, so a hostile label cannot forge a result line. */
  printf("  %s %s ", result->ok ? "ok  " : "FAIL", result->check);
  print_escaped(result->file);
  printf(" [");
  print_escaped(result->label);
  printf("] ");
  print_escaped(result->output);
  if (!isnan(result->allowed)) {
    if (isnan(result->max_abs_diff))
      printf("  max diff -");
    else
      printf("  max diff %.2e <= %.2e", result->max_abs_diff, result->allowed);
  }
  if (!result->ok && result->detail[0]) {
    printf("  (");
    print_escaped(result->detail);
    printf(")");
  }
  printf("\n");
  if (isnan(result->allowed)) return;
  size_t i = 0;
  while (i < seen->n_files && strcmp(seen->files[i].file, result->file) != 0) i++;
  if (i == seen->n_files) {
    if (i == sizeof seen->files / sizeof seen->files[0]) return;
    snprintf(seen->files[i].file, sizeof seen->files[i].file, "%s", result->file);
    seen->files[i].worst = 0;
    seen->files[i].allowed = INFINITY;
    seen->n_files++;
  }
  file_diff *entry = &seen->files[i];
  entry->results++;
  double diff = isnan(result->max_abs_diff) ? INFINITY : result->max_abs_diff;
  if (diff > entry->worst) entry->worst = diff;
  if (result->allowed < entry->allowed) entry->allowed = result->allowed;
}

static int verify(int argc, char **argv) {
  if (argc < 1) {
    fputs(USAGE, stderr);
    return 2;
  }
  int code = 0;
  printf("onnxformer-c, ONNX Runtime %s\n", oxf_onnxruntime_version());
  for (int i = 0; i < argc; i++) {
    report seen = {0};
    oxf_verify_summary summary;
    oxf_error err;
    printf("%s:\n", argv[i]);
    if (oxf_verify(argv[i], print_result, &seen, &summary, &err) != 0) return cli_fail(&err);
    for (size_t k = 0; k < seen.n_files; k++)
      printf("  max diff %-34s %.2e (smallest allowance %.2e, %zu results)\n", seen.files[k].file,
             seen.files[k].worst, seen.files[k].allowed, seen.files[k].results);
    printf("%s: %zu files checked, %zu passed, %zu failed", argv[i], summary.files_checked, summary.passed,
           summary.failed);
    printf("\n");
    if (summary.failed > 0 || summary.passed == 0) code = 1;
  }
  return code;
}

/* Every folder is checked, a failure does not stop the others. */
static int check(int argc, char **argv) {
  if (argc < 1) {
    fputs(USAGE, stderr);
    return 2;
  }
  int code = 0;
  for (int i = 0; i < argc; i++) {
    oxf_error err;
    oxf_folder *folder = oxf_folder_open(argv[i], &err);
    size_t n = 0;
    if (folder == NULL || oxf_folder_check_all(folder, &n, &err) != 0)
      code = cli_fail(&err);
    else
      printf("%s: %zu files match manifest.json (size and sha256)\n", argv[i], n);
    oxf_folder_close(folder);
  }
  return code;
}

/* What golden .pb files hold (files the user names, read as they are). */
static int tensors(int argc, char **argv) {
  if (argc < 1) {
    fputs(USAGE, stderr);
    return 2;
  }
  int code = 0;
  for (int i = 0; i < argc; i++) {
    oxf_error err;
    oxf_tensor_info info;
    if (oxf_read_tensor_file(argv[i], &info, &err) != 0) {
      code = cli_fail(&err);
      continue;
    }
    printf("%s: ", argv[i]);
    print_escaped(info.name);
    printf(" data_type %d shape [", info.data_type);
    for (size_t d = 0; d < info.rank; d++) printf("%s%lld", d ? ", " : "", (long long)info.dims[d]);
    printf("] max |value| %.6g\n", info.max_abs);
    oxf_tensor_info_free(&info);
  }
  return code;
}

/* "1,90,263" -> ids; "" -> none. */
int cli_parse_ids(const char *text, int64_t **ids, size_t *n) {
  *n = 0;
  *ids = malloc((strlen(text) / 2 + 1) * sizeof **ids);
  if (*ids == NULL) return -1;
  for (const char *at = text; *at;) {
    char *end;
    errno = 0;
    long long value = strtoll(at, &end, 10);
    if (end == at || errno != 0 || (*end != ',' && *end != 0)) return -1;
    (*ids)[(*n)++] = value;
    at = *end == ',' ? end + 1 : end;
    if (*end == ',' && *at == 0) return -1;
  }
  return 0;
}

static int generate(int argc, char **argv) {
  const char *dir = NULL, *ids_text = NULL, *stops_text = NULL, *prompt = NULL;
  long long max_new = -1;
  bool options_end = false; /* after "--", a prompt may start with '-' */
  for (int i = 0; i < argc; i++) {
    if (!options_end && strcmp(argv[i], "--") == 0) {
      options_end = true;
    } else if (!options_end && strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
      ids_text = argv[++i];
    } else if (!options_end && strcmp(argv[i], "--max-new-tokens") == 0 && i + 1 < argc) {
      char *end;
      max_new = strtoll(argv[++i], &end, 10);
      if (*end != 0 || max_new < 0) {
        fprintf(stderr, "onnxformer-c: --max-new-tokens needs an integer >= 0\n");
        return 2;
      }
    } else if (!options_end && strcmp(argv[i], "--stop-tokens") == 0 && i + 1 < argc) {
      stops_text = argv[++i];
    } else if (dir == NULL && (options_end || argv[i][0] != '-')) {
      dir = argv[i];
    } else if (prompt == NULL && (options_end || argv[i][0] != '-')) {
      prompt = argv[i];
    } else {
      fputs(USAGE, stderr);
      return 2;
    }
  }
  if (dir == NULL || (ids_text == NULL) == (prompt == NULL)) {
    fputs(USAGE, stderr);
    return 2;
  }
  int64_t *ids = NULL, *stops = NULL;
  size_t n_ids = 0, n_stops = 0;
  if ((ids_text && cli_parse_ids(ids_text, &ids, &n_ids) != 0) ||
      (stops_text && cli_parse_ids(stops_text, &stops, &n_stops) != 0)) {
    fprintf(stderr, "onnxformer-c: --ids and --stop-tokens take comma-separated integers (1,90,263)\n");
    free(ids);
    free(stops);
    return 2;
  }
  oxf_error err;
  int code = 0;
  oxf_model *model = oxf_model_open(dir, &err);
  oxf_generate_options options = {max_new, stops, n_stops, stops_text != NULL};
  oxf_generation out;
  if (model != NULL && prompt != NULL) {
    code = cli_generate_text(model, prompt, &options);
  } else if (model == NULL || oxf_generate(model, ids, n_ids, &options, &out, &err) != 0) {
    code = cli_fail(&err);
  } else {
    printf("{\"output_ids\": [");
    for (size_t i = 0; i < out.n_tokens; i++) printf("%s%lld", i ? ", " : "", (long long)out.tokens[i]);
    printf("], \"finish_reason\": \"%s\"}\n", out.finish_reason);
    oxf_generation_free(&out);
  }
  oxf_model_close(model);
  free(ids);
  free(stops);
  return code;
}

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Decode step time: greedy generations of N tokens and of 1 token from the same prompt (no stop token), the
 * step time being their difference over N - 1 (the prompt's first step cancels out); the median of `runs`. */
static int bench(int argc, char **argv) {
  const char *dir = NULL, *ids_text = "1,90,263,310";
  long tokens = 64, runs = 5;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
      ids_text = argv[++i];
    else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
      tokens = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = strtol(argv[++i], NULL, 10);
    else if (dir == NULL)
      dir = argv[i];
    else
      dir = NULL, i = argc;
  }
  if (dir == NULL || tokens < 2 || runs < 1 || runs > 1000) {
    fputs("usage: onnxformer-c bench DIR [--ids 1,90,263,310] [--tokens 64 (>= 2)] [--runs 5]\n", stderr);
    return 2;
  }
  int64_t *ids;
  size_t n_ids;
  if (cli_parse_ids(ids_text, &ids, &n_ids) != 0) {
    fprintf(stderr, "onnxformer-c: --ids takes comma-separated integers (1,90,263)\n");
    free(ids);
    return 2;
  }
  oxf_error err;
  oxf_model *model = oxf_model_open(dir, &err);
  double *steps = calloc((size_t)runs, sizeof *steps), *firsts = calloc((size_t)runs, sizeof *firsts);
  int code = model == NULL ? cli_fail(&err) : steps == NULL || firsts == NULL ? 2 : 0;
  size_t generated = 0;
  oxf_generation kept = {0};
  for (long run = -1; code == 0 && run < runs; run++) { /* run -1 warms up */
    double took[2];
    for (int k = 0; k < 2 && code == 0; k++) {
      oxf_generate_options options = {k == 0 ? tokens : 1, NULL, 0, 1};
      oxf_generation out;
      double start = seconds_now();
      if (oxf_generate(model, ids, n_ids, &options, &out, &err) != 0) {
        code = cli_fail(&err);
        break;
      }
      took[k] = seconds_now() - start;
      if (k == 0) {
        generated = out.n_tokens;
        oxf_generation_free(&kept);
        kept = out;
      } else {
        oxf_generation_free(&out);
      }
    }
    if (code == 0 && generated < 2) {
      fprintf(stderr, "onnxformer-c: the prompt leaves room for %zu tokens; give a shorter one\n", generated);
      code = 2;
    }
    if (code == 0 && run >= 0) {
      steps[run] = (took[0] - took[1]) / (double)(generated - 1);
      firsts[run] = took[1];
    }
  }
  if (code == 0) {
    printf("{\"steps_ms\": [");
    for (long i = 0; i < runs; i++) printf("%s%.4f", i ? ", " : "", steps[i] * 1e3);
    printf("], \"prefill_ms\": [");
    for (long i = 0; i < runs; i++) printf("%s%.4f", i ? ", " : "", firsts[i] * 1e3);
    qsort(steps, (size_t)runs, sizeof *steps, by_value);
    printf("], \"ms_per_token\": %.4f, \"output_ids\": [", steps[runs / 2] * 1e3);
    for (size_t i = 0; i < kept.n_tokens; i++) printf("%s%lld", i ? ", " : "", (long long)kept.tokens[i]);
    printf("], \"runs\": %ld, \"onnxruntime\": \"%s\"}\n", runs, oxf_onnxruntime_version());
  }
  oxf_generation_free(&kept);
  free(steps);
  free(firsts);
  free(ids);
  oxf_model_close(model);
  return code;
}

static int check_path(int argc, char **argv) {
  if (argc != 1) {
    fputs(USAGE, stderr);
    return 2;
  }
  oxf_error err;
  if (oxf_check_path(argv[0], &err) != 0) return cli_fail(&err);
  printf("accepted\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "verify") == 0) return verify(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "check") == 0) return check(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "generate") == 0) return generate(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "check-path") == 0) return check_path(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "tensor") == 0) return tensors(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "bench") == 0) return bench(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "embed") == 0) return cli_embed(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "tokenize") == 0) return cli_tokenize(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "detokenize") == 0) return cli_detokenize(argc - 2, argv + 2);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(USAGE, stdout);
    return 0;
  }
  fputs(USAGE, stderr);
  return 2;
}
