// Ozaki scheme II on INT8 tensor cores: the SIMT stages around the int8 products.
//
// Compiled at run time by NVRTC for the device's own architecture (sm_90a on the H200) and
// cached as CUBIN (see src/nvrtc_cache.rs). The pipeline per call is
//   scan_rows_*   : max |x| per row of op(A) / column of op(B) as IEEE bit patterns
//                   (NaN/Inf show up as bit patterns >= 0x7ff0...; the host then routes native)
//   residues      : z = rint(x * 2^shift) once per element, then the centred residue of z for
//                   every modulus, written as r int8 planes with the inner dimension contiguous
//                   ("TN" layout, what cuBLASLt's IMMA kernels want); two full-rate fp64
//                   fmas and two integer multiply-adds per residue, no conversions
//   (cuBLASLt)    : r int8 x int8 -> int32 products, one strided batch
//   reconstruct_quad[_w4]: as reconstruct[_w4], four consecutive rows of one column per
//                   thread with 16-byte loads of every product plane in flight (rows % 4 == 0)
//   reconstruct[_w4]: CRT of the r int32 products into an exact multi-limb integer (per-modulus
//                   work on the FP64 pipe in exactly representable integers, see crt_add), signed
//                   lift, one correctly rounded conversion to fp64, unscaling by 2^-(sigma_i+tau_j),
//                   then C = alpha*P + beta*C (beta == 0: C is not read), optionally one triangle.
// Everything before the final conversion is exact integer arithmetic (some of it on integers held
// exactly in doubles), so the result equals the CPU reference route's bit for bit when both use
// the same moduli, shifts and rounding.

typedef unsigned long long u64;
typedef unsigned int u32;

#define MAX_MODULI 20
#define LIMBS 6

// Residue formation table (see `residues`): per modulus RN(1/m_p) and c_p = 2^32 mod m_p.
struct ResidueTable {
    int r;
    int pad_;
    double magic;                 // MAGIC (a parameter, so the compiler keeps it in a register)
    double inv_m[MAX_MODULI];
    double c32[MAX_MODULI];       // c_p as a double
    u32 neg_m[MAX_MODULI];        // 2^32 - m_p (one multiply-add forms y - m q)
    u32 c32i[MAX_MODULI];         // c_p
};

// 1.5 * 2^52: for |v| < 2^51, v + MAGIC (or fma(a, b, MAGIC) for v = a b) rounds v to the
// nearest integer (ties to even) and leaves that integer, in two's complement, in the low
// mantissa bits (read with __double2loint): an exact rint and double -> int32 in one add.
#define MAGIC 6755399441055744.0

// 2^e as a double, for -1022 <= e <= 1023.
__device__ __forceinline__ double pow2(int e) {
    return __longlong_as_double((long long)(e + 1023) << 52);
}

// scalbn(x, e) (exact scaling, one rounding) with one or two multiplications where 2^e is a
// normal double or the scaling goes up (then no step rounds); scalbn itself elsewhere.
__device__ __forceinline__ double scale2(double x, int e) {
    if (e >= -1022 && e <= 1023) return x * pow2(e);
    if (e > 1023 && e <= 2046) return (x * pow2(1023)) * pow2(e - 1023);
    return scalbn(x, e);
}

// CRT table: x = sum_p u_p * W_p mod M, W_p = (M/m_p) * ((M/m_p)^-1 mod m_p), 32-bit limbs.
struct CrtTable {
    int r;
    int pad_;
    double magic;                 // MAGIC (a parameter, so the compiler keeps it in a register)
    double m[MAX_MODULI];
    double inv_m[MAX_MODULI];
    double inv_big_m;             // RN(1 / RN(M)), for the quotient estimate
    double wd[MAX_MODULI][LIMBS - 1]; // the 32-bit limbs of W_p, as doubles
    double md[LIMBS - 1];         // the 32-bit limbs of M, as doubles
    u32 big_m[LIMBS];
    u32 half_m[LIMBS];            // ceil(M/2): R >= half_m lifts to R - M
    u32 neg_lift[LIMBS];          // M - ceil(M/2) + 1: R < 0 with |R| >= neg_lift lifts to R + M
};

__device__ __forceinline__ u64 abs_bits(double v) {
    return (u64)__double_as_longlong(v) & 0x7fffffffffffffffull;
}

// One warp per row; row elements contiguous (x[l + row*ld]). Also sums |x| per row (the
// host's moduli choice uses max/mean as the in-row spread).
extern "C" __global__ void scan_rows_contig(const double* __restrict__ x, long long ld, int rows, int kdim,
                                            u64* __restrict__ maxbits, double* __restrict__ abssum) {
    int row = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const double* p = x + (long long)row * ld;
    u64 mx = 0;
    double sum = 0.0;
#pragma unroll 4
    for (int l = lane; l < kdim; l += 32) {
        u64 b = abs_bits(p[l]);
        mx = b > mx ? b : mx;
        sum += __longlong_as_double((long long)b);
    }
    for (int off = 16; off > 0; off >>= 1) {
        u64 o = __shfl_xor_sync(0xffffffffu, mx, off);
        mx = o > mx ? o : mx;
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (lane == 0) {
        atomicMax(&maxbits[row], mx);
        atomicAdd(&abssum[row], sum);
    }
}

// One thread per row, rows contiguous (x[row + l*ld]); blockIdx.y takes a chunk of l.
extern "C" __global__ void scan_rows_strided(const double* __restrict__ x, long long ld, int rows, int kdim,
                                             int lchunk, u64* __restrict__ maxbits, double* __restrict__ abssum) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int l0 = blockIdx.y * lchunk;
    int l1 = min(kdim, l0 + lchunk);
    u64 mx = 0;
    double sum = 0.0;
#pragma unroll 4
    for (int l = l0; l < l1; ++l) {
        u64 b = abs_bits(x[row + (long long)l * ld]);
        mx = b > mx ? b : mx;
        sum += __longlong_as_double((long long)b);
    }
    atomicMax(&maxbits[row], mx);
    atomicAdd(&abssum[row], sum);
}

