/* test_io.c - tests of the file formats: .npy load/save (round trips, numpy-written fixtures from
 * tests/data/make_io_fixtures.py, byte-identical output, every error class), .safetensors load/save (round trip,
 * converted dtypes, hostile headers), the atomic writer, and the golden Captum file when it is present.
 * Runs with cwd = repo root. Prints each failed check and exits 1 if any failed, 0 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "io/fileutil.h"
#include "io/hf.h"
#include "io/rows.h"
#include "io/tensorio.h"
#include "io/tokenizer.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static char g_dir[64];

/* Checks a status and, for failures, that the message mentions `needle` (NULL: no check). */
static void check_status(const char *file, int line, cattr_status got, cattr_status want, const char *needle,
                         const char *what) {
    if (got != want) {
        g_failures++;
        printf("FAIL %s:%d: %s: got %s, want %s; message: %s\n", file, line, what, cattr_status_string(got),
               cattr_status_string(want), cattr_last_error());
    } else if (got != CATTR_OK && needle && !strstr(cattr_last_error(), needle)) {
        g_failures++;
        printf("FAIL %s:%d: %s: message '%s' does not mention '%s'\n", file, line, what, cattr_last_error(), needle);
    }
}
#define CHECK_STATUS(st, want, needle, what) check_status(__FILE__, __LINE__, (st), (want), (needle), (what))

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        printf("FAIL: cannot write test file %s\n", path);
        g_failures++;
    }
    if (f) fclose(f);
}

/* Number of directory entries whose name contains ".tmp." (leftover temporaries). */
static int count_temporaries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static void remove_dir(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[sizeof g_dir + 300];
        snprintf(p, sizeof p, "%s/%.255s", g_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_dir);
}

static int tensors_equal(const cattr_tensor *a, const cattr_tensor *b) {
    if (a->dtype != b->dtype || !cx_shape_eq(a->ndim, a->shape, b->ndim, b->shape) || a->numel != b->numel) return 0;
    return memcmp(a->data, b->data, (size_t)a->numel * cattr_dtype_size(a->dtype)) == 0;
}

static int files_equal(const char *pa, const char *pb) {
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int eq = cx_read_file(pa, &a, &na) == CATTR_OK && cx_read_file(pb, &b, &nb) == CATTR_OK && na == nb &&
             memcmp(a, b, na) == 0;
    free(a);
    free(b);
    return eq;
}

/* ==== npy ================================================================================================== */

static void test_npy_roundtrip(void) {
    const int64_t s23[2] = {2, 3}, s03[2] = {0, 3}, s4[1] = {4};
    const float f[6] = {1.5f, -2.0f, 0.0f, 3.25f, -1e-30f, 1e30f};
    const double d = -0.125;
    const int64_t iv[4] = {INT64_MIN, -1, 0, INT64_MAX};
    struct {
        cattr_dtype dt;
        int ndim;
        const int64_t *shape;
        const void *data;
        const char *file;
    } cases[] = {
        {CATTR_FLOAT32, 2, s23, f, "rt_f32.npy"},  {CATTR_FLOAT64, 0, NULL, &d, "rt_f64_0d.npy"},
        {CATTR_INT64, 2, s03, NULL, "rt_i64_0x3.npy"}, {CATTR_INT64, 1, s4, iv, "rt_i64.npy"},
        {CATTR_FLOAT64, 2, s03, NULL, "rt_f64_0x3.npy"},
    };
    for (size_t i = 0; i < CX_ARRAY_LEN(cases); i++) {
        cattr_tensor *t = NULL, *back = NULL;
        CHECK_STATUS(cattr_tensor_from_data(cases[i].dt, cases[i].ndim, cases[i].shape, cases[i].data, &t), CATTR_OK,
                     NULL, cases[i].file);
        if (!t) continue;
        const char *p = tmp_path(cases[i].file);
        CHECK_STATUS(cattr_tensor_save_npy(t, p), CATTR_OK, NULL, cases[i].file);
        CHECK_STATUS(cattr_tensor_load_npy(p, &back), CATTR_OK, NULL, cases[i].file);
        CHECK(back && tensors_equal(t, back), "%s: round trip changed the tensor", cases[i].file);
        /* The data must start on a multiple of 64 bytes (NPY 1.0 alignment). */
        void *raw = NULL;
        size_t n = 0;
        if (cx_read_file(p, &raw, &n) == CATTR_OK && n >= 10) {
            const unsigned char *b = raw;
            size_t hl = (size_t)b[8] | ((size_t)b[9] << 8);
            CHECK((10 + hl) % 64 == 0, "%s: data offset %zu is not a multiple of 64", cases[i].file, 10 + hl);
            CHECK(b[10 + hl - 1] == '\n', "%s: header does not end with a newline", cases[i].file);
            CHECK(n == 10 + hl + (size_t)t->numel * cattr_dtype_size(t->dtype), "%s: file size %zu", cases[i].file, n);
        } else {
            CHECK(0, "%s: cannot read back the saved file", cases[i].file);
        }
        free(raw);
        cattr_tensor_free(t);
        cattr_tensor_free(back);
    }
    CHECK(count_temporaries() == 0, "temporaries left after saving");
}

static cattr_tensor *load_fixture(const char *name) {
    char p[256];
    snprintf(p, sizeof p, "tests/data/io/%s", name);
    cattr_tensor *t = NULL;
    cattr_status st = cattr_tensor_load_npy(p, &t);
    CHECK(st == CATTR_OK, "loading %s: %s: %s", p, cattr_status_string(st), cattr_last_error());
    return t;
}

