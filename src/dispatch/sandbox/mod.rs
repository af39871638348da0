//! Containment of agents. An agent runs what ticket text tells it, so it is treated as hostile: it sees the system
//! read-only, its own worktree, HOME and TMPDIR read-write, the prompt and its own program read-only, and nothing
//! else — no other repository's mirror, no other run, no log, no database, no data directory, no process of ours.
//! When a run ends, nothing it started survives.
//!
//! Two ways, chosen once at start-up (`detect`) and named in `/health` and `doctor`:
//! - **`namespaces`**: bubblewrap (`bwrap`, Debian's `bubblewrap`): a new mount namespace built from an empty root
//!   with only the paths above bound in, and a new PID namespace whose init is killed when the agent ends (by the
//!   runner's reaper, `reaper.rs`), so the kernel kills every descendant (a `setsid` or double-forked child
//!   included). Capabilities are dropped when the service runs as root.
//! - **`landlock`**, where user namespaces are refused: Landlock restricts reads as well as writes to the same
//!   paths (and, on ABI 6+, signals to processes outside the agent's domain); ptrace — and so
//!   `/proc/<pid>/environ` of a process outside the domain — is refused by Landlock itself. A reaper process
//!   (`PR_SET_CHILD_SUBREAPER`) between the service and the agent adopts every orphan and kills them all when the
//!   agent ends (see `reaper.rs`). Capabilities are dropped when the service runs as root.
//! - **`none`**: neither works here. `[dispatch] containment = "required"` (the default) leaves the dispatcher
//!   unarmed; `"best-effort"` runs agents uncontained and says so.
//!
//! Landlock uses raw syscalls rather than a crate: the rule set is built in the parent, and the child applies it
//! between fork and exec, where only async-signal-safe calls (syscalls, no allocation) are allowed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::libc;

/// What is in force for agents on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Containment {
    /// bubblewrap works: mount and PID namespaces.
    Namespaces { bwrap: PathBuf },
    /// No user namespaces, but Landlock (of this ABI): reads and writes confined, orphans reaped.
    Landlock { abi: i64 },
    /// Nothing confines agents here.
    None { why: String },
}

impl Containment {
    /// `namespaces`, `landlock` or `none`: the word `/health` and `doctor` show.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Namespaces { .. } => "namespaces",
            Self::Landlock { .. } => "landlock",
            Self::None { .. } => "none",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Namespaces { bwrap } => format!(
                "namespaces ({}): agents see only their worktree, HOME, TMPDIR and the read-only system; every \
                 process of a run ends with it",
                bwrap.display()
            ),
            Self::Landlock { abi } => format!(
                "landlock abi {abi} (no user namespaces): agents read and write only their worktree, HOME, TMPDIR \
                 and the read-only system; a reaper kills every process a run leaves"
            ),
            Self::None { why } => format!("none: {why}; agents run with the service's view of the machine"),
        }
    }

    /// What bounds the memory and disk an agent's own directories take here (`/health`, doctor): sized tmpfs
    /// under bubblewrap; otherwise "not bounded, because …" (directories on the workspace volume, which only
    /// `min_free_disk_mib` watches).
    pub fn describe_scratch(&self, tmp_size: u64, home_size: u64) -> String {
        match self {
            Self::Namespaces { .. } => format!(
                "tmpfs per agent: /tmp and TMPDIR {} MiB each, HOME {} MiB",
                tmp_size >> 20,
                home_size >> 20
            ),
            Self::Landlock { .. } => {
                "not bounded, because Landlock cannot mount a tmpfs: HOME and TMPDIR are \
                 directories on the workspace volume (claims stop below min_free_disk_mib)"
                    .to_owned()
            }
            Self::None { .. } => {
                "not bounded, because nothing contains agents: HOME and TMPDIR are directories \
                 on the workspace volume (claims stop below min_free_disk_mib)"
                    .to_owned()
            }
        }
    }
}

/// Finds what can contain agents here: bubblewrap if it can make a PID and mount namespace (tried for real: some
/// container hosts refuse user namespaces), else Landlock, else nothing. `bwrap` is a path or a name on `PATH`.
pub fn detect(bwrap: &str, path_var: Option<&str>) -> Containment {
    let found = find_program(
        bwrap,
        Some(path_var.unwrap_or("/usr/local/bin:/usr/bin:/bin")),
    );
    let bwrap_error = match &found {
        Some(program) => match try_bwrap(program) {
            Ok(()) => {
                return Containment::Namespaces {
                    bwrap: program.clone(),
                }
            }
            Err(error) => error,
        },
        None => format!("{bwrap} not found"),
    };
    match abi() {
        Some(abi) => Containment::Landlock { abi },
        None => Containment::None {
            why: format!("bubblewrap cannot run ({bwrap_error}) and this kernel has no Landlock"),
        },
    }
}

