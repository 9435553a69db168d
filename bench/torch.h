/* torch.h: a PyTorch baseline served beside a bench: a python script
 * (bench/NAME_torch.py) started once with its stdin and stdout piped, which
 * says "ready [WHAT]" and then answers each request line with a time in ms.
 * Header only; the including file defines _GNU_SOURCE (pipe2). */
#ifndef BENCH_TORCH_H
#define BENCH_TORCH_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Debian's python3-torch belongs to /usr/bin/python3, which may not be the
 * first python3 on PATH; $PYTHON overrides. */
static inline const char *python(void) {
  const char *p = getenv("PYTHON");
  return p ? p : access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";
}

typedef struct Torch {
  pid_t pid;
  FILE *to, *from;
  char said[64];   /* what followed "ready" (which torch runs), "" if nothing */
} Torch;

static inline void torch_stop(Torch *t) {
  if (t->to)
    fclose(t->to);
  if (t->from)
    fclose(t->from);
  if (t->pid > 0)
    waitpid(t->pid, NULL, 0);
  t->to = t->from = NULL, t->pid = 0;   /* `said` stays, for the report */
}

/* Starts DIR/script with args, its stdin and stdout piped to t, and waits
 * for its "ready"; false when it did not start (torch missing). The pipes
 * close on exec, so that no other child holds them open. */
static inline bool torch_start(Torch *t, const char *dir, const char *script, const char *args) {
  *t = (Torch){0};
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "exec %s '%s/%s' %s 2>/dev/null", python(), dir, script, args);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC))
    return false;
  if (pipe2(out, O_CLOEXEC)) {
    close(in[0]);
    close(in[1]);
    return false;
  }
  t->pid = fork();
  if (t->pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  t->to = fdopen(in[1], "w");
  t->from = fdopen(out[0], "r");
  char line[128];
  if (t->pid < 0 || !t->to || !t->from || !fgets(line, sizeof line, t->from) ||
      strncmp(line, "ready", 5)) {
    torch_stop(t);
    return false;
  }
  if (sscanf(line + 5, "%63s", t->said) != 1)
    t->said[0] = 0;
  return true;
}

#endif
