// Ozaki scheme II on INT8 tensor cores: the SIMT stages around the int8 products (issue #4).
//
// Compiled at run time by NVRTC for the device's own architecture (sm_90a on the H200) and
// cached as CUBIN (see src/nvrtc_cache.rs). The pipeline per call is
//   scan_rows_*   : max |x| per row of op(A) / column of op(B) as IEEE bit patterns
//                   (NaN/Inf show up as bit patterns >= 0x7ff0...; the host then routes native)
//   residues      : z = rint(x * 2^shift) once per element, then the centred residue of z for
//                   every modulus, written as r int8 planes with the inner dimension contiguous
//                   ("TN" layout, what cuBLASLt's IMMA kernels want)
//   (cuBLASLt)    : r int8 x int8 -> int32 products, one strided batch
//   reconstruct[_w4]: CRT of the r int32 products into an exact multi-limb integer, signed lift,
//                   one correctly rounded conversion to fp64, unscaling by 2^-(sigma_i+tau_j),
//                   then C = alpha*P + beta*C (beta == 0: C is not read), optionally one triangle.
// Everything before the final conversion is exact integer arithmetic, so the result equals the
// CPU reference route's bit for bit when both use the same moduli, shifts and rounding.

typedef unsigned long long u64;
typedef unsigned int u32;

#define MAX_MODULI 20
#define LIMBS 6

// Residue formation table: moduli as doubles and their rounded reciprocals.
struct ResidueTable {
    int r;
    int two_step;  // |z| may reach 2^53 or more: reduce twice (else one step is exact)
    double m[MAX_MODULI];
    double inv_m[MAX_MODULI];
};

// CRT table: x = sum_p u_p * W_p mod M, W_p = (M/m_p) * ((M/m_p)^-1 mod m_p), 32-bit limbs.
struct CrtTable {
    int r;
    int pad_;
    double m[MAX_MODULI];
    double inv_m[MAX_MODULI];
    double big_m_approx;          // M as a double (rounded), for the quotient estimate
    u32 w[MAX_MODULI][LIMBS];
    u32 big_m[LIMBS];
    u32 half_m[LIMBS];            // ceil(M/2): x >= half_m lifts to x - M
    u32 mi[MAX_MODULI];           // m_p as an integer
    u32 magic[MAX_MODULI];        // floor(2^32 / m_p): Barrett quotient of a 32-bit word
    u32 wrap[MAX_MODULI];         // 2^32 mod m_p: undoes the two's-complement wrap of t < 0
};

// t mod m in [0, m) for any int32 t, in integer arithmetic (full-rate IMADs instead of the
// quarter-rate int <-> double conversions): x = t as u32 (= t + 2^32 when t < 0); the Barrett
// quotient q = floor(x magic / 2^32) is floor(x / m) or one less, so one subtraction finishes
// x mod m; a negative t then subtracts 2^32 mod m. The same value as an exact floor-mod.
__device__ __forceinline__ u32 mod_i32(int t, u32 m, u32 magic, u32 wrap) {
    u32 x = (u32)t;
    u32 q = __umulhi(x, magic);
    u32 u = x - q * m;
    if (u >= m) u -= m;
    if (t < 0) u = u >= wrap ? u - wrap : u + m - wrap;
    return u;
}

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
extern "C" __global__ void residues(const double* __restrict__ x, long long ld, int contig, int rows, int kdim,
                                    int kpad, const int* __restrict__ shift, ResidueTable tab,
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
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int a = ty + 8 * i;
        int row = r0 + a, l = l0 + 4 * tx;
        if (row >= rows || l >= kpad) continue;
        int sh = shift[row];
        double z[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) z[q] = rint(scalbn(tile[a][4 * tx + q], sh));
        unsigned int* o = (unsigned int*)(out + (long long)row * kpad + l);
        for (int p = 0; p < tab.r; ++p) {
            double m = tab.m[p], inv = tab.inv_m[p];
            unsigned int word = 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                // For |z| < 2^52 the rounded quotient is off by at most one and the fix-ups
                // below finish the job; larger |z| (an integer-valued double) needs a second
                // exact step, as the first leaves |t| <= |z| 2^-52 + m.
                double t = fma(-m, rint(z[q] * inv), z[q]);
                if (tab.two_step) t = fma(-m, rint(t * inv), t);
                if (t >= 0.5 * m) t -= m;
                if (t < -0.5 * m) t += m;
                word |= ((unsigned int)(int)t & 0xffu) << (8 * q);
            }
            o[(p * plane_stride) >> 2] = word;
        }
    }
}