/// [`detect`], once per process for each (program, PATH): `doctor::plan` and the dispatcher ask, and a probe
/// starts a process.
pub fn detect_cached(bwrap: &str, path_var: Option<&str>) -> Containment {
    let key = (bwrap.to_owned(), path_var.map(str::to_owned));
    if let Some((_, found)) = cache().iter().find(|(k, _)| *k == key) {
        return found.clone();
    }
    let found = detect(bwrap, path_var);
    pin_in_cache(key, found.clone());
    found
}

type CacheKey = (String, Option<String>);

fn cache() -> std::sync::MutexGuard<'static, Vec<(CacheKey, Containment)>> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Vec<(CacheKey, Containment)>>> =
        std::sync::OnceLock::new();
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn pin_in_cache(key: CacheKey, containment: Containment) {
    let mut cache = cache();
    cache.retain(|(k, _)| *k != key);
    cache.push((key, containment));
}

/// Fixes what [`detect_cached`] answers for `bwrap` with this PATH: for a benchmark that measures what
/// containment costs against none, in one process. Configuration cannot reach this.
pub fn pin(bwrap: &str, path_var: Option<&str>, containment: Containment) {
    pin_in_cache((bwrap.to_owned(), path_var.map(str::to_owned)), containment);
}

fn try_bwrap(program: &Path) -> Result<(), String> {
    let output = std::process::Command::new(program)
        .args([
            "--unshare-pid",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            // Agents' tmpfs have a size (bubblewrap 0.5+): one that cannot size them does not contain them.
            "--size",
            "1048576",
            "--tmpfs",
            "/tmp",
            "true",
        ])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} refused: {}",
            program.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A program as `execvp` would find it: a path as given, a bare name on `path_var` (none without one).
pub fn find_program(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    path_var
        .unwrap_or_default()
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| executable(candidate))
}

/// The system an agent may read (and run) but never change. Only those that exist are used.
pub const SYSTEM_PATHS: [&str; 11] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/sys",
    // Where /etc/resolv.conf points on systemd hosts: agents call their model's API by name.
    "/run/systemd/resolve",
];

/// What one agent may see. Paths are absolute; `writable` ones are its own, `readable` ones (directories or
/// files) are seen read-only.
#[derive(Clone, Debug, Default)]
pub struct AgentView {
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    /// Whether the service runs as root: then the agent gets no capabilities.
    pub drop_capabilities: bool,
    /// Bytes of its private `/tmp` tmpfs under bubblewrap: memory the agent may fill, so bounded.
    pub tmp_size: Option<u64>,
    /// Its own directories that need not outlive the process (TMPDIR, HOME): under bubblewrap each a tmpfs of its
    /// size instead of a directory on the workspace volume. A writable path inside one (pi's agent directory,
    /// written by pidevops into HOME) is bound on top of it.
    pub scratch: Vec<Scratch>,
}

/// A directory of an agent's that is a sized tmpfs under bubblewrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scratch {
    pub path: PathBuf,
    /// Bytes: what a write past fails with "no space left on device".
    pub size: u64,
}

impl AgentView {
    /// The system paths, plus what the caller adds.
    pub fn system_readable() -> Vec<PathBuf> {
        SYSTEM_PATHS
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.symlink_metadata().is_ok())
            .collect()
    }
}

/// The network a bubblewrap sandbox gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwrapNet<'a> {
    /// The host's (`network = "host"`).
    Host,
    /// Its own namespace, only loopback; with the egress proxy's socket bound in at
    /// [`super::egress::SOCKET_IN_SANDBOX`] when there is one.
    Own { proxy_socket: Option<&'a Path> },
}

