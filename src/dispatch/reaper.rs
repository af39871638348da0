//! The reaper: a process between the service and the agent that outlives nothing the agent started.
//!
//! The runner forks it (`Command::spawn`); in `pre_exec` it marks itself a child subreaper and forks again: the
//! grandchild goes on to become the agent (own process group, Landlock, exec), the reaper never returns to Rust.
//! Every orphan of the agent's tree — a `setsid` or double-forked child — is re-parented to the reaper, not to
//! init. When the agent exits, the reaper kills its remaining descendants, waits for them all, and exits with the
//! agent's status. SIGTERM to the reaper is passed to the agent's process group; SIGUSR1 kills everything at once
//! (the runner's "stop now") and ends the reaper; the service's death sends it SIGUSR1 too (its parent-death
//! signal), so a SIGKILLed `serve` leaves nothing of the run behind.
//!
//! Under `landlock` the agent is the agent's own program. Under `namespaces` it is bubblewrap, and what the reaper
//! adopts is bubblewrap's init (PID 1 of the sandbox), orphaned when bubblewrap's monitor exits: killing it makes
//! the kernel kill the whole namespace, and its reaping means the namespace is empty. bubblewrap's own
//! `--die-with-parent` does not make that sure: its init arms its parent-death signal only after forking the
//! command, so a monitor that dies in between (a stop just as the agent starts, seen here under load) leaves the
//! init and the agent running, re-parented to PID 1.
//!
//! Everything here runs between fork and exec of a multi-threaded program: only async-signal-safe syscalls, no
//! allocation, no locks. `/proc` is read with `getdents64` into stack buffers.

use nix::libc;

/// Sent by the runner to make the reaper kill the whole tree at once.
pub const KILL_ALL: libc::c_int = libc::SIGUSR1;

/// In the child of `spawn`: becomes the reaper, and returns (`Ok`) only in the grandchild that is to become the
/// agent. `parent` is the service's pid (the reaper dies with it).
///
/// # Safety
/// Call only between fork and exec (from `pre_exec`).
pub unsafe fn split_in_child() -> std::io::Result<()> {
    if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut waited: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut waited);
    for signal in [libc::SIGCHLD, libc::SIGTERM, KILL_ALL] {
        libc::sigaddset(&mut waited, signal);
    }
    let mut before: libc::sigset_t = std::mem::zeroed();
    if libc::sigprocmask(libc::SIG_BLOCK, &waited, &mut before) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The service's death kills the tree, not just the reaper (blocked above: it waits in `sigwaitinfo`). The
    // service may have died before this prctl: then the signal never comes, and we stop here.
    let service = libc::getppid();
    if libc::prctl(libc::PR_SET_PDEATHSIG, KILL_ALL, 0, 0, 0) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if libc::getppid() != service {
        libc::_exit(127);
    }
    let reaper = libc::getpid();
    let agent = libc::fork();
    if agent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if agent == 0 {
        // The agent: signals as they were, dies with the reaper, its own group (so a group signal to the reaper's
        // group reaches the reaper alone, which decides).
        libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != reaper {
            libc::_exit(127);
        }
        libc::setpgid(0, 0);
        return Ok(());
    }
    reap(agent, &waited)
}

/// The reaper's whole life. Never returns.
unsafe fn reap(agent: libc::pid_t, waited: &libc::sigset_t) -> ! {
    // Nothing of the service's stays open here: not the exec-status pipe (the agent's exec closes its own copy,
    // and the parent must see that), not the agent's output pipes.
    close_all_from(0);
    let mut status: libc::c_int = 0;
    loop {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let signal = libc::sigwaitinfo(waited, &mut info);
        if signal == libc::SIGTERM {
            libc::kill(-agent, libc::SIGTERM);
            libc::kill(agent, libc::SIGTERM);
        } else if signal == KILL_ALL {
            libc::kill(-agent, libc::SIGKILL);
            // Every child reaped, the agent too: nothing is left to wait for (nor any SIGCHLD to report).
            kill_descendants();
            libc::_exit(128 + libc::SIGKILL);
        } else if signal == libc::SIGCHLD {
            let mut agent_ended = false;
            loop {
                let mut child_status: libc::c_int = 0;
                let pid = libc::waitpid(-1, &mut child_status, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == agent {
                    status = child_status;
                    agent_ended = true;
                }
            }
            if agent_ended {
                kill_descendants();
                if libc::WIFEXITED(status) {
                    libc::_exit(libc::WEXITSTATUS(status));
                }
                // Killed by a signal: the same signal ends the reaper, so the runner sees what the agent saw.
                let signal = libc::WTERMSIG(status);
                libc::signal(signal, libc::SIG_DFL);
                let mut only: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut only);
                libc::sigaddset(&mut only, signal);
                libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal);
            }
        }
    }
}

