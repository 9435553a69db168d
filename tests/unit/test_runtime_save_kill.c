/* test_runtime_save_kill.c: saves that do not end. A save killed by SIGKILL
 * while it writes its temporary file leaves it; the next save of the same
 * path removes it, and only it: not a temporary file another save holds
 * locked, nor one of another path, nor anything but a regular file. Each
 * killed save runs in a child process, stopped at a known point: the first
 * allocation after its temporary file exists. */
#define _DEFAULT_SOURCE   /* flock */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "rt_test.h"

static int group_setup(void **state) {
  (void)state;
  return rt_make_dir("dtrt-save-kill");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

/* How many files in dir are named prefix and 6 more characters. */
static int count_tmp(const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  size_t len = strlen(prefix);
  for (struct dirent *e; d && (e = readdir(d));)
    n += !strncmp(e->d_name, prefix, len) && strlen(e->d_name) == len + 6;
  if (d)
    closedir(d);
  return n;
}

/* The temporary files of ck.st before the save, NUL-separated. */
static char before[4096];

/* Whether a temporary file of ck.st not in before exists; with list, puts
 * their names in before instead. */
static bool new_tmp(bool list) {
  DIR *d = opendir(dir);
  bool found = false;
  size_t at = 0;
  for (struct dirent *e; d && (e = readdir(d)) && !found;) {
    if (strncmp(e->d_name, "ck.st.tmp.", 10) || strlen(e->d_name) != 16)
      continue;
    if (list) {
      snprintf(before + at, sizeof before - at, "%s", e->d_name);
      at += strlen(e->d_name) + 1;
      continue;
    }
    found = true;
    for (const char *b = before; *b && found; b += strlen(b) + 1)
      found = strcmp(b, e->d_name) != 0;
  }
  if (d)
    closedir(d);
  return found;
}

/* The signal the hook raises, once, at the first allocation after the save's
 * own temporary file of ck.st exists. */
static int hook_sig;

static void *hook_alloc(void *u, size_t n) {
  if (hook_sig && new_tmp(false)) {
    int sig = hook_sig;
    hook_sig = 0;
    kill(getpid(), sig);
  }
  return count_alloc(u, n);
}

static float w[4096];
static DtCkptTensor t = {"w", DT_G_PARAM, {w, DTRT_F32, 1, {4096}}, {0}, {0}};

/* A save of ck.st in a child process that the hook sends sig; its wait
 * status. */
static int save_in_child(int sig) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (!pid) {
    Count c = {.limit = -1};
    DtAllocator a = {hook_alloc, count_free, &c};
    DtrtCtx *cx = dtrt_ctx_new_with(&a);
    memset(before, 0, sizeof before);
    new_tmp(true);
    hook_sig = sig;
    DtStatus s = dtrt_ckpt_save(cx, rt_at("ck.st"), &t, 1, "m", NULL, 3);
    _exit(hook_sig ? 2 : s == DT_OK ? 0 : 1);   /* 2: the hook never ran */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void make_file(const char *name) {
  FILE *f = fopen(rt_at(name), "w");
  assert_non_null(f);
  fputs("not ours", f);
  fclose(f);
}

static void test_killed_save(void **state) {
  (void)state;
  for (int k = 0; k < 4096; k++)
    w[k] = (float)k;
  int st = save_in_child(SIGKILL);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  assert_int_equal(count_tmp("ck.st.tmp."), 1);
  assert_int_equal(access(rt_at("ck.st"), F_OK), -1);
  st = save_in_child(SIGKILL);   /* the next one removes it, and is killed too */
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  assert_int_equal(count_tmp("ck.st.tmp."), 1);

  /* a save under way elsewhere (its file locked), names that are not
   * ck.st's temporary files, and what is not a regular file */
  make_file("ck.st.tmp.live01");
  int live = open(rt_at("ck.st.tmp.live01"), O_RDONLY);
  assert_true(live >= 0);
  assert_int_equal(flock(live, LOCK_EX), 0);
  static const char *const others[] = {"ck.st.tmp.abc12", "ck.st.tmp.abc1234", "ck.st.tmp.ab-123",
                                       "ck.stx.tmp.abc123", "xck.st.tmp.abc123", "ck.st.tmp.",
                                       "target"};
  for (int k = 0; k < 7; k++)
    make_file(others[k]);
  assert_int_equal(mkdir(rt_at("ck.st.tmp.dir123"), 0755), 0);
  assert_int_equal(symlink("target", rt_at("ck.st.tmp.lnk123")), 0);
  assert_int_equal(mkfifo(rt_at("ck.st.tmp.fif123"), 0644), 0);

  assert_int_equal(dtrt_ckpt_save(ctx, rt_at("ck.st"), &t, 1, "m", NULL, 3), DT_OK);
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("ck.st"), NULL), DT_OK);
  /* live01, ab-123, dir123, lnk123, fif123 */
  assert_int_equal(count_tmp("ck.st.tmp."), 5);
  for (int k = 0; k < 7; k++)
    assert_int_equal(access(rt_at(others[k]), F_OK), 0);
  struct stat sb;
  assert_int_equal(lstat(rt_at("ck.st.tmp.lnk123"), &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));

  /* once its save is over (the lock gone), the next save removes it */
  close(live);
  assert_int_equal(dtrt_ckpt_save(ctx, rt_at("ck.st"), &t, 1, "m", NULL, 4), DT_OK);
  assert_int_equal(count_tmp("ck.st.tmp."), 4);
  assert_int_equal(access(rt_at("ck.st.tmp.live01"), F_OK), -1);

  /* dtrt_save's files the same */
  DtNamed n = {"w", {w, DTRT_F32, 1, {4096}}};
  make_file("t.st.tmp.Xy9abc");
  assert_int_equal(dtrt_save(ctx, rt_at("t.st"), &n, 1, "h", 1), DT_OK);
  assert_int_equal(count_tmp("t.st.tmp."), 0);
  assert_int_equal(dtrt_load(ctx, rt_at("t.st"), &n, 1, "h", NULL), DT_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_killed_save, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
