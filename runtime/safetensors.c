/* safetensors.c: the safetensors format both kinds of file share (an 8-byte
 * little-endian header length, a JSON header, the tensors' bytes): the
 * header read, parsed and checked into entries, the entries sorted and
 * looked up, its strict integers and CRC text, the header framed for
 * writing; and the file I/O of libdtrt: regular files only, positioned
 * reads and writes, the temporary file renamed into place. */
#define _DEFAULT_SOURCE   /* flock */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrt_int.h"

/* ---- files ---- */

int dtrt_open_regular(const char *path, int64_t limit, int64_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), err = 0;
  struct stat st;
  *size = 0;
  if (fd < 0)
    return -1;
  if (fstat(fd, &st) || fcntl(fd, F_SETFL, 0))
    err = errno;
  else if (!S_ISREG(st.st_mode))
    err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  else if ((*size = (int64_t)st.st_size) > limit)
    err = EFBIG;
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

int dtrt_open_input(const DtrtCtx *ctx, const char *path, int64_t *size) {
  int fd = dtrt_open_regular(path, dtrt_read_limit(ctx), size);
  if (fd < 0 && errno == EISDIR)
    errno = EINVAL;   /* the runtime says "not a regular file" of a directory too */
  return fd;
}

FILE *dtrt_open_output(const char *path) {
  struct stat st;
  if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return NULL;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0)
    return NULL;
  FILE *f = NULL;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode))
    errno = EINVAL;
  else if (!ftruncate(fd, 0) && !fcntl(fd, F_SETFL, 0))
    f = fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

DtStatus dtrt_check_output(DtrtCtx *ctx, const char *op, const char *path) {
  struct stat st;
  if (!stat(path, &st))
    return S_ISREG(st.st_mode)
               ? DT_OK
               : dtrt_fail(ctx, DT_ERR_IO, "%s: %s is not a regular file; not writing it", op,
                           path);
  if (errno == ENOENT)
    return DT_OK;
  return dtrt_fail(ctx, DT_ERR_IO, "%s: cannot write %s: %s", op, path, strerror(errno));
}

/* The directory holding path, opened; -1 with errno. */
static int open_dir(DtrtCtx *ctx, const char *path) {
  size_t n = strlen(path);
  char *dir = dtrt_alloc(ctx, n + 2);
  if (!dir) {
    errno = ENOMEM;
    return -1;
  }
  const char *slash = strrchr(path, '/');
  if (!slash)
    strcpy(dir, ".");
  else if (slash == path)
    strcpy(dir, "/");
  else
    memcpy(dir, path, (size_t)(slash - path));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  dtrt_free(ctx, dir);
  return fd;
}

/* fsync of the directory holding path, so the rename itself is durable. */
int dtrt_sync_dir(DtrtCtx *ctx, const char *path) {
  int fd = open_dir(ctx, path), r = -1;
  if (fd >= 0) {
    r = fsync(fd);
    close(fd);
  }
  return r;
}

/* Whether name is base's temporary file: base, ".tmp." and the 6 letters
 * and digits mkstemp puts for the XXXXXX of DTRT_ST_TMP. */
static bool tmp_of(const char *name, const char *base) {
  static const char alnum[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  size_t n = strlen(base), x = sizeof DTRT_ST_TMP - 7;
  return !strncmp(name, base, n) && !strncmp(name + n, DTRT_ST_TMP, x) &&
         strspn(name + n + x, alnum) == 6 && !name[n + x + 6];
}

/* Removes the temporary files of path that saves which did not end left
 * (killed by SIGKILL, or their machine lost): regular files of this user,
 * named as tmp_of says, that no save holds locked. A save holds its
 * temporary file locked from its creation to its rename, and the lock ends
 * with the process. Nothing here is an error: what cannot be removed stays. */
static void remove_stale(DtrtCtx *ctx, const char *path) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  int dfd = base[0] ? open_dir(ctx, path) : -1;
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0)
      close(dfd);
    return;
  }
  for (struct dirent *e; (e = readdir(d));) {
    struct stat st, now;
    if (!tmp_of(e->d_name, base) || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
        !S_ISREG(st.st_mode) || st.st_uid != geteuid())
      continue;
    int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
      continue;
    /* the same file still, unlocked: its save is over */
    if (!fstat(fd, &now) && now.st_dev == st.st_dev && now.st_ino == st.st_ino &&
        !flock(fd, LOCK_EX | LOCK_NB) && !fstatat(dfd, e->d_name, &now, AT_SYMLINK_NOFOLLOW) &&
        now.st_dev == st.st_dev && now.st_ino == st.st_ino)
      unlinkat(dfd, e->d_name, 0);
    close(fd);
  }
  closedir(d);
}

