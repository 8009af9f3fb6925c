//! The LD_PRELOAD BLAS shim (issue #2): to be written.