static void test_npy_numpy_fixtures(void) {
    cattr_tensor *t;
    if ((t = load_fixture("f4_2x3.npy"))) {
        CHECK(t->dtype == CATTR_FLOAT32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3, "f4_2x3 meta");
        const float *v = t->data;
        for (int i = 0; i < 6; i++) CHECK(v[i] == (float)i * 0.5f - 1.0f, "f4_2x3[%d] = %g", i, v[i]);
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("f8_scalar.npy"))) {
        CHECK(t->dtype == CATTR_FLOAT64 && t->ndim == 0 && t->numel == 1 && ((double *)t->data)[0] == 3.25,
              "f8_scalar");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("i8_0x3.npy"))) {
        CHECK(t->dtype == CATTR_INT64 && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 3 && t->numel == 0,
              "i8_0x3");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("i8_vec.npy"))) {
        const int64_t want[4] = {-5, 0, 7, (int64_t)1 << 40};
        CHECK(t->dtype == CATTR_INT64 && t->numel == 4 && memcmp(t->data, want, sizeof want) == 0, "i8_vec");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("i4_vec.npy"))) {
        const int64_t want[4] = {-2147483648LL, -1, 0, 2147483647LL};
        CHECK(t->dtype == CATTR_INT64 && t->numel == 4 && memcmp(t->data, want, sizeof want) == 0, "i4_vec");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("b1_vec.npy"))) {
        const int64_t want[3] = {1, 0, 1};
        CHECK(t->dtype == CATTR_INT64 && t->numel == 3 && memcmp(t->data, want, sizeof want) == 0, "b1_vec");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("u1_vec.npy"))) {
        const int64_t want[3] = {0, 1, 255};
        CHECK(t->dtype == CATTR_INT64 && t->numel == 3 && memcmp(t->data, want, sizeof want) == 0, "u1_vec");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("f2_vec.npy"))) {
        const float *v = t->data;
        CHECK(t->dtype == CATTR_FLOAT32 && t->numel == 5, "f2_vec meta");
        if (t->numel == 5)
            CHECK(v[0] == 1.0f && v[1] == -2.5f && v[2] == 65504.0f && v[3] == ldexpf(1.0f, -24) && isinf(v[4]) &&
                      v[4] > 0,
                  "f2_vec values %g %g %g %g %g", v[0], v[1], v[2], v[3], v[4]);
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("f8_v2.npy"))) {
        const double want[4] = {1, 2, 3, 4};
        CHECK(t->dtype == CATTR_FLOAT64 && t->ndim == 2 && t->numel == 4 && memcmp(t->data, want, sizeof want) == 0,
              "f8_v2 (format 2.0)");
        cattr_tensor_free(t);
    }
    if ((t = load_fixture("f4_v3.npy"))) {
        const float want[3] = {0.5f, -0.5f, 8.0f};
        CHECK(t->dtype == CATTR_FLOAT32 && t->numel == 3 && memcmp(t->data, want, sizeof want) == 0,
              "f4_v3 (format 3.0)");
        cattr_tensor_free(t);
    }
    /* cattr writes exactly what numpy 1.24's np.save writes. */
    const char *same[] = {"f4_2x3.npy", "f8_scalar.npy", "i8_0x3.npy", "i8_vec.npy", "f4_2x1x3.npy"};
    for (size_t i = 0; i < CX_ARRAY_LEN(same); i++) {
        if (!(t = load_fixture(same[i]))) continue;
        char src[256];
        snprintf(src, sizeof src, "tests/data/io/%s", same[i]);
        const char *dst = tmp_path(same[i]);
        CHECK_STATUS(cattr_tensor_save_npy(t, dst), CATTR_OK, NULL, same[i]);
        CHECK(files_equal(src, dst), "%s: cattr's output differs from numpy's", same[i]);
        cattr_tensor_free(t);
    }
}

static void test_npy_errors(void) {
    cattr_tensor *t = (cattr_tensor *)&t; /* must be reset to NULL on failure */
    const char *missing = tmp_path("does_not_exist.npy");
    CHECK_STATUS(cattr_tensor_load_npy(missing, &t), CATTR_ERR_IO, missing, "missing file");
    CHECK(t == NULL, "out not cleared on failure");

    void *good = NULL;
    size_t n = 0;
    if (cx_read_file("tests/data/io/f4_2x3.npy", &good, &n) != CATTR_OK || n != 128 + 24) {
        CHECK(0, "cannot read fixture f4_2x3.npy: %s", cattr_last_error());
        free(good);
        return;
    }
    char *g = good;
    const char *p;

    p = tmp_path("trunc_data.npy");
    write_bytes(p, g, n - 4);
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "truncated data");
    CHECK(strstr(cattr_last_error(), "truncated"), "truncated data message: %s", cattr_last_error());

    p = tmp_path("trunc_header.npy");
    write_bytes(p, g, 40);
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "truncated header");

    p = tmp_path("trunc_preamble.npy");
    write_bytes(p, g, 7);
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "truncated preamble");

    p = tmp_path("empty.npy");
    write_bytes(p, "", 0);
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "empty file");

    p = tmp_path("bad_magic.npy");
    g[1] = 'X';
    write_bytes(p, g, n);
    g[1] = 'N';
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, "magic", "bad magic");

    p = tmp_path("bad_version.npy");
    g[6] = 9;
    write_bytes(p, g, n);
    g[6] = 1;
    CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_UNSUPPORTED, p, "version 9.0");

    /* Header edits keep the length: each replacement has the same number of characters. */
    struct {
        const char *from, *to;
        cattr_status want;
        const char *what;
    } edits[] = {
        {"{'descr'", "['descr'", CATTR_ERR_FORMAT, "header not a dict"},
        {"'shape': (2, 3)", "'shape': (2,-3)", CATTR_ERR_FORMAT, "negative dimension"},
        {"'shape': (2, 3)", "'shape': [2, 3]", CATTR_ERR_FORMAT, "shape as a list"},
        {"'shape'", "'shapX'", CATTR_ERR_FORMAT, "unknown key / missing shape"},
        {"False", "Fals?", CATTR_ERR_FORMAT, "bad bool"},
        {"'<f4'", "'<c8'", CATTR_ERR_UNSUPPORTED, "complex dtype"},
        {"'<f4'", "'>f4'", CATTR_ERR_UNSUPPORTED, "big-endian dtype"},
        {"'<f4'", "'<f4 ", CATTR_ERR_FORMAT, "unterminated string"},
        {"'shape': (2, 3)", "'shape': (2, 4)", CATTR_ERR_FORMAT, "shape larger than the data"},
        {"'shape': (2, 3), }", "'shape': (2, 3), }x", CATTR_ERR_FORMAT, "trailing garbage (overwrites a pad space)"},
    };
    for (size_t i = 0; i < CX_ARRAY_LEN(edits); i++) {
        char *copy = malloc(n);
        memcpy(copy, g, n);
        char *at = strstr(copy + 10, edits[i].from);
        if (!at) {
            CHECK(0, "edit '%s' not found in the fixture", edits[i].from);
            free(copy);
            continue;
        }
        memcpy(at, edits[i].to, strlen(edits[i].to));
        p = tmp_path("edited.npy");
        write_bytes(p, copy, n);
        CHECK_STATUS(cattr_tensor_load_npy(p, &t), edits[i].want, p, edits[i].what);
        free(copy);
    }
    /* An absurd shape must fail before any allocation is attempted. */
    {
        const char *hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
        char buf[128];
        memset(buf, ' ', sizeof buf);
        memcpy(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
        memcpy(buf + 10, hdr, strlen(hdr));
        buf[127] = '\n';
        p = tmp_path("absurd.npy");
        write_bytes(p, buf, sizeof buf);
        CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "absurd shape");
        const char *hdr2 = "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }";
        memset(buf + 10, ' ', 117);
        memcpy(buf + 10, hdr2, strlen(hdr2));
        write_bytes(p, buf, sizeof buf);
        CHECK_STATUS(cattr_tensor_load_npy(p, &t), CATTR_ERR_FORMAT, p, "dimension overflowing int64");
    }
    free(good);

    CHECK_STATUS(cattr_tensor_load_npy("tests/data/io/fortran_f4.npy", &t), CATTR_ERR_UNSUPPORTED, "fortran_f4.npy",
                 "Fortran order");
    CHECK_STATUS(cattr_tensor_load_npy("tests/data/io/be_f8.npy", &t), CATTR_ERR_UNSUPPORTED, "be_f8.npy",
                 "big-endian fixture");
    CHECK_STATUS(cattr_tensor_load_npy(g_dir, &t), CATTR_ERR_IO, g_dir, "directory instead of a file");
    CHECK(t == NULL, "out not cleared on failure");

    /* Saving into a directory that does not exist fails cleanly, naming the path. */
    cattr_tensor *s = NULL;
    cattr_tensor_new(CATTR_FLOAT32, 0, NULL, &s);
    p = tmp_path("no_such_dir/x.npy");
    CHECK_STATUS(cattr_tensor_save_npy(s, p), CATTR_ERR_IO, p, "save into a missing directory");
    CHECK_STATUS(cattr_tensor_save_npy(NULL, p), CATTR_ERR_INVALID_ARGUMENT, NULL, "save NULL tensor");
    cattr_tensor_free(s);
}

