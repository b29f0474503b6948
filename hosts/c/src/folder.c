/* Opening an export folder, with runtime/folder.py's rules: a file is read only when
 *   - its manifest path is plain and relative: no absolute path, no `..`, `.` or empty part, no backslash,
 *     colon or control character (newline and DEL included);
 *   - the folders on the way are opened one at a time from the export folder with O_NOFOLLOW, so no
 *     symbolic link is followed wherever it sits;
 *   - it is a regular file with one hard link, checked with lstat before it is opened (a FIFO or device is
 *     never opened) and with fstat after (O_NONBLOCK: opening never hangs), which must be the same inode;
 *   - its size is the manifest's before a byte is read, and its sha256 the manifest's after.
 * The bytes checked are the bytes handed to ONNX Runtime (CreateSessionFromArray). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_MANIFEST_BYTES ((size_t)64 << 20) /* far above any real manifest */
#define MAX_FILE_BYTES ((uint64_t)1 << 31)    /* protobuf's limit on one serialized message */

/* ---- paths ---- */

int oxf_check_path(const char *relative, oxf_error *err) {
  bool plain = relative != NULL && relative[0] != 0 && relative[0] != '/';
  for (const char *c = relative; plain && *c; c++) {
    unsigned char byte = (unsigned char)*c;
    if (byte < 32 || byte == 127 || byte == '\\' || byte == ':') plain = false;
  }
  /* Parts between slashes: none empty, "." or "..". */
  for (const char *part = relative; plain; part++) {
    const char *slash = strchr(part, '/');
    size_t length = slash ? (size_t)(slash - part) : strlen(part);
    if (length == 0 || (length == 1 && part[0] == '.') || (length == 2 && part[0] == '.' && part[1] == '.'))
      plain = false;
    if (slash == NULL) break;
    part = slash;
  }
  if (!plain) {
    /* The path is shown with its control characters escaped, so a newline cannot forge a line. */
    char shown[256];
    size_t at = 0;
    for (const char *c = relative ? relative : ""; *c && at + 5 < sizeof shown; c++) {
      unsigned char byte = (unsigned char)*c;
      if (byte < 32 || byte == 127 || byte == '\\' || byte == '\'')
        at += (size_t)snprintf(shown + at, sizeof shown - at, "\\x%02x", byte);
      else
        shown[at++] = (char)byte;
    }
    shown[at] = 0;
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s names '%s', which is not a plain relative path inside the folder (no absolute path, "
                    "'..', '.', empty part, backslash, colon or control character); refusing the export",
                    OXF_MANIFEST_NAME, shown);
  }
  return 0;
}

/* ---- reading one file ---- */

static int open_error(int error, const char *root, const char *relative, oxf_error *err) {
  if (error == ENOENT)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s/%s is listed in %s but missing; re-export the folder", root,
                    relative, OXF_MANIFEST_NAME);
  if (error == ELOOP || error == ENOTDIR)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s/%s goes through a symbolic link or a non-folder; refusing it", root, relative);
  return oxf_fail(err, OXF_MANIFEST_ERROR, "cannot open %s/%s: %s; check the folder's permissions", root,
                  relative, strerror(error));
}

static const char *kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/* `expected` is the manifest's size, or UINT64_MAX when unknown (then at most `limit` bytes). */
static int check_stat(const struct stat *info, const char *root, const char *relative, uint64_t expected,
                      uint64_t limit, oxf_error *err) {
  if (!S_ISREG(info->st_mode))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s/%s is %s, not a regular file; refusing it", root, relative,
                    kind_of(info->st_mode));
  if (info->st_nlink > 1)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s/%s has %ju hard links, so it may be a file outside the folder; refusing it (copy "
                    "exports with `cp -r`, not as hard links)",
                    root, relative, (uintmax_t)info->st_nlink);
  if (expected != UINT64_MAX && (uint64_t)info->st_size != expected)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s/%s has %jd bytes but %s says %ju: the file was truncated or altered; re-export the "
                    "folder",
                    root, relative, (intmax_t)info->st_size, OXF_MANIFEST_NAME, (uintmax_t)expected);
  if ((uint64_t)info->st_size > limit)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s/%s has %jd bytes, more than the %ju allowed; refusing it",
                    root, relative, (intmax_t)info->st_size, (uintmax_t)limit);
  return 0;
}

