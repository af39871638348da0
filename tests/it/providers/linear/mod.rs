//! Linear's test kit: the validating fake (`fake`), Linear's published schema it holds requests to (`schema`), the
//! contract tests (`contract`) and the suite through the real app (`suite`).

mod contract;
#[allow(dead_code)]
pub mod fake;
#[allow(dead_code)]
pub mod schema;
mod suite;
