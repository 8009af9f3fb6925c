//! Per-record engine (issue #5): to be written.
