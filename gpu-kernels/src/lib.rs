//! GPU routes for ozaki-shim (issue #4): to be written.
