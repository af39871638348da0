//! Free space on the workspace volume, before a claim. An agent writes into its worktree, HOME and log on the
//! volume of `WORKSPACE_ROOT` (the SQLite log's too, by default); below `[dispatch] min_free_disk_mib` the
//! dispatcher claims nothing, says why in `/health`, and starts again by itself once space returns; below half of
//! it, a running attempt's heartbeat stops its agent (`attempt.rs`).

use std::path::Path;

/// Bytes free for an unprivileged writer on the volume holding `path` (`statvfs`'s available blocks).
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let stats = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    // Both are u64 on the 64-bit Linux pidevops builds for.
    Ok(stats
        .blocks_available()
        .saturating_mul(stats.fragment_size()))
}

/// Why nothing may be claimed on a volume with `free` bytes left, if nothing may: below `min` (0: never).
pub fn too_full(root: &Path, free: u64, min: u64) -> Option<String> {
    (free < min).then(|| {
        format!(
            "claims wait: the workspace volume ({}) has {} free, below dispatch.min_free_disk_mib = {}",
            root.display(),
            mebibytes(free),
            min >> 20
        )
    })
}

fn mebibytes(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_wait_below_the_threshold_only() {
        let root = Path::new("/srv/ws");
        assert_eq!(too_full(root, 2 << 30, 1 << 30), None);
        assert_eq!(too_full(root, 1 << 30, 1 << 30), None);
        let why = too_full(root, (1 << 30) - 1, 1 << 30).unwrap();
        assert!(
            why.contains("/srv/ws") && why.contains("1023 MiB free"),
            "{why}"
        );
        assert!(why.contains("min_free_disk_mib = 1024"), "{why}");
        // 0 turns the check off, even on a full volume.
        assert_eq!(too_full(root, 0, 0), None);
    }

    #[test]
    fn the_free_space_of_a_real_volume_is_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("absent")).is_err());
    }
}