// Tile of 32 rows x 128 inner indices through shared memory, so both storage orders read
// coalesced; each thread then forms 4 consecutive residues per plane and stores them as one
// 32-bit word (a warp writes 128 contiguous bytes per plane). Block (32, 8).
//
// The centred residue of the integer z = rint(x 2^shift), |z| <= 2^62 (`bits_for` caps the
// scaled maxima at 2^62), is formed without conversions or fix-ups:
//   z = hi 2^32 + lo with hi = floor(z 2^-32), lo in [0, 2^32)   (both exact, once per element)
//   m_0 = 256 divides 2^32: the residue is the low byte of lo, read as a signed byte
//   odd m_p: y = hi c_p + lo, c_p = 2^32 mod m_p, so y = z (mod m_p), |y| < 2^39, exact in fp64;
//            q = rint(y RN(1/m_p)) by one fma with MAGIC; t = y - m_p q, computed modulo 2^32
//            from the int32 images of hi, lo and q.
// y RN(1/m) lies within |y/m| 2^-53 < 2^-21 of y/m, while y/m is at least 1/(2m) >= 2^-9 away
// from every half-integer (m odd), so q = floor(y/m + 1/2) exactly (no ties), and t = y - m q
// is the unique residue in [-m/2, m/2): ozaki-core's `centred`, bit for bit.
//
// Rows from `rows` up to `rows_out` (the products' padded extent) get zero residues: a zero
// line adds nothing to any product, so the padded products hold the same integers.
extern "C" __global__ void residues(const double* __restrict__ x, long long ld, int contig, int rows, int rows_out,
                                    int kdim, int kpad, const int* __restrict__ shift, ResidueTable tab,
                                    signed char* __restrict__ out, long long plane_stride) {
    __shared__ double tile[32][129];
    int r0 = blockIdx.y * 32, l0 = blockIdx.x * 128;
    int tx = threadIdx.x, ty = threadIdx.y;
    if (contig) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                int a = ty + 8 * i, c = tx + 32 * q;
                int row = r0 + a, l = l0 + c;
                tile[a][c] = (row < rows && l < kdim) ? x[l + (long long)row * ld] : 0.0;
            }
        }
    } else {
#pragma unroll 4
        for (int i = 0; i < 16; ++i) {
            int c = ty + 8 * i;
            int row = r0 + tx, l = l0 + c;
            tile[tx][c] = (row < rows && l < kdim) ? x[row + (long long)l * ld] : 0.0;
        }
    }
    __syncthreads();
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {
        int a = ty + 8 * i;
        int row = r0 + a, l = l0 + 4 * tx;
        if (row >= rows_out || l >= kpad) continue;
        int sh = row < rows ? shift[row] : 0;
        double hi[4], lo[4];
        u32 hi_i[4], lo_i[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            double z = rint(scale2(tile[a][4 * tx + q], sh));
            hi[q] = floor(z * 2.3283064365386962890625e-10);  // z 2^-32, exact
            lo[q] = fma(-hi[q], 4294967296.0, z);             // exact, in [0, 2^32)
            hi_i[q] = (u32)__double2loint(hi[q] + MAGIC);
            lo_i[q] = (u32)__double2loint(lo[q] + MAGIC);
        }
        unsigned int* o = (unsigned int*)(out + (long long)row * kpad + l);
        // m_0 = 256: the low bytes of lo (lo = z mod 2^32), little-endian in one word
        o[0] = (lo_i[0] & 0xffu) | (lo_i[1] & 0xffu) << 8 | (lo_i[2] & 0xffu) << 16 | lo_i[3] << 24;
        double magic = tab.magic;
        for (int p = 1; p < tab.r; ++p) {
            double c = tab.c32[p], inv = tab.inv_m[p];
            u32 ci = tab.c32i[p], neg_m = tab.neg_m[p];
            unsigned int word = 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                double y = fma(hi[q], c, lo[q]);
                u32 qi = (u32)__double2loint(fma(y, inv, magic));
                u32 t = hi_i[q] * ci + lo_i[q] + neg_m * qi;
                word |= (t & 0xffu) << (8 * q);
            }
            o[(p * plane_stride) >> 2] = word;
        }
    }
}

// Correctly rounded (to nearest, ties to even) conversion of a LIMBS x 32-bit magnitude times
// 2^e to double. Exact except where the result is subnormal (second rounding in scale2).
__device__ double limbs_to_double(const u32* x, int e) {
    // All indices below are compile-time constants after unrolling, so x stays in registers.
    int h = 0;
#pragma unroll
    for (int i = 1; i < LIMBS; ++i) if (x[i] != 0) h = i;
    if (h <= 1) {
        u64 v = ((u64)x[1] << 32) | x[0];
        return scale2(__ull2double_rn(v), e);
    }
    u64 hi = 0, lo = 0;
    bool sticky = false;
#pragma unroll
    for (int i = 2; i < LIMBS; ++i) {
        if (i == h) {
            hi = ((u64)x[i] << 32) | x[i - 1];
            lo = (u64)x[i - 2] << 32;  // next 32 bits, left-aligned
        }
    }
#pragma unroll
    for (int i = 0; i < LIMBS - 3; ++i) sticky |= (i < h - 2) && x[i] != 0;
    int s = __clzll(hi);
    u64 top = s ? (hi << s) | (lo >> (64 - s)) : hi;
    u64 rest = s ? (lo << s) : lo;
    sticky |= rest != 0;
    // Bit 0 of top lies 10 bits below the rounding bit of a 53-bit significand, so OR-ing the
    // sticky bit there makes the hardware u64 -> double rounding see the whole tail.
    double d = __ull2double_rn(top | (sticky ? 1ull : 0ull));
    return scale2(d, e + 32 * (h - 1) - s);
}

// x >= y for N-limb numbers (branch-free, unrolled).
template <int N>
__device__ __forceinline__ bool ge_limbs(const u32* x, const u32* y) {
    u64 borrow = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        u64 d = (u64)x[i] - y[i] - borrow;
        borrow = (d >> 63) & 1;
    }
    return borrow == 0;
}

// x -= y over N limbs (x >= y).
template <int N>
__device__ __forceinline__ void sub_limbs(u32* x, const u32* y) {
    u64 borrow = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        u64 d = (u64)x[i] - y[i] - borrow;
        x[i] = (u32)d;
        borrow = (d >> 63) & 1;
    }
}

// acc += v W_p over the WL limbs W_p can occupy, where v = t - m_p rint(t / m_p) is the
// centred residue of the int32 product t, all on the FP64 pipe (the integer pipe bounded the
// earlier all-integer version at about twice the memory floor, BENCHMARKS.md):
//   t as a double without a conversion instruction: the bits (0x43300000, t ^ 2^31) are the
//     double 2^52 + 2^31 + t (exact), minus 2^52 + 2^31;
//   q = rint(t RN(1/m_p)) by one fma with MAGIC: t/m_p is within |t/m_p| 2^-53 < 2^-22 of the
//     computed product and, for odd m_p, at least 1/(2 m_p) > 2^-9 from a half-integer, so
//     q = rint(t/m_p) exactly (m_0 = 256: 1/256 is exact, a tie rounds either way, |v| <= 128);
//   v = t - m_p q by one fma, exact, |v| <= 128.
// Every partial sum of v W_p,l is an integer below 20 * 128 * 2^32 < 2^44 in magnitude, so the
// fp64 accumulation is exact in any order; crt_finish turns it back into integer limbs.
template <int WL>
__device__ __forceinline__ void crt_add(double (&acc)[WL], int t, int p, const CrtTable& tab) {
    double td = __hiloint2double(0x43300000, t ^ 0x80000000) - 4503601774854144.0;
    double q = fma(td, tab.inv_m[p], tab.magic) - tab.magic;
    double v = fma(-q, tab.m[p], td);
#pragma unroll
    for (int l = 0; l < WL; ++l) acc[l] = fma(v, tab.wd[p][l], acc[l]);
}

