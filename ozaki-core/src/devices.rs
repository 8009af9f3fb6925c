//! Which GPUs a process uses, and how one large call's C is split across them.
//!
//! ozaki-shim builds no distribution layer of its own: a user who outgrows one machine runs
//! MPI + ScaLAPACK (or ELPA, SLATE), and the shim sits under every rank. Two questions
//! remain for the shim, both answered here as pure logic so they can be tested without
//! a GPU or an MPI launcher:
//!
//! 1. **Which devices does this process own?** ([`DeviceAssignment::resolve`]) The
//!    host's device *pool* is `OZAKI_DEVICES=0,1,...` when set, else every visible device.
//!    The MPI launcher tells each rank its local rank and the number of ranks on its host
//!    ([`LauncherEnv`]); the pool is dealt out among the local ranks in balanced contiguous
//!    blocks (contiguous ordinals tend to share a PCIe switch / NVLink island). A process
//!    that is alone on its host owns the whole pool; when there are more local ranks than
//!    devices, ranks share devices round-robin.
//!    A device may appear several times in `OZAKI_DEVICES` (`OZAKI_DEVICES=0,0`): each
//!    entry is one *slot* with its own streams and workspace, so the split logic below can
//!    be exercised end to end on a single GPU.
//! 2. **How is one call split?** ([`split_c`]) A process that owns several slots tiles C
//!    into a balanced `pr x pc` grid, one tile per slot. Each slot computes
//!    `C_ij = alpha op(A)_i op(B)_j + beta C_ij` independently: it needs the `rows x k`
//!    panel of A and the `k x cols` panel of B, so for a fixed tile area the input traffic
//!    `k (rows + cols)` is smallest for square-ish tiles; that is what the grid choice
//!    minimises. Tiles never go below a minimum side, so a call too small to share well
//!    uses fewer slots (down to one, i.e. no split).
//!
//! The engine prices a split with [`price_split`]: it passes its own single-device cost
//! of one tile, and gets back the time of the slowest device, tiles that share an ordinal
//! being serialised. That is the whole seam between this module and the cost model.
//!
//! Status: `gpu-kernels` opens the first slot of [`DeviceAssignment::resolve`] (unless
//! `OZAKI_GPU` pins a device); `gpu_kernels::multi` executes a multi-slot [`SplitPlan`] for
//! host-resident dgemm (bit-identical to one device). The engine prices splits through
//! [`price_split`] (`engine::split`, with each device's calibrated rates and the shared host
//! link) and the shim splits a call only when that price beats one device, or when
//! `OZAKI_SPLIT=1` forces it (`OZAKI_SPLIT=0` never splits).

use std::collections::BTreeMap;
use std::fmt;

/// The environment variable that names the host's device pool (a user-facing name).
pub const DEVICES_VAR: &str = crate::env::DEVICES;

/// Launcher variables holding the rank in the whole job, first match wins:
/// Open MPI, MPICH/Intel MPI (Hydra, PMI-1/2), PMIx launchers, Slurm `srun`, MVAPICH2.
pub const WORLD_RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "MV2_COMM_WORLD_RANK",
];

/// Launcher variables holding the rank among the processes of this host, first match wins:
/// Open MPI, MPICH/Intel MPI (Hydra), Slurm `srun`, MVAPICH2, Cray PALS, Flux.
pub const LOCAL_RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
    "FLUX_TASK_LOCAL_ID",
];

/// Launcher variables holding the number of processes on this host, first match wins.
/// Slurm only exports a per-node task count for homogeneous layouts
/// (`SLURM_NTASKS_PER_NODE`), which is what is read here.
pub const LOCAL_SIZE_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "SLURM_NTASKS_PER_NODE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
    "PALS_LOCAL_SIZE",
];

/// What the MPI launcher (if any) says about this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LauncherEnv {
    /// Rank in the whole job (the `%r` of trace file names).
    pub world_rank: Option<u32>,
    /// Rank among the processes on this host.
    pub local_rank: Option<u32>,
    /// Number of processes on this host.
    pub local_size: Option<u32>,
}