/* ==== atomic writer ======================================================================================== */

static cattr_status writer_ok(FILE *f, void *ctx) {
    fputs((const char *)ctx, f);
    return CATTR_OK;
}

static cattr_status writer_fails(FILE *f, void *ctx) {
    fputs("partial", f);
    return cx_fail(CATTR_ERR_IO, "simulated failure");
}

static void test_atomic_write(void) {
    char pbuf[512];
    snprintf(pbuf, sizeof pbuf, "%s", tmp_path("atomic.txt"));
    const char *p = pbuf;
    CHECK_STATUS(cx_write_file_atomic(p, writer_ok, "first"), CATTR_OK, NULL, "atomic write");
    CHECK_STATUS(cx_write_file_atomic(p, writer_fails, NULL), CATTR_ERR_IO, p, "failing writer");
    CHECK(strstr(cattr_last_error(), "simulated failure"), "writer message lost: %s", cattr_last_error());
    void *data = NULL;
    size_t n = 0;
    CHECK_STATUS(cx_read_file(p, &data, &n), CATTR_OK, NULL, "read back");
    CHECK(data && n == 5 && memcmp(data, "first", 5) == 0 && ((char *)data)[5] == '\0',
          "a failed write changed the file or the read is not NUL-terminated");
    free(data);
    CHECK_STATUS(cx_write_file_atomic(p, writer_ok, "second!"), CATTR_OK, NULL, "atomic overwrite");
    CHECK_STATUS(cx_read_file(p, &data, &n), CATTR_OK, NULL, "read back");
    CHECK(data && n == 7 && memcmp(data, "second!", 7) == 0, "overwrite did not replace the content");
    free(data);
    CHECK(count_temporaries() == 0, "temporaries left after a failed write");
    const char *missing = tmp_path("missing.txt");
    CHECK_STATUS(cx_read_file(missing, &data, &n), CATTR_ERR_IO, missing, "cx_read_file on a missing file");
    CHECK(strstr(cattr_last_error(), "No such file"), "no strerror in: %s", cattr_last_error());
    CHECK(data == NULL && n == 0, "outputs not cleared");

    /* what is at the output's path decides how it is written: a link to a file, a folder are refused (the link's target
     * untouched), a device or FIFO is written in place (a FIFO nobody reads is an error, not a hang) */
    CHECK(symlink(p, tmp_path("link.txt")) == 0, "symlink");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("link.txt"), writer_ok, "third"), CATTR_ERR_IO, "symbolic link",
                 "a link to a file");
    CHECK_STATUS(cx_read_file(p, &data, &n), CATTR_OK, NULL, "read back");
    CHECK(data && n == 7 && memcmp(data, "second!", 7) == 0, "a write through a link changed its target");
    free(data);
    struct stat lsb;
    CHECK(lstat(tmp_path("link.txt"), &lsb) == 0 && S_ISLNK(lsb.st_mode), "the link was replaced");
    CHECK(mkdir(tmp_path("adir.txt"), 0755) == 0, "mkdir");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("adir.txt"), writer_ok, "x"), CATTR_ERR_IO, "directory", "a folder");
    CHECK_STATUS(cx_write_file_atomic("/dev/null", writer_ok, "to the null device"), CATTR_OK, NULL, "/dev/null");
    CHECK(lstat("/dev/null", &lsb) == 0 && S_ISCHR(lsb.st_mode), "/dev/null is no longer a device");
    CHECK(mkfifo(tmp_path("fifo.txt"), 0600) == 0, "mkfifo");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("fifo.txt"), writer_ok, "x"), CATTR_ERR_IO, "no process is reading",
                 "a FIFO without a reader");
    CHECK(symlink("/dev/null", tmp_path("devlink.txt")) == 0, "symlink");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("devlink.txt"), writer_ok, "x"), CATTR_OK, NULL, "a link to a device");
    CHECK(lstat(tmp_path("devlink.txt"), &lsb) == 0 && S_ISLNK(lsb.st_mode), "a link to a device was replaced");
    cx_dest kind;
    CHECK_STATUS(cx_output_kind(tmp_path("none.txt"), &kind), CATTR_OK, NULL, "a new file");
    CHECK(kind == CX_DEST_NEW, "a missing path is not new");
    CHECK_STATUS(cx_output_kind(p, &kind), CATTR_OK, NULL, "a file");
    CHECK(kind == CX_DEST_FILE, "a regular file is not a file");
    CHECK(count_temporaries() == 0, "temporaries left");

    /* outputs written in place: created, never through a link, locked against a second writer */
    int fd = -1, fd2 = -1;
    bool created = false;
    CHECK_STATUS(cx_open_locked(tmp_path("locked.txt"), false, &fd, &created), CATTR_ERR_IO, "locked.txt",
                 "absent and not created");
    CHECK_STATUS(cx_open_locked(tmp_path("locked.txt"), true, &fd, &created), CATTR_OK, NULL, "create");
    CHECK(created && fd >= 0, "not created");
    CHECK_STATUS(cx_open_locked(tmp_path("locked.txt"), true, &fd2, &created), CATTR_ERR_IO,
                 "another process is writing", "a second writer");
    CHECK(fd2 == -1, "a refused open left a descriptor");
    if (fd >= 0) close(fd);
    CHECK_STATUS(cx_open_locked(tmp_path("locked.txt"), true, &fd, &created), CATTR_OK, NULL, "reopen after close");
    CHECK(!created, "an existing file was created");
    if (fd >= 0) close(fd);
    CHECK_STATUS(cx_open_locked(tmp_path("link.txt"), true, &fd, &created), CATTR_ERR_IO, "symbolic link", "a link");
    CHECK_STATUS(cx_open_locked(tmp_path("fifo.txt"), true, &fd, &created), CATTR_ERR_IO, "not a regular file", "a FIFO");

    /* fingerprints: the same content the same, a change anywhere in a small file seen; large files sampled */
    uint64_t f1 = 0, f2 = 0, f3 = 0;
    CHECK_STATUS(cx_file_fingerprint(p, false, &f1), CATTR_OK, NULL, "fingerprint");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("copy.txt"), writer_ok, "second!"), CATTR_OK, NULL, "copy");
    CHECK_STATUS(cx_file_fingerprint(tmp_path("copy.txt"), true, &f2), CATTR_OK, NULL, "fingerprint");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("copy.txt"), writer_ok, "second?"), CATTR_OK, NULL, "change");
    CHECK_STATUS(cx_file_fingerprint(tmp_path("copy.txt"), true, &f3), CATTR_OK, NULL, "fingerprint");
    CHECK(f1 == f2 && f2 != f3, "fingerprints: same content %016llx %016llx, changed %016llx", (unsigned long long)f1,
          (unsigned long long)f2, (unsigned long long)f3);
    CHECK_STATUS(cx_file_fingerprint(tmp_path("none.txt"), false, &f1), CATTR_ERR_IO, "none.txt", "a missing file");
    {
        const char *big = tmp_path("big.bin");
        FILE *bf = fopen(big, "wb");
        size_t sz = (size_t)70 << 20;
        char *buf = calloc(1, sz);
        CHECK(bf && buf && fwrite(buf, 1, sz, bf) == sz, "write a large file");
        if (bf) fclose(bf);
        CHECK_STATUS(cx_file_fingerprint(big, false, &f1), CATTR_OK, NULL, "a large file");
        bf = fopen(big, "r+b"); /* a byte in the first MiB changed: seen */
        if (bf) {
            fseek(bf, 1000, SEEK_SET);
            fputc(1, bf);
            fclose(bf);
        }
        CHECK_STATUS(cx_file_fingerprint(big, false, &f2), CATTR_OK, NULL, "a large file");
        CHECK(f1 != f2, "a change in the first MiB of a large file is not seen");
        free(buf);
        unlink(big);
    }
    /* a folder: its .json and .safetensors files */
    CHECK(mkdir(tmp_path("ckpt"), 0755) == 0, "mkdir");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("ckpt/config.json"), writer_ok, "{}"), CATTR_OK, NULL, "config");
    CHECK_STATUS(cx_file_fingerprint(tmp_path("ckpt"), false, &f1), CATTR_OK, NULL, "a folder");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("ckpt/README.md"), writer_ok, "notes"), CATTR_OK, NULL, "readme");
    CHECK_STATUS(cx_file_fingerprint(tmp_path("ckpt"), false, &f2), CATTR_OK, NULL, "a folder");
    CHECK_STATUS(cx_write_file_atomic(tmp_path("ckpt/config.json"), writer_ok, "{\"a\":1}"), CATTR_OK, NULL, "config");
    CHECK_STATUS(cx_file_fingerprint(tmp_path("ckpt"), false, &f3), CATTR_OK, NULL, "a folder");
    CHECK(f1 == f2 && f2 != f3, "folder fingerprints: other files must not count, config.json must");
    unlink(tmp_path("ckpt/config.json"));
    unlink(tmp_path("ckpt/README.md"));
    rmdir(tmp_path("ckpt"));
    rmdir(tmp_path("adir.txt"));
}

