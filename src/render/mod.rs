//! Provider renderers: being written.
