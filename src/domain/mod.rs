//! Pure domain values. No I/O lives here.

pub mod event;

pub use event::{EventType, NewEvent, Source, Subject};
