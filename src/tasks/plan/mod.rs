//! Plans: a goal decomposed into items that run as parallel tasks, each confined to its own scope of paths.
//! Pure: no I/O.

pub mod glob;
pub mod scope;

pub use glob::{Glob, GlobError, GlobErrorKind};
pub use scope::{Scope, ScopeText};
