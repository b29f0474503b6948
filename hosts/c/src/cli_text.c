/* onnxformer-c's text commands (tokenize, detokenize); see cli.c for the others.
 *
 *   onnxformer-c tokenize PATH "text"        {"ids": [...]} (PATH: an export folder or a tokenizer.json)
 *   onnxformer-c tokenize PATH --hex [--stages]
 *       one text per line of stdin as the hex of its bytes (any bytes: NUL, invalid UTF-8), one JSON line
 *       out per text: {"ids": [...]} (with --stages also "normalized": hex, "pieces": [hex, ...], what the
 *       normalizer and the pre-tokenizer gave), or {"error": "InputError: ..."}
 *   onnxformer-c detokenize PATH --ids 46,75,82   {"text": "..."}
 *   onnxformer-c detokenize PATH --lines     one comma-separated id list per line of stdin, one JSON line out
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tokenizer.h"

#define TEXT_USAGE                                                            \
  "usage: onnxformer-c tokenize PATH \"text\"\n"                              \
  "       onnxformer-c tokenize PATH --hex [--stages]   (stdin: hex lines)\n" \
  "       onnxformer-c detokenize PATH --ids 46,75,82\n"                      \
  "       onnxformer-c detokenize PATH --lines          (stdin: id lists)\n"

/* A JSON string of any bytes: quotes, backslashes and control characters escaped, the rest as it is. */
void cli_print_json_string(const char *text, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static void print_hex(const char *text, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)text[i]);
  putchar('"');
}

static void print_ids(const int64_t *ids, size_t n) {
  putchar('[');
  for (size_t i = 0; i < n; i++) printf("%s%lld", i ? ", " : "", (long long)ids[i]);
  putchar(']');
}

static void print_error_line(const oxf_error *err) {
  char line[1100];
  snprintf(line, sizeof line, "%s: %s", oxf_error_kind_name(err->kind), err->message);
  printf("{\"error\": ");
  cli_print_json_string(line, strlen(line));
  printf("}\n");
}

static int hex_value(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One stdin line (without its newline), malloc'd in *line; 0 at the end of input. */
static ssize_t read_line(char **line, size_t *cap) {
  ssize_t n = getline(line, cap, stdin);
  if (n > 0 && (*line)[n - 1] == '\n') (*line)[--n] = '\0';
  return n;
}

static int tokenize_lines(const oxf_tokenizer *tokenizer, bool stages) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int code = 0;
  while ((n = read_line(&line, &cap)) >= 0) {
    size_t bytes = (size_t)n / 2;
    bool hex = n % 2 == 0;
    for (size_t i = 0; hex && i < bytes; i++) {
      int high = hex_value(line[2 * i]), low = hex_value(line[2 * i + 1]);
      hex = high >= 0 && low >= 0;
      line[i] = (char)(high << 4 | low);
    }
    if (!hex) {
      fprintf(stderr, "onnxformer-c: tokenize --hex reads one text per line as the hex of its bytes\n");
      code = 2;
      break;
    }
    oxf_idlist ids = {0};
    oxf_str normalized = {0};
    oxf_pieces pieces = {0};
    oxf_error err;
    if (oxf_tokenizer_run(tokenizer, line, bytes, &ids, stages ? &normalized : NULL, stages ? &pieces : NULL,
                          &err) != 0) {
      print_error_line(&err);
    } else {
      printf("{\"ids\": ");
      print_ids(ids.items, ids.n);
      if (stages) {
        printf(", \"normalized\": ");
        print_hex(normalized.data, normalized.len);
        printf(", \"pieces\": [");
        for (size_t i = 0; i < pieces.n; i++) {
          if (i) printf(", ");
          print_hex(pieces.items[i].text.data, pieces.items[i].text.len);
        }
        printf("]");
      }
      printf("}\n");
    }
    fflush(stdout);
    oxf_ids_free(&ids);
    oxf_str_free(&normalized);
    oxf_pieces_free(&pieces);
  }
  free(line);
  return code;
}