impl LauncherEnv {
    /// Reads the launcher variables through `get` (normally `crate::env::var`;
    /// tests pass a map). Unparsable values count as absent: a launcher we misread must
    /// not stop the program, it only loses the rank-aware device choice.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> LauncherEnv {
        let first = |vars: &[&str]| {
            vars.iter()
                .find_map(|v| get(v).and_then(|s| s.trim().parse::<u32>().ok()))
        };
        LauncherEnv {
            world_rank: first(WORLD_RANK_VARS),
            local_rank: first(LOCAL_RANK_VARS),
            local_size: first(LOCAL_SIZE_VARS).filter(|&n| n > 0),
        }
    }

    /// Reads the launcher variables of this process.
    pub fn from_process_env() -> LauncherEnv {
        LauncherEnv::from_lookup(crate::env::var)
    }
}

/// Why a device assignment could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// `OZAKI_DEVICES` is not a comma-separated list of ordinals.
    Parse {
        /// The offending value.
        value: String,
    },
    /// `OZAKI_DEVICES` names an ordinal the driver does not show.
    NotVisible {
        /// The ordinal asked for.
        ordinal: u32,
        /// How many devices are visible.
        visible: u32,
    },
    /// No device is visible (and none was named).
    NoDevice,
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Parse { value } => {
                write!(
                    f,
                    "{DEVICES_VAR}={value:?} is not a comma-separated list of GPU ordinals (e.g. 0,1)"
                )
            }
            DeviceError::NotVisible { ordinal, visible } => {
                write!(
                    f,
                    "{DEVICES_VAR} names GPU {ordinal}, but only {visible} GPU(s) are visible"
                )
            }
            DeviceError::NoDevice => write!(f, "no GPU is visible"),
        }
    }
}

impl std::error::Error for DeviceError {}

/// Parses `OZAKI_DEVICES` (`"0,1"`, `" 0, 0 "`); repeats are kept (one slot each).
///
/// # Errors
/// - [`DeviceError::Parse`] for an empty list or an entry that is not an unsigned integer.
pub fn parse_devices(value: &str) -> Result<Vec<u32>, DeviceError> {
    let err = || DeviceError::Parse {
        value: value.to_string(),
    };
    let list: Vec<u32> = value
        .split(',')
        .map(|s| s.trim().parse::<u32>().map_err(|_| err()))
        .collect::<Result<_, _>>()?;
    if list.is_empty() {
        Err(err())
    } else {
        Ok(list)
    }
}

/// How this process's device list was chosen (for the trace and `OZAKI_LOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentSource {
    /// Alone on the host (or no launcher): the whole pool.
    WholePool,
    /// A block of the pool chosen by local rank.
    LocalRank {
        /// This process's local rank.
        local_rank: u32,
        /// Processes on this host (`None`: launcher did not say, one device per rank).
        local_size: Option<u32>,
    },
}

/// The device slots this process owns: `slots[i]` is the CUDA ordinal of slot `i`.
/// A slot is the unit that gets its own streams and workspace; the same ordinal may
/// back several slots (`OZAKI_DEVICES=0,0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAssignment {
    /// Ordinal of each slot, in pool order.
    pub slots: Vec<u32>,
    /// Whether the pool came from `OZAKI_DEVICES`.
    pub from_override: bool,
    /// How the slots were picked from the pool.
    pub source: AssignmentSource,
}

