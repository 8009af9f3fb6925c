/* The library's load-time constructor as an `.init_array` entry, for links whose linker
 * takes no `-init` option (zig's, in the manylinux wheel build; see build.rs). This object
 * goes into the cdylib link only, never into the Rust library the `ozaki` command links. */
extern void _ozaki_shim_on_load(void);

__attribute__((section(".init_array"), used))
static void (*const ozaki_shim_on_load_entry)(void) = _ozaki_shim_on_load;
