//! `pidevops-bridge --socket S --port P -- <agent argv…>`: the one process of ours inside an agent's network
//! namespace, exec'd first inside every bubblewrap sandbox whose agent has `network = "proxy"`. It listens on the
//! sandbox's own loopback (127.0.0.1:P, where the agent's `HTTPS_PROXY` points), then forks: the child forwards each
//! connection to its run's egress proxy through the Unix socket S bound into the sandbox, and the parent becomes
//! the agent (`exec`), so the agent's standard input, output, error, signals and exit status are its own and its
//! parent is the sandbox's init, as without the bridge. It listens before the agent starts, so the agent's first
//! request never races it; the forwarder dies with the agent (the PID namespace ends, and `PR_SET_PDEATHSIG`).
//!
//! A binary of its own, apart from `pidevops`: it starts on every agent's dispatch path, so it is std and libc
//! only (no pidevops library, no argument parser, no async runtime, the system allocator), small and quick to start
//! (docs/benchmarks.md, "The dispatch path with an agent's own network"). The dispatcher looks for it beside its
//! own executable (dispatch/egress/mod.rs, `bridge_program`). Plain threads: it copies bytes, nothing more.
//!
//! Exit codes, as `env` and shells use them: the agent's own once it runs; 126 when the bridge cannot run it
//! (bad arguments, the port cannot be bound, no fork); 127 when there is no command or it cannot be exec'd.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nix::libc;

const NAME: &str = "pidevops-bridge";
const USAGE: &str =
    "usage: pidevops-bridge --socket <unix socket> --port <port> -- <command> [args…]";

/// The bridge cannot run the command (bad arguments, no listener, no fork).
const CANNOT_RUN: u8 = 126;
/// No command, or it could not be exec'd.
const NOT_STARTED: u8 = 127;

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    socket: PathBuf,
    port: u16,
    command: Vec<OsString>,
}

/// Why the command line is refused, and the exit code that says so.
#[derive(Debug, PartialEq, Eq)]
struct Refused {
    message: String,
    code: u8,
}

impl Refused {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            message: format!("{}\n{USAGE}", message.into()),
            code: CANNOT_RUN,
        }
    }
}

/// `--socket S --port P -- argv…` (each option once, `--name value` or `--name=value`); everything after `--` is
/// the command, untouched.
fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Args, Refused> {
    let (mut socket, mut port): (Option<PathBuf>, Option<u16>) = (None, None);
    loop {
        let Some(arg) = args.next() else {
            return Err(Refused {
                message: format!(
                    "no command: expected `-- <command> [args…]` after the options\n{USAGE}"
                ),
                code: NOT_STARTED,
            });
        };
        if arg == "--" {
            break;
        }
        let text = arg.to_string_lossy().into_owned();
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (text.clone(), None),
        };
        if name != "--socket" && name != "--port" {
            return Err(Refused::usage(format!("unexpected argument {text:?}")));
        }
        let value: OsString = match inline {
            Some(_) if arg.to_str().is_none() => {
                return Err(Refused::usage(format!("{name}: not valid UTF-8")))
            }
            Some(value) => value.into(),
            None => match args.next() {
                Some(value) if value != "--" => value,
                _ => return Err(Refused::usage(format!("{name} needs a value"))),
            },
        };
        if name == "--socket" {
            if socket.is_some() {
                return Err(Refused::usage("--socket given twice"));
            }
            if value.is_empty() {
                return Err(Refused::usage("--socket: empty path"));
            }
            socket = Some(PathBuf::from(value));
        } else {
            if port.is_some() {
                return Err(Refused::usage("--port given twice"));
            }
            let shown = value.to_string_lossy();
            match shown.parse::<u16>() {
                Ok(p) if p > 0 => port = Some(p),
                _ => {
                    return Err(Refused::usage(format!(
                        "--port: {shown:?} is not a port number (1-65535)"
                    )))
                }
            }
        }
    }
    let command: Vec<OsString> = args.collect();
    let Some(socket) = socket else {
        return Err(Refused::usage("--socket is missing"));
    };
    let Some(port) = port else {
        return Err(Refused::usage("--port is missing"));
    };
    if command.is_empty() {
        return Err(Refused {
            message: format!("no command after `--`\n{USAGE}"),
            code: NOT_STARTED,
        });
    }
    Ok(Args {
        socket,
        port,
        command,
    })
}