/* The bytes of `relative` under the folder, opened as the top of this file says. */
static int read_inside(int root_fd, const char *root, const char *relative, uint64_t expected, uint64_t limit,
                       uint8_t **bytes, size_t *size, oxf_error *err) {
  if (oxf_check_path(relative, err) != 0) return -1;
  char *parts = strdup(relative);
  if (parts == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  int status = -1, dir = dup(root_fd), fd = -1;
  uint8_t *data = NULL;
  if (dir < 0) {
    open_error(errno, root, relative, err);
    goto done;
  }
  char *part = parts;
  for (char *slash; (slash = strchr(part, '/')) != NULL; part = slash + 1) {
    *slash = 0;
    int next = openat(dir, part, O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    if (next < 0) {
      open_error(errno, root, relative, err);
      goto done;
    }
    close(dir);
    dir = next;
  }
  struct stat before, after;
  if (fstatat(dir, part, &before, AT_SYMLINK_NOFOLLOW) != 0) {
    open_error(errno, root, relative, err);
    goto done;
  }
  if (check_stat(&before, root, relative, expected, limit, err) != 0) goto done;
  fd = openat(dir, part, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    open_error(errno, root, relative, err);
    goto done;
  }
  if (fstat(fd, &after) != 0 || after.st_dev != before.st_dev || after.st_ino != before.st_ino) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s/%s was replaced while it was being opened; refusing it", root,
             relative);
    goto done;
  }
  if (check_stat(&after, root, relative, expected, limit, err) != 0) goto done;
  /* Exactly the bytes expected: one more (a file growing while read) is refused. */
  size_t most = expected != UINT64_MAX ? (size_t)expected : (size_t)after.st_size;
  data = malloc(most + 1);
  if (data == NULL) {
    oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory reading %s/%s (%zu bytes)", root, relative, most);
    goto done;
  }
  size_t total = 0;
  while (total <= most) {
    ssize_t got = read(fd, data + total, most + 1 - total);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      oxf_fail(err, OXF_MANIFEST_ERROR, "cannot read %s/%s: %s", root, relative, strerror(errno));
      goto done;
    }
    if (got == 0) break;
    total += (size_t)got;
  }
  if (total != most) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s/%s %s while it was read; refusing it", root, relative,
             total > most ? "grew" : "shrank");
    goto done;
  }
  *bytes = data;
  *size = total;
  data = NULL;
  status = 0;
done:
  free(data);
  free(parts);
  if (fd >= 0) close(fd);
  if (dir >= 0) close(dir);
  return status;
}

/* ---- the folder ---- */

/* The entries are sorted by path once the manifest is read, so that a lookup is a binary search (a
 * hostile manifest may list millions of files). */
static int by_path(const void *a, const void *b) {
  return strcmp(((const oxf_file_entry *)a)->path, ((const oxf_file_entry *)b)->path);
}

static const oxf_file_entry *find_entry(const oxf_folder *folder, const char *relative) {
  oxf_file_entry key = {.path = (char *)relative};
  return folder->n_files ? bsearch(&key, folder->files, folder->n_files, sizeof key, by_path) : NULL;
}

/* Every file path the manifest refers to outside its files list must be in that list. */
static int check_reference(const oxf_folder *folder, const cJSON *item, const char *what, oxf_error *err) {
  if (item == NULL || cJSON_IsNull(item)) return 0;
  if (!cJSON_IsString(item))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s: %s must be a file path; re-export", OXF_MANIFEST_NAME,
                    what);
  if (oxf_check_path(item->valuestring, err) != 0) return -1;
  if (find_entry(folder, item->valuestring) == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s refers to %s, which its files list lacks; re-export",
                    OXF_MANIFEST_NAME, item->valuestring);
  return 0;
}

