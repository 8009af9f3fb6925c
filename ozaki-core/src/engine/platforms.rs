//! Built-in parameter sets for what-if projections: the Ozaki 2.5 paper's
//! platforms (Rubin, GB300, B200) and the H200 datasheet, evaluated by the paper's reduced
//! model ([`super::reduced`]). Device-resident, datasheet constants: projections, never
//! measurements (brief caveat 1). Values and their sources are in the brief §4.11 and §9.1.

use serde::Serialize;

/// The low-precision substrate a route's products run on; it sets α, the products per fp64
/// product (brief §0): fp8 digit planes need 3r+1, INT8 byte moduli r+1 (accurate mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Substrate {
    /// e4m3 planes, α = 3r+1.
    Fp8,
    /// int8 byte moduli, α = r+1.
    Int8,
}

/// One route of the paper's menu (Table 2/3) or its INT8 transfer (brief §9.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaperRoute {
    /// Route name (`S0`, `S2L`, `Et`, `At`, `Dt`, `L1d`, `Adp`, `I15dp`, ...).
    pub name: &'static str,
    /// Modulus set (S, E, A, D, or `byte`).
    pub set: &'static str,
    /// Number of moduli r.
    pub r: u32,
    /// INT8-tensor MACs per streamed element for the reduction (0 for SIMT/dp4a routes).
    pub a_int8: f64,
    /// SIMT instructions per modulus per converted element (c_q^res; total c_q on SIMT routes).
    pub c_res: f64,
    /// Stored plane bytes per scalar (p_store).
    pub p_store: f64,
    /// Product substrate.
    pub substrate: Substrate,
}

impl PaperRoute {
    /// Low-precision products per fp64 product.
    pub fn alpha(&self) -> f64 {
        match self.substrate {
            Substrate::Fp8 => 3.0 * self.r as f64 + 1.0,
            Substrate::Int8 => self.r as f64 + 1.0,
        }
    }

    /// Garner narrow-int ops per output, r(r−1)/2 + 2r (brief §0).
    pub fn n_gamma(&self) -> f64 {
        let r = self.r as f64;
        r * (r - 1.0) / 2.0 + 2.0 * r
    }
}

/// A platform's constants (brief §4.11 "engine constants" for the fixed geometry).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Platform {
    /// Name for `--platform`.
    pub name: &'static str,
    /// What it is and where the numbers come from.
    pub description: &'static str,
    /// Dense rate of the product substrate (fp8 FLOP/s or int8 op/s).
    pub p_low: f64,
    /// Dense INT8 tensor rate available to tensor-hosted reductions (op/s, 2 per MAC).
    pub p_i8tc: f64,
    /// SIMT/integer-pipe instruction rate I_SIMT (inst/s).
    pub i_simt: f64,
    /// HBM bandwidth, B/s.
    pub b_mem: f64,
    /// L2 service bandwidth, B/s (an assumption: 4 × HBM).
    pub b_l2: f64,
    /// L2 capacity, bytes.
    pub c_l2: f64,
    /// Flat native fp64 DGEMM rate used as the "vs native" reference, FLOP/s.
    pub native_fp64: f64,
    /// Accumulator tile edge T.
    pub tile: f64,
    /// CTAs per cluster C.
    pub cluster_ctas: f64,
    /// Cluster reach R* (Eq. 19).
    pub reach: f64,
    /// k-slab depth for split-k.
    pub k_slab: f64,
    /// Routes carried by the switched dispatch.
    pub routes: Vec<PaperRoute>,
    /// The shipping baseline route ("vs ship").
    pub baseline: &'static str,
}

impl Platform {
    /// A route of this platform's menu by name.
    pub fn route(&self, name: &str) -> Option<&PaperRoute> {
        self.routes.iter().find(|r| r.name == name)
    }
}

const fn fp8(
    name: &'static str,
    set: &'static str,
    r: u32,
    a_int8: f64,
    c_res: f64,
    p_store: f64,
) -> PaperRoute {
    PaperRoute {
        name,
        set,
        r,
        a_int8,
        c_res,
        p_store,
        substrate: Substrate::Fp8,
    }
}

const fn int8(name: &'static str, r: u32, c_res: f64) -> PaperRoute {
    PaperRoute {
        name,
        set: "byte",
        r,
        a_int8: 0.0,
        c_res,
        p_store: r as f64,
        substrate: Substrate::Int8,
    }
}

/// The paper's fp8 route menu (Table 2), including `Dt`, which the paper does not carry.
/// c_q^res: S 70/12, E 69/13, A 5.27 (the §7 value that reproduces k ≈ 6777; brief §10.10),
/// D 4/17+5; dp4a totals 10.3 (L1d) and 7.3 (Adp) by their instruction counts; S0 16.
pub fn paper_fp8_routes() -> Vec<PaperRoute> {
    vec![
        fp8("S0", "S", 12, 0.0, 16.0, 30.0),
        fp8("S2L", "S", 12, 176.0, 70.0 / 12.0, 30.0),
        fp8("Et", "E", 13, 136.0, 69.0 / 13.0, 33.0),
        fp8("At", "A", 15, 112.0, 5.27, 44.0),
        fp8("Dt", "D", 17, 128.0, 4.0 / 17.0 + 5.0, 50.0),
        fp8("L1d", "S", 12, 0.0, 4.0 / 12.0 + 10.0, 30.0),
        fp8("Adp", "A", 15, 0.0, 4.0 / 15.0 + 7.0, 44.0),
    ]
}