/// Kills every child until none is left: a killed child's own children are re-parented here, and are found on
/// the next pass. Returns when the reaper has no child at all, so no descendant either.
unsafe fn kill_descendants() {
    let me = libc::getpid();
    loop {
        signal_children(me, libc::SIGKILL);
        let mut status: libc::c_int = 0;
        if libc::waitpid(-1, &mut status, 0) < 0 && *libc::__errno_location() == libc::ECHILD {
            return;
        }
    }
}

/// Sends `signal` to every process whose parent is `parent`, found through `/proc/<pid>/stat`.
unsafe fn signal_children(parent: libc::pid_t, signal: libc::c_int) {
    let proc = libc::open(
        c"/proc".as_ptr(),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
    );
    if proc < 0 {
        return;
    }
    let mut buffer = [0u8; 8192];
    loop {
        let read = libc::syscall(
            libc::SYS_getdents64,
            proc,
            buffer.as_mut_ptr(),
            buffer.len(),
        );
        if read <= 0 {
            break;
        }
        let mut offset = 0usize;
        while offset < read as usize {
            // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
            let record = &buffer[offset..];
            let length = u16::from_ne_bytes([record[16], record[17]]) as usize;
            if length == 0 {
                break;
            }
            let name = &record[19..length.min(record.len())];
            if let Some(pid) = parse_pid(name) {
                if pid != parent && parent_of(proc, name) == Some(parent) {
                    libc::kill(pid, signal);
                }
            }
            offset += length;
        }
    }
    libc::close(proc);
}

/// A directory entry's name as a pid: digits up to the terminating NUL.
fn parse_pid(name: &[u8]) -> Option<libc::pid_t> {
    let mut pid: libc::pid_t = 0;
    let mut digits = 0;
    for &byte in name {
        match byte {
            0 => break,
            b'0'..=b'9' => {
                pid = pid
                    .checked_mul(10)?
                    .checked_add((byte - b'0') as libc::pid_t)?;
                digits += 1;
            }
            _ => return None,
        }
    }
    (digits > 0).then_some(pid)
}

/// The parent pid in `/proc/<name>/stat`: the fourth field, counted after the command's closing parenthesis (a
/// command may itself hold spaces and parentheses).
unsafe fn parent_of(proc: libc::c_int, name: &[u8]) -> Option<libc::pid_t> {
    let mut path = [0u8; 32];
    let mut length = 0;
    for &byte in name.iter().take_while(|&&b| b != 0) {
        *path.get_mut(length)? = byte;
        length += 1;
    }
    for &byte in b"/stat\0" {
        *path.get_mut(length)? = byte;
        length += 1;
    }
    let fd = libc::openat(proc, path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return None;
    }
    let mut stat = [0u8; 512];
    let read = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
    libc::close(fd);
    if read <= 0 {
        return None;
    }
    parse_parent(&stat[..read as usize])
}

fn parse_parent(stat: &[u8]) -> Option<libc::pid_t> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    // ") S 1234 ..."
    let rest = stat.get(close + 1..)?;
    let mut fields = rest.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let _state = fields.next()?;
    let ppid = fields.next()?;
    parse_pid(ppid)
}

/// Closes every descriptor from `first` on.
unsafe fn close_all_from(first: u32) {
    if libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) == 0 {
        return;
    }
    // Kernels before 5.9: one by one, up to the limit.
    let limit = libc::sysconf(libc::_SC_OPEN_MAX).clamp(256, 65_536) as libc::c_int;
    for fd in first as libc::c_int..limit {
        libc::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis() {
        assert_eq!(parse_parent(b"42 (sh) S 7 42 42 0"), Some(7));
        assert_eq!(parse_parent(b"42 (a) b) (c) R 99 1 1"), Some(99));
        assert_eq!(parse_parent(b"42 (x"), None);
    }

    #[test]
    fn only_digits_make_a_pid() {
        assert_eq!(parse_pid(b"123\0"), Some(123));
        assert_eq!(parse_pid(b"self\0"), None);
        assert_eq!(parse_pid(b"\0"), None);
        assert_eq!(parse_pid(b"99999999999999\0"), None);
    }
}