fn main() -> ExitCode {
    match parse(std::env::args_os().skip(1)) {
        Ok(args) => ExitCode::from(run(&args.socket, args.port, &args.command)),
        Err(refused) => {
            eprintln!("{NAME}: {}", refused.message);
            ExitCode::from(refused.code)
        }
    }
}

/// Listens on 127.0.0.1:`port`, then runs `argv` in this process; returns only if that fails (the exit code).
fn run(socket: &Path, port: u16, argv: &[OsString]) -> u8 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("{NAME}: no command");
        return NOT_STARTED;
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("{NAME}: cannot listen on 127.0.0.1:{port}: {e}");
            return CANNOT_RUN;
        }
    };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: this process has one thread (main, before anything spawned one), so the child may do anything after
    // the fork.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: prctl and getppid with plain integers.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // The agent may have ended before the signal was asked for: then nobody would send it.
                if libc::getppid() != parent {
                    libc::_exit(0);
                }
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
            eprintln!("{NAME}: cannot start {program:?}: {error}");
            NOT_STARTED
        }
        Err(e) => {
            eprintln!("{NAME}: cannot fork the forwarder: {e}");
            CANNOT_RUN
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Args, Refused> {
        parse(args.iter().map(OsString::from))
    }

    fn refused(args: &[&str]) -> (String, u8) {
        let refused = parsed(args).expect_err("refused");
        let first = refused
            .message
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        (first, refused.code)
    }

    #[test]
    fn the_dispatchers_argv_is_read_and_the_command_kept_as_given() {
        let args = parsed(&[
            "--socket",
            "/run/pidevops/egress.sock",
            "--port",
            "3128",
            "--",
            "claude",
            "--port",
            "--",
            "-p",
        ])
        .unwrap();
        assert_eq!(
            args,
            Args {
                socket: "/run/pidevops/egress.sock".into(),
                port: 3128,
                command: ["claude", "--port", "--", "-p"]
                    .map(OsString::from)
                    .to_vec(),
            }
        );
        let inline = parsed(&["--port=1", "--socket=/s", "--", "x"]).unwrap();
        assert_eq!((inline.port, inline.socket), (1, PathBuf::from("/s")));
    }

    #[test]
    fn a_bad_command_line_is_refused_by_name_with_its_code() {
        let cases: &[(&[&str], &str, u8)] = &[
            (
                &["--socket", "/s", "--port", "http", "--", "x"],
                "--port: \"http\" is not a port number (1-65535)",
                126,
            ),
            (
                &["--socket", "/s", "--port", "0", "--", "x"],
                "--port: \"0\" is not a port number (1-65535)",
                126,
            ),
            (
                &["--socket", "/s", "--port", "65536", "--", "x"],
                "--port: \"65536\" is not a port number (1-65535)",
                126,
            ),
            (&["--port", "1", "--", "x"], "--socket is missing", 126),
            (&["--socket", "/s", "--", "x"], "--port is missing", 126),
            (&["--socket", "--", "x"], "--socket needs a value", 126),
            (&["--socket"], "--socket needs a value", 126),
            (
                &["--socket", "", "--port", "1", "--", "x"],
                "--socket: empty path",
                126,
            ),
            (
                &["--socket", "/a", "--socket", "/b", "--port", "1", "--", "x"],
                "--socket given twice",
                126,
            ),
            (
                &["--sock", "/s", "--", "x"],
                "unexpected argument \"--sock\"",
                126,
            ),
            (&["claude", "-p"], "unexpected argument \"claude\"", 126),
            (
                &["--socket", "/s", "--port", "1"],
                "no command: expected `-- <command> [args…]` after the options",
                127,
            ),
            (
                &["--socket", "/s", "--port", "1", "--"],
                "no command after `--`",
                127,
            ),
        ];
        for (args, message, code) in cases {
            assert_eq!(refused(args), ((*message).to_owned(), *code), "{args:?}");
        }
    }
}
