//! The gap from a timed call's return to the program's next call, fed into the process's
//! ledger (`ozaki_core::engine::follow`) under the returning call's class and side.
//!
//! Only calls made alone count, at both ends: with other calls in flight the time between
//! two of them is not the program's own work. Small calls the gate sends to the vendor
//! ([`super::gate`]) neither start nor end a gap (they read no clock); their time falls in
//! the gap they are made in, as the rest of the program's work does.

use super::learned::learned;
use ozaki_core::engine::correct::ClassKey;
use ozaki_core::engine::follow::{Follow, FollowKey};
use ozaki_core::route::Route;
use std::sync::Mutex;
use std::time::Instant;

/// The last timed call made alone: when it returned, its class and whether it ran on the
/// vendor. Taken by the next call, so each gap is noted once.
#[derive(Debug, Clone, Copy)]
struct Returned {
    at: Instant,
    key: FollowKey,
    vendor: bool,
}

static LAST: Mutex<Option<Returned>> = Mutex::new(None);

/// A timed call of class `key` (its correction class) returned from `route`.
pub fn returned(key: &ClassKey, route: Route) {
    returned_into(&LAST, key, route);
}

fn returned_into(slot: &Mutex<Option<Returned>>, key: &ClassKey, route: Route) {
    if key.concurrent > 1 {
        return;
    }
    put(
        slot,
        Returned {
            at: Instant::now(),
            key: FollowKey::of(key),
            vendor: route == Route::Vendor,
        },
    );
}

/// A call the gate did not take is being decided with `in_flight` calls in flight (itself
/// included): the gap since the last timed call returned ends here.
pub fn entered(in_flight: u32) {
    if let Some(r) = take(&LAST) {
        note(&learned().follow, r, in_flight, Instant::now());
    }
}

fn put(slot: &Mutex<Option<Returned>>, r: Returned) {
    // never waits: a slot another thread holds keeps its value
    if let Ok(mut s) = slot.try_lock() {
        *s = Some(r);
    }
}

fn take(slot: &Mutex<Option<Returned>>) -> Option<Returned> {
    slot.try_lock().ok()?.take()
}

fn note(follow: &Follow, r: Returned, in_flight: u32, now: Instant) {
    if in_flight <= 1 {
        let gap_s = now.saturating_duration_since(r.at).as_secs_f64();
        follow.note(r.key, r.vendor, gap_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozaki_core::engine::follow::MIN_GAPS;
    use ozaki_core::trace::Routine;
    use std::time::Duration;

    fn key(route: Route, concurrent: u32) -> ClassKey {
        ClassKey::new(route, Routine::Dgemm, 110592, 128, 128, concurrent)
    }

    /// A gap is noted once, under the side the call before it ran on, and only when the
    /// next call is made alone.
    #[test]
    fn each_gap_is_noted_once_under_its_side_and_only_alone() {
        let slot = Mutex::new(None);
        let follow = Follow::default();
        let t0 = Instant::now();
        let k = FollowKey::of(&key(Route::Vendor, 1));
        for (vendor, gap_ms) in [(true, 40), (false, 15)] {
            for _ in 0..MIN_GAPS {
                put(
                    &slot,
                    Returned {
                        at: t0,
                        key: k,
                        vendor,
                    },
                );
                let r = take(&slot).unwrap();
                note(&follow, r, 1, t0 + Duration::from_millis(gap_ms));
                assert!(take(&slot).is_none(), "taken once");
            }
        }
        assert!((follow.vendor_extra_s(k) - 0.025).abs() < 1e-9);
        // beside another call in flight the gap is not the program's own work
        let busy = Follow::default();
        put(
            &slot,
            Returned {
                at: t0,
                key: k,
                vendor: true,
            },
        );
        note(
            &busy,
            take(&slot).unwrap(),
            2,
            t0 + Duration::from_millis(90),
        );
        assert_eq!(busy.vendor_extra_s(k), 0.0);
    }

    /// A call made beside others starts no gap.
    #[test]
    fn a_call_made_beside_others_starts_no_gap() {
        let slot = Mutex::new(None);
        returned_into(&slot, &key(Route::GpuNative, 2), Route::GpuNative);
        assert!(take(&slot).is_none());
        returned_into(&slot, &key(Route::GpuNative, 1), Route::GpuNative);
        assert!(take(&slot).is_some_and(|r| !r.vendor));
    }
}
