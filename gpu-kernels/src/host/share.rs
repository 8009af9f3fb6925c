//! A split's shared A (`crate::multi`): each slot uploads its own row panels and copies them
//! on to the others; the [`PanelBoard`] tells every slot when each panel has arrived.

use super::Handle;
use crate::error::GpuError;
use cudarc::driver::sys;

/// The arrival of each row panel of a split's shared A on every device (`crate::multi`):
/// the slot that uploads a panel copies it on to the others over NVLink and publishes an
/// event recorded after those copies; the other slots' compute streams wait for it, so
/// products start while later panels are still on their way (no barrier before compute).
pub(crate) struct PanelBoard {
    events: std::sync::Mutex<Vec<Option<Handle<sys::CUevent>>>>,
    ready: std::sync::Condvar,
    failed: std::sync::atomic::AtomicBool,
}

impl PanelBoard {
    pub(crate) fn new(panels: usize) -> PanelBoard {
        PanelBoard {
            events: std::sync::Mutex::new(vec![None; panels]),
            ready: std::sync::Condvar::new(),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(super) fn publish(&self, panel: usize, e: sys::CUevent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner())[panel] = Some(Handle(e));
        self.ready.notify_all();
    }

    /// Some slot failed: every wait returns an error from now on.
    pub(crate) fn fail(&self) {
        self.failed.store(true, std::sync::atomic::Ordering::SeqCst);
        let _g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        self.ready.notify_all();
    }

    /// The event of `panel`, once its slot has published it.
    pub(super) fn wait(&self, panel: usize) -> Result<sys::CUevent, GpuError> {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(e) = ev[panel] {
                return Ok(e.0);
            }
            if self.failed.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(GpuError::Cuda(
                    "another slot of the split failed before sharing its panel of A".into(),
                ));
            }
            ev = self
                .ready
                .wait_timeout(ev, std::time::Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Destroys the published events of the panels `owned` says are this slot's; call on
    /// that slot's thread (its context current) once no slot waits any more.
    pub(crate) fn release(&self, owned: impl Fn(usize) -> bool) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let mine = ev.iter_mut().enumerate().filter(|(p, _)| owned(*p));
        for e in mine.filter_map(|(_, e)| e.take()) {
            // SAFETY: created by this slot's upload thread, destroyed once; every stream
            // that waited on it has been synchronised.
            let _ = unsafe { sys::cuEventDestroy_v2(e.0) };
        }
    }
}

/// One slot's part in a split's shared A: it uploads the row panels `owner` gives it into
/// its buffer `a_dev` and on to `peers` (the other slots' buffers of A), and waits on
/// `board` for the others' panels.
pub(crate) struct Share<'a> {
    pub(crate) slot: usize,
    pub(crate) owner: &'a [usize],
    pub(crate) a_dev: u64,
    pub(crate) peers: Vec<(u64, Handle<sys::CUcontext>)>,
    pub(crate) board: &'a PanelBoard,
}
