//! cuBLAS arguments in the terms of the BLAS decoder ([`crate::abi`]): operation and fill
//! enums as the reference flag letters, the data types a call must have to be routed, and the
//! members of a strided-batched call.

use core::ffi::c_int;
use gpu_kernels::ozaki::{DeviceCall, Op};

/// `CUDA_R_64F`.
pub(crate) const CUDA_R_64F: c_int = 1;
/// `CUBLAS_COMPUTE_64F` (`CUBLAS_COMPUTE_64F_PEDANTIC` asks for cuBLAS's own arithmetic and
/// is forwarded).
pub(crate) const CUBLAS_COMPUTE_64F: c_int = 70;

/// A `cublasOperation_t` as the reference flag letter (`?`, illegal, for anything else).
pub(crate) fn op(o: c_int) -> u8 {
    match o {
        0 => b'N',
        1 => b'T',
        2 => b'C',
        _ => b'?',
    }
}

/// A `cublasFillMode_t` as the reference flag letter (`?`, illegal, for anything else).
pub(crate) fn fill(f: c_int) -> u8 {
    match f {
        0 => b'L',
        1 => b'U',
        _ => b'?',
    }
}

/// Whether a `cublasGemmEx`-style call is an fp64 product the hook routes: A, B and C
/// `CUDA_R_64F` and the compute type `CUBLAS_COMPUTE_64F`.
pub(crate) fn fp64(a: c_int, b: c_int, c: c_int, compute: c_int) -> bool {
    [a, b, c] == [CUDA_R_64F; 3] && compute == CUBLAS_COMPUTE_64F
}

/// The members of a strided-batched call: `count` products, member `i`'s A, B and C at
/// `i * stride` elements from the first's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    /// Members (batchCount).
    pub count: i64,
    /// Elements between consecutive members' A, B and C.
    pub strides: [i64; 3],
}

impl Batch {
    /// A single product.
    pub const ONE: Batch = Batch {
        count: 1,
        strides: [0; 3],
    };

    /// Member `i` of the batch whose first member is `first`.
    pub fn member(&self, first: &DeviceCall, i: i64) -> DeviceCall {
        let at = |addr: u64, stride: i64| {
            addr.wrapping_add((i.wrapping_mul(stride) as u64).wrapping_mul(8))
        };
        let [sa, sb, sc] = self.strides;
        let op = match first.op {
            Op::Gemm {
                transa,
                transb,
                b,
                ldb,
            } => Op::Gemm {
                transa,
                transb,
                b: at(b, sb),
                ldb,
            },
            syrk => syrk,
        };
        DeviceCall {
            op,
            a: at(first.a, sa),
            c: at(first.c, sc),
            ..*first
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_map_to_the_reference_letters_and_only_fp64_is_routed() {
        assert_eq!([op(0), op(1), op(2), op(3)], [b'N', b'T', b'C', b'?']);
        assert_eq!([fill(0), fill(1), fill(2)], [b'L', b'U', b'?']);
        assert!(fp64(1, 1, 1, 70));
        assert!(!fp64(1, 1, 1, 71)); // pedantic compute
        assert!(!fp64(0, 0, 0, 68)); // fp32
        assert!(!fp64(1, 1, 0, 70)); // mixed types
    }

    #[test]
    fn batch_members_are_offset_by_their_element_strides() {
        let first = DeviceCall::product((2, 3, 4), 1.0, (0x1000, 0x2000), 0.0, 0x3000);
        let b = Batch {
            count: 3,
            strides: [8, 12, 6],
        };
        let m = b.member(&first, 2);
        assert_eq!((m.a, m.c), (0x1000 + 2 * 8 * 8, 0x3000 + 2 * 6 * 8));
        let Op::Gemm { b: bb, .. } = m.op else {
            unreachable!()
        };
        assert_eq!(bb, 0x2000 + 2 * 12 * 8);
        assert_eq!((m.m, m.n, m.k), (2, 3, 4));
        let same = Batch::ONE.member(&first, 0);
        assert_eq!((same.a, same.c), (first.a, first.c));
    }
}