/* ==== safetensors ========================================================================================== */

static void test_safetensors_roundtrip(void) {
    cattr_tensor_set *s = NULL;
    CHECK_STATUS(cattr_tensor_set_new(&s), CATTR_OK, NULL, "set_new");
    if (!s) return;
    const int64_t s23[2] = {2, 3}, s03[2] = {0, 3}, s3[1] = {3};
    const float f[6] = {1, -2, 3.5f, 0, 1e-20f, -7};
    const double d = 2.75;
    const int64_t iv[3] = {-9, 0, INT64_MAX};
    cattr_tensor *a = NULL, *b = NULL, *c = NULL, *e = NULL;
    cattr_tensor_from_data(CATTR_FLOAT32, 2, s23, f, &a);
    cattr_tensor_from_data(CATTR_FLOAT64, 0, NULL, &d, &b);
    cattr_tensor_from_data(CATTR_INT64, 1, s3, iv, &c);
    cattr_tensor_new(CATTR_FLOAT64, 2, s03, &e);
    {   /* sizes whose bytes overflow are refused, not allocated short */
        const int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 30}, h1[1] = {((int64_t)1 << 61) - 1};
        cattr_tensor *x = NULL;
        CHECK_STATUS(cattr_tensor_new(CATTR_FLOAT64, 2, huge, &x), CATTR_ERR_NO_MEMORY, "too large", "huge tensor");
        CHECK(x == NULL, "a refused tensor must leave *out NULL");
        CHECK_STATUS(cattr_tensor_new(CATTR_FLOAT64, 1, h1, &x), CATTR_ERR_NO_MEMORY, "too large", "2^61 doubles");
    }
    /* insertion order deliberately not alphabetical */
    const char *names[4] = {"z.weights", "m.scalar", "a.ints", "\"quoted\\name\""};
    cattr_tensor *ts[4] = {a, b, c, e};
    CHECK_STATUS(cattr_tensor_set_add(s, names[0], c), CATTR_OK, NULL, "add");
    for (int i = 0; i < 4; i++) CHECK_STATUS(cattr_tensor_set_add(s, names[i], ts[i]), CATTR_OK, NULL, "add");
    CHECK(cattr_tensor_set_count(s) == 4, "replacing a name must not add an entry (count %d)", cattr_tensor_set_count(s));
    CHECK(cattr_tensor_set_get(s, "nope") == NULL && cattr_tensor_set_name(s, 4) == NULL &&
              cattr_tensor_set_name(s, -1) == NULL,
          "absent lookups must return NULL");
    CHECK_STATUS(cattr_tensor_set_add(s, "__metadata__", a), CATTR_ERR_INVALID_ARGUMENT, NULL, "reserved name");
    const char *p = tmp_path("rt.safetensors");
    CHECK_STATUS(cattr_tensor_set_save(s, p), CATTR_OK, NULL, "set_save");
    cattr_tensor_set *r = NULL;
    CHECK_STATUS(cattr_tensor_set_load(p, &r), CATTR_OK, NULL, "set_load");
    if (r) {
        CHECK(cattr_tensor_set_count(r) == 4, "count after load %d", cattr_tensor_set_count(r));
        for (int i = 0; i < 4 && i < cattr_tensor_set_count(r); i++) {
            const char *nm = cattr_tensor_set_name(r, i);
            CHECK(nm && strcmp(nm, names[i]) == 0, "tensor %d is '%s', want '%s'", i, nm ? nm : "(null)", names[i]);
            const cattr_tensor *got = cattr_tensor_set_get(r, names[i]);
            CHECK(got && tensors_equal(got, ts[i]), "tensor '%s' changed in the round trip", names[i]);
        }
    }
    /* header length is a multiple of 8 */
    void *raw = NULL;
    size_t n = 0;
    if (cx_read_file(p, &raw, &n) == CATTR_OK && n >= 8) {
        const unsigned char *u = raw;
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | u[i];
        CHECK(hl % 8 == 0 && 8 + hl + 24 + 8 + 24 + 0 == n, "header length %llu, file %zu", (unsigned long long)hl, n);
    }
    free(raw);
    /* an empty set round-trips too */
    cattr_tensor_set *empty = NULL, *empty_back = NULL;
    cattr_tensor_set_new(&empty);
    CHECK_STATUS(cattr_tensor_set_save(empty, tmp_path("empty.safetensors")), CATTR_OK, NULL, "save empty set");
    CHECK_STATUS(cattr_tensor_set_load(tmp_path("empty.safetensors"), &empty_back), CATTR_OK, NULL, "load empty set");
    CHECK(empty_back && cattr_tensor_set_count(empty_back) == 0, "empty set not empty");
    CHECK_STATUS(cattr_tensor_set_save(s, tmp_path("no_such_dir/x.safetensors")), CATTR_ERR_IO, "no_such_dir",
                 "save into a missing directory");
    CHECK(count_temporaries() == 0, "temporaries left after saving");
    cattr_tensor_set_free(empty);
    cattr_tensor_set_free(empty_back);
    cattr_tensor_set_free(r);
    cattr_tensor_set_free(s);
    for (int i = 0; i < 4; i++) cattr_tensor_free(ts[i]);
    cattr_tensor_set_free(NULL);
}

