/* fileutil.c - atomic whole-file writes (temporary + fsync + rename), outputs written in place (locked), file
 * fingerprints, whole-file reads, and the little-endian element codecs used by the .npy and .safetensors readers and writers. */
#define _POSIX_C_SOURCE 200809L
#include "io/fileutil.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== atomic write ========================================================================================= */

/* Opens the temporary for writing: exclusive create without following links, so that a stale or planted file of
 * the same name is never written through; a stale regular file left by a dead process with our pid is removed once. */
static FILE *open_temp(const char *tmp) {
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0) {
            FILE *f = fdopen(fd, "wb");
            if (!f) {
                int e = errno;
                close(fd);
                unlink(tmp);
                errno = e;
            }
            return f;
        }
        if (errno != EEXIST || attempt > 0) return NULL;
        struct stat st;
        if (lstat(tmp, &st) != 0 || !S_ISREG(st.st_mode) || unlink(tmp) != 0) {
            errno = EEXIST;
            return NULL;
        }
    }
    return NULL;
}

/* Best effort: makes the rename durable by syncing the directory that holds `path`. Failure is not an error (some
 * file systems refuse fsync on directories). */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) {
        strcpy(dir, ".");
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1; /* "/file" -> "/" */
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

/* The descriptor a path names when it is one of the process's own open descriptors (/dev/stdout, /dev/stderr,
 * /dev/fd/N, /proc/self/fd/N) and that descriptor is open; else -1. Such a path is written through the descriptor,
 * where a shell's redirection put it (a file, a pipe, a terminal), never replaced. */
static int own_fd(const char *path) {
    long n = -1;
    char *end = NULL;
    if (!strcmp(path, "/dev/stdout")) n = 1;
    else if (!strcmp(path, "/dev/stderr")) n = 2;
    else if (!strncmp(path, "/dev/fd/", 8)) n = strtol(path + 8, &end, 10);
    else if (!strncmp(path, "/proc/self/fd/", 14)) n = strtol(path + 14, &end, 10);
    if (end && (*end || end == path + 8 || end == path + 14)) n = -1;
    if (n < 0 || n > INT_MAX || fcntl((int)n, F_GETFD) < 0) return -1;
    return (int)n;
}

cattr_status cx_output_kind(const char *path, cx_dest *kind) {
    *kind = CX_DEST_NEW;
    if (own_fd(path) >= 0) {
        *kind = CX_DEST_STREAM;
        return CATTR_OK;
    }
    struct stat ls, ts;
    if (lstat(path, &ls) != 0) {
        if (errno == ENOENT) return CATTR_OK; /* a missing folder on the way is reported when the file is created */
        return cx_fail(CATTR_ERR_IO, "cannot examine '%s': %s", path, strerror(errno));
    }
    if (S_ISLNK(ls.st_mode)) {
        if (stat(path, &ts) == 0 && (S_ISCHR(ts.st_mode) || S_ISFIFO(ts.st_mode))) {
            *kind = CX_DEST_STREAM;
            return CATTR_OK;
        }
        return cx_fail(CATTR_ERR_IO, "'%s' is a symbolic link: cattr writes no file through a link (give the path of "
                       "the file itself, or remove the link)", path);
    }
    if (S_ISREG(ls.st_mode)) *kind = CX_DEST_FILE;
    else if (S_ISCHR(ls.st_mode) || S_ISFIFO(ls.st_mode)) *kind = CX_DEST_STREAM;
    else if (S_ISDIR(ls.st_mode)) return cx_fail(CATTR_ERR_IO, "'%s' is a directory, not a file name", path);
    else if (S_ISBLK(ls.st_mode)) return cx_fail(CATTR_ERR_IO, "'%s' is a block device: cattr does not write to disks", path);
    else return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file (a socket?): cattr cannot write it", path);
    return CATTR_OK;
}

/* A character device or FIFO written in place: opened without blocking (a FIFO nobody reads is an error, not a hang),
 * checked to be what cx_output_kind saw (not a file swapped in since), then written blocking. */
static cattr_status write_stream(const char *path, cattr_status (*writer)(FILE *f, void *ctx), void *ctx) {
    int own = own_fd(path), fd = own >= 0 ? fcntl(own, F_DUPFD_CLOEXEC, 3) : open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENXIO) return cx_fail(CATTR_ERR_IO, "cannot write '%s': no process is reading the FIFO", path);
        return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    struct stat sb;
    int fl = fcntl(fd, F_GETFL);
    if (own < 0 && (fstat(fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) || fl < 0 ||
                    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) {
        close(fd);
        return cx_fail(CATTR_ERR_IO, "'%s' changed while it was opened: not written", path);
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        return cx_fail(CATTR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    cattr_status st = writer(f, ctx);
    if (st != CATTR_OK) cx_fail_context(st, "writing '%s'", path);
    else if (ferror(f) || fflush(f) != 0) st = cx_fail(CATTR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (fclose(f) != 0 && st == CATTR_OK) st = cx_fail(CATTR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return st;
}

cattr_status cx_write_file_atomic(const char *path, cattr_status (*writer)(FILE *f, void *ctx), void *ctx) {
    if (!path || !*path || !writer) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no output file name given");
    cx_dest kind;
    CX_CHECK(cx_output_kind(path, &kind));
    if (kind == CX_DEST_STREAM) return write_stream(path, writer, ctx);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a temporary file name for '%s'", path);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());

    FILE *f = open_temp(tmp);
    if (!f) {
        cattr_status st = cx_fail(CATTR_ERR_IO, "cannot create '%s' (temporary for '%s'): %s", tmp, path, strerror(errno));
        free(tmp);
        return st;
    }
    cattr_status st = writer(f, ctx);
    if (st != CATTR_OK) {
        cx_fail_context(st, "writing '%s'", path);
    } else if (ferror(f)) {
        st = cx_fail(CATTR_ERR_IO, "cannot write '%s': write error on the temporary '%s'", path, tmp);
    } else if (fflush(f) != 0) {
        st = cx_fail(CATTR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    } else if (fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) {
        /* EINVAL/EROFS: the file system does not support syncing (pipes, some FUSE mounts); the data is written. */
        st = cx_fail(CATTR_ERR_IO, "cannot sync '%s': %s", path, strerror(errno));
    }
    if (fclose(f) != 0 && st == CATTR_OK) st = cx_fail(CATTR_ERR_IO, "cannot close '%s': %s", path, strerror(errno));
    if (st == CATTR_OK && rename(tmp, path) != 0)
        st = cx_fail(CATTR_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != CATTR_OK) {
        unlink(tmp);
    } else {
        sync_parent_dir(path);
    }
    free(tmp);
    return st;
}

int cx_remove_stale_temps(const char *path) {
    if (!path || !*path) return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0, blen = strlen(base);
    char *dir = malloc(dlen + 2), *full = malloc(strlen(path) + 64);
    int removed = 0;
    DIR *d = NULL;
    if (dir && full) {
        if (slash) {
            memcpy(dir, path, dlen ? dlen : 1); /* "/x": the root */
            dir[dlen ? dlen : 1] = 0;
        } else {
            strcpy(dir, ".");
        }
        d = opendir(dir);
    }
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0) continue;
        const char *digits = n + blen + 5;
        char *end = NULL;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (!*digits || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        snprintf(full, strlen(path) + 64, "%.*s%s", (int)(slash ? (size_t)(slash - path) + 1 : 0), path, n);
        struct stat sb;
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(full) == 0) removed++;
    }
    if (d) closedir(d);
    free(dir);
    free(full);
    return removed;
}

/* ==== outputs written in place ============================================================================= */

cattr_status cx_open_locked(const char *path, bool create, int *fd, bool *created) {
    *fd = -1;
    if (created) *created = false;
    struct stat sb;
    int f = -1;
    for (int attempt = 0; attempt < 2 && f < 0; attempt++) {
        if (lstat(path, &sb) == 0) {
            if (S_ISLNK(sb.st_mode))
                return cx_fail(CATTR_ERR_IO, "'%s' is a symbolic link: cattr writes no file through a link (give the "
                               "path of the file itself, or remove the link)", path);
            if (!S_ISREG(sb.st_mode))
                return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file: cattr cannot append to it or resume it", path);
            f = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        } else if (errno == ENOENT && create) {
            f = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (f >= 0 && created) *created = true;
            if (f < 0 && errno == EEXIST) continue; /* made by someone else meanwhile: look again */
        } else {
            return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        }
        if (f < 0) {
            if (errno == ELOOP) return cx_fail(CATTR_ERR_IO, "'%s' is a symbolic link: cattr writes no file through a link", path);
            return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        }
    }
    if (f < 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': it keeps changing", path);
    if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(f);
        return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file: cattr cannot append to it or resume it", path);
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(f);
        if (e == EWOULDBLOCK)
            return cx_fail(CATTR_ERR_IO, "another process is writing '%s' (a cattr run on the same output): wait for "
                           "it to end, or choose another output", path);
        return cx_fail(CATTR_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
    }
    *fd = f;
    return CATTR_OK;
}

/* ==== fingerprints ========================================================================================= */

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

uint64_t cx_hash_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t a = h ^ 0x9e3779b97f4a7c15ull, b = fmix64(h + n);
    for (; n >= 16; n -= 16, p += 16) { /* two independent lanes */
        uint64_t w0, w1;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + 8, 8);
        a = rotl64(a ^ (w0 * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
        b = rotl64(b ^ (w1 * 0x4cf5ad432745937full), 29) * 0x87c37b91114253d5ull;
    }
    if (n >= 8) { /* one more word */
        uint64_t w;
        memcpy(&w, p, 8);
        a = rotl64(a ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
        p += 8;
        n -= 8;
    }
    uint64_t t = 0; /* the last 0 to 7 bytes */
    for (size_t k = 0; k < n; k++) t |= (uint64_t)p[k] << (8 * k);
    return fmix64(a ^ rotl64(b, 17) ^ fmix64(t + n));
}

/* Hashes len bytes of fd from offset `at` into *h (pread through a buffer). */
static bool hash_range(int fd, uint64_t at, uint64_t len, unsigned char *buf, size_t cap, uint64_t *h) {
    while (len > 0) {
        size_t k = len < cap ? (size_t)len : cap;
        ssize_t got = pread(fd, buf, k, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        *h = cx_hash_bytes(*h, buf, (size_t)got);
        at += (uint64_t)got;
        len -= (uint64_t)got;
    }
    return true;
}

static cattr_status file_fingerprint(const char *path, bool with_time, uint64_t *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file", path);
    }
    const uint64_t whole = (uint64_t)64 << 20, edge = (uint64_t)1 << 20, block = (uint64_t)64 << 10;
    uint64_t size = (uint64_t)sb.st_size, h = cx_hash_bytes(0, &size, sizeof size);
    size_t cap = (size_t)1 << 20;
    unsigned char *buf = malloc(cap);
    bool ok = buf != NULL;
    if (ok && size <= whole) {
        ok = hash_range(fd, 0, size, buf, cap, &h);
    } else if (ok) {
        ok = hash_range(fd, 0, edge, buf, cap, &h) && hash_range(fd, size - edge, edge, buf, cap, &h);
        uint64_t span = size - 2 * edge - block;
        for (int k = 0; k < 62 && ok; k++) ok = hash_range(fd, edge + span / 61 * (uint64_t)k, block, buf, cap, &h);
        if (with_time) {
            int64_t t[3] = {(int64_t)sb.st_mtim.tv_sec, (int64_t)sb.st_mtim.tv_nsec, (int64_t)sb.st_ino};
            h = cx_hash_bytes(h, t, sizeof t);
        }
    }
    int e = errno;
    free(buf);
    close(fd);
    if (!buf) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (!ok) return cx_fail(CATTR_ERR_IO, "cannot read '%s': %s", path, e ? strerror(e) : "it shrank while being read");
    *out = h;
    return CATTR_OK;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool name_ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

cattr_status cx_file_fingerprint(const char *path, bool with_time, uint64_t *out) {
    struct stat sb;
    if (stat(path, &sb) != 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return file_fingerprint(path, with_time, out);
    DIR *d = opendir(path);
    if (!d) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    cattr_status st = CATTR_OK;
    for (struct dirent *de; st == CATTR_OK && (de = readdir(d));) {
        if (de->d_name[0] == '.' || !(name_ends(de->d_name, ".json") || name_ends(de->d_name, ".safetensors"))) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **g = realloc(names, cap * sizeof *g);
            if (!g) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else names = g;
        }
        if (st == CATTR_OK && !(names[n++] = strdup(de->d_name))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    closedir(d);
    if (st == CATTR_OK && n) qsort(names, n, sizeof *names, cmp_names);
    uint64_t h = 0x5bd1e995ull;
    for (size_t k = 0; k < n && st == CATTR_OK; k++) {
        size_t len = strlen(path) + strlen(names[k]) + 2;
        char *full = malloc(len);
        uint64_t f = 0;
        if (!full) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            snprintf(full, len, "%s/%s", path, names[k]);
            if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) {
                st = file_fingerprint(full, with_time, &f);
                h = cx_hash_bytes(cx_hash_bytes(h, names[k], strlen(names[k]) + 1), &f, sizeof f);
            }
        }
        free(full);
    }
    for (size_t k = 0; k < n; k++) free(names[k]);
    free(names);
    if (st == CATTR_OK) *out = h;
    return st;
}

/* ==== whole-file read ====================================================================================== */

cattr_status cx_file_size(FILE *f, const char *path, uint64_t *size) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return cx_fail(CATTR_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file", path);
    *size = (uint64_t)st.st_size;
    return CATTR_OK;
}

cattr_status cx_read_file(const char *path, void **data, size_t *size) {
    if (data) *data = NULL;
    if (size) *size = 0;
    if (!path || !data || !size) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no file name given");
    FILE *f = fopen(path, "rb");
    if (!f) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    uint64_t n64 = 0;
    cattr_status st = cx_file_size(f, path, &n64);
    if (st != CATTR_OK) {
        fclose(f);
        return st;
    }
    if (n64 >= (uint64_t)SIZE_MAX) {
        fclose(f);
        return cx_fail(CATTR_ERR_NO_MEMORY, "'%s' is too large to read (%llu bytes)", path, (unsigned long long)n64);
    }
    size_t n = (size_t)n64;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate %zu bytes to read '%s'", n + 1, path);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n) {
        free(buf);
        if (err) return cx_fail(CATTR_ERR_IO, "cannot read '%s': %s", path, strerror(err));
        return cx_fail(CATTR_ERR_IO, "cannot read '%s': it shrank while being read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return CATTR_OK;
}

cattr_status cx_file_map_open(const char *path, cx_file_map *m) {
    if (m) memset(m, 0, sizeof *m);
    if (!path || !m) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no file name given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return cx_fail(CATTR_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)sb.st_size >= (uint64_t)SIZE_MAX) {
        close(fd);
        return cx_fail(CATTR_ERR_NO_MEMORY, "'%s' is too large to map", path);
    }
    size_t n = (size_t)sb.st_size;
    if (n == 0) {
        close(fd);
        m->data = (const unsigned char *)"";
        return CATTR_OK;
    }
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p != MAP_FAILED) {
        m->map_ = p;
        m->data = p;
        m->size = n;
        return CATTR_OK;
    }
    /* a file system without mmap: read it */
    void *buf = NULL;
    size_t got = 0;
    CX_CHECK(cx_read_file(path, &buf, &got));
    m->heap_ = buf;
    m->data = buf;
    m->size = got;
    return CATTR_OK;
}

void cx_file_unmap(cx_file_map *m) {
    if (!m) return;
    if (m->map_) munmap(m->map_, m->size);
    free(m->heap_);
    memset(m, 0, sizeof *m);
}

/* ==== little-endian element codecs ========================================================================= */

size_t cx_elem_size(cx_elem e) {
    switch (e) {
    case CX_ELEM_I8:
    case CX_ELEM_U8:
    case CX_ELEM_BOOL: return 1;
    case CX_ELEM_F16:
    case CX_ELEM_BF16:
    case CX_ELEM_I16:
    case CX_ELEM_U16: return 2;
    case CX_ELEM_F32:
    case CX_ELEM_I32:
    case CX_ELEM_U32: return 4;
    case CX_ELEM_F64:
    case CX_ELEM_I64: return 8;
    }
    return 0;
}

cattr_dtype cx_elem_dtype(cx_elem e) {
    switch (e) {
    case CX_ELEM_F16:
    case CX_ELEM_BF16:
    case CX_ELEM_F32: return CATTR_FLOAT32;
    case CX_ELEM_F64: return CATTR_FLOAT64;
    default: return CATTR_INT64;
    }
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static void wr64(unsigned char *p, uint64_t v) {
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

/* IEEE binary16 bits -> binary32 bits (exact: every half is representable as a float). */
static uint32_t half_to_float_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return sign; /* +-0 */
        /* subnormal: mant * 2^-24; shift until the implicit bit (0x400) appears */
        int k = 0;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            k++;
        }
        mant &= 0x3ffu;
        return sign | ((uint32_t)(113 - k) << 23) | (mant << 13);
    }
    if (exp == 31) return sign | 0x7f800000u | (mant << 13); /* inf / nan (payload kept) */
    return sign | ((exp + 112u) << 23) | (mant << 13);
}

/* Stores go through memcpy so that the in-place widening of cx_read_elems (src inside dst's tail) never breaks the
 * aliasing rules; each element is loaded completely before its wider result is stored, which is what makes the
 * forward in-place pass safe. */
void cx_decode_le(cx_elem e, const void *src, size_t n, void *dst) {
    const unsigned char *s = src;
    unsigned char *d = dst;
    size_t ss = cx_elem_size(e);
    for (size_t i = 0; i < n; i++, s += ss) {
        switch (e) {
        case CX_ELEM_F16:
        case CX_ELEM_BF16:
        case CX_ELEM_F32: {
            uint32_t bits = e == CX_ELEM_F32 ? rd32(s) : e == CX_ELEM_BF16 ? (uint32_t)rd16(s) << 16 : half_to_float_bits(rd16(s));
            float v;
            memcpy(&v, &bits, 4);
            memcpy(d + i * 4, &v, 4);
            break;
        }
        case CX_ELEM_F64: {
            uint64_t bits = rd64(s);
            double v;
            memcpy(&v, &bits, 8);
            memcpy(d + i * 8, &v, 8);
            break;
        }
        default: {
            int64_t v = 0;
            switch (e) {
            case CX_ELEM_I8: v = (int8_t)s[0]; break;
            case CX_ELEM_U8: v = s[0]; break;
            case CX_ELEM_BOOL: v = s[0] != 0; break;
            case CX_ELEM_I16: v = (int16_t)rd16(s); break;
            case CX_ELEM_U16: v = rd16(s); break;
            case CX_ELEM_I32: v = (int32_t)rd32(s); break;
            case CX_ELEM_U32: v = rd32(s); break;
            case CX_ELEM_I64: v = (int64_t)rd64(s); break;
            default: break;
            }
            memcpy(d + i * 8, &v, 8);
            break;
        }
        }
    }
}

void cx_encode_le(cattr_dtype dtype, const void *src, size_t n, void *dst) {
    const unsigned char *s = src;
    unsigned char *d = dst;
    if (dtype == CATTR_FLOAT32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, s + i * 4, 4);
            wr32(d + i * 4, bits);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint64_t bits;
            memcpy(&bits, s + i * 8, 8);
            wr64(d + i * 8, bits);
        }
    }
}

int cx_read_elems(FILE *f, cx_elem e, size_t n, void *dst) {
    if (n == 0) return 1;
    size_t ss = cx_elem_size(e), ds = cattr_dtype_size(cx_elem_dtype(e));
    unsigned char *raw = (unsigned char *)dst + n * (ds - ss); /* the raw bytes end where dst ends */
    if (fread(raw, ss, n, f) != n) return 0;
    cx_decode_le(e, raw, n, dst);
    return 1;
}

cattr_status cx_write_tensor_data(FILE *f, const cattr_tensor *t) {
    unsigned char buf[16384];
    size_t es = cattr_dtype_size(t->dtype);
    size_t per = sizeof buf / es;
    const unsigned char *s = t->data;
    size_t left = (size_t)t->numel;
    while (left > 0) {
        size_t k = left < per ? left : per;
        cx_encode_le(t->dtype, s, k, buf);
        if (fwrite(buf, es, k, f) != k) return cx_fail(CATTR_ERR_IO, "write failed: %s", strerror(errno));
        s += k * es;
        left -= k;
    }
    return CATTR_OK;
}
