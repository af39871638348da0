//! The commit's symbolic links, for following an attempt's changed links to their ends
//! (`tasks::plan::guard::links`): which paths of the commit are links (one `git ls-tree -r`, read as it comes and
//! only its links kept), then, round by round, the targets a resolution meets (one `git cat-file --batch` a
//! round, each round a hop further along every chain, at most `MAX_HOPS + 1` rounds). Read from git's objects by
//! our git on the mirror, never from the worktree; skipped when the attempt changed no link.

use std::process::Stdio;

use tokio::io::AsyncReadExt;

use super::diff::{DIFF_TIMEOUT, LINK_MODE};
use super::{WorkspaceError, Workspaces};
use crate::tasks::plan::guard::links::MAX_HOPS;
use crate::tasks::plan::guard::{self, Change, Entry, Links};

/// The most links a commit may hold for its changed links to be checked: each is kept (its path and blob id)
/// while chains are followed. A commit with more fails the check (nothing pushed) rather than being read
/// without a bound.
pub const MAX_TREE_LINKS: usize = 100_000;
/// The longest record of `git ls-tree -z` read: a path git could check out (PATH_MAX) and its mode and id.
const RECORD_MAX: usize = 4_096 + 128;

impl Workspaces {
    /// The links of `commit` that resolving `changes`' links meets, their targets read; empty when no link
    /// changed. A link still unread after the last round is refused by the judgement, never let through.
    pub(super) async fn links_met(
        &self,
        git_dir: &str,
        commit: &str,
        changes: &[Change],
    ) -> Result<Links, WorkspaceError> {
        let mut links = Links::default();
        if !changes.iter().any(|c| matches!(c.entry, Entry::Symlink(_))) {
            return Ok(links);
        }
        self.tree_links(git_dir, commit, &mut links).await?;
        for change in changes {
            if let Entry::Symlink(target) = &change.entry {
                links.set_target(&change.path, target.clone());
            }
        }
        for _ in 0..=MAX_HOPS {
            let needed = guard::unread(changes, &links);
            let objects: Vec<String> = needed
                .iter()
                .filter_map(|path| links.unread_object(path).map(str::to_owned))
                .collect();
            if objects.is_empty() {
                break;
            }
            let borrowed: Vec<&str> = objects.iter().map(String::as_str).collect();
            let targets = self.link_targets(git_dir, &borrowed).await?;
            for (path, target) in needed.iter().zip(targets) {
                links.set_target(path, target);
            }
        }
        Ok(links)
    }

    /// Every link of `commit`'s tree into `links`, its target unread: `git ls-tree -r -z`, read as it comes.
    async fn tree_links(
        &self,
        git_dir: &str,
        commit: &str,
        links: &mut Links,
    ) -> Result<(), WorkspaceError> {
        let failed = |detail: String| WorkspaceError::Git {
            what: "listing the commit's symbolic links".to_owned(),
            detail,
        };
        let mut command = self.git(None);
        command
            .args([git_dir, "ls-tree", "-r", "-z", "--full-tree", commit])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot run git: {e}")))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("git's output is not piped".to_owned()))?;
        let read = async {
            let mut buffer = vec![0u8; 64 * 1024];
            let mut partial: Vec<u8> = Vec::new();
            loop {
                let n = stdout
                    .read(&mut buffer)
                    .await
                    .map_err(|e| format!("reading git's output: {e}"))?;
                if n == 0 {
                    return if partial.is_empty() {
                        Ok(())
                    } else {
                        Err("git ls-tree's output ends in the middle of a record".to_owned())
                    };
                }
                partial.extend_from_slice(&buffer[..n]);
                let mut start = 0;
                while let Some(end) = partial[start..].iter().position(|b| *b == 0) {
                    keep_link(&partial[start..start + end], links)?;
                    start += end + 1;
                }
                partial.drain(..start);
                if partial.len() > RECORD_MAX {
                    return Err(format!(
                        "git ls-tree printed a record over {RECORD_MAX} bytes"
                    ));
                }
                if links.len() > MAX_TREE_LINKS {
                    return Err(format!(
                        "the commit holds more than {MAX_TREE_LINKS} symbolic links; its links cannot be checked"
                    ));
                }
            }
        };
        let read = match tokio::time::timeout(DIFF_TIMEOUT, read).await {
            Ok(read) => read,
            Err(_) => Err(format!("git took over {} s", DIFF_TIMEOUT.as_secs())),
        };
        if read.is_err() {
            let _ = child.start_kill();
        }
        let status = child
            .wait()
            .await
            .map_err(|e| failed(format!("waiting for git: {e}")))?;
        read.map_err(failed)?;
        if !status.success() {
            return Err(failed(format!("git ls-tree exited with {status}")));
        }
        Ok(())
    }
}

/// Keeps one `git ls-tree -z` record (`mode SP type SP object TAB path`) when it is a link. A path that is not
/// UTF-8 is skipped: no target (read as UTF-8, or refused) can name it.
fn keep_link(record: &[u8], links: &mut Links) -> Result<(), String> {
    let Some(tab) = record.iter().position(|b| *b == b'\t') else {
        return Err(format!(
            "git ls-tree printed {:?}",
            String::from_utf8_lossy(record)
        ));
    };
    let meta = String::from_utf8_lossy(&record[..tab]);
    let mut parts = meta.split(' ');
    let (Some(mode), Some(_), Some(object)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("git ls-tree printed {meta:?}"));
    };
    if mode == LINK_MODE {
        if let Ok(path) = std::str::from_utf8(&record[tab + 1..]) {
            links.add(path, object);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_with_utf8_paths_are_kept_and_a_bad_record_is_an_error() {
        let mut links = Links::default();
        keep_link(b"100644 blob 1111\tsrc/a.rs", &mut links).unwrap();
        keep_link(b"120000 blob 2222\tsrc/l", &mut links).unwrap();
        keep_link(b"120000 blob 3333\tsrc/\xff", &mut links).unwrap();
        keep_link(b"160000 commit 4444\tvendor/lib", &mut links).unwrap();
        keep_link(b"040000 tree 5555\tsrc/l x", &mut links).unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(links.unread_object("src/l"), Some("2222"));
        assert!(keep_link(b"120000 blob 2222 src/l", &mut links).is_err());
        assert!(keep_link(b"120000\tsrc/l", &mut links).is_err());
    }
}
