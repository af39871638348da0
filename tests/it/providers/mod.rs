//! Each third-party provider's whole test kit, one folder per provider as in the library (`src/providers/<name>/`):
//! its fake on loopback, its contract tests (fixtures, requests and the real client against that fake) and its
//! suite through the real app.

pub mod github;
pub mod gitlab;
pub mod linear;
pub mod slack;
pub mod telegram;
