/* memory.c - the memory available to this process (cgroup limits, /proc/meminfo, RLIMIT_AS) and a method's memory
 * budget from it (cx_memory_budget: max_memory, else a quarter of what is available). */
#include "attr/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

/* The first unsigned number of a small file (a /proc or cgroup file), or false (absent, unreadable, "max"). */
static bool read_u64_file(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long x = 0;
    int ok = fscanf(f, "%llu", &x) == 1;
    fclose(f);
    if (ok) *v = x;
    return ok;
}

/* The value of `key` (a line "key value") in a cgroup's memory.stat, or false. */
static bool read_stat_key(const char *path, const char *key, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    size_t kl = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long x;
        if (!strncmp(line, key, kl) && line[kl] == ' ' && sscanf(line + kl + 1, "%llu", &x) == 1) {
            *v = x;
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* RLIMIT_AS (ulimit -v) minus the process's virtual size now (/proc/self/statm), or SIZE_MAX without a limit. */
static size_t rlimit_room(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    uint64_t pages = 0;
    long psz = sysconf(_SC_PAGESIZE);
    if (!read_u64_file("/proc/self/statm", &pages) || psz <= 0) pages = 0;
    uint64_t vm = pages * (uint64_t)psz, lim = (uint64_t)rl.rlim_cur;
    uint64_t room = lim > vm ? lim - vm : 0;
    return room > SIZE_MAX ? SIZE_MAX : (size_t)room;
}

/* A cgroup's limit minus its usage (the reclaimable inactive page cache not counted as used), the smallest over the
 * cgroup and its ancestors: cgroup v2 (memory.max, memory.current, memory.stat's inactive_file) when v2 is true, else
 * v1 (memory.limit_in_bytes, memory.usage_in_bytes, memory.stat's total_inactive_file). `dir` is the cgroup's folder;
 * `root` the hierarchy's mount point, where the walk stops. SIZE_MAX when no level has a limit. */
static size_t cgroup_room(const char *root, const char *dir, bool v2) {
    char path[4300], cg[4200];
    snprintf(cg, sizeof cg, "%s", dir);
    size_t best = SIZE_MAX, rl = strlen(root);
    for (int depth = 0; depth < 64; depth++) {
        uint64_t lim, use, inactive = 0;
        snprintf(path, sizeof path, "%s/%s", cg, v2 ? "memory.max" : "memory.limit_in_bytes");
        /* v1 reports "no limit" as a page-rounded LONG_MAX; v2 as "max", which does not parse */
        if (read_u64_file(path, &lim) && lim < ((uint64_t)1 << 62)) {
            snprintf(path, sizeof path, "%s/%s", cg, v2 ? "memory.current" : "memory.usage_in_bytes");
            if (read_u64_file(path, &use)) {
                snprintf(path, sizeof path, "%s/memory.stat", cg);
                if (!read_stat_key(path, v2 ? "inactive_file" : "total_inactive_file", &inactive)) inactive = 0;
                use = use > inactive ? use - inactive : 0;
                uint64_t room = lim > use ? lim - use : 0;
                if (room < best) best = (size_t)room;
            }
        }
        if (strlen(cg) <= rl) break; /* the hierarchy's root */
        char *slash = strrchr(cg, '/');
        if (!slash || slash < cg + rl) break;
        *slash = '\0';
    }
    return best;
}

/* The memory cgroups of this process (/proc/self/cgroup: "0::/path" for v2, "N:...memory...:/path" for v1), each
 * one's room (cgroup_room); SIZE_MAX when there is none or no limit. */
static size_t cgroups_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return SIZE_MAX;
    size_t best = SIZE_MAX;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2) continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1, *rel = c2 + 1;
        bool v2 = !*ctrl, v1mem = false;
        for (const char *t = ctrl; *t && !v1mem;) { /* "memory" among the comma-separated controllers */
            size_t n = strcspn(t, ",");
            v1mem = n == 6 && !strncmp(t, "memory", 6);
            t += n + (t[n] == ',');
        }
        if (!v2 && !v1mem) continue;
        if (strcmp(rel, "/") == 0) rel = "";
        /* v2 at /sys/fs/cgroup (or /sys/fs/cgroup/unified in the hybrid layout), v1 at /sys/fs/cgroup/memory */
        static const char *const v2_roots[2] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (int r = 0; r < (v2 ? 2 : 1); r++) {
            const char *root = v2 ? v2_roots[r] : "/sys/fs/cgroup/memory";
            char dir[4200];
            snprintf(dir, sizeof dir, "%s%s", root, rel);
            size_t room = cgroup_room(root, dir, v2);
            if (room < best) best = room;
        }
    }
    fclose(f);
    return best;
}

size_t cx_avail_memory(void) {
    /* read at most every half second: small models call this per attribution and the queries read files */
    static _Atomic long long last_ns = -1;
    static _Atomic size_t last;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, prev = last_ns;
    if (prev >= 0 && now - prev < 500000000LL) return last;
    /* the least of: the free RAM, what `ulimit -v` leaves this process, and what its cgroups' limits leave */
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t v = pages <= 0 || psz <= 0 ? (size_t)1 << 30 : (size_t)pages * (size_t)psz;
    size_t r = rlimit_room();
    if (r < v) v = r;
    r = cgroups_room();
    if (r < v) v = r;
    last = v;
    last_ns = now;
    return v;
}

size_t cx_avail_memory_for_load(void) {
    uint64_t kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long long x;
        if (sscanf(line, "MemAvailable: %llu kB", &x) == 1) {
            kb = x;
            found = true;
        }
    }
    if (f) fclose(f);
    size_t v = found ? (size_t)kb * 1024 : cx_avail_memory();
    size_t r = rlimit_room();
    if (r < v) v = r;
    r = cgroups_room();
    return r < v ? r : v;
}

/* max_memory, else a quarter of what the explainer's device can still allocate: the host's memory (cx_avail_memory),
 * or a GPU's free memory (its backend's free_memory) where the device has memory of its own. */
size_t cx_memory_budget(const cattr_explainer *e) {
    if (e->p.max_memory) return e->p.max_memory;
    size_t dev = e->be && e->be->free_memory ? e->be->free_memory(e->be->ctx) : SIZE_MAX;
    return (dev != SIZE_MAX ? dev : cx_avail_memory()) / 4;
}