/// The argv that runs `argv` inside a bubblewrap sandbox showing only `view`.
pub fn bwrap_argv(
    bwrap: &Path,
    view: &AgentView,
    cwd: &Path,
    argv: &[String],
    net: BwrapNet<'_>,
) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut out = vec![
        s(bwrap),
        "--die-with-parent".into(),
        "--unshare-pid".into(),
        "--unshare-ipc".into(),
        "--unshare-uts".into(),
        "--unshare-cgroup-try".into(),
        // No controlling terminal to push keystrokes into (TIOCSTI).
        "--new-session".into(),
        "--proc".into(),
        "/proc".into(),
        "--dev".into(),
        "/dev".into(),
        // First, so that the paths bound below (a worktree under /tmp) are mounted on top of it, not hidden.
        // Its own TMPDIR is in the run directory; this is for tools that write to /tmp regardless.
    ];
    let tmpfs = |out: &mut Vec<String>, path: String, size: Option<u64>| {
        if let Some(size) = size {
            out.extend(["--size".into(), size.to_string()]);
        }
        out.extend(["--tmpfs".into(), path]);
    };
    tmpfs(&mut out, "/tmp".into(), view.tmp_size);
    if view.drop_capabilities {
        out.extend(["--cap-drop".into(), "ALL".into()]);
    }
    if let BwrapNet::Own { .. } = net {
        out.push("--unshare-net".into());
    }
    let mut bound: Vec<&Path> = Vec::new();
    for path in &view.readable {
        // Beneath something already bound (`/usr/local/bin` under `/usr`, `/bin` twice): nothing to add, and a
        // second mount at a link bwrap made would fail.
        if bound.iter().any(|b| path.starts_with(b)) {
            continue;
        }
        bound.push(path);
        match std::fs::read_link(path) {
            // A system path that is a link (`/bin -> usr/bin` on merged-/usr systems) stays a link.
            Ok(target) if SYSTEM_PATHS.iter().any(|p| Path::new(p) == path) => {
                out.extend(["--symlink".into(), s(&target), s(path)]);
            }
            _ => out.extend(["--ro-bind-try".into(), s(path), s(path)]),
        }
    }
    // Writable after readable: a worktree inside a readable directory is mounted over it, read-write. A writable
    // path inside a scratch tmpfs goes after that tmpfs, which would hide it.
    let (inside_scratch, outside_scratch): (Vec<&PathBuf>, Vec<&PathBuf>) =
        view.writable.iter().partition(|path| {
            view.scratch
                .iter()
                .any(|scratch| path.starts_with(&scratch.path) && **path != scratch.path)
        });
    for path in outside_scratch {
        out.extend(["--bind".into(), s(path), s(path)]);
    }
    for scratch in &view.scratch {
        tmpfs(&mut out, s(&scratch.path), Some(scratch.size));
    }
    for path in inside_scratch {
        out.extend(["--bind".into(), s(path), s(path)]);
    }
    if let BwrapNet::Own {
        proxy_socket: Some(socket),
    } = net
    {
        out.extend([
            "--bind".into(),
            s(socket),
            super::egress::SOCKET_IN_SANDBOX.into(),
        ]);
    }
    // The root that holds these mounts is bwrap's own tmpfs: read-only, so a write anywhere else fails loudly
    // rather than landing somewhere that vanishes.
    out.extend(["--remount-ro".into(), "/".into()]);
    out.extend(["--chdir".into(), s(cwd)]);
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: renaming or linking across directories.
const REFER: u64 = 1 << 13;
/// ABI 3: truncating a file.
const TRUNCATE: u64 = 1 << 14;
/// ABI 5: ioctl on device files.
const IOCTL_DEV: u64 = 1 << 15;
/// ABI 6: no signals to processes outside the domain (the service, other agents).
const SCOPE_SIGNAL: u64 = 1 << 1;

/// ABI 1's rights to change what a directory holds.
const CHANGE_DIRECTORY: u64 = REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM;

/// Rights that only make sense on a directory; a rule on a file may hold only the others.
const DIRECTORY_ONLY: u64 = READ_DIR | CHANGE_DIRECTORY | REFER;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// ABI 4: TCP bind and connect, by port.
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const RULE_NET_PORT: u32 = 2;
/// The first ABI with network rules.
pub const NET_ABI: i64 = 4;

#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version the kernel offers, or `None` without Landlock.
pub fn abi() -> Option<i64> {
    // SAFETY: the documented version query: a null attribute, size 0 and the version flag.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    (version >= 1).then_some(version)
}

/// A Landlock rule set ready to be applied in a child: reads only beneath `readable` and `writable`, writes only
/// beneath `writable`.
#[derive(Debug)]
pub struct Confinement {
    ruleset: OwnedFd,
}