fn carried() -> Vec<PaperRoute> {
    paper_fp8_routes()
        .into_iter()
        .filter(|r| r.name != "Dt")
        .collect()
}

/// The paper's engine geometry: T = 64, C = 16, R* = 256, K_slab = 4096.
const GEOMETRY: (f64, f64, f64, f64) = (64.0, 16.0, 256.0, 4096.0);

/// Rubin (HGX/DGX NVL8 preliminary): fp8 17.5 PF, int8 250 TOPS, I_SIMT 75 T (presumed),
/// HBM 22 TB/s, L2 126 MB, native 30 TF illustrative (brief §4.11).
pub fn rubin() -> Platform {
    Platform {
        name: "rubin",
        description: "Rubin per GPU, paper constants (fp8 17.5 PF, int8 250 TOPS, I_SIMT 75 T, HBM 22 TB/s, L2 126 MB, native 30 TF)",
        p_low: 17.5e15,
        p_i8tc: 250e12,
        i_simt: 75e12,
        b_mem: 22e12,
        b_l2: 88e12,
        c_l2: 126e6,
        native_fp64: 30e12,
        tile: GEOMETRY.0,
        cluster_ctas: GEOMETRY.1,
        reach: GEOMETRY.2,
        k_slab: GEOMETRY.3,
        routes: carried(),
        baseline: "S0",
    }
}

/// GB300 (NVL72-derived per GPU): fp8 5 PF, int8 166 TOPS, I_SIMT 75 T, HBM 8 TB/s,
/// native 1.4 TF (brief §4.11). The int8 rate is Table 3's printed 166 TOPS: the tables'
/// rounded cells (e.g. S two-limb 60 TF at n̄ = 128, the A→E switch at 178) reproduce with it
/// and not with the 166.7 of 24 POPS/72/2.
pub fn gb300() -> Platform {
    Platform {
        name: "gb300",
        description: "GB300 per GPU, paper constants (fp8 5 PF, int8 166 TOPS, I_SIMT 75 T, HBM 8 TB/s, L2 126 MB assumed, native 1.4 TF)",
        p_low: 5e15,
        p_i8tc: 166e12,
        i_simt: 75e12,
        b_mem: 8e12,
        b_l2: 32e12,
        c_l2: 126e6,
        native_fp64: 1.4e12,
        routes: carried(),
        ..rubin()
    }
}

/// B200 on its INT8 CRT path (brief §4.3): int8 4500 TOPS, α = r+1 with r = 15, the
/// shipping conversion c_q = 13 (n* ≈ 730) and a dp4a-grade 4.3 for comparison; HBM 8 TB/s,
/// native fp64 40 TF [datasheet, unverified].
pub fn b200() -> Platform {
    Platform {
        name: "b200",
        description: "B200, INT8 CRT substrate (int8 4500 TOPS, I_SIMT 75 T, HBM 8 TB/s, L2 126 MB assumed, native 40 TF datasheet)",
        p_low: 4.5e15,
        p_i8tc: 4.5e15,
        i_simt: 75e12,
        b_mem: 8e12,
        b_l2: 32e12,
        c_l2: 126e6,
        native_fp64: 40e12,
        routes: vec![
            int8("I15ship", 15, 13.0),
            int8("I15dp", 15, 4.0 / 15.0 + 4.0),
        ],
        baseline: "I15ship",
        ..rubin()
    }
}

/// H200 datasheet (brief §9.1–9.3): INT8 = FP8 = 1979 T dense, I_SIMT 16.7 T (INT32 lanes),
/// HBM 4.8 TB/s, L2 50 MB, native fp64 tensor 67 TF; INT8 byte-moduli routes with the
/// dp4a residue (≈4.3/modulus), the FP64-FMA residue (≈3.8) and a shipping-like c_q = 13.
/// The host link is not in this model (use a measured profile for that).
pub fn h200_datasheet() -> Platform {
    Platform {
        name: "h200-datasheet",
        description: "H200 datasheet, device-resident (int8 1979 TOPS, I_SIMT 16.7 T, HBM 4.8 TB/s, L2 50 MB, native 67 TF); no host link",
        p_low: 1979e12,
        p_i8tc: 1979e12,
        i_simt: 16.7e12,
        b_mem: 4.8e12,
        b_l2: 19.2e12,
        c_l2: 50e6,
        native_fp64: 67e12,
        routes: vec![
            int8("I14dp", 14, 4.0 / 14.0 + 4.0),
            int8("I15dp", 15, 4.0 / 15.0 + 4.0),
            int8("I16dp", 16, 4.0 / 16.0 + 4.0),
            int8("I15fma", 15, 4.0 / 15.0 + 3.5),
            int8("I15ship", 15, 13.0),
        ],
        baseline: "I15ship",
        ..rubin()
    }
}

/// Every built-in platform.
pub fn all() -> Vec<Platform> {
    vec![rubin(), gb300(), b200(), h200_datasheet()]
}

/// A platform by name (case-insensitive; `h200` also finds `h200-datasheet`).
pub fn by_name(name: &str) -> Option<Platform> {
    let n = name.to_ascii_lowercase();
    all()
        .into_iter()
        .find(|p| p.name == n || (n == "h200" && p.name == "h200-datasheet"))
}
