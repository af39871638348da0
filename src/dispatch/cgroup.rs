//! A memory limit per agent, where cgroup v2 lets pidevops set one: each contained process (an agent, a
//! repository's command, a reviewer) starts in a cgroup of its own under `<our cgroup>/pidevops-agents/`, with
//! `memory.max` (`[dispatch] memory_max_mib`), `memory.swap.max = 0` and `memory.oom.group = 1`, so the OOM killer
//! takes the agent and everything it started, never `serve` or the database. The child moves itself there
//! between fork and exec (writing `0` to the cgroup's `cgroup.procs`, opened beforehand), so nothing it starts is
//! ever outside.
//!
//! Delegation, found once at start-up (`probe`, read-only: what doctor shows) and then set up (`arm`): a cgroup2
//! hierarchy holding pidevops's own cgroup, with the memory controller available there. A cgroup that holds
//! processes cannot hand controllers to its children (cgroup v2's "no internal processes"), so when pidevops's
//! cgroup holds pidevops alone, pidevops moves itself into a leaf beside the agents (`pidevops-serve/`), as a
//! systemd unit with `Delegate=yes` or a container with its own cgroup namespace expects. Anything else (cgroup
//! v1, no memory controller, other processes in the cgroup, a refused write) is "not bounded, because …",
//! named in `/health` and doctor; no limit is claimed that is not in force.
//!
//! Every path is read under `host` (`/` in production), so the detection and the writes are tested against a
//! temporary directory shaped like the cgroup tree.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The leaf pidevops moves itself into when its cgroup must hand the memory controller down.
const SERVICE_LEAF: &str = "pidevops-serve";
/// The parent of every agent's cgroup.
const AGENTS: &str = "pidevops-agents";

/// What bounds an agent's memory here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryBound {
    /// Each contained process runs in its own cgroup under `parent`, with `memory.max = limit`.
    Cgroup { parent: PathBuf, limit: u64 },
    /// Nothing does, and why.
    NotBounded { why: String },
}

impl MemoryBound {
    /// What `/health` and doctor say.
    pub fn describe(&self) -> String {
        match self {
            Self::Cgroup { parent, limit } => format!(
                "cgroup v2 limit {} MiB per agent, no swap (memory.max under {})",
                limit >> 20,
                parent.display()
            ),
            Self::NotBounded { why } => format!("not bounded, because {why}"),
        }
    }
}

/// Where pidevops's cgroup is, once it is known to be a cgroup v2 one with the memory controller available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delegation {
    /// pidevops's own cgroup directory (under `host`).
    pub dir: PathBuf,
    /// Whether the memory controller is already handed to its children.
    pub memory_delegated: bool,
    /// Other processes in it than pidevops: then it cannot be handed down.
    pub others: usize,
    /// Whether pidevops itself is in it (not already in a leaf of it).
    pub holds_us: bool,
}

/// Finds pidevops's cgroup v2 directory and whether agents could be bounded under it, writing nothing.
pub fn probe(host: &Path, pid: u32) -> Result<Delegation, String> {
    let read = |relative: &str| std::fs::read_to_string(host.join(relative));
    let membership =
        read("proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup cannot be read ({e})"))?;
    let path = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy (cgroup v1 only)")?;
    let mountinfo = read("proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo cannot be read ({e})"))?;
    let (root, point) = mountinfo
        .lines()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            (fs.split(' ').next() == Some("cgroup2")).then(|| {
                let fields: Vec<&str> = mount.split(' ').collect();
                (fields.get(3).copied(), fields.get(4).copied())
            })
        })
        .and_then(|(root, point)| Some((root?, point?)))
        .ok_or("/sys/fs/cgroup is cgroup v1 (no cgroup2 mount, so no delegation)")?;
    // In a cgroup namespace the mount's root is where our paths start; outside one, it is `/`.
    let inside = path
        .strip_prefix(root)
        .unwrap_or(path)
        .trim_start_matches('/');
    let dir = host.join(point.trim_start_matches('/')).join(inside);
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).map_err(|e| {
        format!(
            "pidevops's cgroup {} cannot be read ({e})",
            shown(host, &dir)
        )
    })?;
    if !words(&controllers).any(|c| c == "memory") {
        return Err(format!(
            "the memory controller is not available in pidevops's cgroup {} (cgroup v1 may hold it)",
            shown(host, &dir)
        ));
    }
    let subtree = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<&str> = words(&procs).collect();
    let ours = pid.to_string();
    let memory_delegated = words(&subtree).any(|c| c == "memory");
    let others = pids.iter().filter(|p| **p != ours).count();
    let holds_us = pids.contains(&ours.as_str());
    Ok(Delegation {
        dir,
        memory_delegated,
        others,
        holds_us,
    })
}

