"""`python -m ozaki_shim ARGS` and the `ozaki` console command: both replace this Python
process with the bundled `ozaki` binary, so its exit status, signals and stdin/stdout are
exactly those of a source build's `ozaki`.

The one thing added on the way is where pip installed the `cu13` extra's CUDA libraries:
their directories are appended to `OZAKI_CUDA_LIB_DIRS` (after any the user set), which the
shim searches first and `ozaki run` / `ozaki env` pass on to the program. `LD_PRELOAD` is
left alone: only `ozaki run` sets it, for the program it starts."""

import os
import sys

from ozaki_shim import binary_path, cuda_lib_dirs

CUDA_LIB_DIRS_VAR = "OZAKI_CUDA_LIB_DIRS"


def environment(env, found):
    """`env` with the directories `found` appended to OZAKI_CUDA_LIB_DIRS (each once)."""
    have = [d for d in env.get(CUDA_LIB_DIRS_VAR, "").split(os.pathsep) if d]
    dirs = have + [d for d in found if d not in have]
    if not dirs or dirs == have:
        return env
    return dict(env, **{CUDA_LIB_DIRS_VAR: os.pathsep.join(dirs)})


def main():
    exe = str(binary_path())
    env = environment(os.environ, cuda_lib_dirs())
    try:
        os.execve(exe, ["ozaki"] + sys.argv[1:], env)
    except OSError as e:
        sys.exit(f"ozaki: cannot start {exe}: {e}")


if __name__ == "__main__":
    main()