int dtrt_st_create_tmp(DtrtCtx *ctx, const char *path, char *tmp, int *lock) {
  remove_stale(ctx, path);
  size_t n = strlen(tmp);
  for (int tries = 0; tries < 100; tries++) {
    memcpy(tmp + n - 6, "XXXXXX", 6);
    int fd = mkstemp(tmp), r, err = 0;
    if (fd < 0)
      return -1;
    /* locked at once: a save of path elsewhere that lists it before takes it
     * for stale only while it is unlocked, and then removes it first */
    while ((r = flock(fd, LOCK_EX)) && errno == EINTR)
      ;
    struct stat st;
    if (r && errno != ENOLCK && errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL)
      err = errno;   /* a file system without locks: saved, never taken for stale */
    else if (fstat(fd, &st) || fchmod(fd, 0644))
      err = errno;
    else if (st.st_nlink == 0) {   /* removed as stale before it was locked */
      close(fd);
      continue;
    } else if ((*lock = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
      err = errno;
    if (!err)
      return fd;
    unlink(tmp);
    close(fd);
    memcpy(tmp + n - 6, "XXXXXX", 6);
    errno = err;
    return -1;
  }
  memcpy(tmp + n - 6, "XXXXXX", 6);
  errno = EEXIST;
  return -1;
}

int dtrt_st_pwrite(int fd, const void *p, int64_t n, int64_t off) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = pwrite(fd, c, (size_t)(n < (1 << 30) ? n : (1 << 30)), (off_t)off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO;
      return -1;
    }
    c += w, n -= w, off += w;
  }
  return 0;
}

int dtrt_st_pread(int fd, void *p, int64_t n, int64_t off) {
  char *c = p;
  while (n > 0) {
    ssize_t r = pread(fd, c, (size_t)(n < (1 << 30) ? n : (1 << 30)), (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0)
      return -2;
    c += r, n -= r, off += r;
  }
  return 0;
}

DtStatus dtrt_st_open(DtrtCtx *ctx, const char *path, int *fd, int64_t *size) {
  if ((*fd = dtrt_open_input(ctx, path, size)) >= 0)
    return DT_OK;
  if (errno == EINVAL)
    return dtrt_fail(ctx, DT_ERR_IO, "load: %s is not a regular file", path);
  if (errno == EFBIG)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s is %lld bytes, more than the read limit of %lld", path,
                     (long long)*size, (long long)dtrt_read_limit(ctx));
  return dtrt_fail(ctx, DT_ERR_IO, "load: cannot open %s: %s", path, strerror(errno));
}

char *dtrt_st_tmp_name(DtrtCtx *ctx, const char *path) {
  size_t n = strlen(path);
  char *tmp = dtrt_alloc(ctx, n + 16);
  if (tmp) {
    memcpy(tmp, path, n);
    strcpy(tmp + n, DTRT_ST_TMP);
  }
  return tmp;
}

DtStatus dtrt_st_replace(DtrtCtx *ctx, const char *tmp, const char *path, int lock) {
  /* the path may have become something else while the data were written */
  DtStatus s = dtrt_check_output(ctx, "save", path);
  if (!s && rename(tmp, path))
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", path, strerror(errno));
  if (s)
    unlink(tmp);
  close(lock);
  if (s)
    return s;
  if (dtrt_sync_dir(ctx, path))
    return dtrt_fail(ctx, DT_ERR_IO, "save: wrote %s but could not sync its directory: %s",
                     path, strerror(errno));
  return DT_OK;
}

/* ---- numbers ---- */

unsigned long dtrt_st_crc(unsigned long crc, const void *p, int64_t n) {
  return n ? crc32_z(crc, p, (z_size_t)n) : crc;   /* zlib restarts at 0 given NULL */
}

bool dtrt_st_parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) || *end || errno)
    return false;
  *v = x;
  return true;
}