/// Sets up the agents' parent cgroup: pidevops moved into its leaf where needed, the memory controller handed
/// down twice (to the agents' parent, and to each agent's cgroup). `Err`: why agents are not bounded.
pub fn arm(host: &Path, delegation: &Delegation, pid: u32) -> Result<PathBuf, String> {
    let dir = &delegation.dir;
    let failed = |what: &str, e: std::io::Error| format!("{what} failed ({e})");
    if !delegation.memory_delegated {
        if delegation.others > 0 {
            return Err(format!(
                "pidevops's cgroup {} holds {} other process(es), so it cannot hand the memory controller to \
                 agents (run pidevops in a cgroup of its own: systemd Delegate=yes, or a container's own cgroup \
                 namespace)",
                shown(host, dir),
                delegation.others
            ));
        }
        if delegation.holds_us {
            let leaf = dir.join(SERVICE_LEAF);
            make_dir(&leaf).map_err(|e| failed(&format!("making {}", shown(host, &leaf)), e))?;
            write(&leaf.join("cgroup.procs"), &pid.to_string())
                .map_err(|e| failed("moving pidevops into its own leaf cgroup", e))?;
        }
        write(&dir.join("cgroup.subtree_control"), "+memory")
            .map_err(|e| failed(&format!("enabling memory in {}", shown(host, dir)), e))?;
    }
    let agents = dir.join(AGENTS);
    make_dir(&agents).map_err(|e| failed(&format!("making {}", shown(host, &agents)), e))?;
    write(&agents.join("cgroup.subtree_control"), "+memory")
        .map_err(|e| failed(&format!("enabling memory in {}", shown(host, &agents)), e))?;
    Ok(agents)
}

/// What bounds agents' memory on this host: `probe` then `arm` under `/`, once per process (a second dispatcher
/// in the same process, a test's, finds it done).
pub fn detect_cached(limit: u64) -> MemoryBound {
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let (host, pid) = (Path::new("/"), std::process::id());
        probe(host, pid).and_then(|delegation| arm(host, &delegation, pid))
    });
    match found {
        Ok(parent) => MemoryBound::Cgroup {
            parent: parent.clone(),
            limit,
        },
        Err(why) => MemoryBound::NotBounded { why: why.clone() },
    }
}

/// What doctor says, writing nothing: what `serve` would find.
pub fn describe_probe(host: &Path, pid: u32, limit: u64) -> String {
    match probe(host, pid) {
        Ok(delegation) if delegation.memory_delegated || delegation.others == 0 => format!(
            "cgroup v2 limit {} MiB per agent, no swap (under {})",
            limit >> 20,
            shown(host, &delegation.dir.join(AGENTS))
        ),
        Ok(delegation) => MemoryBound::NotBounded {
            why: format!(
                "pidevops's cgroup {} holds {} other process(es), so it cannot hand the memory controller to agents",
                shown(host, &delegation.dir),
                delegation.others
            ),
        }
        .describe(),
        Err(why) => MemoryBound::NotBounded { why }.describe(),
    }
}

/// One contained process's cgroup: made with its limit before the process starts, removed once it has ended.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the child to write `0` into (itself) between fork and exec.
    procs: OwnedFd,
}