static void test_safetensors_converted(void) {
    cattr_tensor_set *s = NULL;
    CHECK_STATUS(cattr_tensor_set_load("tests/data/io/mixed.safetensors", &s), CATTR_OK, NULL, "mixed.safetensors");
    if (!s) return;
    const char *order[] = {"zeta.f16", "alpha.bf16", "mid.i32", "mid.u8", "mid.bool", "beta.f32", "empty.f64"};
    CHECK(cattr_tensor_set_count(s) == 7, "count %d (metadata must be skipped)", cattr_tensor_set_count(s));
    for (int i = 0; i < 7 && i < cattr_tensor_set_count(s); i++)
        CHECK(strcmp(cattr_tensor_set_name(s, i), order[i]) == 0, "file order: %d is %s", i, cattr_tensor_set_name(s, i));
    const cattr_tensor *t;
    if ((t = cattr_tensor_set_get(s, "zeta.f16"))) {
        const float *v = t->data;
        CHECK(t->dtype == CATTR_FLOAT32 && t->numel == 3 && v[0] == 1.0f && v[1] == -2.5f && v[2] == ldexpf(1, -24),
              "F16 conversion");
    }
    if ((t = cattr_tensor_set_get(s, "alpha.bf16"))) {
        const float *v = t->data;
        CHECK(t->dtype == CATTR_FLOAT32 && t->numel == 3 && v[0] == 1.0f && v[1] == -3.0f && v[2] == 0.15625f,
              "BF16 conversion");
    }
    if ((t = cattr_tensor_set_get(s, "mid.i32"))) {
        const int64_t *v = t->data;
        CHECK(t->dtype == CATTR_INT64 && t->ndim == 2 && t->shape[0] == 1 && t->shape[1] == 2 && v[0] == -7 && v[1] == 8,
              "I32 conversion");
    }
    if ((t = cattr_tensor_set_get(s, "mid.u8"))) {
        const int64_t *v = t->data;
        CHECK(t->dtype == CATTR_INT64 && v[0] == 200 && v[1] == 3, "U8 conversion");
    }
    if ((t = cattr_tensor_set_get(s, "mid.bool"))) {
        const int64_t *v = t->data;
        CHECK(t->dtype == CATTR_INT64 && v[0] == 1 && v[1] == 0, "BOOL conversion");
    }
    if ((t = cattr_tensor_set_get(s, "beta.f32")))
        CHECK(t->dtype == CATTR_FLOAT32 && t->ndim == 0 && ((float *)t->data)[0] == 2.5f, "0-d F32");
    if ((t = cattr_tensor_set_get(s, "empty.f64")))
        CHECK(t->dtype == CATTR_FLOAT64 && t->ndim == 2 && t->numel == 0, "empty F64");
    for (int i = 0; i < 7; i++) CHECK(cattr_tensor_set_get(s, order[i]) != NULL, "missing %s", order[i]);
    cattr_tensor_set_free(s);
}

/* Writes a safetensors file with the given header text, `ndata` zero data bytes, and a declared header length
 * (UINT64_MAX: the true length). */
static const char *write_st(const char *name, const char *json, size_t ndata, uint64_t declared) {
    size_t hl = strlen(json);
    uint64_t n = declared == UINT64_MAX ? hl : declared;
    unsigned char *buf = calloc(1, 8 + hl + ndata);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, json, hl);
    const char *p = tmp_path(name);
    write_bytes(p, buf, 8 + hl + ndata);
    free(buf);
    return p;
}

static void test_safetensors_hostile(void) {
    struct {
        const char *json;
        size_t ndata;
        uint64_t declared;
        cattr_status want;
        const char *what;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, UINT64_MAX, CATTR_ERR_FORMAT,
         "offset past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1000, CATTR_ERR_FORMAT,
         "header length larger than the file"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "wrong byte count"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         UINT64_MAX, CATTR_ERR_FORMAT, "absurd shape (overflow)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "absurd shape (1e300)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "negative dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "fractional dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "begin > end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT,
         "one offset"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, UINT64_MAX, CATTR_ERR_FORMAT, "no offsets"},
        {"{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, UINT64_MAX, CATTR_ERR_UNSUPPORTED,
         "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, UINT64_MAX, CATTR_ERR_FORMAT, "duplicate name"},
        {"{\"a\":[1,2]}", 8, UINT64_MAX, CATTR_ERR_FORMAT, "entry not an object"},
        {"[1,2,3]", 8, UINT64_MAX, CATTR_ERR_FORMAT, "header not an object"},
        {"{\"a\":", 8, UINT64_MAX, CATTR_ERR_FORMAT, "invalid JSON"},
        {"{}  xx  ", 8, UINT64_MAX, CATTR_ERR_FORMAT, "garbage after the JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, UINT64_MAX, CATTR_ERR_FORMAT, "overlapping tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, UINT64_MAX, CATTR_ERR_FORMAT, "two tensors on the same bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 24, UINT64_MAX, CATTR_ERR_FORMAT,
         "bytes after the last tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]}}",
         24, UINT64_MAX, CATTR_ERR_FORMAT, "a gap of 16 bytes between tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
         16, UINT64_MAX, CATTR_OK, "4 zero bytes aligning the next tensor to 8 (the golden files' padding)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, UINT64_MAX, CATTR_OK,
         "4 zero bytes aligning the end to 8"},
        {"{}", 0, 2, CATTR_OK, "minimal valid file"},
        {"{\"__metadata__\":{\"k\":\"v\"}}", 0, UINT64_MAX, CATTR_OK, "metadata only"},
    };
    for (size_t i = 0; i < CX_ARRAY_LEN(cases); i++) {
        const char *p = write_st("hostile.safetensors", cases[i].json, cases[i].ndata, cases[i].declared);
        cattr_tensor_set *s = (cattr_tensor_set *)&s;
        CHECK_STATUS(cattr_tensor_set_load(p, &s), cases[i].want, cases[i].want == CATTR_OK ? NULL : p, cases[i].what);
        if (cases[i].want != CATTR_OK) CHECK(s == NULL, "%s: out not cleared", cases[i].what);
        if (cases[i].want == CATTR_OK) cattr_tensor_set_free(s);
    }
    /* shorter than the 8-byte length */
    const char *p = tmp_path("tiny.safetensors");
    write_bytes(p, "\x02\x00\x00", 3);
    cattr_tensor_set *s = NULL;
    CHECK_STATUS(cattr_tensor_set_load(p, &s), CATTR_ERR_FORMAT, p, "3-byte file");
    CHECK_STATUS(cattr_tensor_set_load(tmp_path("absent.safetensors"), &s), CATTR_ERR_IO, "absent.safetensors",
                 "missing file");
    /* a header length over 100 MB in a (sparse) file big enough to hold it */
    p = tmp_path("huge.safetensors");
    FILE *f = fopen(p, "wb");
    if (f) {
        uint64_t n = 150000000u;
        unsigned char pre[8];
        for (int i = 0; i < 8; i++) pre[i] = (unsigned char)(n >> (8 * i));
        fwrite(pre, 1, 8, f);
        fclose(f);
        if (truncate(p, (off_t)(8 + n + 8)) == 0)
            CHECK_STATUS(cattr_tensor_set_load(p, &s), CATTR_ERR_FORMAT, "100 MB", "header over 100 MB");
        unlink(p);
    }
}