bool dtrt_st_parse_crc(const char *s, unsigned long *v) {
  if (strlen(s) != 6 + DTRT_ST_DIGITS || strncmp(s, "crc32:", 6))
    return false;
  *v = 0;
  for (int k = 6; k < 6 + DTRT_ST_DIGITS; k++) {
    int c = s[k], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return false;
    *v = *v << 4 | (unsigned long)d;
  }
  return true;
}

bool dtrt_json_whole(const cJSON *j, int64_t *v) {
  if (!cJSON_IsNumber(j))
    return false;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
    return false;
  *v = (int64_t)d;
  return true;
}

bool dtrt_json_dims(const cJSON *j, int rank, int64_t *v) {
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != rank)
    return false;
  int d = 0;
  for (const cJSON *x = j->child; x; x = x->next)
    if (!dtrt_json_whole(x, &v[d++]))
      return false;
  return true;
}

/* ---- entries ---- */

int dtrt_st_by_name(const void *a, const void *b) {
  return strcmp(((const DtStEntry *)a)->name, ((const DtStEntry *)b)->name);
}

/* Data order; empty tensors at one offset by name, so that the order is one. */
int dtrt_st_by_begin(const void *a, const void *b) {
  const DtStEntry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

DtStEntry *dtrt_st_find(const DtStEntry *e, int n, const char *name) {
  DtStEntry key = {.name = name};
  return bsearch(&key, e, (size_t)n, sizeof key, dtrt_st_by_name);
}

/* One tensor entry j of the header into e. */
static DtStatus parse_entry(DtrtCtx *ctx, const char *path, const cJSON *j, int64_t datalen,
                            bool model, DtStEntry *e) {
  const char *name = j->string;
  if (!model && !cJSON_IsObject(j))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: entry '%s' is not an object", path, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsObject(j) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' lacks a string dtype, a shape or data_offsets", path,
                     name);
  *e = (DtStEntry){.name = name, .kind = -1, .local = -1};
  if (!strcmp(dt->valuestring, "F32"))
    e->dtype = DTRT_F32;
  else if (!strcmp(dt->valuestring, "I32"))
    e->dtype = DTRT_I32;
  else
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "load: %s: tensor '%s' has dtype %s; only F32 and I32 load", path, name,
                     dt->valuestring);
  if ((e->rank = cJSON_GetArraySize(sh)) > DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s: tensor '%s' has rank %d; at most %d load",
                     path, name, e->rank, DT_MAX_RANK);
  int d = 0;
  for (const cJSON *x = sh->child; x; x = x->next)
    if (!dtrt_json_whole(x, &e->dim[d++]))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' has a bad shape entry", path,
                       name);
  int64_t n = dtrt_elems(e->dim, e->rank), bytes;
  if (n < 0 || !dtrt_mul(n, 4, &bytes))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' has too many elements", path,
                     name);
  if (cJSON_GetArraySize(off) != 2 || !dtrt_json_whole(off->child, &e->begin) ||
      !dtrt_json_whole(off->child->next, &e->end) || e->begin > e->end || e->end > datalen)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' has data_offsets outside the %lld data bytes", path,
                     name, (long long)datalen);
  if (e->end - e->begin != bytes)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' spans %lld bytes, its shape needs %lld", path, name,
                     (long long)(e->end - e->begin), (long long)bytes);
  return DT_OK;
}

