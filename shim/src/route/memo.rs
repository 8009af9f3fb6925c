//! This thread's recent `auto` decisions, so that a call whose shape the thread priced
//! lately writes nothing another thread reads or writes.
//!
//! A program whose threads all call the BLAS at once (PySCF's integral transformation:
//! 16 OpenMP threads, each cycling through three small shapes) would otherwise, on every
//! call, lock the engine's shared decision cache and bump the reference count of a decision
//! every other thread bumps too: two cache lines bouncing between all the cores that call.
//! Here each thread keeps its last decisions in a small set-associative table
//! ([`SETS`] x [`WAYS`]), keyed by the engine that made them, the canonical shape, the
//! forced moduli count and the concurrency class, and each entry holds the thread's own
//! copy of the decision: cloning its `Arc` touches a reference count no other thread
//! touches (except the trace's flush thread, once per record, when tracing).
//!
//! An entry also keeps what the test "clearly the vendor's" needs of its decision
//! ([`Margin`], two numbers), so that it costs a multiplication instead of a walk over the
//! prediction's route names.
//!
//! The table is a cache: a miss prices the call through the engine's shared cache as before,
//! and correctness never depends on what the table holds. A `fork` child inherits the
//! forking thread's table, which is as valid there as in the parent.

use ozaki_core::engine::CallShape;
use ozaki_core::engine::choose::{Decision, Engine};
use ozaki_core::engine::correct::{ClassKey, Place};
use ozaki_core::route::Route;
use std::cell::RefCell;
use std::sync::Arc;

/// Sets of the table (a power of two).
pub const SETS: usize = 16;
/// Entries per set: a thread alternating between shapes that fall into one set keeps them.
pub const WAYS: usize = 2;

/// A decision and the size class's bound it was priced at, if any.
pub type Priced = (Arc<Decision>, Option<CallShape>);

/// What an entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The engine that decided (the pre-engine and the engine price differently), by
    /// address: the shim's engines are process-wide statics that are never dropped.
    engine: usize,
    shape: CallShape,
    moduli: Option<u32>,
    /// [`ozaki_core::engine::load::concurrency_class`] of the calls in flight.
    concurrent: u32,
}

impl Key {
    /// The key of a call of `shape` decided by `engine`.
    pub fn new(engine: &Engine, shape: &CallShape, moduli: Option<u32>, concurrent: u32) -> Key {
        Key {
            engine: engine as *const Engine as usize,
            shape: *shape,
            moduli,
            concurrent,
        }
    }

    fn set(&self) -> usize {
        let s = &self.shape;
        let mut h = s.m.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ s.n.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            ^ s.k.wrapping_mul(0x1656_67b1_9e37_79f9)
            ^ (self.concurrent as u64).wrapping_mul(0x27d4_eb2f_1656_67c5)
            ^ ((s.transa as u64)
                | (s.transb as u64) << 1
                | (s.beta_zero as u64) << 2
                | (s.c_gaps as u64) << 3);
        h ^= h >> 32;
        h ^= h >> 16;
        (h as usize) & (SETS - 1)
    }
}

/// What "clearly the vendor's" (`super::choose`) asks of a vendor decision: its vendor price
/// and the cheapest price of any other route it priced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margin {
    vendor_s: f64,
    /// The least of the other routes' prices (infinite when none was priced, NaN when one
    /// price is NaN: never ahead then).
    others_s: f64,
}

impl Margin {
    /// The margin of `d`; `None` unless `d` takes the vendor and prices it.
    pub fn of(d: &Decision) -> Option<Margin> {
        if d.route != Route::Vendor {
            return None;
        }
        let p = &d.prediction.predicted_s;
        let vendor_s = *p.get(Route::Vendor.name())?;
        let others_s = p
            .iter()
            .filter(|(r, _)| r.as_str() != Route::Vendor.name())
            .fold(f64::INFINITY, |m, (_, &s)| {
                if m.is_nan() || s.is_nan() {
                    f64::NAN
                } else {
                    m.min(s)
                }
            });
        Some(Margin { vendor_s, others_s })
    }
}

/// Whether `margin` (of a decision) prices every route but the vendor at least `times` the
/// vendor's price; false for a decision without a margin.
pub fn ahead_by(margin: Option<Margin>, times: f64) -> bool {
    margin.is_some_and(|m| m.others_s >= m.vendor_s * times)
}

/// What the table keeps per call kind.
#[derive(Debug, Clone)]
pub struct Memoized {
    /// The decision (the thread's own copy) and the bound it was priced at.
    pub priced: Priced,
    /// Its margin ([`Margin::of`]).
    pub margin: Option<Margin>,
    /// The vendor's correction class of the call and its place in the table.
    pub vendor: (ClassKey, Place),
}

struct Entry {
    key: Key,
    value: Memoized,
}

type Table = [[Option<Entry>; WAYS]; SETS];

