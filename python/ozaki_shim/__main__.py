"""`python -m ozaki_shim ARGS` and the `ozaki` console command: both replace this Python
process with the bundled `ozaki` binary, so its exit status, signals and stdin/stdout are
exactly those of a source build's `ozaki`."""

import os
import sys

from ozaki_shim import binary_path


def main():
    exe = str(binary_path())
    try:
        os.execv(exe, ["ozaki"] + sys.argv[1:])
    except OSError as e:
        sys.exit(f"ozaki: cannot start {exe}: {e}")


if __name__ == "__main__":
    main()
