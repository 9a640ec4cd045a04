// The CUDA backend's loader: finds libstoker-cuda.so (the search order is in backend.h and
// docs/operating.md), opens it with dlopen the first time a GPU is asked for, checks that it is
// a plugin of this build, and creates the backend through it. The trainer links no CUDA library,
// so `--version` or `--device cpu` never map cudart and cuBLAS (hundreds of MB). A plugin once
// opened stays open: the CUDA runtime does not support being unloaded.
#include "config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "stoker/error.h"

#ifndef STOKER_CUDA_PLUGIN_PATH
#error "config.h must define STOKER_CUDA_PLUGIN_PATH"
#endif

#define PLUGIN_FILE "libstoker-cuda.so"

static pthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static const stoker_cuda_plugin *plugin; // set once loaded; never unloaded

// The folder of the running executable, with a trailing '/', or "" when /proc cannot say.
static void
exe_dir(char *buf, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    buf[0] = '\0';
    if (n <= 0)
        return;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash == NULL)
        return;
    slash[1] = '\0';
    snprintf(buf, len, "%s", path);
}

// The candidates in order, at most 3; returns how many. from_env is set when the first (and
// then only) one is $STOKER_CUDA_PLUGIN.
static int
candidates(char paths[3][PATH_MAX + 32], bool *from_env)
{
    const char *env = getenv("STOKER_CUDA_PLUGIN");
    *from_env = env != NULL && env[0] != '\0';
    if (*from_env) {
        snprintf(paths[0], PATH_MAX + 32, "%s", env);
        return 1;
    }
    char dir[PATH_MAX];
    exe_dir(dir, sizeof(dir));
    int n = 0;
    if (dir[0] != '\0')
        snprintf(paths[n++], PATH_MAX + 32, "%s%s", dir, PLUGIN_FILE);
    snprintf(paths[n++], PATH_MAX + 32, "%s", STOKER_CUDA_PLUGIN_PATH);
    return n;
}

// Opens one candidate and checks it; STOKER_OK and *out, or an error with the reason in why.
static int
open_plugin(const char *path, const stoker_cuda_plugin **out, char *why, size_t why_len)
{
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *e = dlerror();
        return stoker_errorf(why, why_len, STOKER_DEVICE,
                             "cannot load the CUDA backend plugin %s: %s (the stoker-cuda package "
                             "depends on the CUDA runtime and cuBLAS it needs)",
                             path, e ? e : "unknown dlopen error");
    }
    const stoker_cuda_plugin *p = dlsym(handle, STOKER_CUDA_PLUGIN_SYMBOL);
    if (p == NULL) {
        dlclose(handle);
        return stoker_errorf(why, why_len, STOKER_DEVICE,
                             "%s is not a stoker CUDA backend plugin (no symbol %s)", path,
                             STOKER_CUDA_PLUGIN_SYMBOL);
    }
    if (p->abi != STOKER_CUDA_PLUGIN_ABI || p->backend_size != sizeof(backend) ||
        p->ops_size != sizeof(backend_ops) || p->version == NULL ||
        strcmp(p->version, STOKER_VERSION) != 0 || p->create == NULL) {
        char v[32];
        snprintf(v, sizeof(v), "%s", p->version ? p->version : "?");
        dlclose(handle);
        return stoker_errorf(why, why_len, STOKER_DEVICE,
                             "the CUDA backend plugin %s is of another build (version %s, ABI "
                             "%u); this stoker-trainer is %s, ABI %d: install the matching "
                             "stoker-cuda",
                             path, v, p->abi, STOKER_VERSION, STOKER_CUDA_PLUGIN_ABI);
    }
    *out = p;
    return STOKER_OK;
}

// Finds and opens the plugin once; later calls reuse it.
static int
load_plugin(char *why, size_t why_len)
{
    if (plugin != NULL)
        return STOKER_OK;
    char paths[3][PATH_MAX + 32];
    bool from_env;
    int n = candidates(paths, &from_env);
    for (int i = 0; i < n; i++) {
        // Only $STOKER_CUDA_PLUGIN is opened when missing: its error names the setting. The
        // other places are tried when something is there.
        if (!from_env && access(paths[i], F_OK) != 0)
            continue;
        int rv = open_plugin(paths[i], &plugin, why, why_len);
        if (rv != STOKER_OK && from_env && why_len > 0) {
            char reason[768];
            snprintf(reason, sizeof(reason), "%s", why);
            snprintf(why, why_len, "STOKER_CUDA_PLUGIN: %s", reason);
        }
        return rv;
    }
    return stoker_errorf(why, why_len, STOKER_DEVICE,
                         "no CUDA backend plugin: " PLUGIN_FILE " is neither beside this program "
                         "(%s) nor at %s, and STOKER_CUDA_PLUGIN is not set (install the "
                         "stoker-cuda package, or build with -Dcuda=enabled)",
                         n == 2 ? paths[0] : "unknown", STOKER_CUDA_PLUGIN_PATH);
}

int
backend_cuda_create(backend **out, char *why, size_t why_len)
{
    if (why_len > 0)
        why[0] = '\0';
    pthread_mutex_lock(&plugin_lock);
    int rv = load_plugin(why, why_len);
    pthread_mutex_unlock(&plugin_lock);
    if (rv != STOKER_OK)
        return rv;
    return plugin->create(out, why, why_len);
}