static int check_manifest(oxf_folder *folder, oxf_error *err) {
  const cJSON *manifest = folder->manifest;
  if (!cJSON_IsObject(manifest))
    return oxf_fail(err, OXF_MANIFEST_ERROR, "%s must hold a JSON object; re-export the folder",
                    OXF_MANIFEST_NAME);
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(manifest, "format_version");
  if (!cJSON_IsNumber(version))
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s: format_version is missing; re-export the folder with onnxformer", OXF_MANIFEST_NAME);
  if (version->valuedouble != OXF_FORMAT_VERSION) {
    /* The Python runtime's words (runtime/manifest.py): newer -> upgrade, older -> the re-export command. */
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(manifest, "export_kind");
    bool blocks = cJSON_IsString(kind) && strcmp(kind->valuestring, "blocks") == 0;
    bool model = cJSON_IsString(kind) && strcmp(kind->valuestring, "model") == 0;
    if (version->valuedouble > OXF_FORMAT_VERSION)
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "%s: format_version %g is not supported (this onnxformer reads %d); upgrade onnxformer to "
          "read it",
          OXF_MANIFEST_NAME, version->valuedouble, OXF_FORMAT_VERSION);
    return oxf_fail(
        err, OXF_MANIFEST_ERROR,
        "%s: format_version %g is not supported (this onnxformer reads %d); re-export the folder with "
        "this onnxformer: %s",
        OXF_MANIFEST_NAME, version->valuedouble, OXF_FORMAT_VERSION,
        blocks  ? "`onnxformer export-blocks --out DIR`"
        : model ? "`onnxformer export CHECKPOINT --out DIR`"
                : "`onnxformer export CHECKPOINT --out DIR` or `onnxformer export-blocks --out DIR`");
  }
  const cJSON *files = oxf_json_get(manifest, "files", cJSON_Array, "", err);
  if (files == NULL) return -1;
  size_t n = (size_t)cJSON_GetArraySize(files);
  folder->files = calloc(n ? n : 1, sizeof *folder->files);
  if (folder->files == NULL) return oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
  for (const cJSON *item = files->child; item != NULL; item = item->next) {
    const cJSON *path = oxf_json_get(item, "path", cJSON_String, "files[].", err);
    if (path == NULL) return -1;
    if (oxf_check_path(path->valuestring, err) != 0) return -1;
    oxf_file_entry *entry = &folder->files[folder->n_files++];
    entry->path = path->valuestring; /* owned by the cJSON tree */
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(item, "sha256");
    bool hex = cJSON_IsString(sha) && strlen(sha->valuestring) == 64 &&
               strspn(sha->valuestring, "0123456789abcdef") == 64;
    int64_t size = -1;
    if (!hex || oxf_json_int(cJSON_GetObjectItemCaseSensitive(item, "size"), 0, (int64_t)MAX_FILE_BYTES,
                             &size, "files[].size", NULL) != 0)
      return oxf_fail(
          err, OXF_MANIFEST_ERROR,
          "%s's entry for %s needs a size (0 .. 2^31 bytes) and a lowercase hex sha256; re-export",
          OXF_MANIFEST_NAME, entry->path);
    memcpy(entry->sha256, sha->valuestring, 65);
    entry->size = (uint64_t)size;
  }
  qsort(folder->files, folder->n_files, sizeof *folder->files, by_path);
  for (size_t i = 1; i < folder->n_files; i++)
    if (strcmp(folder->files[i - 1].path, folder->files[i].path) == 0)
      return oxf_fail(err, OXF_MANIFEST_ERROR, "%s lists %s twice; re-export the folder", OXF_MANIFEST_NAME,
                      folder->files[i].path);
  /* Every file referred to elsewhere is listed (and so checked). */
  if (check_reference(folder, cJSON_GetObjectItemCaseSensitive(manifest, "tokenizer"), "tokenizer", err))
    return -1;
  const cJSON *graphs = cJSON_GetObjectItemCaseSensitive(manifest, "graphs");
  for (const cJSON *graph = cJSON_IsObject(graphs) ? graphs->child : NULL; graph; graph = graph->next)
    if (check_reference(folder, graph, "graphs", err) != 0) return -1;
  const cJSON *goldens = cJSON_GetObjectItemCaseSensitive(manifest, "goldens");
  if (cJSON_IsObject(goldens)) {
    if (check_reference(folder, cJSON_GetObjectItemCaseSensitive(goldens, "end_to_end"), "goldens.end_to_end",
                        err) != 0)
      return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(goldens, "graphs");
    for (const cJSON *graph = cJSON_IsArray(list) ? list->child : NULL; graph; graph = graph->next) {
      if (check_reference(folder, cJSON_GetObjectItemCaseSensitive(graph, "file"), "goldens.graphs[].file",
                          err) != 0)
        return -1;
      const cJSON *cases = cJSON_GetObjectItemCaseSensitive(graph, "cases");
      for (const cJSON *golden = cJSON_IsArray(cases) ? cases->child : NULL; golden; golden = golden->next) {
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(golden, "dir");
        if (!cJSON_IsString(dir) || oxf_check_path(dir->valuestring, err) != 0)
          return cJSON_IsString(dir)
                     ? -1
                     : oxf_fail(err, OXF_MANIFEST_ERROR,
                                "%s: goldens.graphs[].cases[].dir must be a folder path; re-export",
                                OXF_MANIFEST_NAME);
      }
    }
  }
  return 0;
}