// From the limb sums acc_l (X = sum_l acc_l 2^(32 l) = sum_p v_p W_p, |X| < 20 * 128 M) to the
// output entry, with the quotient taken in the FP64 domain (the earlier integer version spent
// about as many instructions per entry as the 14 planes' accumulation):
//   q = rint(X~ / M), X~ the fp64 Horner value of X: relative errors below 2^-49 and |X / M| <
//   2^12 put X / M within 2^-37 of X~ / M, so q is rint(X / M) or, next to a half-integer, one
//   off; R = X - q M is then in (-1.5 M, 1.5 M) and R = C' (mod M);
//   R limb by limb, exactly: acc_l - q M_l by one fma (|q M_l| < 2^44), then to 32-bit limbs
//   with signed carries (M < 2^(32 WL - 1), so |R| < 2^(32 WL) and the last carry is 0 or -1);
//   the lift to [ceil(M/2) - M, ceil(M/2)) (ozaki-core's symmetric range) by one comparison of
//   |R| with half_m (R >= 0) or neg_lift (R < 0) and at most one M - |R|;
// then one correctly rounded conversion times 2^e, and alpha v + beta c_old (c_old read only
// when beta != 0). The host twin is CrtTable::reconstruct_fp64 in ozaki-core/src/crt_tables.rs.
template <int WL>
__device__ __forceinline__ double crt_finish(const double (&acc)[WL], const CrtTable& tab, int e, double alpha,
                                             double beta, const double* cp) {
    double xd = acc[WL - 1];
#pragma unroll
    for (int l = WL - 2; l >= 0; --l) xd = fma(xd, 4294967296.0, acc[l]);
    double q = fma(xd, tab.inv_big_m, tab.magic) - tab.magic;
    u32 x[LIMBS];
    long long carry = 0;
#pragma unroll
    for (int l = 0; l < WL; ++l) {
        long long s = __double2ll_rn(fma(-q, tab.md[l], acc[l])) + carry;
        x[l] = (u32)s;
        carry = s >> 32;  // arithmetic shift: floor(s / 2^32)
    }
#pragma unroll
    for (int l = WL; l < LIMBS; ++l) x[l] = 0;
    bool neg = carry < 0;
    if (neg) {  // |R| = 2^(32 WL) - x
        u64 c = 1;
#pragma unroll
        for (int l = 0; l < WL; ++l) {
            u64 s = (u64)(~x[l]) + c;
            x[l] = (u32)s;
            c = s >> 32;
        }
    }
    u32 lift[WL];
#pragma unroll
    for (int l = 0; l < WL; ++l) lift[l] = neg ? tab.neg_lift[l] : tab.half_m[l];
    if (ge_limbs<WL>(x, lift)) {  // outside the symmetric range: |C'| = M - |R|, other sign
        u32 mag[WL];
#pragma unroll
        for (int l = 0; l < WL; ++l) mag[l] = tab.big_m[l];
        sub_limbs<WL>(mag, x);
#pragma unroll
        for (int l = 0; l < WL; ++l) x[l] = mag[l];
        neg = !neg;
    }
    double v = limbs_to_double(x, e);
    if (neg) v = -v;
    // Separate rounded multiply and add (never contracted to an fma), as the CPU route does.
    double out = __dmul_rn(alpha, v);
    if (beta != 0.0) out = __dadd_rn(out, __dmul_rn(beta, *cp));
    return out;
}

// One thread per output element of a column block. prod: r planes of int32 (column-major,
// leading dimension prod_ld >= rows, the products' padded rows; planes prod_stride apart), of
// which the rows x cols block is read. sigma indexes rows,
// tau the block's columns; (row_off, col_off) place the block in C (for the triangle test).
// uplo: 0 whole block, 1 upper (i <= j), 2 lower (i >= j).
// WL: 32-bit limbs of the weights W_p < M that can be nonzero (4 while M < 2^128, i.e. up to
// 16 moduli; 5 for up to 20): the multiply-adds of the always-zero top limbs are skipped (the
// per-modulus limb products are what bounds this kernel), the sum is the same integer.
template <int WL>
__device__ __forceinline__ void reconstruct_impl(const int* __restrict__ prod, long long prod_stride, int prod_ld,
                                                 int rows, int cols,
                                                 const int* __restrict__ sigma, const int* __restrict__ tau, const CrtTable& tab,
                                                 double alpha, double beta, double* __restrict__ c, long long ldc,
                                                 int uplo, int row_off, int col_off) {
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)rows * cols) return;
    int i = (int)(idx % rows);
    int j = (int)(idx / rows);
    int gi = i + row_off, gj = j + col_off;
    if ((uplo == 1 && gi > gj) || (uplo == 2 && gi < gj)) return;

    double acc[WL];
#pragma unroll
    for (int l = 0; l < WL; ++l) acc[l] = 0.0;
    long long at = i + (long long)j * prod_ld;
    for (int p = 0; p < tab.r; ++p) crt_add<WL>(acc, prod[p * prod_stride + at], p, tab);
    double* cp = c + i + (long long)j * ldc;
    *cp = crt_finish<WL>(acc, tab, -(sigma[i] + tau[j]), alpha, beta, cp);
}

// Four consecutive rows i..i+3 of one column per thread over the padded rows (prod_ld % 4 ==
// 0, so a quad never straddles columns and every plane offset is 16-byte aligned; rows at or
// beyond `rows` are read but not written, a ragged last quad included): one 16-byte streaming load per
// plane, issued four planes at a time, keeps enough bytes in flight to run near the memory
// rate (the one-element kernel waits on one 4-byte load per modulus). Same arithmetic per entry.
template <int WL>
__device__ __forceinline__ void reconstruct_quad_impl(const int* __restrict__ prod, long long prod_stride,
                                                      int prod_ld, int rows, int cols, const int* __restrict__ sigma,
                                                      const int* __restrict__ tau, const CrtTable& tab, double alpha,
                                                      double beta, double* __restrict__ c, long long ldc, int uplo,
                                                      int row_off, int col_off) {
    long long idx = 4 * (blockIdx.x * (long long)blockDim.x + threadIdx.x);
    if (idx >= (long long)prod_ld * cols) return;
    int i = (int)(idx % prod_ld);
    int j = (int)(idx / prod_ld);
    if (i >= rows) return;  // a quad of padding rows only
    int gi = i + row_off, gj = j + col_off;
    // whole quad outside the triangle: nothing to do
    if ((uplo == 1 && gi > gj) || (uplo == 2 && gi + 3 < gj)) return;

    double acc[4][WL];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int l = 0; l < WL; ++l) acc[e][l] = 0.0;
    const int4* src = (const int4*)(prod + idx);
    long long vs = prod_stride >> 2;
    int p = 0;
    for (; p + 4 <= tab.r; p += 4) {
        int4 v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = __ldcs(src + (p + q) * vs);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            crt_add<WL>(acc[0], v[q].x, p + q, tab);
            crt_add<WL>(acc[1], v[q].y, p + q, tab);
            crt_add<WL>(acc[2], v[q].z, p + q, tab);
            crt_add<WL>(acc[3], v[q].w, p + q, tab);
        }
    }
    for (; p < tab.r; ++p) {
        int4 v = __ldcs(src + p * vs);
        crt_add<WL>(acc[0], v.x, p, tab);
        crt_add<WL>(acc[1], v.y, p, tab);
        crt_add<WL>(acc[2], v.z, p, tab);
        crt_add<WL>(acc[3], v.w, p, tab);
    }
    int tj = tau[j];
    double* cp = c + i + (long long)j * ldc;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        if (i + e >= rows || (uplo == 1 && gi + e > gj) || (uplo == 2 && gi + e < gj)) continue;
        cp[e] = crt_finish<WL>(acc[e], tab, -(sigma[i + e] + tj), alpha, beta, cp + e);
    }
}