impl Confinement {
    /// `Ok(None)` when the kernel has no Landlock. `connect_ports`: `None` leaves the network alone; `Some` refuses
    /// every TCP bind and every TCP connect but to those ports (ABI 4; an older kernel is an error).
    pub fn new(view: &AgentView, connect_ports: Option<&[u16]>) -> std::io::Result<Option<Self>> {
        let Some(abi) = abi() else {
            return Ok(None);
        };
        if connect_ports.is_some() && abi < NET_ABI {
            return Err(std::io::Error::other(format!(
                "landlock abi {abi} has no network rules (they need abi {NET_ABI})"
            )));
        }
        let read = EXECUTE | READ_FILE | READ_DIR;
        let mut all = read | WRITE_FILE | CHANGE_DIRECTORY;
        if abi >= 2 {
            all |= REFER;
        }
        if abi >= 3 {
            all |= TRUNCATE;
        }
        if abi >= 5 {
            all |= IOCTL_DEV;
        }
        let attr = RulesetAttr {
            handled_access_fs: all,
            handled_access_net: if connect_ports.is_some() {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 { SCOPE_SIGNAL } else { 0 },
        };
        // Before ABI 4 the attribute ends after the file-system field, before ABI 6 after the network one; a
        // larger size with zeros is refused by old kernels that do not know the fields, so pass only what they
        // know.
        let size = if abi >= 6 {
            std::mem::size_of::<RulesetAttr>()
        } else if abi >= NET_ABI {
            2 * std::mem::size_of::<u64>()
        } else {
            std::mem::size_of::<u64>()
        };
        // SAFETY: a valid attribute of at least the size passed; the kernel returns a new close-on-exec fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the syscall just returned this fd, owned by nobody else.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let (proc, dev) = (PathBuf::from("/proc"), PathBuf::from("/dev"));
        let rules = view
            .readable
            .iter()
            .map(|p| (p, read))
            .chain(view.writable.iter().map(|p| (p, all)))
            .chain([(&proc, read), (&dev, all)]);
        for (path, access) in rules {
            let Ok(file) = std::fs::File::options()
                .read(true)
                .custom_flags_path()
                .open(path)
            else {
                // Absent paths give nothing to see.
                continue;
            };
            let is_dir = file.metadata().map(|m| m.is_dir()).unwrap_or(false);
            let access = if is_dir {
                access
            } else {
                access & !DIRECTORY_ONLY
            };
            let rule = PathBeneathAttr {
                allowed_access: access,
                parent_fd: file.as_raw_fd(),
            };
            // SAFETY: valid fds and a rule of the documented layout.
            let added = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0u32,
                )
            };
            if added < 0 {
                return Err(std::io::Error::other(format!(
                    "landlock rule for {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                )));
            }
        }
        for port in connect_ports.unwrap_or_default() {
            let rule = NetPortAttr {
                allowed_access: NET_CONNECT_TCP,
                port: u64::from(*port),
            };
            // SAFETY: a valid fd and a rule of the documented layout.
            let added = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    RULE_NET_PORT,
                    &rule as *const NetPortAttr,
                    0u32,
                )
            };
            if added < 0 {
                return Err(std::io::Error::other(format!(
                    "landlock rule for TCP port {port}: {}",
                    std::io::Error::last_os_error()
                )));
            }
        }
        Ok(Some(Self { ruleset }))
    }

    /// Applies the rule set to the calling thread. Meant for `pre_exec`: syscalls only, no allocation.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        // SAFETY: prctl and landlock_restrict_self with plain integer arguments.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Drops every capability for good: the bounding set, the ambient set and the permitted, effective and
/// inheritable sets, so the agent gains none back when it runs a program (it still runs as uid 0, without them).
/// Async-signal-safe: for `pre_exec`.
pub fn drop_capabilities_in_child() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capset with plain integers and stack values of the documented layout.
    unsafe {
        for cap in 0..64 {
            // EINVAL past the kernel's last capability: nothing to drop there.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `O_PATH` opens: a handle for a rule, without needing read permission on it.
trait PathOpen {
    fn custom_flags_path(&mut self) -> &mut Self;
}

impl PathOpen for std::fs::OpenOptions {
    fn custom_flags_path(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_PATH | libc::O_CLOEXEC)
    }
}

#[cfg(test)]
mod tests;
