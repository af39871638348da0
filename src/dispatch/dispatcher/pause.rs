//! Pausing new dispatch: an event in the `dispatch` stream, so every replica sees the same state; runs already
//! going are not touched. `PIDEVOPS_PAUSED=1` pauses this process alone. The command side of the pause lives in
//! `board::pause`, where the API, the CLI and the Telegram bot reach it without depending on the dispatcher.

use super::Dispatcher;
use crate::board::pause::pause_state;

impl Dispatcher {
    /// Whether new dispatch is paused, and why.
    pub async fn paused(&self) -> anyhow::Result<Option<String>> {
        if self.inner.paused_by_env {
            return Ok(Some("PIDEVOPS_PAUSED=1".into()));
        }
        pause_state(self.store()).await
    }
}