int cli_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL;
  bool hex = false, stages = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--hex") == 0)
      hex = true;
    else if (strcmp(argv[i], "--stages") == 0)
      stages = true;
    else if (path == NULL)
      path = argv[i];
    else if (text == NULL)
      text = argv[i];
    else
      path = NULL, i = argc;
  }
  if (path == NULL || (text == NULL) == !hex || (stages && !hex)) {
    fputs(TEXT_USAGE, stderr);
    return 2;
  }
  oxf_error err;
  oxf_tokenizer *tokenizer = oxf_tokenizer_open(path, &err);
  if (tokenizer == NULL) return cli_fail(&err);
  int code = 0;
  if (hex) {
    code = tokenize_lines(tokenizer, stages);
  } else {
    int64_t *ids;
    size_t n_ids;
    if (oxf_tokenize(tokenizer, text, strlen(text), &ids, &n_ids, &err) != 0) {
      code = cli_fail(&err);
    } else {
      printf("{\"ids\": ");
      print_ids(ids, n_ids);
      printf("}\n");
      free(ids);
    }
  }
  oxf_tokenizer_close(tokenizer);
  return code;
}

static int print_text(const oxf_tokenizer *tokenizer, const int64_t *ids, size_t n_ids, bool lines) {
  char *text;
  size_t n_text;
  oxf_error err;
  if (oxf_detokenize(tokenizer, ids, n_ids, &text, &n_text, &err) != 0) {
    if (!lines) return cli_fail(&err);
    print_error_line(&err);
    return 0;
  }
  printf("{\"text\": ");
  cli_print_json_string(text, n_text);
  printf("}\n");
  free(text);
  return 0;
}

int cli_detokenize(int argc, char **argv) {
  const char *path = NULL, *ids_text = NULL;
  bool lines = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--lines") == 0)
      lines = true;
    else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
      ids_text = argv[++i];
    else if (path == NULL)
      path = argv[i];
    else
      path = NULL, i = argc;
  }
  if (path == NULL || (ids_text == NULL) == !lines) {
    fputs(TEXT_USAGE, stderr);
    return 2;
  }
  oxf_error err;
  oxf_tokenizer *tokenizer = oxf_tokenizer_open(path, &err);
  if (tokenizer == NULL) return cli_fail(&err);
  int code = 0;
  int64_t *ids = NULL;
  size_t n_ids;
  if (!lines) {
    if (cli_parse_ids(ids_text, &ids, &n_ids) != 0) {
      fprintf(stderr, "onnxformer-c: --ids takes comma-separated integers (46,75,82)\n");
      code = 2;
    } else {
      code = print_text(tokenizer, ids, n_ids, false);
    }
    free(ids);
  } else {
    char *line = NULL;
    size_t cap = 0;
    while (code == 0 && read_line(&line, &cap) >= 0) {
      if (cli_parse_ids(line, &ids, &n_ids) != 0) {
        fprintf(stderr, "onnxformer-c: detokenize --lines reads comma-separated ids, one list per line\n");
        code = 2;
      } else {
        code = print_text(tokenizer, ids, n_ids, true);
      }
      free(ids);
      ids = NULL;
      fflush(stdout);
    }
    free(line);
  }
  oxf_tokenizer_close(tokenizer);
  return code;
}

int cli_generate_text(oxf_model *model, const char *prompt, const oxf_generate_options *options) {
  oxf_text_generation out;
  oxf_error err;
  if (oxf_generate_text(model, prompt, options, &out, &err) != 0) return cli_fail(&err);
  printf("{\"text\": ");
  cli_print_json_string(out.text, strlen(out.text));
  printf(", \"output_ids\": ");
  print_ids(out.tokens, out.n_tokens);
  printf(", \"finish_reason\": \"%s\", \"prompt_tokens\": %zu}\n", out.finish_reason, out.prompt_tokens);
  oxf_text_generation_free(&out);
  return 0;
}

int cli_embed(int argc, char **argv) {
  const char *dir = NULL, *text = NULL, *output = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--output") == 0 && i + 1 < argc)
      output = argv[++i];
    else if (dir == NULL)
      dir = argv[i];
    else if (text == NULL)
      text = argv[i];
    else
      dir = NULL, i = argc;
  }
  if (dir == NULL || text == NULL) {
    fputs("usage: onnxformer-c embed DIR \"text\" [--output KEY]\n", stderr);
    return 2;
  }
  oxf_error err;
  oxf_model *model = oxf_model_open(dir, &err);
  if (model == NULL) return cli_fail(&err);
  float *values;
  size_t n;
  int code = 0;
  if (oxf_embed_text(model, text, output, &values, &n, &err) != 0) {
    code = cli_fail(&err);
  } else {
    printf("{\"embedding\": [");
    /* %.9g: a float32 read back exactly. */
    for (size_t i = 0; i < n; i++) printf("%s%.9g", i ? ", " : "", (double)values[i]);
    printf("]}\n");
    free(values);
  }
  oxf_model_close(model);
  return code;
}