#define RECONSTRUCT_ARGS                                                                                      \
    const int *__restrict__ prod, long long prod_stride, int prod_ld, int rows, int cols,                    \
        const int *__restrict__ sigma, const int *__restrict__ tau, CrtTable tab, double alpha, double beta,  \
        double *__restrict__ c,                                                                               \
        long long ldc, int uplo, int row_off, int col_off
#define RECONSTRUCT_PASS prod, prod_stride, prod_ld, rows, cols, sigma, tau, tab, alpha, beta, c, ldc, uplo, row_off, col_off

// Up to 20 moduli (M < 2^160: weights have 5 limbs).
extern "C" __global__ void reconstruct(RECONSTRUCT_ARGS) { reconstruct_impl<5>(RECONSTRUCT_PASS); }

// Up to 16 moduli (M < 2^128: weights have 4 limbs).
extern "C" __global__ void reconstruct_w4(RECONSTRUCT_ARGS) { reconstruct_impl<4>(RECONSTRUCT_PASS); }

// Quads of rows (rows % 4 == 0), up to 20 moduli. The launch bounds (256-thread blocks, 3 or 4
// per SM) also make ptxas issue each batch of four 16-byte loads together, where unbounded it
// interleaves every load with the arithmetic of the previous one (seen in the SASS).
extern "C" __global__ void __launch_bounds__(256, 3) reconstruct_quad(RECONSTRUCT_ARGS) {
    reconstruct_quad_impl<5>(RECONSTRUCT_PASS);
}

// Quads of rows (rows % 4 == 0), up to 16 moduli.
extern "C" __global__ void __launch_bounds__(256, 4) reconstruct_quad_w4(RECONSTRUCT_ARGS) {
    reconstruct_quad_impl<4>(RECONSTRUCT_PASS);
}

// ---- Line statistics: norm scaling's S_i = sum_l abar_il^2 and the accuracy rule's sums ----
// abar = ceil(|x| 2^(5 - e)) in [0, 64] with e = floor(log2 max|x|) of the line, exactly as
// ozaki-core's scaling.rs (step 2, `coarse`). line_stats_* run after scan_rows_* on the same
// stream (they read their maxima); scan_stats_* do both in one read of lines that fit in
// registers.

// floor(log2 |x|) from a nonzero, finite |x| bit pattern (subnormals: their true exponent).
__device__ __forceinline__ int exponent_of_bits(u64 bits) {
    int biased = (int)(bits >> 52);
    return biased == 0 ? (63 - __clzll((long long)bits)) - 1074 : biased - 1023;
}

// The accuracy rule's line statistics (ozaki-core rule.rs, "Line statistics"), summed per
// line from the scan's exponent e; every term is an exact integer, so the atomics make the
// result independent of the order. Slots (u64 each, `stride` lines apart): 0 S = sum abar^2,
// 1 sum floor(|x| 2^(40-e)), 2 sum floor((|x| 2^-e)^2 2^40), 3 sum (e - E(x)),
// 4 sum (e - E(x))^2, 5 nonzero count, 6 two u32: max (e - E(x)) and max (e - lsb(x)).
// abar = max(ceil(scalbn(|x|, 5 - e)), 1): scalbn is exact whenever its result is normal; a
// result below 2^-1022 may round (even to 0), but the ceiling of any value in (0, 1) is 1,
// which the max() restores; the floors of values below 1 are 0 however they round.
#define FIX_BITS 40
// S: the width of the sums of small integers (log depths, nonzeros): u64 in the per-line
// passes, u32 where a thread sums at most 32 entries (every term is below 2^23). A: the type
// of the sums of S's, abs1's and abs2's terms: u64, or double where a thread sums at most 32
// entries (integers below 2^47, exact in any order).
template <typename S, typename A>
struct LineAccT {
    A s, a1, a2;
    S ld, ld2, nz;
    u32 depth, span;
};
typedef LineAccT<u64, u64> LineAcc;

template <typename S, typename A>
__device__ __forceinline__ void line_acc_zero(LineAccT<S, A>& t) {
    t.s = t.ld = t.ld2 = t.nz = 0;
    t.a1 = t.a2 = 0;
    t.depth = t.span = 0;
}

// One nonzero entry (bit pattern b of |x|) by the definitions themselves: any entry of any
// line (subnormal entries, lines whose maximum lies below 2^-1002). scale2 is scalbn's value
// (exact, or one rounding of a subnormal result) in one multiplication where 2^(5 - e) etc.
// are normal, and each ceil / floor is the conversion's own rounding mode. d <= 2097, so
// d^2 is exact in 32 bits.
template <typename S, typename A>
__device__ __forceinline__ void line_add_exact(LineAccT<S, A>& t, u64 b, int e) {
    double a = __longlong_as_double((long long)b);
    u32 c = max(__double2uint_ru(scale2(a, 5 - e)), 1u);
    t.s += c * c;
    t.a1 += __double2ull_rd(scale2(a, FIX_BITS - e));
    double y = scale2(a, -e);
    double y2 = __dmul_rn(y, y);
    t.a2 += __double2ull_rd(scale2(y2, FIX_BITS));
    u32 d = (u32)(e - exponent_of_bits(b));
    t.ld += d;
    t.ld2 += d * d;
    t.nz += 1;
    t.depth = max(t.depth, d);
    int biased = (int)(b >> 52);
    u64 frac = b & ((1ull << 52) - 1);
    int lsb = biased == 0 ? (__ffsll((long long)frac) - 1) - 1074
                          : (__ffsll((long long)(frac | (1ull << 52))) - 1) + biased - 1075;
    t.span = max(t.span, (u32)(e - lsb));
}