oxf_folder *oxf_folder_open(const char *dir, oxf_error *err) {
  struct stat info;
  if (dir == NULL || stat(dir, &info) != 0) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s does not exist; pass the folder an `onnxformer export` wrote",
             dir ? dir : "(null)");
    return NULL;
  }
  if (!S_ISDIR(info.st_mode)) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "%s is not a folder; pass the export folder, not a file inside it",
             dir);
    return NULL;
  }
  oxf_folder *folder = calloc(1, sizeof *folder);
  if (folder == NULL || (folder->root = strdup(dir)) == NULL) {
    free(folder);
    oxf_fail(err, OXF_INFERENCE_ERROR, "out of memory");
    return NULL;
  }
  /* The folder the user named may itself be a link (they chose it); nothing inside it may be. */
  folder->root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder->root_fd < 0) {
    oxf_fail(err, OXF_MANIFEST_ERROR, "cannot open %s: %s; check its permissions", dir, strerror(errno));
    oxf_folder_close(folder);
    return NULL;
  }
  if (faccessat(folder->root_fd, OXF_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
    oxf_fail(err, OXF_MANIFEST_ERROR,
             "%s is not an onnxformer export: it has no %s; pass the folder an `onnxformer export` wrote",
             dir, OXF_MANIFEST_NAME);
    oxf_folder_close(folder);
    return NULL;
  }
  uint8_t *text = NULL;
  size_t size = 0;
  if (read_inside(folder->root_fd, dir, OXF_MANIFEST_NAME, UINT64_MAX, MAX_MANIFEST_BYTES, &text, &size,
                  err) != 0) {
    oxf_folder_close(folder);
    return NULL;
  }
  int status = 0;
  if ((folder->manifest = oxf_json_parse(text, size, OXF_MANIFEST_NAME, err)) == NULL ||
      check_manifest(folder, err) != 0)
    status = -1;
  free(text);
  if (status != 0) {
    oxf_folder_close(folder);
    return NULL;
  }
  return folder;
}

void oxf_folder_close(oxf_folder *folder) {
  if (folder == NULL) return;
  if (folder->root_fd >= 0) close(folder->root_fd);
  cJSON_Delete(folder->manifest);
  free(folder->files);
  free(folder->root);
  free(folder);
}

int oxf_folder_read(oxf_folder *folder, const char *relative, uint8_t **bytes, size_t *size, oxf_error *err) {
  const oxf_file_entry *entry = find_entry(folder, relative);
  if (entry == NULL)
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s is not listed in %s's files, so it cannot be checked; re-export the folder", relative,
                    OXF_MANIFEST_NAME);
  uint8_t *data = NULL;
  size_t got = 0;
  if (read_inside(folder->root_fd, folder->root, entry->path, entry->size, MAX_FILE_BYTES, &data, &got,
                  err) != 0)
    return -1;
  char digest[65];
  oxf_sha256_hex(data, got, digest);
  if (strcmp(digest, entry->sha256) != 0) {
    free(data);
    return oxf_fail(err, OXF_MANIFEST_ERROR,
                    "%s does not match its sha256 in %s (got %.12s..., expected %.12s...): the file was "
                    "altered; re-export the folder",
                    entry->path, OXF_MANIFEST_NAME, digest, entry->sha256);
  }
  size_t length = strlen(entry->path);
  if (length > 5 && strcmp(entry->path + length - 5, ".onnx") == 0 &&
      oxf_refuse_external_data(data, got, entry->path, err) != 0) {
    free(data);
    return -1;
  }
  *bytes = data;
  *size = got;
  return 0;
}

int oxf_folder_check_all(oxf_folder *folder, size_t *n_files, oxf_error *err) {
  for (size_t i = 0; i < folder->n_files; i++) {
    uint8_t *data;
    size_t size;
    if (oxf_folder_read(folder, folder->files[i].path, &data, &size, err) != 0) return -1;
    free(data);
  }
  if (n_files != NULL) *n_files = folder->n_files;
  return 0;
}
