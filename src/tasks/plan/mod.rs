//! Plans: a goal decomposed into items that run as parallel tasks, each confined to its own scope of paths.
//! Pure: no I/O, no clock.
//!
//! A planner agent writes a **plan file**, `.pidevops/plan.json` ([`PLAN_PATH`]) in its worktree: a version, an
//! optional summary, and items, each with an id, a title, a task, a scope (paths or globs it may change), how to
//! tell it is done, and the ids of the items it depends on. [`PlanDocument::parse`] checks it and reports every
//! problem as a line the planner can act on ([`PlanErrors::retry_text`]); a person approves a valid plan; each
//! item becomes a child task ([`PlanItem::spec`]), created in [`PlanDocument::topological_order`], and items
//! without a dependency between them run in parallel. No path is in the scope of two items, so parallel agents
//! never edit the same files: [`Glob::overlaps`] decides that glob against glob, and after an attempt
//! [`Scope::outside`] names the changed files its task's scope does not cover.
//!
//! **Versions.** This module reads version 1 and refuses any other version, naming the one it understands. A
//! future version 2 is a new parser next to this one, not a change to it: version 1 files, and version 1 plans
//! stored in the event log, stay readable as they are. For the same reason the checks of version 1 may be relaxed
//! but never tightened (a stored plan is checked again when it is read back).
//!
//! `docs/plans.md` documents the file for planner authors; `docs/plan.schema.json` is its JSON Schema, held to
//! [`PlanDocument::FIELDS`] and [`PlanDocument::ITEM_FIELDS`] by a test.
//!
//! - [`glob`]: path globs, matching and overlap (one automaton for both).
//! - [`scope`]: a task's scope text read as globs, prose or nothing; a scope stored as data.
//! - [`guard`]: what a push is held to beyond the globs: agent and hook configuration ([`guard::PROTECTED`]),
//!   which a planner's scope names only where the repository allows it, symbolic links by where they end up
//!   ([`guard::links`]), gitlinks.
//! - [`document`]: the plan file, its checks and its errors.

pub mod document;
pub mod glob;
pub mod guard;
pub mod scope;

pub use document::{
    ItemId, ItemIdError, PlanDocument, PlanError, PlanErrorKind, PlanErrors, PlanItem, PlanLimits,
    PLAN_PATH,
};
pub use glob::{Glob, GlobError, GlobErrorKind};
pub use scope::{Scope, ScopeText};