// What the entries' terms need from their line: e = E(max |x|), and for the paths below
// (max |x| normal and at least 2^-983, so that 2^(5 - e), 2^(20 - e) and 2^(40 - e) are
// normal doubles) the biased exponent eb of max |x| and those powers; eb = 0 sends every
// entry to line_add_exact.
struct LineExp {
    int e;
    u32 eb;
    double p5, p20, p40;
};

__device__ __forceinline__ LineExp line_exp(u64 maxbits) {
    LineExp L;
    L.e = exponent_of_bits(maxbits);
    u32 eb = (u32)(maxbits >> 52);
    L.eb = eb >= 40 ? eb : 0;
    L.p5 = L.eb ? pow2(5 - L.e) : 0.0;
    L.p20 = L.eb ? pow2(20 - L.e) : 0.0;
    L.p40 = L.eb ? pow2(40 - L.e) : 0.0;
    return L;
}

// Whether an entry (bit pattern b of |x|) takes line_add_fast: normal, of a line with eb != 0.
__device__ __forceinline__ bool fast_entry(u64 b, const LineExp& L) {
    return (b >> 52) != 0 && L.eb != 0;
}

// A fast_entry's terms: line_add_exact's integers without its conversions (which bounded the
// pass). With M the entry's 53-bit significand and d = e - E(x) = eb - B (B its biased
// exponent), |x| = M 2^(e - d - 52), so
//   abar  = ceil(M 2^-(47 + d)) = floor((M - 1) 2^-(47 + d)) + 1, from the high word of M - 1
//           (below 2^21: a shift of 21 or more gives 0, abar = 1, as the definition's max()
//           gives for d >= 6, where the scaled value lies in (0, 1));
//   abs1  = floor(M 2^-(12 + d)) = M >> (12 + d) (0 from d = 41 on, as the definition);
//   abs2  = floor(RN(y^2)), y = |x| 2^(20 - e): for d <= 20 y >= 1 is exact and RN(y^2) is
//           the definition's RN((|x| 2^-e)^2) 2^40; for d > 20 y < 1 (however it rounds), so
//           RN(y^2) < 1 and both floors are 0. The floor of y^2 < 2^42 is the low bits of one
//           round-down add of 2^52;
//   depth = d, span = e - lsb(x) = d + 52 - ctz(M).
template <typename S, typename A>
__device__ __forceinline__ void line_add_fast(LineAccT<S, A>& t, u64 b, const LineExp& L) {
    u32 hi = (u32)(b >> 32), lo = (u32)b;
    u32 d = L.eb - (hi >> 20);
    u32 mh = (hi & 0xfffffu) | 0x100000u;  // M >> 32
    u32 c = ((mh - (lo == 0u ? 1u : 0u)) >> min(15u + d, 31u)) + 1u;
    t.s += c * c;
    t.a1 += ((u64)mh << 32 | lo) >> min(12u + d, 63u);
    double y = __dmul_rn(__longlong_as_double((long long)b), L.p20);
    double f = __dadd_rd(__dmul_rn(y, y), 4503599627370496.0);  // 2^52 + floor(y^2)
    t.a2 += (u64)__double_as_longlong(f) & ((1ull << 52) - 1);
    t.ld += d;
    t.ld2 += d * d;  // d < 2^11
    t.nz += 1;
    t.depth = max(t.depth, d);
    u32 tz = lo != 0u ? (u32)__ffs((int)lo) - 1u : 31u + (u32)__ffs((int)mh);
    t.span = max(t.span, d + 52u - tz);
}

// A fast_entry's terms with S's, abs1's and abs2's sums on the FP64 pipe (the integer pipe
// bounds line_add_fast): each is the definition's floor or ceiling of one product,
//   abar = max(ceil(RN(|x| 2^(5 - e))), 1), abs1 = floor(RN(|x| 2^(40 - e))) (2^(5 - e) and
//   2^(40 - e) normal: scale2's single multiplication), abs2 as line_add_fast,
// each value below 2^52, so one add of 2^52 rounding up (ceil) or down (floor) leaves
// 2^52 plus the integer, and subtracting 2^52 gives it exactly; the sums stay exact.
__device__ __forceinline__ void line_add_fast(LineAccT<u32, double>& t, u64 b, const LineExp& L) {
    const double two52 = 4503599627370496.0;
    u32 hi = (u32)(b >> 32), lo = (u32)b;
    u32 d = L.eb - (hi >> 20);
    double a = __longlong_as_double((long long)b);
    double c = fmax(__dsub_rn(__dadd_ru(__dmul_rn(a, L.p5), two52), two52), 1.0);
    t.s = __fma_rn(c, c, t.s);
    t.a1 = __dadd_rn(t.a1, __dsub_rn(__dadd_rd(__dmul_rn(a, L.p40), two52), two52));
    double y = __dmul_rn(a, L.p20);
    t.a2 = __dadd_rn(t.a2, __dsub_rn(__dadd_rd(__dmul_rn(y, y), two52), two52));
    t.ld += d;
    t.ld2 += d * d;  // d < 2^11
    t.nz += 1;
    t.depth = max(t.depth, d);
    u32 mh = hi & 0xfffffu;  // ctz(M) = ctz(M >> 32) + 32 when lo = 0, with M's bit 52
    u32 tz = lo != 0u ? (u32)__ffs((int)lo) - 1u : 31u + (u32)__ffs((int)(mh | 0x100000u));
    t.span = max(t.span, d + 52u - tz);
}

// One entry's terms (zeros add nothing).
__device__ __forceinline__ void line_add(LineAcc& t, double v, const LineExp& L) {
    u64 b = abs_bits(v);
    if (fast_entry(b, L))
        line_add_fast(t, b, L);
    else if (b != 0)
        line_add_exact(t, b, L.e);
}

// Combines the accumulators of the lanes `off`, 2 off, ... 16 apart (off a power of two).
__device__ __forceinline__ void line_acc_reduce(LineAcc& t, int off) {
    for (; off < 32; off <<= 1) {
        t.s += __shfl_xor_sync(0xffffffffu, t.s, off);
        t.a1 += __shfl_xor_sync(0xffffffffu, t.a1, off);
        t.a2 += __shfl_xor_sync(0xffffffffu, t.a2, off);
        t.ld += __shfl_xor_sync(0xffffffffu, t.ld, off);
        t.ld2 += __shfl_xor_sync(0xffffffffu, t.ld2, off);
        t.nz += __shfl_xor_sync(0xffffffffu, t.nz, off);
        t.depth = max(t.depth, __shfl_xor_sync(0xffffffffu, t.depth, off));
        t.span = max(t.span, __shfl_xor_sync(0xffffffffu, t.span, off));
    }
}