/* Bytes of a padding gap that are not zero are data no tensor covers. */
static void test_safetensors_padding_bytes(void) {
    const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
    size_t hl = strlen(json);
    unsigned char buf[512] = {0};
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    buf[8 + hl + 5] = 0x7f;
    cattr_tensor_set *s = NULL;
    CHECK_STATUS(cx_tensor_set_parse(buf, 8 + hl + 16, "padded", &s), CATTR_ERR_FORMAT, "belong to no tensor",
                 "non-zero padding");
    buf[8 + hl + 5] = 0;
    CHECK_STATUS(cx_tensor_set_parse(buf, 8 + hl + 16, "padded", &s), CATTR_OK, NULL, "zero padding");
    cattr_tensor_set_free(s);
}

/* The undefined behaviour short fuzzing runs found (each is checked under UBSan in CI) and the checks that replaced
 * it: element counts with a 0 among huge sizes, .npy trailing bytes, config.json values out of range. */
static void test_fuzz_regressions(void) {
    int64_t z[3] = {INT64_C(1) << 62, 0, INT64_C(1) << 62}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    CHECK(cx_numel(3, z) == 0, "a 0 among huge sizes: numel %lld", (long long)cx_numel(3, z));
    CHECK(cx_numel(2, big) == -1, "an overflowing shape: numel %lld", (long long)cx_numel(2, big));
    /* an .npy of shape (2^62, 0, 2^62): no data, 0 elements */
    char hdr[128];
    int hn = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, 0, %lld), }",
                      (long long)z[0], (long long)z[2]);
    unsigned char npy[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    int pad = (64 - (10 + hn + 1) % 64) % 64;
    memcpy(npy + 10, hdr, (size_t)hn);
    memset(npy + 10 + hn, ' ', (size_t)pad);
    npy[10 + hn + pad] = '\n';
    int hl = hn + pad + 1;
    npy[8] = (unsigned char)hl;
    npy[9] = (unsigned char)(hl >> 8);
    cattr_tensor *t = NULL;
    CHECK_STATUS(cx_npy_parse(npy, (size_t)(10 + hl), "zero-dim.npy", &t), CATTR_OK, NULL, "0 among huge dims");
    CHECK(t && cattr_tensor_numel(t) == 0, "0 among huge dims: numel");
    cattr_tensor_free(t);
    /* the same with 4 bytes after the (empty) data */
    CHECK_STATUS(cx_npy_parse(npy, (size_t)(10 + hl + 4), "trailing.npy", &t), CATTR_ERR_FORMAT, "4 bytes after the data",
                 "trailing bytes");
    /* config.json */
    static const struct {
        const char *kv, *needle;
    } bad[] = {{"\"vocab_size\": 3.2e49", "vocab_size"},      {"\"vocab_size\": -3", "vocab_size"},
               {"\"vocab_size\": 2.5", "vocab_size"},        {"\"rms_norm_eps\": 0", "rms_norm_eps"},
               {"\"rms_norm_eps\": -1e-6", "rms_norm_eps"},   {"\"rms_norm_eps\": 1e999", "rms_norm_eps"},
               {"\"rope_theta\": 0", "rope_theta"},           {"\"rope_theta\": -1", "rope_theta"},
               {"\"num_hidden_layers\": 1e30", "num_hidden_layers"}, {"\"head_dim\": 3", "head_dim"},
               {"\"num_key_value_heads\": 3", "kv heads"},
               {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0}", "factor"},
               {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 4, \"high_freq_factor\": 4}",
                "high_freq_factor"},
               {"\"eos_token_id\": \"x\"", "eos_token_id"},
               /* finite, positive values whose rotary frequencies are not (a review found them) */
               {"\"rope_theta\": 1e-310, \"head_dim\": 65536", "rotary frequency"},
               {"\"rope_theta\": 1e300, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e300}",
                "rotary frequency"}};
    for (size_t i = 0; i <= CX_ARRAY_LEN(bad); i++) {
        char json[1024];
        /* the bad key first: cJSON finds the first of two equal keys */
        snprintf(json, sizeof json, "{%s%s\"model_type\": \"qwen3\", \"hidden_size\": 8, \"intermediate_size\": 12, "
                 "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4, "
                 "\"vocab_size\": 16}", i < CX_ARRAY_LEN(bad) ? bad[i].kv : "", i < CX_ARRAY_LEN(bad) ? ", " : "");
        cx_hf_config cfg;
        cattr_status st = cx_hf_config_parse(json, strlen(json), "config.json", &cfg);
        if (i == CX_ARRAY_LEN(bad)) CHECK_STATUS(st, CATTR_OK, NULL, "the valid config");
        else CHECK_STATUS(st, CATTR_ERR_FORMAT, bad[i].needle, bad[i].kv);
    }
    /* a tokenizer.json naming an id far beyond its tokens (it cost a 16 GiB table) */
    const char *tj = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2147483646}, \"merges\": []}}";
    cx_tokenizer *tok = NULL;
    CHECK_STATUS(cx_tokenizer_load_json(tj, strlen(tj), "tokenizer.json", &tok), CATTR_ERR_FORMAT, "far beyond",
                 "huge token id");
    cx_tokenizer_free(tok);
    cx_hf_config cfg;
    const char *lists = "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 12, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 16, "
                        "\"eos_token_id\": [12, 13, 14]}";
    CHECK_STATUS(cx_hf_config_parse(lists, strlen(lists), "config.json", &cfg), CATTR_OK, NULL, "eos_token_id list");
    CHECK(cfg.eos_token_id == 12, "the first of an eos_token_id list: %lld", (long long)cfg.eos_token_id);
}

static void test_golden(void) {
    const char *root = getenv("CATTR_GOLDEN");
    if (!root || !*root) root = "../shared/golden";
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("SKIP golden checks: %s is not a directory (set CATTR_GOLDEN)\n", root);
        return;
    }
    char p[1024];
    /* The number of points is the case's attribute_args.n_steps (20 for this case; Captum's default is 50). */
    int n_steps = 50;
    snprintf(p, sizeof p, "%s/captum/custom_cnn__IntegratedGradients_gausslegendre/case.json", root);
    void *text = NULL;
    size_t tn = 0;
    CHECK_STATUS(cx_read_file(p, &text, &tn), CATTR_OK, NULL, "golden case.json");
    cJSON *cj = text ? cJSON_ParseWithLength(text, tn) : NULL;
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cj, "attribute_args"), "n_steps");
    if (cJSON_IsNumber(ns)) n_steps = ns->valueint;
    cJSON_Delete(cj);
    free(text);

    snprintf(p, sizeof p, "%s/captum/custom_cnn__IntegratedGradients_gausslegendre/tensors.safetensors", root);
    cattr_tensor_set *s = NULL;
    CHECK_STATUS(cattr_tensor_set_load(p, &s), CATTR_OK, NULL, "golden tensors.safetensors");
    if (s) {
        const cattr_tensor *a = cattr_tensor_set_get(s, "quad.alphas");
        CHECK(a && a->dtype == CATTR_FLOAT64 && a->ndim == 1 && a->shape[0] == n_steps, "quad.alphas is not F64 [%d]",
              n_steps);
        if (a && a->dtype == CATTR_FLOAT64 && a->numel == n_steps) {
            const double *v = a->data;
            for (int i = 0; i < n_steps; i++)
                CHECK(v[i] > 0 && v[i] < 1, "quad.alphas[%d] = %g outside (0, 1)", i, v[i]);
        }
        const char *order[3] = {"input.0", "baseline.0", "target"};
        for (int i = 0; i < 3; i++)
            CHECK(cattr_tensor_set_name(s, i) && strcmp(cattr_tensor_set_name(s, i), order[i]) == 0,
                  "golden tensor %d is %s, want %s (file order)", i, cattr_tensor_set_name(s, i), order[i]);
        CHECK(cattr_tensor_set_count(s) > 1, "golden file holds %d tensors", cattr_tensor_set_count(s));
    }
    cattr_tensor_set_free(s);
    /* a BF16 model file, when present */
    snprintf(p, sizeof p, "%s/llm/qwen3-tiny/model.safetensors", root);
    if (stat(p, &st) == 0) {
        s = NULL;
        CHECK_STATUS(cattr_tensor_set_load(p, &s), CATTR_OK, NULL, "qwen3-tiny model.safetensors (BF16)");
        for (int i = 0; s && i < cattr_tensor_set_count(s); i++) {
            const cattr_tensor *t = cattr_tensor_set_get(s, cattr_tensor_set_name(s, i));
            CHECK(t && t->dtype == CATTR_FLOAT32, "BF16 tensor %s not loaded as float32", cattr_tensor_set_name(s, i));
            for (int64_t k = 0; t && k < t->numel; k++)
                if (!isfinite(((const float *)t->data)[k])) {
                    CHECK(0, "non-finite weight in %s", cattr_tensor_set_name(s, i));
                    break;
                }
        }
        cattr_tensor_set_free(s);
    } else {
        printf("SKIP BF16 model check: %s is absent\n", p);
    }
}

