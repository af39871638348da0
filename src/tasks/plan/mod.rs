//! Plans: a goal decomposed into items that run as parallel tasks, each confined to its own scope of paths.
//! Pure: no I/O.

pub mod document;
pub mod glob;
pub mod scope;

pub use document::{
    ItemId, ItemIdError, PlanDocument, PlanError, PlanErrorKind, PlanErrors, PlanItem, PlanLimits,
    PLAN_PATH,
};
pub use glob::{Glob, GlobError, GlobErrorKind};
pub use scope::{Scope, ScopeText};