__device__ __forceinline__ void line_flush(const LineAcc& t, u64* __restrict__ stats, long long stride, int row) {
    atomicAdd(&stats[row], t.s);
    atomicAdd(&stats[stride + row], t.a1);
    atomicAdd(&stats[2 * stride + row], t.a2);
    atomicAdd(&stats[3 * stride + row], t.ld);
    atomicAdd(&stats[4 * stride + row], t.ld2);
    atomicAdd(&stats[5 * stride + row], t.nz);
    u32* range = (u32*)&stats[6 * stride + row];
    atomicMax(&range[0], t.depth);
    atomicMax(&range[1], t.span);
}

// One warp per row; row elements contiguous (x[l + row*ld]). Zero and non-finite rows
// (max bit pattern 0 or >= 0x7ff0...) are skipped: their statistics stay 0 (the host routes
// non-finite calls to native before using them).
extern "C" __global__ void line_stats_contig(const double* __restrict__ x, long long ld, int rows, int kdim,
                                             const u64* __restrict__ maxbits, u64* __restrict__ stats,
                                             long long stride) {
    int row = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    u64 mb = maxbits[row];
    if (mb == 0 || mb >= 0x7ff0000000000000ull) return;
    LineExp L = line_exp(mb);
    const double* p = x + (long long)row * ld;
    LineAcc t;
    line_acc_zero(t);
#pragma unroll 4
    for (int l = lane; l < kdim; l += 32) line_add(t, p[l], L);
    line_acc_reduce(t, 1);
    if (lane == 0) line_flush(t, stats, stride, row);
}

// One thread per row, rows contiguous (x[row + l*ld]); blockIdx.y takes a chunk of l.
extern "C" __global__ void line_stats_strided(const double* __restrict__ x, long long ld, int rows, int kdim,
                                              int lchunk, const u64* __restrict__ maxbits, u64* __restrict__ stats,
                                              long long stride) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    u64 mb = maxbits[row];
    if (mb == 0 || mb >= 0x7ff0000000000000ull) return;
    LineExp L = line_exp(mb);
    int l0 = blockIdx.y * lchunk;
    int l1 = min(kdim, l0 + lchunk);
    LineAcc t;
    line_acc_zero(t);
#pragma unroll 4
    for (int l = l0; l < l1; ++l) line_add(t, x[row + (long long)l * ld], L);
    line_flush(t, stats, stride, row);
}

// ---- Scan and statistics in one read of the operand ----
// R lines per block of T threads (C = T / R per line, W = T / 32 warps; lane i of each warp
// serves line i % R): the block reduces its lines' maxima, forms their statistics from the
// same entries and writes maxima, sum |x| and statistics (plain stores: the block owns its
// lines; the statistics of zero and non-finite lines stay the 0 the buffer was cleared to).
// The values are scan_rows_*'s and line_stats_*'s (sums of exact integers; sum |x|, which no
// decision reads, in another order). A thread sums at most 32 entries (u32 small sums).
template <int R, int W>
struct LineBlock {
    u64 max[W][R];
    double sum[W][R];
    u64 acc[6][W][R];
    u32 range[2][W][R];
};

// The first half: every thread's partial maximum and sum |x| of its line; returns the line's
// maximum (to every thread of the line).
template <int R, int W>
__device__ __forceinline__ u64 line_block_max(LineBlock<R, W>& sh, u64 mx, double sum) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = R; off < 32; off <<= 1) {
        u64 o = __shfl_xor_sync(0xffffffffu, mx, off);
        mx = o > mx ? o : mx;
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (lane < R) {
        sh.max[warp][lane] = mx;
        sh.sum[warp][lane] = sum;
    }
    __syncthreads();
    int r = threadIdx.x % R;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        u64 o = sh.max[w][r];
        mx = o > mx ? o : mx;
    }
    return mx;
}

// The second half: every thread's partial statistics of its line; thread r < R (the first
// of line r) writes line r's results.
template <int R, int W, typename A>
__device__ __forceinline__ void line_block_write(LineBlock<R, W>& sh, const LineAccT<u32, A>& acc, int row, bool live,
                                                 bool keyed, u64 mx, u64* __restrict__ maxbits,
                                                 double* __restrict__ abssum, u64* __restrict__ stats,
                                                 long long stride) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    LineAcc t = {(u64)acc.s, (u64)acc.a1, (u64)acc.a2, acc.ld, acc.ld2, acc.nz, acc.depth, acc.span};
    line_acc_reduce(t, R);
    if (lane < R) {
        sh.acc[0][warp][lane] = t.s;
        sh.acc[1][warp][lane] = t.a1;
        sh.acc[2][warp][lane] = t.a2;
        sh.acc[3][warp][lane] = t.ld;
        sh.acc[4][warp][lane] = t.ld2;
        sh.acc[5][warp][lane] = t.nz;
        sh.range[0][warp][lane] = t.depth;
        sh.range[1][warp][lane] = t.span;
    }
    __syncthreads();
    int r = threadIdx.x;
    if (r >= R || !live) return;
    double total = 0.0;
    u64 s[6] = {0, 0, 0, 0, 0, 0};
    u32 depth = 0, span = 0;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        total += sh.sum[w][r];
#pragma unroll
        for (int f = 0; f < 6; ++f) s[f] += sh.acc[f][w][r];
        depth = max(depth, sh.range[0][w][r]);
        span = max(span, sh.range[1][w][r]);
    }
    maxbits[row] = mx;
    abssum[row] = total;
    if (!keyed) return;
#pragma unroll
    for (int f = 0; f < 6; ++f) stats[f * stride + row] = s[f];
    stats[6 * stride + row] = (u64)depth | (u64)span << 32;
}

// Contiguous lines (x[l + row*ld]), one per block, each thread holding its V entries in
// registers between the halves: kdim <= T V.
template <int T, int V, typename A>
__device__ __forceinline__ void scan_stats_regs(const double* __restrict__ x, long long ld, int rows, int kdim,
                                                u64* __restrict__ maxbits, double* __restrict__ abssum,
                                                u64* __restrict__ stats, long long stride, int with_stats) {
    __shared__ LineBlock<1, T / 32> sh;
    int c = threadIdx.x, row = blockIdx.x;
    const double* p = x + (long long)row * ld + c;
    double v[V];
    u64 mx = 0;
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = c + T * j < kdim ? p[T * j] : 0.0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        u64 b = abs_bits(v[j]);
        mx = b > mx ? b : mx;
        sum += __longlong_as_double((long long)b);
    }
    mx = line_block_max(sh, mx, sum);
    bool keyed = with_stats && mx != 0 && mx < 0x7ff0000000000000ull;
    LineAccT<u32, A> acc;
    line_acc_zero(acc);
    if (keyed) {
        LineExp L = line_exp(mx);
        u32 rest = 0;  // the entries line_add_exact takes (rare), after the others
#pragma unroll
        for (int j = 0; j < V; ++j) {
            u64 b = abs_bits(v[j]);
            if (fast_entry(b, L))
                line_add_fast(acc, b, L);
            else if (b != 0)
                rest |= 1u << j;
        }
        if (rest != 0) {
#pragma unroll
            for (int j = 0; j < V; ++j)
                if (rest >> j & 1u) line_add_exact(acc, abs_bits(v[j]), L.e);
        }
    }
    line_block_write(sh, acc, row, true, keyed, mx, maxbits, abssum, stats, stride);
}