thread_local! {
    static TABLE: RefCell<Table> = const { RefCell::new([const { [const { None }; WAYS] }; SETS]) };
}

/// This thread's entry for `key`, if it has one. A call made while this thread's locals are
/// torn down (at exit) finds nothing.
pub fn get(key: &Key) -> Option<Memoized> {
    TABLE
        .try_with(|t| {
            let mut t = t.try_borrow_mut().ok()?;
            let set = &mut t[key.set()];
            let way = set
                .iter()
                .position(|e| e.as_ref().is_some_and(|e| e.key == *key))?;
            // The most recent first: a replacement evicts the other way.
            if way > 0 {
                set[..=way].rotate_right(1);
            }
            set[0].as_ref().map(|e| e.value.clone())
        })
        .ok()
        .flatten()
}

/// Keeps `priced` (a decision of the engine's shared cache) for `key` in this thread's
/// table, as the thread's own copy, with the call's vendor class; returns what it keeps.
pub fn put(key: Key, priced: Priced, vendor: ClassKey) -> Memoized {
    let own: Priced = (Arc::new(Decision::clone(&priced.0)), priced.1);
    let value = Memoized {
        margin: Margin::of(&own.0),
        priced: own,
        vendor: (vendor, vendor.placed()),
    };
    let _ = TABLE.try_with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            let set = &mut t[key.set()];
            if let Some(way) = set
                .iter()
                .position(|e| e.as_ref().is_some_and(|e| e.key == key))
            {
                set[way] = None;
                set[way..].rotate_left(1);
            }
            set.rotate_right(1);
            set[0] = Some(Entry {
                key,
                value: value.clone(),
            });
        }
    });
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::profile::Profile;

    fn engine() -> &'static Engine {
        static E: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
        E.get_or_init(|| Engine::new(Profile::built_in("h200").unwrap(), 16))
    }

    #[test]
    fn a_thread_keeps_its_own_copy_of_the_shared_decision() {
        let e = engine();
        let shape = CallShape::gemm(18, 114, 114);
        let shared = e.decide_loaded(&shape, None, || Some(14), 16);
        let key = Key::new(e, &shape, None, 16);
        let kv = ClassKey::new(Route::Vendor, shape.routine, 18, 114, 114, 16);
        let own = put(key, (Arc::clone(&shared), None), kv);
        assert!(
            !Arc::ptr_eq(&own.priced.0, &shared),
            "the thread's copy is its own"
        );
        assert_eq!(*own.priced.0, *shared);
        let hit = get(&key).expect("kept");
        assert!(Arc::ptr_eq(&hit.priced.0, &own.priced.0));
        assert_eq!((hit.margin, hit.vendor), (own.margin, (kv, kv.placed())));
        // Another thread finds nothing of this one's.
        let other = std::thread::spawn(move || get(&key).is_none());
        assert!(other.join().unwrap());
        // A different concurrency class or moduli count is another entry.
        assert!(get(&Key::new(e, &shape, None, 8)).is_none());
        assert!(get(&Key::new(e, &shape, Some(9), 16)).is_none());
    }

    #[test]
    fn shapes_alternating_in_one_set_all_stay() {
        let e = engine();
        // More shapes than one set holds land in different sets; WAYS shapes of one set stay.
        let shapes: Vec<CallShape> = (1..=64).map(|m| CallShape::gemm(m, 96, 114)).collect();
        let first = Key::new(e, &shapes[0], None, 4);
        let same_set: Vec<CallShape> = shapes
            .iter()
            .copied()
            .filter(|s| Key::new(e, s, None, 4).set() == first.set())
            .take(WAYS)
            .collect();
        assert_eq!(same_set.len(), WAYS, "64 shapes fill every set");
        for s in &same_set {
            let d = e.decide_loaded(s, None, || Some(14), 4);
            let kv = ClassKey::new(Route::Vendor, s.routine, s.m, s.n, s.k, 4);
            put(Key::new(e, s, None, 4), (d, None), kv);
        }
        for _ in 0..3 {
            for s in &same_set {
                assert!(get(&Key::new(e, s, None, 4)).is_some());
            }
        }
    }

    #[test]
    fn the_margin_is_the_route_walk_it_replaces() {
        let e = engine();
        for n in [8u64, 64, 256, 1024, 4096] {
            let d = e.decide_loaded(&CallShape::gemm(n, n, n), None, || Some(14), 1);
            for times in [0.5, 2.0, 8.0, 128.0] {
                let p = &d.prediction.predicted_s;
                let walk = d.route == Route::Vendor
                    && p.get("vendor").is_some_and(|&v| {
                        p.iter()
                            .filter(|(r, _)| r.as_str() != "vendor")
                            .all(|(_, &s)| s >= v * times)
                    });
                assert_eq!(ahead_by(Margin::of(&d), times), walk, "n = {n}, x{times}");
            }
        }
    }
}
