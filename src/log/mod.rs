//! The session log.
