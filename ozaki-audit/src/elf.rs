//! A defined symbol's address in an object the loader mapped, read from its dynamic section
//! and GNU hash table in place (what `dlsym` does, without the loader's lock, which an audit
//! function runs under).

use std::ffi::c_char;

/// `Elf64_Dyn`.
#[repr(C)]
pub struct Dyn {
    tag: i64,
    val: u64,
}

/// `Elf64_Sym`.
#[repr(C)]
pub struct Sym {
    st_name: u32,
    st_info: u8,
    st_other: u8,
    st_shndx: u16,
    /// The symbol's value (an offset from the object's base before relocation).
    pub st_value: u64,
    st_size: u64,
}

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// The GNU hash of a symbol name (the ELF gABI extension's `dl_new_hash`).
pub fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| {
        h.wrapping_mul(33).wrapping_add(u32::from(c))
    })
}

/// The address of the defined symbol `name` in the object loaded at `base` whose dynamic
/// section is `dynamic`; `None` when it defines no such symbol or has no GNU hash table.
///
/// # Safety
/// `base` and `dynamic` are a live object's, as its link map gives them (the loader has
/// relocated the dynamic section's addresses on this platform, or they are offsets from
/// `base`, which this function tells apart).
pub unsafe fn lookup(base: usize, dynamic: *const Dyn, name: &[u8]) -> Option<usize> {
    let (mut strtab, mut symtab, mut hash) = (0usize, 0usize, 0usize);
    let mut d = dynamic;
    // SAFETY: the dynamic section is an array ending with DT_NULL.
    while unsafe { (*d).tag } != DT_NULL {
        // SAFETY: as above.
        let (tag, val) = unsafe { ((*d).tag, (*d).val as usize) };
        let at = if val < base { base + val } else { val };
        match tag {
            DT_STRTAB => strtab = at,
            DT_SYMTAB => symtab = at,
            DT_GNU_HASH => hash = at,
            _ => {}
        }
        // SAFETY: not past DT_NULL yet.
        d = unsafe { d.add(1) };
    }
    if strtab == 0 || symtab == 0 || hash == 0 {
        return None;
    }
    let h = gnu_hash(name);
    let words = hash as *const u32;
    // SAFETY: the GNU hash table's header: buckets, first hashed symbol, bloom words, shift.
    let (nbuckets, symoffset, bloom_words) =
        unsafe { (*words, *words.add(1), *words.add(2) as usize) };
    if nbuckets == 0 {
        return None;
    }
    // the bloom filter (64-bit words) comes before the buckets
    // SAFETY: inside the table, after its 4-word header and its bloom words.
    let buckets = unsafe { words.add(4 + 2 * bloom_words) };
    // SAFETY: nbuckets entries.
    let mut i = unsafe { *buckets.add((h % nbuckets) as usize) };
    if i < symoffset {
        return None;
    }
    // SAFETY: the chains follow the buckets, one per hashed symbol from symoffset on.
    let chains = unsafe { buckets.add(nbuckets as usize) };
    loop {
        // SAFETY: i is a hashed symbol's index (the chain ends with a set low bit).
        let ch = unsafe { *chains.add((i - symoffset) as usize) };
        // SAFETY: symbol i of the table.
        let sym = unsafe { &*(symtab as *const Sym).add(i as usize) };
        if (ch | 1) == (h | 1) && sym.st_shndx != 0 {
            // SAFETY: the name is a C string in the string table.
            let s = unsafe {
                std::ffi::CStr::from_ptr((strtab + sym.st_name as usize) as *const c_char)
            };
            if s.to_bytes() == name {
                return Some(base + sym.st_value as usize);
            }
        }
        if ch & 1 != 0 {
            return None;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash values the gABI extension gives for its examples.
    #[test]
    fn names_hash_as_the_loader_hashes_them() {
        assert_eq!(gnu_hash(b""), 0x0000_1505);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(gnu_hash(b"exit"), 0x7c96_7e3f);
        assert_eq!(gnu_hash(b"syscall"), 0xbac2_12a0);
    }
}