impl RunCgroup {
    /// A new cgroup under `parent` holding at most `limit` bytes of memory and no swap; its processes are killed
    /// together when it runs out.
    pub fn create(parent: &Path, limit: u64) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "agent-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir)?;
        let made = Self::limit(&dir, limit).and_then(|()| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .custom_flags(nix::libc::O_CLOEXEC)
                .open(dir.join("cgroup.procs"))
        });
        match made {
            Ok(file) => Ok(Self {
                dir,
                procs: file.into(),
            }),
            Err(error) => {
                let _ = std::fs::remove_dir(&dir);
                Err(error)
            }
        }
    }

    fn limit(dir: &Path, limit: u64) -> std::io::Result<()> {
        write(&dir.join("memory.max"), &limit.to_string())?;
        // Absent without swap accounting, or on older kernels: then there is no swap to bound or no group kill.
        for (file, value) in [("memory.swap.max", "0"), ("memory.oom.group", "1")] {
            let path = dir.join(file);
            if path.exists() {
                write(&path, value)?;
            }
        }
        Ok(())
    }

    /// Moves the calling process into this cgroup. For `pre_exec`: one `write`, no allocation.
    pub fn enter_in_child(&self) -> std::io::Result<()> {
        // SAFETY: a valid open fd and a one-byte static buffer.
        let written = unsafe { nix::libc::write(self.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if written == 1 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// How many times the OOM killer acted in it (`memory.events`' `oom_kill`).
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|events| {
                events.lines().find_map(|line| {
                    line.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let kills = self.oom_kills();
        if kills > 0 {
            tracing::warn!(cgroup = %self.dir.display(), kills, "an agent ran out of its memory limit (memory.max)");
        }
        // Empty once its processes are gone (the runner kills the whole group before this is dropped).
        if let Err(error) = std::fs::remove_dir(&self.dir) {
            tracing::warn!(cgroup = %self.dir.display(), %error, "could not remove an agent's cgroup");
        }
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split_whitespace()
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// A cgroup file takes one write of its value (the file exists in a real cgroup; a test's tree makes it).
fn write(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// A path as the host names it (without a test's temporary prefix).
fn shown(host: &Path, path: &Path) -> String {
    match path.strip_prefix(host) {
        Ok(inside) => format!("/{}", inside.display()),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: u32 = 4242;

    /// A host tree: `/proc/self/{cgroup,mountinfo}` and the cgroup directory `/sys/fs/cgroup<path>` with its files.
    fn host(
        cgroup: &str,
        mountinfo: &str,
        path: &str,
        files: &[(&str, &str)],
    ) -> tempfile::TempDir {
        let host = tempfile::tempdir().unwrap();
        let proc = host.path().join("proc/self");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(proc.join("cgroup"), cgroup).unwrap();
        std::fs::write(proc.join("mountinfo"), mountinfo).unwrap();
        let dir = host
            .path()
            .join("sys/fs/cgroup")
            .join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
        host
    }

    const V2_MOUNT: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
    /// This machine's shape: cgroup v1 controllers, an empty unified hierarchy named in /proc/self/cgroup but not
    /// mounted.
    const V1_MOUNTS: &str = "40 30 0:35 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                             41 40 0:36 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";

    #[test]
    fn cgroup_v1_is_not_bounded_and_says_why() {
        let host = host("4:memory:/x\n0::/\n", V1_MOUNTS, "/", &[]);
        let why = probe(host.path(), PID).unwrap_err();
        assert!(why.contains("cgroup v1"), "{why}");
        let host = self::host("4:memory:/x\n", V1_MOUNTS, "/", &[]);
        assert!(probe(host.path(), PID).unwrap_err().contains("cgroup v1"));
        assert!(describe_probe(host.path(), PID, 1 << 30).starts_with("not bounded, because "));
    }

    #[test]
    fn a_v2_cgroup_without_the_memory_controller_is_not_bounded() {
        let host = host(
            "0::/svc\n",
            V2_MOUNT,
            "/svc",
            &[("cgroup.controllers", "cpu pids\n")],
        );
        let why = probe(host.path(), PID).unwrap_err();
        assert!(
            why.contains("memory controller is not available")
                && why.contains("/sys/fs/cgroup/svc"),
            "{why}"
        );
    }

    #[test]
    fn a_cgroup_shared_with_other_processes_is_left_alone() {
        let host = host(
            "0::/svc\n",
            V2_MOUNT,
            "/svc",
            &[
                ("cgroup.controllers", "cpu memory pids\n"),
                ("cgroup.subtree_control", ""),
                ("cgroup.procs", "1\n4242\n"),
            ],
        );
        let delegation = probe(host.path(), PID).unwrap();
        assert_eq!(delegation.others, 1);
        let why = arm(host.path(), &delegation, PID).unwrap_err();
        assert!(why.contains("1 other process(es)"), "{why}");
        // Nothing was written or made.
        let dir = host.path().join("sys/fs/cgroup/svc");
        assert_eq!(
            std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap(),
            ""
        );
        assert!(!dir.join(SERVICE_LEAF).exists() && !dir.join(AGENTS).exists());
    }

    #[test]
    fn a_delegated_cgroup_holding_only_us_moves_us_to_a_leaf_and_hands_memory_to_the_agents() {
        let host = host(
            "0::/system.slice/pidevops.service\n",
            V2_MOUNT,
            "/system.slice/pidevops.service",
            &[
                ("cgroup.controllers", "cpu io memory pids\n"),
                ("cgroup.subtree_control", ""),
                ("cgroup.procs", "4242\n"),
            ],
        );
        let delegation = probe(host.path(), PID).unwrap();
        assert!(delegation.holds_us && !delegation.memory_delegated);
        let agents = arm(host.path(), &delegation, PID).unwrap();
        let dir = host
            .path()
            .join("sys/fs/cgroup/system.slice/pidevops.service");
        assert_eq!(agents, dir.join(AGENTS));
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(dir.join(SERVICE_LEAF).join("cgroup.procs")), "4242");
        assert_eq!(read(dir.join("cgroup.subtree_control")), "+memory");
        assert_eq!(read(agents.join("cgroup.subtree_control")), "+memory");
        let bound = MemoryBound::Cgroup {
            parent: agents,
            limit: 4096 << 20,
        };
        assert!(bound
            .describe()
            .starts_with("cgroup v2 limit 4096 MiB per agent"));
        assert!(describe_probe(host.path(), PID, 4096 << 20)
            .contains("/sys/fs/cgroup/system.slice/pidevops.service/pidevops-agents"));
    }

    #[test]
    fn in_a_cgroup_namespace_the_paths_start_at_the_mounts_root() {
        // A container with its own cgroup namespace: /proc/self/cgroup says `/`, the memory already delegated.
        let host = host(
            "0::/\n",
            V2_MOUNT,
            "/",
            &[
                ("cgroup.controllers", "memory\n"),
                ("cgroup.subtree_control", "memory\n"),
            ],
        );
        let delegation = probe(host.path(), PID).unwrap();
        assert_eq!(delegation.dir, host.path().join("sys/fs/cgroup/"));
        assert!(delegation.memory_delegated);
        arm(host.path(), &delegation, PID).unwrap();
        assert!(!host
            .path()
            .join("sys/fs/cgroup")
            .join(SERVICE_LEAF)
            .exists());
    }

    #[test]
    fn an_agents_cgroup_gets_its_limit_no_swap_and_a_group_kill_and_goes_when_dropped() {
        let parent = tempfile::tempdir().unwrap();
        let run = RunCgroup::create(parent.path(), 64 << 20).unwrap();
        let dir = run.dir.clone();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        // Absent files (no swap accounting here) are not made up.
        assert!(!dir.join("memory.swap.max").exists());
        std::fs::write(dir.join("memory.events"), "low 0\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(run.oom_kills(), 2);
        // A real cgroup directory holds only its interface files, which rmdir ignores; the test's are files.
        for f in ["memory.max", "memory.events", "cgroup.procs"] {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
        drop(run);
        assert!(!dir.exists());
    }
}
