//! STUB until the agent-files module lands (same signatures): files an agent leaves for pidevops in `.pidevops/`.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AgentFileError(String);

/// Reads `.pidevops/<name>` from `worktree`, refusing symlinks and anything over `max_bytes`; `None`: absent.
pub fn read_agent_file(
    worktree: &Path,
    name: &str,
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, AgentFileError> {
    let path = worktree.join(".pidevops").join(name);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(_) => return Ok(None),
    };
    if !meta.is_file() || meta.len() as usize > max_bytes {
        return Err(AgentFileError(format!(
            ".pidevops/{name} is not a regular file under {max_bytes} bytes"
        )));
    }
    std::fs::read(&path)
        .map(Some)
        .map_err(|e| AgentFileError(e.to_string()))
}