// Each thread's entries read again in the second half instead of held in registers: the
// first half has just brought them into the SM's L1 (R kdim 8 bytes per block), so the
// operand leaves memory once while that fits. CONTIG: contiguous lines (x[l + row*ld]),
// R = 1; else adjacent lines (x[row + l*ld]), R per block (8 R contiguous bytes per index l;
// R = 4: whole 32-byte sectors). kdim <= 32 (T / R).
template <int R, int T, bool CONTIG, typename A>
__device__ __forceinline__ void scan_stats_reread(const double* __restrict__ x, long long ld, int rows, int kdim,
                                                  u64* __restrict__ maxbits, double* __restrict__ abssum,
                                                  u64* __restrict__ stats, long long stride, int with_stats) {
    constexpr int C = T / R;
    __shared__ LineBlock<R, T / 32> sh;
    int r = threadIdx.x % R, c = threadIdx.x / R;
    int row = blockIdx.x * R + r;
    bool live = row < rows;
    const double* p = x + (live ? (CONTIG ? (long long)row * ld : row) : 0);
    long long at = CONTIG ? 1 : ld;  // from one index l to the next
    int kmine = live ? kdim : 0;
    u64 mx = 0;
    double sum = 0.0;
#pragma unroll 4
    for (int l = c; l < kmine; l += C) {
        u64 b = abs_bits(p[(long long)l * at]);
        mx = b > mx ? b : mx;
        sum += __longlong_as_double((long long)b);
    }
    mx = line_block_max(sh, mx, sum);
    bool keyed = with_stats && live && mx != 0 && mx < 0x7ff0000000000000ull;
    LineAccT<u32, A> acc;
    line_acc_zero(acc);
    if (keyed) {
        LineExp L = line_exp(mx);
#pragma unroll 4
        for (int l = c; l < kdim; l += C) {
            u64 b = abs_bits(p[(long long)l * at]);
            if (fast_entry(b, L))
                line_add_fast(acc, b, L);
            else if (b != 0)
                line_add_exact(acc, b, L.e);
        }
    }
    line_block_write(sh, acc, row, live, keyed, mx, maxbits, abssum, stats, stride);
}

// with_stats = 0: the maxima and sum |x| alone (what the scan costs in the same form, for
// measuring what the statistics add; the statistics stay 0).
#define SCAN_STATS_ARGS                                                                                   \
    const double *__restrict__ x, long long ld, int rows, int kdim, u64 *__restrict__ maxbits,           \
        double *__restrict__ abssum, u64 *__restrict__ stats, long long stride, int with_stats
#define SCAN_STATS_PASS x, ld, rows, kdim, maxbits, abssum, stats, stride, with_stats

// Contiguous lines, kdim <= 4096 and kdim <= 8192.
extern "C" __global__ void __launch_bounds__(256) scan_stats_contig_16(SCAN_STATS_ARGS) {
    scan_stats_regs<256, 16, u64>(SCAN_STATS_PASS);
}
extern "C" __global__ void __launch_bounds__(256) scan_stats_contig_32(SCAN_STATS_ARGS) {
    scan_stats_regs<256, 32, u64>(SCAN_STATS_PASS);
}
// Adjacent lines, kdim <= 8192: four per block of 1024 threads, or two per block of 512.
extern "C" __global__ void __launch_bounds__(1024) scan_stats_strided_4(SCAN_STATS_ARGS) {
    scan_stats_reread<4, 1024, false, u64>(SCAN_STATS_PASS);
}
extern "C" __global__ void __launch_bounds__(512) scan_stats_strided_2(SCAN_STATS_ARGS) {
    scan_stats_reread<2, 512, false, u64>(SCAN_STATS_PASS);
}
// Adjacent lines, kdim <= 4096: four per block of 512 threads.
extern "C" __global__ void __launch_bounds__(512) scan_stats_strided_4_narrow(SCAN_STATS_ARGS) {
    scan_stats_reread<4, 512, false, u64>(SCAN_STATS_PASS);
}
// Contiguous lines, one per block of 256 threads reading their entries twice: kdim <= 8192.
extern "C" __global__ void __launch_bounds__(256) scan_stats_contig_reread(SCAN_STATS_ARGS) {
    scan_stats_reread<1, 256, true, u64>(SCAN_STATS_PASS);
}
// As scan_stats_contig_16 and scan_stats_strided_4_narrow with the sums of S, abs1 and abs2
// on the FP64 pipe (line_add_fast's double overload).
extern "C" __global__ void __launch_bounds__(256) scan_stats_contig_16_fp(SCAN_STATS_ARGS) {
    scan_stats_regs<256, 16, double>(SCAN_STATS_PASS);
}
extern "C" __global__ void __launch_bounds__(512) scan_stats_strided_4_narrow_fp(SCAN_STATS_ARGS) {
    scan_stats_reread<4, 512, false, double>(SCAN_STATS_PASS);
}

// ---- Shifts on the device: sigma_i = table[class(S_i)] - e_i per line ----
// The shift of a line depends on its coarse square sum S only through its class (0 for S = 0,
// clog2(S) + 1 otherwise; `norm_class` in src/ozaki.rs), so the host sends a 66-entry table,
// p(class) + COARSE_BITS - 1 for the call's moduli count (fast scaling: one value for every
// class; its S are zero), and the lines never travel to the host and back before the residues.
// Zero lines keep shift 0; non-finite maxima get 0 too (the host then refuses the call).
extern "C" __global__ void line_shifts(const u64* __restrict__ maxbits, const u64* __restrict__ sq, int lines,
                                       const int* __restrict__ table, int* __restrict__ shift) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= lines) return;
    u64 mb = maxbits[i];
    if (mb == 0 || mb >= 0x7ff0000000000000ull) {
        shift[i] = 0;
        return;
    }
    u64 s = sq[i];
    int cls = s == 0 ? 0 : (s == 1 ? 1 : 65 - __clzll((long long)(s - 1)));
    shift[i] = table[cls] - exponent_of_bits(mb);
}

// ---- The accuracy rule's side summaries (ozaki-core rule/summary.rs) ----
// One thread per line: the line's keys from its statistics (the slots line_stats_* summed),
// then atomic maxima / bit sets into its side's summary (op(A)'s rows: lines below `split`,
// op(B)'s columns: the others), a fixed-size block of u32 words the host reads instead of the
// per-line table. The keys are `LineKey::of` in summary.rs: the same IEEE operations in the
// same order (the _rn intrinsics keep nvrtc from contracting them into fmas) and the same
// log2 table (from the host), so the words equal the host's `SideSummary` for the same
// statistics. Layout constants: summary.rs (checked by the gpu-kernels unit tests).
#define SUMMARY_SPANS 63
#define CONC_OFFSET 319
#define CONC_AT 2
#define CLASS_AT 22
#define CELLS_AT 26
#define SUMMARY_WORDS 16658
#define KEY_BIAS (1ll << 30)