// Correctly rounded (to nearest, ties to even) conversion of a LIMBS x 32-bit magnitude times
// 2^e to double. Exact except where the result is subnormal (second rounding in scalbn).
__device__ double limbs_to_double(const u32* x, int e) {
    // All indices below are compile-time constants after unrolling, so x stays in registers.
    int h = 0;
#pragma unroll
    for (int i = 1; i < LIMBS; ++i) if (x[i] != 0) h = i;
    if (h <= 1) {
        u64 v = ((u64)x[1] << 32) | x[0];
        return scalbn(__ull2double_rn(v), e);
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
    return scalbn(d, e + 32 * (h - 1) - s);
}

// x >= y for LIMBS-limb numbers (branch-free, unrolled).
__device__ __forceinline__ bool ge_limbs(const u32* x, const u32* y) {
    u64 borrow = 0;
#pragma unroll
    for (int i = 0; i < LIMBS; ++i) {
        u64 d = (u64)x[i] - y[i] - borrow;
        borrow = (d >> 63) & 1;
    }
    return borrow == 0;
}

// x -= y (x >= y).
__device__ __forceinline__ void sub_limbs(u32* x, const u32* y) {
    u64 borrow = 0;
#pragma unroll
    for (int i = 0; i < LIMBS; ++i) {
        u64 d = (u64)x[i] - y[i] - borrow;
        x[i] = (u32)d;
        borrow = (d >> 63) & 1;
    }
}

// One thread per output element of a column block. prod: r planes of rows x cols int32
// (column-major, leading dimension rows, planes prod_stride apart). sigma indexes rows,
// tau the block's columns; (row_off, col_off) place the block in C (for the triangle test).
// uplo: 0 whole block, 1 upper (i <= j), 2 lower (i >= j).
// WL: 32-bit limbs of the weights W_p < M that can be nonzero (4 while M < 2^128, i.e. up to
// 16 moduli; 5 for up to 20): the multiply-adds of the always-zero top limbs are skipped (the
// per-modulus limb products are what bounds this kernel), the sum is the same integer.
template <int WL>
__device__ __forceinline__ void reconstruct_impl(const int* __restrict__ prod, long long prod_stride, int rows, int cols,
                                                 const int* __restrict__ sigma, const int* __restrict__ tau, const CrtTable& tab,
                                                 double alpha, double beta, double* __restrict__ c, long long ldc,
                                                 int uplo, int row_off, int col_off) {
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)rows * cols) return;
    int i = (int)(idx % rows);
    int j = (int)(idx / rows);
    int gi = i + row_off, gj = j + col_off;
    if ((uplo == 1 && gi > gj) || (uplo == 2 && gi < gj)) return;

    u64 acc[WL];
#pragma unroll
    for (int l = 0; l < WL; ++l) acc[l] = 0;
    for (int p = 0; p < tab.r; ++p) {
        u32 uu = mod_i32(prod[p * prod_stride + idx], tab.mi[p], tab.magic[p], tab.wrap[p]);
#pragma unroll
        for (int l = 0; l < WL; ++l) acc[l] += (u64)uu * tab.w[p][l];
    }
    u32 x[LIMBS];
    u64 carry = 0;
#pragma unroll
    for (int l = 0; l < LIMBS; ++l) {
        u64 s = (l < WL ? acc[l < WL ? l : 0] : 0ull) + carry;
        x[l] = (u32)s;
        carry = s >> 32;
    }
    // x < r * 256 * M: estimate the quotient low, subtract q*M, then finish by subtraction.
    double xd = 0.0;
#pragma unroll
    for (int l = LIMBS - 1; l >= 0; --l) xd = xd * 4294967296.0 + (double)x[l];
    double qd = floor(xd / tab.big_m_approx) - 1.0;
    if (qd > 0.0) {
        u32 q = (u32)qd;
        u32 qm[LIMBS];
        u64 cy = 0;
#pragma unroll
        for (int l = 0; l < LIMBS; ++l) {
            u64 s = (u64)q * tab.big_m[l] + cy;
            qm[l] = (u32)s;
            cy = s >> 32;
        }
        sub_limbs(x, qm);
    }
    while (ge_limbs(x, tab.big_m)) sub_limbs(x, tab.big_m);
    bool neg = ge_limbs(x, tab.half_m);
    if (neg) {
        u32 mag[LIMBS];
#pragma unroll
        for (int l = 0; l < LIMBS; ++l) mag[l] = tab.big_m[l];
        sub_limbs(mag, x);
#pragma unroll
        for (int l = 0; l < LIMBS; ++l) x[l] = mag[l];
    }
    double v = limbs_to_double(x, -(sigma[i] + tau[j]));
    if (neg) v = -v;
    double* cp = c + i + (long long)j * ldc;
    // Separate rounded multiply and add (never contracted to an fma), as the CPU route does.
    double out = __dmul_rn(alpha, v);
    if (beta != 0.0) out = __dadd_rn(out, __dmul_rn(beta, *cp));
    *cp = out;
}

