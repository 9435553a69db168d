/* test_runtime_save_signals.c: SIGTERM, SIGINT and SIGHUP that come while a
 * save writes its temporary file act once the save is over, whichever
 * thread the system would give them to: the checkpoint is whole and no
 * temporary file is left. Each save runs in a child process with the
 * context's pool of threads started; the signal is sent to the process at
 * a known point, the first allocation after the save's temporary file
 * exists, and the process is then given every chance to take it (it waits
 * until the signal shows as pending, which it does at once when no thread
 * can take it, or until a thread the runtime did not start has run a
 * handler). The application's own handler still runs. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "rt_test.h"

static int group_setup(void **state) {
  (void)state;
  return rt_make_dir("dtrt-save-signals");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

static int count_tmp(void) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  if (d)
    closedir(d);
  return n;
}

/* The signal the hook sends, once. */
static int hook_sig;

/* A thread that the runtime did not start and that does not block the
 * signals (as OpenBLAS's, started when it is loaded): how many handlers it
 * has run. */
static atomic_int woken;

static void *foreign(void *arg) {
  (void)arg;
  for (;;) {
    pause();
    atomic_fetch_add(&woken, 1);
  }
  return NULL;
}

/* The application's own handler. */
static volatile sig_atomic_t handled;
static void on_signal(int sig) { handled = sig; }

static void *hook_alloc(void *u, size_t n) {
  if (hook_sig && count_tmp()) {
    int sig = hook_sig, was = atomic_load(&woken);
    hook_sig = 0;
    kill(getpid(), sig);
    /* taken by a thread that does not hold it off, it ends the process
     * here, or a handler runs in the foreign thread; held off by every
     * thread, it is pending */
    sigset_t p;
    for (int k = 0; k < 10000; k++) {
      if ((!sigpending(&p) && sigismember(&p, sig)) || atomic_load(&woken) != was)
        break;
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
  }
  return count_alloc(u, n);
}

static float w[4096];

/* A save of ck.st in a child process with a pool of threads that the hook
 * sends sig, the main thread holding sig off itself when main_holds (as an
 * application that blocks it around its saves does), with a foreign thread
 * when with_foreign, with the application's handler of sig when handler;
 * its wait status. */
static int save_in_child(int sig, bool main_holds, bool with_foreign, bool handler) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (!pid) {
    pthread_t th;
    if (with_foreign && pthread_create(&th, NULL, foreign, NULL))
      _exit(3);
    if (handler)
      signal(sig, on_signal);
    setenv("DTRT_NUM_THREADS", "3", 1);
    Count c = {.limit = -1};
    DtAllocator a = {hook_alloc, count_free, &c};
    DtrtCtx *cx = dtrt_ctx_new_with(&a);
    if (!cx || dtrt_threads(cx) != 3)
      _exit(3);
    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(main_holds ? SIG_BLOCK : SIG_UNBLOCK, &one, &old);
    DtCkptTensor t = {"w", DT_G_PARAM, {w, DTRT_F32, 1, {4096}}, {0}, {0}};
    hook_sig = sig;
    DtStatus s = dtrt_ckpt_save(cx, rt_at("ck.st"), &t, 1, "m", NULL, 3);
    int hooked = !hook_sig;
    pthread_sigmask(SIG_SETMASK, &old, NULL);   /* the signal acts here, if held */
    if (handler && handled != sig)
      _exit(4);
    _exit(!hooked ? 2 : s == DT_OK ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void test_signal_in_save(void **state) {
  (void)state;
  static const struct {
    int sig;
    bool main_holds, foreign, handler;
  } cases[] = {{SIGTERM, false, false, false}, {SIGINT, false, false, false},
               {SIGTERM, true, false, false},  {SIGINT, true, false, false},
               {SIGHUP, true, false, false},   {SIGTERM, false, true, false},
               {SIGINT, true, true, false},    {SIGTERM, true, true, true}};
  for (int k = 0; k < 4096; k++)
    w[k] = (float)k / 3;
  for (int c = 0; c < 8; c++) {
    unlink(rt_at("ck.st"));
    int st = save_in_child(cases[c].sig, cases[c].main_holds, cases[c].foreign,
                           cases[c].handler);
    if (cases[c].handler ? !WIFEXITED(st) || WEXITSTATUS(st)
                         : !WIFSIGNALED(st) || WTERMSIG(st) != cases[c].sig)
      fail_msg("case %d: the child %s %d", c, WIFSIGNALED(st) ? "died of signal" : "exited",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    int64_t step = 0;
    if (dtrt_ckpt_verify(ctx, rt_at("ck.st"), &step))
      fail_msg("case %d: %s", c, dtrt_errmsg(ctx));
    assert_true(step == 3);
    assert_int_equal(count_tmp(), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_signal_in_save, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