DtStatus dtrt_st_read_header(DtrtCtx *ctx, const char *path, int fd, int64_t size, bool model,
                             DtStHeader *h) {
  unsigned char len8[8];
  if (size < 8 || dtrt_st_pread(fd, len8, 8, 0))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s is too short (%lld bytes) for a checkpoint",
                     path, (long long)size);
  uint64_t hl = 0;
  for (int k = 0; k < 8; k++)
    hl |= (uint64_t)len8[k] << 8 * k;
  if (hl < 2 || hl > DTRT_ST_MAX_HEADER || hl > (uint64_t)size - 8)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: header length %llu does not fit a %lld-byte file", path,
                     (unsigned long long)hl, (long long)size);
  h->hl = (int64_t)hl;
  h->datalen = size - 8 - h->hl;
  if (!(h->text = dtrt_alloc(ctx, hl + 1)))
    return DT_ERR_NOMEM;
  if (dtrt_st_pread(fd, h->text, h->hl, 8))
    return dtrt_fail(ctx, DT_ERR_IO, "load: cannot read the header of %s", path);
  const char *end = h->text;
  h->root = cJSON_ParseWithLengthOpts(h->text, hl, &end, 0);
  if (!cJSON_IsObject(h->root))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: the header is not a JSON object%s", path,
                     h->root ? "" : " (malformed JSON)");
  for (; end < h->text + hl; end++)
    if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: text after the JSON header", path);
  /* a name holding a NUL (\u0000, or the byte) would be read as its first
   * part; a backslash only appears in a string, as an escape */
  for (const char *c = h->text; c < end; c++)
    if (!*c || (*c == '\\' && !strncmp(c + 1, "u0000", 5)))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: the header holds a NUL%s at byte %lld",
                       path, *c ? " (\\u0000)" : "", (long long)(c - h->text) + 8);
    else if (*c == '\\')
      c++;
  if (!(h->e = dtrt_alloc(ctx, (size_t)(cJSON_GetArraySize(h->root) + 1) * sizeof *h->e)))
    return DT_ERR_NOMEM;
  DtStatus s = DT_OK;
  for (const cJSON *j = h->root->child; j && !s; j = j->next) {
    if (strcmp(j->string, "__metadata__"))
      s = parse_entry(ctx, path, j, h->datalen, model, &h->e[h->ne++]);
    else if (model && (h->meta || !cJSON_IsObject(j)))
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: a second or malformed __metadata__", path);
    else if (h->meta)
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: two __metadata__ entries", path);
    else
      h->meta = j;
  }
  return s;
}

DtStatus dtrt_st_check_layout(DtrtCtx *ctx, const char *path, DtStHeader *h, const char *more) {
  qsort(h->e, (size_t)h->ne, sizeof *h->e, dtrt_st_by_begin);
  int64_t at = 0;
  for (int k = 0; k < h->ne; k++) {
    if (h->e[k].begin != at)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' %s at byte %lld", path,
                       h->e[k].name, h->e[k].begin < at ? "overlaps another" : "leaves a hole",
                       (long long)h->e[k].begin);
    at = h->e[k].end;
  }
  if (at != h->datalen)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensors cover %lld of the %lld data bytes%s",
                     path, (long long)at, (long long)h->datalen, more);
  return DT_OK;
}

DtStatus dtrt_st_check_names(DtrtCtx *ctx, const char *path, DtStHeader *h) {
  qsort(h->e, (size_t)h->ne, sizeof *h->e, dtrt_st_by_name);
  for (int k = 1; k < h->ne; k++)
    if (!strcmp(h->e[k - 1].name, h->e[k].name))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' appears twice", path,
                       h->e[k].name);
  return DT_OK;
}

void dtrt_st_header_free(DtrtCtx *ctx, DtStHeader *h) {
  cJSON_Delete(h->root);
  dtrt_free(ctx, h->text);
  dtrt_free(ctx, h->e);
  *h = (DtStHeader){0};
}

/* ---- writing ---- */

cJSON *dtrt_st_new_header(cJSON **meta) {
  cJSON *root = cJSON_CreateObject();
  *meta = cJSON_CreateObject();
  if (!root || !*meta || !cJSON_AddItemToObject(root, "__metadata__", *meta)) {
    cJSON_Delete(root);
    cJSON_Delete(*meta);
    return NULL;
  }
  return root;
}

bool dtrt_st_add_entry(cJSON *root, const DtStEntry *e) {
  char buf[160];
  cJSON *o = cJSON_AddObjectToObject(root, e->name);
  dtrt_dims_str(e->dim, e->rank, buf, sizeof buf);
  bool ok = o && cJSON_AddStringToObject(o, "dtype", e->dtype == DTRT_F32 ? "F32" : "I32") &&
            cJSON_AddRawToObject(o, "shape", buf);
  snprintf(buf, sizeof buf, "[%lld,%lld]", (long long)e->begin, (long long)e->end);
  return ok && cJSON_AddRawToObject(o, "data_offsets", buf);
}

char *dtrt_st_frame(DtrtCtx *ctx, const char *json, int64_t *size) {
  /* padded with spaces to a multiple of 8 bytes, as is usual */
  size_t len = strlen(json), hl = (len + 7) / 8 * 8;
  char *f = dtrt_alloc(ctx, 8 + hl);
  if (!f)
    return NULL;
  for (int k = 0; k < 8; k++)
    f[k] = (char)((uint64_t)hl >> 8 * k);
  memcpy(f + 8, json, len);
  memset(f + 8 + len, ' ', hl - len);
  *size = 8 + (int64_t)hl;
  return f;
}