impl DeviceAssignment {
    /// Picks this process's slots from the pool.
    ///
    /// `devices_var` is the value of `OZAKI_DEVICES` (if set), `visible` the number of
    /// devices the driver shows. With `L` local ranks and a pool of `P` slots:
    /// `L <= 1` (or no launcher) takes all `P`; `L <= P` gives local rank `r` the `r`-th of
    /// `L` balanced contiguous blocks; `L > P`, or a local rank without a local size, gives
    /// rank `r` the single slot `r mod P`.
    ///
    /// # Errors
    /// - [`DeviceError::Parse`] / [`DeviceError::NotVisible`] for a bad `OZAKI_DEVICES`;
    /// - [`DeviceError::NoDevice`] when `visible == 0`.
    pub fn resolve(
        devices_var: Option<&str>,
        visible: u32,
        launcher: &LauncherEnv,
    ) -> Result<DeviceAssignment, DeviceError> {
        if visible == 0 {
            return Err(DeviceError::NoDevice);
        }
        let (pool, from_override) = match devices_var.map(str::trim).filter(|s| !s.is_empty()) {
            Some(v) => {
                let pool = parse_devices(v)?;
                if let Some(&ordinal) = pool.iter().find(|&&d| d >= visible) {
                    return Err(DeviceError::NotVisible { ordinal, visible });
                }
                (pool, true)
            }
            None => ((0..visible).collect(), false),
        };
        let p = pool.len();
        let (slots, source) = match (launcher.local_rank, launcher.local_size) {
            (None, _) | (Some(_), Some(0 | 1)) => (pool, AssignmentSource::WholePool),
            (Some(r), size @ Some(l)) if (l as usize) <= p => {
                let (start, len) = balanced_block(p, l as usize, (r % l) as usize);
                (
                    pool[start..start + len].to_vec(),
                    AssignmentSource::LocalRank {
                        local_rank: r,
                        local_size: size,
                    },
                )
            }
            (Some(r), size) => (
                vec![pool[r as usize % p]],
                AssignmentSource::LocalRank {
                    local_rank: r,
                    local_size: size,
                },
            ),
        };
        Ok(DeviceAssignment {
            slots,
            from_override,
            source,
        })
    }

    /// Distinct ordinals in first-use order (what calibration and the profile iterate over).
    pub fn ordinals(&self) -> Vec<u32> {
        let mut seen = Vec::new();
        for &d in &self.slots {
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
        seen
    }
}

/// Start and length of part `i` of `total` items cut into `parts` near-equal contiguous
/// blocks (the first `total % parts` blocks are one longer).
fn balanced_block(total: usize, parts: usize, i: usize) -> (usize, usize) {
    let (q, rem) = (total / parts, total % parts);
    (i * q + i.min(rem), q + usize::from(i < rem))
}

/// Limits on the tiles of a split (minimum tile sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitParams {
    /// Smallest number of rows of C a tile may have.
    pub min_rows: u64,
    /// Smallest number of columns of C a tile may have.
    pub min_cols: u64,
    /// Tile boundaries fall on multiples of this (the GPU kernels' block edge), except at
    /// the end of C. Must be at least 1.
    pub align: u64,
}

impl Default for SplitParams {
    /// 2048-wide tiles at least: below that one H200 is not saturated by a dgemm, so
    /// splitting only adds transfers (`h200-baselines.md`); boundaries on 256.
    fn default() -> SplitParams {
        SplitParams {
            min_rows: 2048,
            min_cols: 2048,
            align: 256,
        }
    }
}

/// One tile of C assigned to one slot: rows `row0..row0+rows`, columns `col0..col0+cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// Index into [`DeviceAssignment::slots`].
    pub slot: usize,
    /// CUDA ordinal of that slot.
    pub device: u32,
    /// First row of C.
    pub row0: u64,
    /// Rows of C.
    pub rows: u64,
    /// First column of C.
    pub col0: u64,
    /// Columns of C.
    pub cols: u64,
}

impl Tile {
    /// fp64 bytes this tile moves for inner dimension `k`: its panel of A (`rows x k`), its
    /// panel of B (`k x cols`), C in (only when `beta != 0`) and C out.
    pub fn transfer_bytes(&self, k: u64, beta_nonzero: bool) -> u64 {
        let c = self.rows * self.cols;
        8 * (self.rows * k + k * self.cols + c * (1 + u64::from(beta_nonzero)))
    }

