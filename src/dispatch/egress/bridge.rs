//! `pidevops sandbox-bridge`: the one process of ours inside an agent's network namespace. It listens on the
//! sandbox's own loopback (where the agent's `HTTPS_PROXY` points), then forks: the child forwards each connection
//! to its run's egress proxy through the Unix socket bound into the sandbox, and the parent becomes the agent
//! (`exec`), so the agent's standard input, output, error, signals and exit status are its own and its parent is
//! the sandbox's init, as without the bridge. It listens before the agent starts, so the agent's first request
//! never races it; the forwarder dies with the agent (the PID namespace ends, and `PR_SET_PDEATHSIG`). Plain
//! threads: it runs before and outside any runtime, and copies bytes, nothing more.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;

use nix::libc;

/// Listens on 127.0.0.1:`port`, then runs `argv` in this process; returns only if that fails (the exit code).
pub fn run(socket: &Path, port: u16, argv: &[OsString]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("pidevops sandbox-bridge: no command");
        return 127;
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("pidevops sandbox-bridge: cannot listen on 127.0.0.1:{port}: {e}");
            return 126;
        }
    };
    // SAFETY: this process has one thread (main runs the bridge before any runtime starts), so the child may do
    // anything after the fork.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: prctl with plain integers.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            }
            for client in listener.incoming().flatten() {
                let _ = client.set_nodelay(true);
                let socket = socket.to_owned();
                std::thread::spawn(move || forward(client, &socket));
            }
            std::process::exit(0);
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            // The listener is the forwarder's; the agent does not hold it (and std made it close-on-exec).
            drop(listener);
            let error = std::process::Command::new(program).args(args).exec();
            eprintln!("pidevops sandbox-bridge: cannot start {program:?}: {error}");
            127
        }
        Err(e) => {
            eprintln!("pidevops sandbox-bridge: cannot fork the forwarder: {e}");
            126
        }
    }
}

/// One connection: bytes both ways until both sides are done.
fn forward(client: TcpStream, socket: &Path) {
    let Ok(upstream) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(mut client_read), Ok(mut upstream_write)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let to_proxy = std::thread::spawn(move || {
        let _ = copy(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(Shutdown::Write);
    });
    let (mut upstream_read, mut client_write) = (upstream, client);
    let _ = copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = to_proxy.join();
}

/// `io::copy` that flushes as it goes (a model's stream arrives in small pieces that must not wait).
fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buffer)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buffer[..n])?;
        to.flush()?;
    }
}