/* ==== rows: read and written a batch at a time ============================================================== */

static void test_rows(void) {
    /* a [7, 2, 3] float32 tensor and a [7] int64 one, saved whole; read back in batches of 3 */
    int64_t sa[3] = {7, 2, 3}, sb[1] = {7};
    cattr_tensor *a = cx_tensor_alloc(CATTR_FLOAT32, 3, sa), *b = cx_tensor_alloc(CATTR_INT64, 1, sb);
    if (!a || !b) {
        CHECK(0, "out of memory");
        return;
    }
    for (int64_t k = 0; k < a->numel; k++) ((float *)a->data)[k] = (float)k * 0.5f - 3;
    for (int64_t k = 0; k < b->numel; k++) ((int64_t *)b->data)[k] = 100 - k;
    cattr_tensor_set *set = NULL;
    CHECK(cattr_tensor_set_new(&set) == CATTR_OK && cattr_tensor_set_add(set, "a", a) == CATTR_OK &&
              cattr_tensor_set_add(set, "b", b) == CATTR_OK,
          "set");
    CHECK(cattr_tensor_save_npy(a, tmp_path("whole_a.npy")) == CATTR_OK, "save npy");
    CHECK(cattr_tensor_set_save(set, tmp_path("whole.safetensors")) == CATTR_OK, "save safetensors");
    const char *specs[3] = {tmp_path("whole_a.npy"), NULL, NULL};
    char sp1[600], sp2[600];
    snprintf(sp1, sizeof sp1, "%s:a", tmp_path("whole.safetensors"));
    snprintf(sp2, sizeof sp2, "%s:b", tmp_path("whole.safetensors"));
    specs[1] = sp1;
    specs[2] = sp2;
    for (int f = 0; f < 3; f++) {
        const cattr_tensor *want = f < 2 ? a : b;
        cx_rows_reader r;
        CHECK_STATUS(cx_rows_open(specs[f], &r), CATTR_OK, NULL, specs[f]);
        CHECK(r.ndim == want->ndim && r.shape[0] == 7, "%s: shape", specs[f]);
        size_t row = (size_t)(want->numel / 7) * cattr_dtype_size(want->dtype);
        for (int64_t b0 = 0; b0 < 7 && r.ndim; b0 += 3) {
            int64_t b1 = b0 + 3 < 7 ? b0 + 3 : 7;
            cattr_tensor *t = NULL;
            CHECK_STATUS(cx_rows_read(&r, b0, b1, &t), CATTR_OK, NULL, "read rows");
            CHECK(t && t->dtype == want->dtype && t->shape[0] == b1 - b0 &&
                      memcmp(t->data, (const char *)want->data + (size_t)b0 * row, (size_t)(b1 - b0) * row) == 0,
                  "%s: rows %lld to %lld", specs[f], (long long)b0, (long long)b1);
            cattr_tensor_free(t);
        }
        cattr_tensor *t = NULL;
        CHECK_STATUS(cx_rows_read(&r, 5, 8, &t), CATTR_ERR_INVALID_ARGUMENT, "rows 5 to 8 of 7", "rows past the end");
        cx_rows_close(&r);
    }
    cx_rows_reader r;
    CHECK_STATUS(cx_rows_open(tmp_path("whole.safetensors"), &r), CATTR_ERR_INVALID_ARGUMENT, "name one", "two tensors");
    snprintf(sp1, sizeof sp1, "%s:c", tmp_path("whole.safetensors"));
    CHECK_STATUS(cx_rows_open(sp1, &r), CATTR_ERR_INVALID_ARGUMENT, "no tensor named 'c'", "a missing tensor");
    CHECK_STATUS(cx_rows_open(tmp_path("missing.npy"), &r), CATTR_ERR_IO, "missing.npy", "a missing file");
    cattr_tensor *sc = cx_tensor_alloc(CATTR_FLOAT32, 0, NULL);
    CHECK(sc && cattr_tensor_save_npy(sc, tmp_path("scalar.npy")) == CATTR_OK, "save a scalar");
    CHECK_STATUS(cx_rows_open(tmp_path("scalar.npy"), &r), CATTR_ERR_INVALID_ARGUMENT, "scalar", "a scalar has no rows");
    cattr_tensor_free(sc);

    /* written in batches, out of order, the files equal the whole-tensor saves byte for byte */
    const char *names[2] = {"a", "b"};
    cattr_dtype dt[2] = {CATTR_FLOAT32, CATTR_INT64};
    int nd[2] = {3, 1};
    int64_t shp[2][CATTR_MAX_DIMS] = {{7, 2, 3}, {7}};
    for (int npy = 0; npy < 2; npy++) {
        const char *out = tmp_path(npy ? "rows.npy" : "rows.safetensors");
        cx_rows_writer *w = NULL;
        int fd = -1;
        bool created = false;
        CHECK_STATUS(cx_rows_part_open(out, &fd, &created), CATTR_OK, NULL, "open the part file");
        CHECK(created, "a new part file is created");
        CHECK_STATUS(cx_rows_writer_open(out, fd, npy ? 1 : 2, names, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])shp,
                                         false, &w),
                     CATTR_OK, NULL, "open a writer");
        int64_t order[3] = {6, 3, 0};
        for (int q = 0; q < 3 && w; q++) {
            int64_t b0 = order[q], b1 = b0 + 3 < 7 ? b0 + 3 : 7;
            for (int i = 0; i < (npy ? 1 : 2); i++) {
                const cattr_tensor *src = i ? b : a;
                int64_t sh[CATTR_MAX_DIMS];
                memcpy(sh, src->shape, sizeof sh);
                sh[0] = b1 - b0;
                size_t row = (size_t)(src->numel / 7) * cattr_dtype_size(src->dtype);
                cattr_tensor *part = NULL;
                CHECK(cattr_tensor_from_data(src->dtype, src->ndim, sh, (const char *)src->data + (size_t)b0 * row,
                                             &part) == CATTR_OK,
                      "rows");
                CHECK_STATUS(cx_rows_writer_put(w, i, b0, part), CATTR_OK, NULL, "put rows");
                cattr_tensor_free(part);
            }
            if (q == 1) { /* interrupted after two batches, then reopened: the rows written stay */
                CHECK_STATUS(cx_rows_writer_sync(w), CATTR_OK, NULL, "sync");
                int fd2 = -1;
                CHECK_STATUS(cx_rows_part_open(out, &fd2, &created), CATTR_ERR_IO, "another process is writing",
                             "a second writer while the first holds the lock");
                cx_rows_writer_free(w);
                w = NULL;
                CHECK(access(out, F_OK) != 0, "%s exists before it is finished", out);
                CHECK_STATUS(cx_rows_part_open(out, &fd, &created), CATTR_OK, NULL, "reopen the part file");
                CHECK(!created, "the part file is reopened, not made anew");
                CHECK_STATUS(cx_rows_writer_open(out, fd, npy ? 1 : 2, names, dt, nd,
                                                 (const int64_t(*)[CATTR_MAX_DIMS])shp, true, &w),
                             CATTR_OK, NULL, "resume");
            }
        }
        cattr_tensor *bad = cx_tensor_alloc(CATTR_FLOAT64, 3, (int64_t[]){1, 2, 3});
        if (w && bad) CHECK_STATUS(cx_rows_writer_put(w, 0, 0, bad), CATTR_ERR_INVALID_ARGUMENT, "wrong dtype", "dtype");
        cattr_tensor_free(bad);
        if (w) CHECK_STATUS(cx_rows_writer_finish(w), CATTR_OK, NULL, "finish");
        CHECK(files_equal(out, npy ? tmp_path("whole_a.npy") : tmp_path("whole.safetensors")),
              "%s differs from the whole-tensor save", out);
        char part[600];
        snprintf(part, sizeof part, "%s.part", out);
        CHECK(access(part, F_OK) != 0, "%s left behind", part);
    }
    /* another header: a part file is not resumed */
    cx_rows_writer *w = NULL;
    int fd = -1;
    bool created = false;
    CHECK_STATUS(cx_rows_part_open(tmp_path("re.npy"), &fd, &created), CATTR_OK, NULL, "open");
    CHECK_STATUS(cx_rows_writer_open(tmp_path("re.npy"), fd, 1, names, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])shp,
                                     false, &w), CATTR_OK, NULL, "open");
    cx_rows_writer_free(w);
    shp[0][1] = 5;
    CHECK_STATUS(cx_rows_part_open(tmp_path("re.npy"), &fd, &created), CATTR_OK, NULL, "reopen");
    CHECK_STATUS(cx_rows_writer_open(tmp_path("re.npy"), fd, 1, names, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])shp,
                                     true, &w), CATTR_ERR_IO, "does not hold the rows", "resume with another shape");
    unlink(tmp_path("re.npy.part"));
    /* a planted link or a folder at PATH.part is refused, and the link's target is untouched */
    CHECK(symlink(tmp_path("whole_a.npy"), tmp_path("ln.npy.part")) == 0, "symlink");
    CHECK_STATUS(cx_rows_part_open(tmp_path("ln.npy"), &fd, &created), CATTR_ERR_IO, "symbolic link", "a link");
    CHECK(mkdir(tmp_path("dir.npy.part"), 0755) == 0, "mkdir");
    CHECK_STATUS(cx_rows_part_open(tmp_path("dir.npy"), &fd, &created), CATTR_ERR_IO, "not a regular file", "a folder");
    rmdir(tmp_path("dir.npy.part"));
    CHECK_STATUS(cx_rows_part_open(tmp_path("x.json"), &fd, &created), CATTR_OK, NULL, "open");
    CHECK_STATUS(cx_rows_writer_open(tmp_path("x.json"), fd, 1, names, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])shp,
                                     false, &w), CATTR_ERR_INVALID_ARGUMENT, ".npy or .safetensors", "extension");
    unlink(tmp_path("x.json.part"));
    CHECK_STATUS(cx_rows_part_open(tmp_path("two.npy"), &fd, &created), CATTR_OK, NULL, "open");
    CHECK_STATUS(cx_rows_writer_open(tmp_path("two.npy"), fd, 2, names, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])shp,
                                     false, &w), CATTR_ERR_INVALID_ARGUMENT, "a .npy holds one", "two in an npy");
    unlink(tmp_path("two.npy.part"));
    cattr_tensor_set_free(set);
    cattr_tensor_free(a);
    cattr_tensor_free(b);
}