    /// Flops of this tile's share of a dgemm with inner dimension `k`.
    pub fn flops(&self, k: u64) -> f64 {
        2.0 * self.rows as f64 * self.cols as f64 * k as f64
    }
}

/// A split of an `m x n` C over slots, tiles in column-major grid order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPlan {
    /// Row blocks of the grid.
    pub grid_rows: usize,
    /// Column blocks of the grid.
    pub grid_cols: usize,
    /// One tile per used slot (slot `i` gets tile `i`); fewer tiles than slots when C is
    /// too small to give every slot a tile of the minimum size.
    pub tiles: Vec<Tile>,
}

impl SplitPlan {
    /// Whether the call actually runs on more than one slot.
    pub fn is_split(&self) -> bool {
        self.tiles.len() > 1
    }
}

/// Cuts `m x n` into `parts` aligned blocks along one side; `None` if some block would be
/// shorter than `min` (the last block may be ragged but must still reach `min`, unless the
/// whole side is a single block).
fn cut(len: u64, parts: usize, min: u64, align: u64) -> Option<Vec<(u64, u64)>> {
    if parts == 1 {
        return Some(vec![(0, len)]);
    }
    let units = len.div_ceil(align);
    if units < parts as u64 {
        return None;
    }
    let blocks: Vec<(u64, u64)> = (0..parts)
        .map(|i| {
            let (s, l) = balanced_block(units as usize, parts, i);
            let start = s as u64 * align;
            (start, ((s + l) as u64 * align).min(len) - start)
        })
        .collect();
    blocks.iter().all(|&(_, l)| l >= min).then_some(blocks)
}

/// Splits C (`m x n`) over the given slots.
///
/// Uses as many slots as possible (from `slots.len()` down to 1) such that some grid
/// `pr x pc = used` keeps every tile at least `min_rows` tall when rows are cut and at
/// least `min_cols` wide when columns are cut (an uncut side is all of C); among those grids it
/// takes the one with the least per-slot input traffic (`ceil(m/pr) + ceil(n/pc)`),
/// preferring to cut columns on a tie (column blocks of a column-major C are contiguous).
/// An empty slot list or an empty C yields a single tile on slot 0's ordinal (or 0).
///
/// # Panics
/// - if `params.align == 0`.
pub fn split_c(m: u64, n: u64, slots: &[u32], params: &SplitParams) -> SplitPlan {
    assert!(params.align >= 1, "SplitParams::align must be at least 1");
    let device = |slot: usize| slots.get(slot).copied().unwrap_or(0);
    let single = || SplitPlan {
        grid_rows: 1,
        grid_cols: 1,
        tiles: vec![Tile {
            slot: 0,
            device: device(0),
            row0: 0,
            rows: m,
            col0: 0,
            cols: n,
        }],
    };
    if m == 0 || n == 0 || slots.len() <= 1 {
        return single();
    }
    for used in (2..=slots.len()).rev() {
        let best = (1..=used)
            .filter(|pr| used % pr == 0)
            .filter_map(|pr| {
                let pc = used / pr;
                let rows = cut(m, pr, params.min_rows, params.align)?;
                let cols = cut(n, pc, params.min_cols, params.align)?;
                let traffic = m.div_ceil(pr as u64) + n.div_ceil(pc as u64);
                Some((traffic, pr, rows, cols))
            })
            // min_by_key keeps the first minimum; pr ascends, so ties cut columns.
            .min_by_key(|(traffic, ..)| *traffic);
        if let Some((_, pr, rows, cols)) = best {
            let tiles = cols
                .iter()
                .flat_map(|&c| rows.iter().map(move |&r| (r, c)))
                .enumerate()
                .map(|(slot, ((row0, nr), (col0, nc)))| Tile {
                    slot,
                    device: device(slot),
                    row0,
                    rows: nr,
                    col0,
                    cols: nc,
                })
                .collect();
            return SplitPlan {
                grid_rows: pr,
                grid_cols: used / pr,
                tiles,
            };
        }
    }
    single()
}