struct SummaryParams {
    double table[257];    // log2(1 + i/256)
    double log2_k;        // log2_fast(k)
    long long g_star;     // the last g whose allowance is the floor
    int normwise;         // qt = 0
    int fixed_class;      // >= 0: every line's shift class (fast scaling); -1: from S
};

__device__ __forceinline__ double log2_fast(double x, const SummaryParams& p) {
    u64 bits = (u64)__double_as_longlong(x); // x >= 1: normal
    int e = (int)(bits >> 52) - 1023;
    double m = __longlong_as_double((long long)((bits & ((1ull << 52) - 1)) | (1023ull << 52)));
    double f = __dmul_rn(__dsub_rn(m, 1.0), 256.0);
    int i = min((int)f, 255);
    double w = __dsub_rn(f, (double)i);
    return __dadd_rn(__dadd_rn((double)e, p.table[i]), __dmul_rn(__dsub_rn(p.table[i + 1], p.table[i]), w));
}

// ceil(4 x) (up) or floor(4 x) as the rule's `quarters`.
__device__ __forceinline__ long long quarters(double x, bool up) {
    double y = __dmul_rn(4.0, x);
    long long t = (long long)y;
    if (up && (double)t < y) return t + 1;
    if (!up && (double)t > y) return t - 1;
    return t;
}

// atomicMax that first reads the word: a stale (older, so smaller) read only costs an atomic
// that was not needed.
__device__ __forceinline__ void raise_to(u32* w, u32 v) {
    if (__ldcg(w) < v) atomicMax(w, v);
}

// The lanes of `live` (each calls this once, with its own word) that name the same word
// combine their values first, and one of them updates it: all lines of a side tend to hit
// the same few words, and one atomic per warp and word instead of one per line keeps them
// from queueing on those words.
__device__ __forceinline__ void warp_raise(unsigned live, u32* w, u32 v) {
    unsigned group = __match_any_sync(live, (unsigned long long)w);
    v = __reduce_max_sync(group, v);
    if ((int)(threadIdx.x & 31) == __ffs(group) - 1) raise_to(w, v);
}

__device__ __forceinline__ void warp_set_bit(unsigned live, u32* w, int bit) {
    u32* word = w + (bit >> 5);
    unsigned group = __match_any_sync(live, (unsigned long long)word);
    u32 m = __reduce_or_sync(group, 1u << (bit & 31));
    if ((int)(threadIdx.x & 31) == __ffs(group) - 1 && (__ldcg(word) & m) != m) atomicOr(word, m);
}

__device__ __forceinline__ u32 enc_key(long long v) {
    v = v < 1 - KEY_BIAS ? 1 - KEY_BIAS : (v > KEY_BIAS - 1 ? KEY_BIAS - 1 : v);
    return (u32)(v + KEY_BIAS);
}

// stats: STAT_SLOTS u64 slots of `stride` lines (maxbits, sum |x|, S, abs1, abs2, log_depth,
// log_depth_sq, nonzeros, range); summaries: two blocks of SUMMARY_WORDS u32 (one for syrk).
extern "C" __global__ void line_summary(const u64* __restrict__ stats, long long stride, int lines, int split,
                                        SummaryParams p, u32* __restrict__ summaries) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // every lane of the warp is here (blocks of whole warps): the side maxima first, one
    // atomic per warp and side (a u64 maximum is the maximum of the high halves, then of the
    // low halves that go with it)
    bool in = i < lines;
    u32* w = summaries + (i < split ? 0 : SUMMARY_WORDS);
    u64 mb = in ? stats[i] : 0;
    unsigned group = __match_any_sync(0xffffffffu, (unsigned long long)w);
    u32 hi = __reduce_max_sync(group, (u32)(mb >> 32));
    u32 lo = __reduce_max_sync(group, (u32)(mb >> 32) == hi ? (u32)mb : 0u);
    u64 top = (u64)hi << 32 | lo;
    if ((int)(threadIdx.x & 31) == __ffs(group) - 1 && __ldcg((u64*)w) < top) atomicMax((u64*)w, top);
    u64 nz = in ? stats[7 * stride + i] : 0;
    bool keyed = in && mb != 0 && mb < 0x7ff0000000000000ull && nz != 0;
    unsigned live = __ballot_sync(0xffffffffu, keyed);
    if (!keyed) return;
    u64 s = stats[2 * stride + i], a1 = stats[3 * stride + i], a2 = stats[4 * stride + i];
    u64 ld = stats[5 * stride + i], ld2 = stats[6 * stride + i], range = stats[8 * stride + i];
    double n1 = __dsub_rn(log2_fast(__ull2double_rn(a1 > 1 ? a1 : 1), p), 40.0);
    double n2 = __dmul_rn(0.5, __dsub_rn(log2_fast(__ull2double_rn(a2 > 1 ? a2 : 1), p), 40.0));
    double d = fmin(__dsub_rn(n2, n1), 0.0);
    long long g = quarters(d, false), g_up = quarters(d, true);
    long long qt = 0;
    if (!p.normwise) {
        double nzd = __ull2double_rn(nz);
        double mean = __ddiv_rn(__ull2double_rn(ld), nzd);
        double var = fmax(__dsub_rn(__ddiv_rn(__ull2double_rn(ld2), nzd), __dmul_rn(mean, mean)), 0.0);
        double lognormal = __dadd_rn(-mean, fmin(__ddiv_rn(__dmul_rn(var, 0.6931471805599453), 2.0), 4.0));
        double typical = fmin(lognormal, __dsub_rn(n1, p.log2_k));
        qt = quarters(-typical, true);
    }
    int cls = p.fixed_class >= 0 ? p.fixed_class : (s == 0 ? 0 : (s == 1 ? 1 : 65 - __clzll((long long)(s - 1))));
    int span = (int)min(range >> 32, (u64)(SUMMARY_SPANS - 1));
    u32 depth = (u32)(range & 0xffffffffull);
    bool up = g_up > g;
    if (g < -CONC_OFFSET) g = -CONC_OFFSET;
    warp_set_bit(live, w + CONC_AT, (int)(2 * (g + CONC_OFFSET)) + (up ? 1 : 0));
    warp_set_bit(live, w + CLASS_AT, cls);
    u32* cell = w + CELLS_AT + 4 * (cls * SUMMARY_SPANS + span);
    warp_raise(live, cell, enc_key(qt));
    // the allowance's branch (summary.rs): every live lane makes this one call
    bool at_floor = g <= p.g_star;
    warp_raise(live, cell + (at_floor ? 1 : 2), enc_key(at_floor ? qt : qt - g));
    warp_raise(live, cell + 3, depth + 1);
}
