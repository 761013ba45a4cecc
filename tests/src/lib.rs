//! End-to-end tests and the load benchmark live here; they start the real binaries.