/// The engine's view of a split: predicted busy time per device ordinal.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitPrice {
    /// Seconds each ordinal is busy (tiles sharing an ordinal add up).
    pub per_device_s: BTreeMap<u32, f64>,
    /// Predicted time of the whole call: the busiest device.
    pub total_s: f64,
}

/// Prices a split with the engine's own single-device model ("the engine's cost
/// model knows the device count and prices the split").
///
/// `tile_cost(tile)` returns the predicted seconds for that tile alone on its device
/// (the engine's usual route price for a `tile.rows x tile.cols x k` call, host link
/// included, e.g. using [`Tile::transfer_bytes`]). Tiles on distinct ordinals run
/// concurrently; tiles on one ordinal (`OZAKI_DEVICES=0,0`) are serialised, which is the
/// conservative view (separate streams may overlap a little). The result's `total_s` is
/// what the engine compares against the unsplit call.
pub fn price_split(plan: &SplitPlan, mut tile_cost: impl FnMut(&Tile) -> f64) -> SplitPrice {
    let mut per_device_s = BTreeMap::new();
    for t in &plan.tiles {
        *per_device_s.entry(t.device).or_insert(0.0) += tile_cost(t);
    }
    let total_s = per_device_s.values().copied().fold(0.0, f64::max);
    SplitPrice {
        per_device_s,
        total_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> LauncherEnv {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LauncherEnv::from_lookup(|k| map.get(k).cloned())
    }

    fn slots(var: Option<&str>, visible: u32, launcher: &LauncherEnv) -> Vec<u32> {
        DeviceAssignment::resolve(var, visible, launcher)
            .unwrap()
            .slots
    }

    #[test]
    fn launcher_variables_of_each_mpi_are_read() {
        let ompi = env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]);
        assert_eq!(
            ompi,
            LauncherEnv {
                world_rank: Some(5),
                local_rank: Some(1),
                local_size: Some(4)
            }
        );
        let hydra = env(&[
            ("PMI_RANK", "3"),
            ("MPI_LOCALRANKID", "0"),
            ("MPI_LOCALNRANKS", "2"),
        ]);
        assert_eq!(
            hydra,
            LauncherEnv {
                world_rank: Some(3),
                local_rank: Some(0),
                local_size: Some(2)
            }
        );
        let slurm = env(&[("SLURM_PROCID", "7"), ("SLURM_LOCALID", "3")]);
        assert_eq!(
            slurm,
            LauncherEnv {
                world_rank: Some(7),
                local_rank: Some(3),
                local_size: None
            }
        );
        // A value we cannot parse (Slurm's "2(x3)") counts as absent, never as an error.
        let odd = env(&[("SLURM_NTASKS_PER_NODE", "2(x3)"), ("SLURM_LOCALID", "x")]);
        assert_eq!(odd, LauncherEnv::default());
    }

    #[test]
    fn a_process_alone_on_its_host_owns_every_visible_gpu() {
        assert_eq!(slots(None, 4, &LauncherEnv::default()), vec![0, 1, 2, 3]);
        let one = env(&[
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
        ]);
        assert_eq!(slots(None, 2, &one), vec![0, 1]);
    }

    #[test]
    fn local_ranks_get_balanced_contiguous_blocks() {
        let rank = |r: u32, l: u32| {
            env(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", &r.to_string()),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", &l.to_string()),
            ])
        };
        // 2 ranks x 1 GPU each on a 2-GPU host (the issue's ScaLAPACK benchmark layout).
        assert_eq!(slots(None, 2, &rank(0, 2)), vec![0]);
        assert_eq!(slots(None, 2, &rank(1, 2)), vec![1]);
        // 8 GPUs over 3 ranks: 3 + 3 + 2, every GPU used exactly once.
        let all: Vec<Vec<u32>> = (0..3).map(|r| slots(None, 8, &rank(r, 3))).collect();
        assert_eq!(all, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        // More ranks than GPUs: round-robin sharing.
        let shared: Vec<Vec<u32>> = (0..4).map(|r| slots(None, 2, &rank(r, 4))).collect();
        assert_eq!(shared, vec![vec![0], vec![1], vec![0], vec![1]]);
        // A local rank without a local size: one GPU per rank.
        let slurm = env(&[("SLURM_LOCALID", "3")]);
        assert_eq!(slots(None, 2, &slurm), vec![1]);
    }

    #[test]
    fn ozaki_devices_overrides_the_pool_and_may_repeat_a_device() {
        assert_eq!(slots(Some("1"), 2, &LauncherEnv::default()), vec![1]);
        let a = DeviceAssignment::resolve(Some(" 0, 0 "), 1, &LauncherEnv::default()).unwrap();
        assert_eq!(a.slots, vec![0, 0]);
        assert!(a.from_override);
        assert_eq!(a.ordinals(), vec![0]);
        // The override is the host's pool: ranks still take their block of it.
        let r1 = env(&[("MPI_LOCALRANKID", "1"), ("MPI_LOCALNRANKS", "2")]);
        assert_eq!(slots(Some("3,2,1,0"), 4, &r1), vec![1, 0]);
        // Empty means unset.
        assert_eq!(slots(Some(""), 2, &LauncherEnv::default()), vec![0, 1]);
    }

    #[test]
    fn bad_device_lists_are_errors_with_a_readable_message() {
        let none = LauncherEnv::default();
        let e = DeviceAssignment::resolve(Some("0,x"), 2, &none).unwrap_err();
        assert_eq!(
            e,
            DeviceError::Parse {
                value: "0,x".into()
            }
        );
        assert!(e.to_string().contains("OZAKI_DEVICES"));
        assert_eq!(
            DeviceAssignment::resolve(Some("0,,1"), 2, &none).unwrap_err(),
            DeviceError::Parse {
                value: "0,,1".into()
            }
        );
        let e = DeviceAssignment::resolve(Some("0,2"), 2, &none).unwrap_err();
        assert_eq!(
            e,
            DeviceError::NotVisible {
                ordinal: 2,
                visible: 2
            }
        );
        assert_eq!(
            DeviceAssignment::resolve(None, 0, &none).unwrap_err(),
            DeviceError::NoDevice
        );
    }

    /// Every element of C belongs to exactly one tile, and tiles meet the minimum size.
    fn assert_partition(m: u64, n: u64, plan: &SplitPlan, p: &SplitParams) {
        let mut count = vec![0u8; (m * n) as usize];
        for t in &plan.tiles {
            // The minimum applies to the sides that are cut; an uncut side is all of C.
            assert!(
                plan.grid_rows == 1 || t.rows >= p.min_rows,
                "tile below minimum: {t:?}"
            );
            assert!(
                plan.grid_cols == 1 || t.cols >= p.min_cols,
                "tile below minimum: {t:?}"
            );
            for j in t.col0..t.col0 + t.cols {
                for i in t.row0..t.row0 + t.rows {
                    count[(i + j * m) as usize] += 1;
                }
            }
        }
        assert!(
            count.iter().all(|&c| c == 1),
            "tiles do not partition {m}x{n}: {plan:?}"
        );
        assert_eq!(plan.tiles.len(), plan.grid_rows * plan.grid_cols);
    }

    #[test]
    fn splits_partition_c_for_awkward_sizes() {
        let p = SplitParams {
            min_rows: 3,
            min_cols: 3,
            align: 4,
        };
        for &(m, n) in &[
            (1, 1),
            (3, 3),
            (17, 9),
            (63, 65),
            (64, 64),
            (257, 2),
            (2, 257),
            (100, 30),
        ] {
            for d in 1..=6 {
                let plan = split_c(m, n, &vec![0; d], &p);
                assert!(plan.tiles.len() <= d);
                assert_partition(m, n, &plan, &p);
                for t in &plan.tiles {
                    // Interior boundaries are aligned.
                    assert!(t.row0 % p.align == 0 && t.col0 % p.align == 0, "{t:?}");
                }
            }
        }
    }

    #[test]
    fn the_issue_benchmark_call_splits_in_two_halves_of_columns() {
        // 32768^2 dgemm on 2 GPUs (the split benchmark): two 32768 x 16384 tiles.
        let plan = split_c(32768, 32768, &[0, 1], &SplitParams::default());
        assert_eq!((plan.grid_rows, plan.grid_cols), (1, 2));
        assert_eq!(
            plan.tiles[0],
            Tile {
                slot: 0,
                device: 0,
                row0: 0,
                rows: 32768,
                col0: 0,
                cols: 16384
            }
        );
        assert_eq!(
            plan.tiles[1],
            Tile {
                slot: 1,
                device: 1,
                row0: 0,
                rows: 32768,
                col0: 16384,
                cols: 16384
            }
        );
        // Four devices on a square C: a 2 x 2 grid moves less than 1 x 4 strips.
        let plan = split_c(32768, 32768, &[0, 1, 2, 3], &SplitParams::default());
        assert_eq!((plan.grid_rows, plan.grid_cols), (2, 2));
        // A tall C is cut along its rows.
        let plan = split_c(65536, 4096, &[0, 1], &SplitParams::default());
        assert_eq!((plan.grid_rows, plan.grid_cols), (2, 1));
    }

    #[test]
    fn one_device_used_twice_gets_two_slots_with_their_own_tiles() {
        let a = DeviceAssignment::resolve(Some("0,0"), 1, &LauncherEnv::default()).unwrap();
        let plan = split_c(8192, 8192, &a.slots, &SplitParams::default());
        assert!(plan.is_split());
        assert_eq!(
            plan.tiles
                .iter()
                .map(|t| (t.slot, t.device))
                .collect::<Vec<_>>(),
            vec![(0, 0), (1, 0)]
        );
        // Priced serially, since both tiles share GPU 0: no speed-up predicted.
        let price = price_split(&plan, |t| t.flops(8192) / 1e12);
        let whole = 2.0 * 8192f64.powi(3) / 1e12;
        assert!((price.total_s - whole).abs() < 1e-12 * whole);
        assert_eq!(price.per_device_s.len(), 1);
    }

    #[test]
    fn small_calls_use_fewer_slots_or_none() {
        let p = SplitParams::default();
        // Too small for two 2048-wide tiles: no split.
        assert!(!split_c(3000, 3000, &[0, 1], &p).is_split());
        // Room for two tiles but not four: three or four slots fall back to two.
        let plan = split_c(4096, 2048, &[0, 1, 2, 3], &p);
        assert_eq!(plan.tiles.len(), 2);
        assert_eq!(split_c(0, 5, &[0, 1], &p).tiles.len(), 1);
    }

    #[test]
    fn pricing_takes_the_busiest_device_and_counts_transfers() {
        let plan = split_c(32768, 32768, &[0, 1], &SplitParams::default());
        let k = 32768;
        // Toy model: 50 TFLOP/s compute + 50 GB/s link, per device.
        let model = |t: &Tile| t.flops(k) / 50e12 + t.transfer_bytes(k, false) as f64 / 50e9;
        let split = price_split(&plan, model);
        let whole = split_c(32768, 32768, &[0], &SplitParams::default());
        let single = price_split(&whole, model);
        let speedup = single.total_s / split.total_s;
        // Compute halves, but each device still ships all of A: below the ideal 2x.
        assert!(speedup > 1.0 && speedup < 2.0, "speed-up {speedup}");
        assert_eq!(split.per_device_s.len(), 2);
        assert_eq!(
            plan.tiles[0].transfer_bytes(2, true),
            8 * (32768 * 2 + 2 * 16384 + 2 * 32768 * 16384)
        );
    }
}
