//! Pure domain values. No I/O lives here.

pub mod backoff;
pub mod clock;
pub mod effect;
pub mod event;
pub mod limits;
pub mod registry;
pub mod runs;
pub mod usage;

pub use event::{EventType, NewEvent, Source, Subject};
