//! Whether `WORKSPACE_ROOT` is on a volume: the images have no `VOLUME` instruction (Railway refuses one), so the
//! mount is the operator's to make, and a forgotten one only shows when a redeploy loses every mirror and worktree.
//! Read from `/proc/self/mountinfo`; doctor writes nothing to find out.

use std::path::{Path, PathBuf};

/// The mount holding a path: where it is mounted, and whether read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub read_only: bool,
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = (bytes[i] == b'\\' && i + 4 <= bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 4]).ok())
            .flatten()
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount of `mountinfo` (the text of `/proc/self/mountinfo`) that holds `path` (absolute, symlinks resolved):
/// the longest mount point that is an ancestor of it; the last one mounted there when several are.
pub fn mount_of(mountinfo: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if !path.starts_with(&point) {
            continue;
        }
        let deeper = best
            .as_ref()
            .is_none_or(|b| point.components().count() >= b.point.components().count());
        if deeper {
            best = Some(Mount {
                point,
                read_only: options.split(',').any(|o| o == "ro"),
            });
        }
    }
    best
}

/// `path` made absolute with symlinks resolved, through its nearest existing ancestor (it may not exist yet).
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::env::current_dir()?.join(path);
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(found) => {
                return Ok(rest.iter().rev().fold(found, |p, part| p.join(part)));
            }
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return Ok(absolute),
            },
        }
    }
}

/// doctor's `workspace` line for `root` (WORKSPACE_ROOT).
pub fn line(root: &Path) -> String {
    let shown = root.display();
    let Ok(path) = resolved(root) else {
        return format!("workspace                  unknown   {shown}: cannot resolve it");
    };
    let Some(mount) = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|info| mount_of(&info, &path))
    else {
        return format!(
            "workspace                  unknown   {shown}: /proc/self/mountinfo unreadable"
        );
    };
    if mount.read_only {
        return format!(
            "workspace                  warn      {shown} is on a read-only mount ({}): no mirror or worktree can be made",
            mount.point.display()
        );
    }
    if mount.point == Path::new("/") {
        format!(
            "workspace                  warn      {shown} is on the root filesystem, not a mounted volume: in a \
             container, every mirror and worktree is lost when it is replaced (mount one: docs/deploy.md, Volume)"
        )
    } else {
        format!(
            "workspace                  volume    {shown} (on the mount at {})",
            mount.point.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
30 22 0:40 / /app/data rw,relatime - ext4 /dev/sdb rw
31 22 0:41 / /app/data\\040old rw,relatime - ext4 /dev/sdc rw
32 22 0:42 / /srv/ro ro,relatime - ext4 /dev/sdd ro
";

    #[test]
    fn the_deepest_mount_above_the_path_holds_it() {
        let mount = |p: &str| mount_of(MOUNTINFO, Path::new(p)).map(|m| (m.point, m.read_only));
        assert_eq!(
            mount("/app/data/workspaces"),
            Some((PathBuf::from("/app/data"), false))
        );
        assert_eq!(
            mount("/app/database"),
            Some((PathBuf::from("/"), false)),
            "a prefix of a name is not an ancestor"
        );
        assert_eq!(
            mount("/app/data old/w"),
            Some((PathBuf::from("/app/data old"), false))
        );
        assert_eq!(mount("/srv/ro/w"), Some((PathBuf::from("/srv/ro"), true)));
        assert_eq!(mount("/home/x"), Some((PathBuf::from("/"), false)));
        assert_eq!(mount_of("", Path::new("/x")), None);
    }

    #[test]
    fn a_path_not_made_yet_resolves_through_its_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(
            resolved(&dir.path().join("a/b")).unwrap(),
            real.join("a").join("b")
        );
    }
}
