//! Token counting: being written.