// Up to 20 moduli (M < 2^160: weights have 5 limbs).
extern "C" __global__ void reconstruct(const int* __restrict__ prod, long long prod_stride, int rows, int cols,
                                       const int* __restrict__ sigma, const int* __restrict__ tau, CrtTable tab,
                                       double alpha, double beta, double* __restrict__ c, long long ldc,
                                       int uplo, int row_off, int col_off) {
    reconstruct_impl<5>(prod, prod_stride, rows, cols, sigma, tau, tab, alpha, beta, c, ldc, uplo, row_off, col_off);
}

// Up to 16 moduli (M < 2^128: weights have 4 limbs).
extern "C" __global__ void reconstruct_w4(const int* __restrict__ prod, long long prod_stride, int rows, int cols,
                                          const int* __restrict__ sigma, const int* __restrict__ tau, CrtTable tab,
                                          double alpha, double beta, double* __restrict__ c, long long ldc,
                                          int uplo, int row_off, int col_off) {
    reconstruct_impl<4>(prod, prod_stride, rows, cols, sigma, tau, tab, alpha, beta, c, ldc, uplo, row_off, col_off);
}

// ---- Norm scaling (issue #4): S_i = sum_l abar_il^2 per row of op(A) / column of op(B) ----
// abar = ceil(|x| 2^(5 - e)) in [0, 64] with e = floor(log2 max|x|) of the line, exactly as
// ozaki-core's scaling.rs (step 2, `coarse`); the host turns the exact integer sums into the
// shifts (step 3, norm mode). Runs after scan_rows_* on the same stream: it reads their maxima.
// Integer sums, so the atomics make the result independent of the order.

// floor(log2 |x|) from a nonzero, finite |x| bit pattern (subnormals: their true exponent).
__device__ __forceinline__ int exponent_of_bits(u64 bits) {
    int biased = (int)(bits >> 52);
    return biased == 0 ? (63 - __clzll((long long)bits)) - 1074 : biased - 1023;
}

// abar^2 for one entry of a line with exponent e. scalbn is exact whenever its result is a
// normal number; a result below 2^-1022 may round (even to 0), but the ceiling of any value in
// (0, 1) is 1, which the max() restores.
__device__ __forceinline__ u64 coarse_sq(double v, int e) {
    if (v == 0.0) return 0;
    double c = fmax(ceil(scalbn(fabs(v), 5 - e)), 1.0);
    u64 ci = (u64)c;
    return ci * ci;
}

// One warp per row; row elements contiguous (x[l + row*ld]). Zero and non-finite rows
// (max bit pattern 0 or >= 0x7ff0...) are skipped: their sums stay 0 (the host routes
// non-finite calls to native before using them).
extern "C" __global__ void coarse_norms_contig(const double* __restrict__ x, long long ld, int rows, int kdim,
                                               const u64* __restrict__ maxbits, u64* __restrict__ sq) {
    int row = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    u64 mb = maxbits[row];
    if (mb == 0 || mb >= 0x7ff0000000000000ull) return;
    int e = exponent_of_bits(mb);
    const double* p = x + (long long)row * ld;
    u64 s = 0;
    for (int l = lane; l < kdim; l += 32) s += coarse_sq(p[l], e);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) atomicAdd(&sq[row], s);
}

// One thread per row, rows contiguous (x[row + l*ld]); blockIdx.y takes a chunk of l.
extern "C" __global__ void coarse_norms_strided(const double* __restrict__ x, long long ld, int rows, int kdim,
                                                int lchunk, const u64* __restrict__ maxbits, u64* __restrict__ sq) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    u64 mb = maxbits[row];
    if (mb == 0 || mb >= 0x7ff0000000000000ull) return;
    int e = exponent_of_bits(mb);
    int l0 = blockIdx.y * lchunk;
    int l1 = min(kdim, l0 + lchunk);
    u64 s = 0;
#pragma unroll 4
    for (int l = l0; l < l1; ++l) s += coarse_sq(x[row + (long long)l * ld], e);
    atomicAdd(&sq[row], s);
}