/* cx_tensor_first_nonfinite: the first NaN or infinity by flat index, in any block of the scan, both float dtypes */
static void test_first_nonfinite(void) {
    const int64_t n = 10001, at[] = {0, 1, 4095, 4096, 8191, 10000};
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int dt = 0; dt < 2; dt++) {
        cattr_dtype d = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
        cattr_tensor *t = cx_tensor_alloc(d, 1, &n);
        CHECK(t, "alloc");
        if (!t) return;
        for (int64_t k = 0; k < n; k++) cx_tensor_set(t, k, k % 7 ? 1e30 * (k % 3 - 1) : -0.0);
        CHECK(cx_tensor_first_nonfinite(t) == -1, "all finite (dtype %d)", (int)d);
        for (size_t i = 0; i < CX_ARRAY_LEN(at); i++)
            for (size_t j = 0; j < CX_ARRAY_LEN(bad); j++) {
                cx_tensor_set(t, at[i], bad[j]);
                if (i + 1 < CX_ARRAY_LEN(at)) cx_tensor_set(t, at[i + 1] + 1 < n ? at[i + 1] : n - 1, NAN);
                int64_t got = cx_tensor_first_nonfinite(t);
                CHECK(got == at[i], "dtype %d: %g at %lld found at %lld", (int)d, bad[j], (long long)at[i],
                      (long long)got);
                for (int64_t k = 0; k < n; k++) cx_tensor_set(t, k, k % 7 ? 1e30 * (k % 3 - 1) : -0.0);
            }
        cattr_tensor_free(t);
    }
    int64_t m = 3;
    cattr_tensor *ti = cx_tensor_alloc(CATTR_INT64, 1, &m);
    if (ti) {
        for (int64_t k = 0; k < m; k++) ((int64_t *)ti->data)[k] = INT64_MAX;
        CHECK(cx_tensor_first_nonfinite(ti) == -1, "int64 has no non-finite value");
        cattr_tensor_free(ti);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/cattr_test_io_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("FAIL: cannot create a temporary directory\n");
        return 1;
    }
    test_npy_roundtrip();
    test_npy_numpy_fixtures();
    test_npy_errors();
    test_atomic_write();
    test_safetensors_roundtrip();
    test_safetensors_converted();
    test_safetensors_hostile();
    test_safetensors_padding_bytes();
    test_fuzz_regressions();
    test_rows();
    test_first_nonfinite();
    test_golden();
    remove_dir();
    if (g_failures) {
        printf("test_io: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_io: all checks passed\n");
    return 0;
}
