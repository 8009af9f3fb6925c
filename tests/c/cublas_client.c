/* Loads libcublas_user.so (tests/c/cublas_user.c) RTLD_LOCAL from the directory in argv[1],
 * as Python loads an extension module, and runs its cuBLAS calls. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/libcublas_user.so", argc > 1 ? argv[1] : ".");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    int (*run)(void) = (int (*)(void))dlsym(lib, "run");
    return run ? run() : 3;
}
