//! Phase timing with CUDA events recorded on the call's stream: no extra synchronisation,
//! read once the call has finished (trace field `phases`).

use crate::error::{Context, GpuError};
use cudarc::driver::sys;

/// Waits for `stream` and reports a failed kernel or copy as an error.
pub fn sync(stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: a live stream of the current context.
    unsafe { sys::cuStreamSynchronize(stream) }
        .result()
        .ctx("cuStreamSynchronize")
}

/// Median seconds of `reps` runs of `f` on `stream` (after one untimed warm-up).
pub fn time_median(
    stream: sys::CUstream,
    reps: usize,
    mut f: impl FnMut() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    f()?;
    sync(stream)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let ev = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let e0 = cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?;
        let e1 = cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?;
        // SAFETY: fresh events on a live stream; destroyed below.
        let ms = unsafe {
            cudarc::driver::result::event::record(e0, stream).ctx("cuEventRecord")?;
            let r = f();
            cudarc::driver::result::event::record(e1, stream).ctx("cuEventRecord")?;
            sync(stream)?;
            let ms = cudarc::driver::result::event::elapsed(e0, e1).ctx("cuEventElapsedTime");
            let _ = cudarc::driver::result::event::destroy(e0);
            let _ = cudarc::driver::result::event::destroy(e1);
            r?;
            ms?
        };
        times.push(ms as f64 * 1e-3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Seconds of one run of `f` on `stream`, timed with events (no warm-up).
pub fn time_once(
    stream: sys::CUstream,
    f: impl FnOnce() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let ev = sys::CUevent_flags::CU_EVENT_DEFAULT;
    let e0 = cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?;
    let e1 = cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?;
    // SAFETY: fresh events on a live stream; destroyed below.
    unsafe {
        let r = (|| {
            cudarc::driver::result::event::record(e0, stream).ctx("cuEventRecord")?;
            f()?;
            cudarc::driver::result::event::record(e1, stream).ctx("cuEventRecord")?;
            sync(stream)?;
            cudarc::driver::result::event::elapsed(e0, e1).ctx("cuEventElapsedTime")
        })();
        let _ = cudarc::driver::result::event::destroy(e0);
        let _ = cudarc::driver::result::event::destroy(e1);
        r.map(|ms| ms as f64 * 1e-3)
    }
}

/// Events recorded in stream order, each tagged with the phase that ends at it.
pub struct Marks {
    stream: sys::CUstream,
    events: Vec<(sys::CUevent, Phase)>,
}

/// Which phase a span between two marks belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The first mark (no span ends here).
    Start,
    /// Exponent scan, scaling, residues.
    Convert,
    /// Int8 (or fp64) products.
    Products,
    /// CRT reconstruction and epilogue.
    Reconstruct,
}

impl Marks {
    /// Starts timing on `stream` (records the first event).
    pub fn start(stream: sys::CUstream) -> Result<Marks, GpuError> {
        let mut m = Marks {
            stream,
            events: Vec::new(),
        };
        m.mark(Phase::Start)?;
        Ok(m)
    }

    /// Records an event ending a span of `phase`.
    pub fn mark(&mut self, phase: Phase) -> Result<(), GpuError> {
        let ev = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let e = cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?;
        // SAFETY: e is a fresh event, the stream is live.
        unsafe { cudarc::driver::result::event::record(e, self.stream) }.ctx("cuEventRecord")?;
        self.events.push((e, phase));
        Ok(())
    }

    /// The seconds between consecutive marks, in order; call after the stream has been
    /// synchronised.
    pub fn spans(&self) -> Result<Vec<f64>, GpuError> {
        self.events
            .windows(2)
            .map(|w| {
                // SAFETY: both events were recorded and have completed (stream synchronised).
                unsafe { cudarc::driver::result::event::elapsed(w[0].0, w[1].0) }
                    .ctx("cuEventElapsedTime")
                    .map(|ms| f64::from(ms).max(0.0) * 1e-3)
            })
            .collect()
    }

    /// Sums the spans per phase, in ns; call after the stream has been synchronised.
    pub fn phases(&self) -> Result<ozaki_core::trace::Phases, GpuError> {
        let mut p = ozaki_core::trace::Phases::default();
        for w in self.events.windows(2) {
            // SAFETY: both events were recorded and have completed (stream synchronised).
            let ms = unsafe { cudarc::driver::result::event::elapsed(w[0].0, w[1].0) }
                .ctx("cuEventElapsedTime")?;
            let ns = (ms as f64 * 1e6).max(0.0) as u64;
            match w[1].1 {
                Phase::Start => {}
                Phase::Convert => p.convert_ns += ns,
                Phase::Products => p.products_ns += ns,
                Phase::Reconstruct => p.reconstruct_ns += ns,
            }
        }
        Ok(p)
    }
}

impl Drop for Marks {
    fn drop(&mut self) {
        for (e, _) in &self.events {
            // SAFETY: each event is destroyed once; destroying a pending event is allowed.
            let _ = unsafe { cudarc::driver::result::event::destroy(*e) };
        }
    }
}

/// One event to wait for a point of the stream from the host without waiting for the work
/// enqueued after it (the route's host plan runs while the residues are computed).
pub struct Fence(sys::CUevent);

impl Fence {
    /// Records the fence at the current end of `stream`.
    pub fn record(stream: sys::CUstream) -> Result<Fence, GpuError> {
        let ev = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let f = Fence(cudarc::driver::result::event::create(ev).ctx("cuEventCreate")?);
        // SAFETY: f.0 is a fresh event, the stream is live.
        unsafe { cudarc::driver::result::event::record(f.0, stream) }.ctx("cuEventRecord")?;
        Ok(f)
    }

    /// The event, for the driver calls that order a stream after it.
    pub(crate) fn event(&self) -> sys::CUevent {
        self.0
    }

    /// Blocks until the stream has passed the fence.
    pub fn wait(&self) -> Result<(), GpuError> {
        // SAFETY: the event is live and recorded.
        unsafe { sys::cuEventSynchronize(self.0) }
            .result()
            .ctx("cuEventSynchronize")
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        // SAFETY: destroyed once; destroying a pending event is allowed.
        let _ = unsafe { cudarc::driver::result::event::destroy(self.0) };
    }
}
