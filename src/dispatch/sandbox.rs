//! Filesystem confinement for agents with Landlock (Linux 5.13+, unprivileged): the agent and everything it
//! starts may read the whole filesystem but write only beneath the directories it is given (its worktree, its
//! HOME and TMPDIR, `/dev`, and the parts of the repository's mirror its own commits write). A kernel without Landlock runs agents
//! unconfined and says so in `/health` (`dispatcher` detail `confinement`); nothing pretends.
//!
//! Raw syscalls rather than a crate: the rule set is built in the parent, and the child applies it between fork
//! and exec, where only async-signal-safe calls (two syscalls, no allocation) are allowed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::libc;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const WRITE_FILE: u64 = 1 << 1;
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

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
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

/// A rule set ready to be applied in a child: writes only beneath the given directories.
#[derive(Debug)]
pub struct WriteConfinement {
    ruleset: OwnedFd,
}

impl WriteConfinement {
    /// `Ok(None)` when the kernel has no Landlock.
    pub fn new(writable: &[&Path]) -> std::io::Result<Option<Self>> {
        let Some(abi) = abi() else {
            return Ok(None);
        };
        let mut access = WRITE_FILE
            | REMOVE_DIR
            | REMOVE_FILE
            | MAKE_CHAR
            | MAKE_DIR
            | MAKE_REG
            | MAKE_SOCK
            | MAKE_FIFO
            | MAKE_BLOCK
            | MAKE_SYM;
        if abi >= 2 {
            access |= REFER;
        }
        if abi >= 3 {
            access |= TRUNCATE;
        }
        let attr = RulesetAttr {
            handled_access_fs: access,
        };
        // SAFETY: a valid attribute of the size passed; the kernel returns a new close-on-exec fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the syscall just returned this fd, owned by nobody else.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        for path in writable {
            let dir = std::fs::File::options()
                .read(true)
                .custom_flags_path()
                .open(path)?;
            let rule = PathBeneathAttr {
                allowed_access: access,
                parent_fd: dir.as_raw_fd(),
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
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(Some(Self { ruleset }))
    }

    /// Applies the rule set to the calling thread. Meant for `pre_exec`: two syscalls, no allocation.
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

/// `O_PATH` opens: a directory handle for a rule, without needing read permission on it.
trait PathOpen {
    fn custom_flags_path(&mut self) -> &mut Self;
}

impl PathOpen for std::fs::OpenOptions {
    fn custom_flags_path(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_PATH | libc::O_CLOEXEC)
    }
}
