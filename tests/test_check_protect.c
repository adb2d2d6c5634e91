/* test_check_protect.c - the cpu-check device's promise: its memory can be touched only through the backend's own
 * functions. For a small buffer and one of 4 MiB (mapped in 2 MiB units for transparent huge pages), data copied in
 * comes back out intact, and a direct read or write from outside the backend kills a child process with SIGSEGV. */
#include "backend/backend.h"
#include "test_util.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_segv(int sig) {
    (void)sig;
    _exit(42);
}

/* Whether touching p directly (a read, or a write when `write`) in a child process faults: the child's SIGSEGV
 * handler exits 42 (its own handler, so that a sanitizer's does not report the expected fault as an error). */
static bool faults(volatile unsigned char *p, bool write) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        if (write) p[0] = 1;
        else if (p[0] == 0x5a) _exit(3);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
    return (WIFEXITED(status) && WEXITSTATUS(status) == 42) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
}

int main(void) {
    cx_backend *be = NULL;
    CHECK(cx_backend_by_name("cpu-check", &be) == CATTR_OK && be, "the cpu-check backend");
    if (!be) return 1;
    const size_t sizes[2] = {1000, (size_t)4 << 20};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        unsigned char *host = malloc(n), *back = malloc(n);
        void *dev = be->alloc(be->ctx, n);
        CHECK(host && back && dev, "%zu bytes", n);
        if (!host || !back || !dev) return 1;
        for (size_t k = 0; k < n; k++) host[k] = (unsigned char)(k * 7 + 1);
        CHECK(be->copy_in(be->ctx, dev, host, n) == CATTR_OK, "copy in %zu bytes", n);
        memset(back, 0, n);
        CHECK(be->copy_out(be->ctx, back, dev, n) == CATTR_OK && memcmp(host, back, n) == 0,
              "%zu bytes come back as they went in", n);
        CHECK(faults(dev, false), "a direct read of %zu bytes of backend memory faults", n);
        CHECK(faults((unsigned char *)dev + n - 1, true), "a direct write at the end of %zu bytes faults", n);
        CHECK(be->copy_out(be->ctx, back, dev, n) == CATTR_OK && memcmp(host, back, n) == 0,
              "%zu bytes intact after the faulting children", n);
        be->free(be->ctx, dev, n);
        free(host);
        free(back);
    }
    printf("test_check_protect: %d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
