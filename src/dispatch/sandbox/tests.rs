use super::*;

#[test]
fn writable_paths_are_bound_after_readable_ones_and_the_command_follows_a_separator() {
    let view = AgentView {
        writable: vec![PathBuf::from("/ws/runs/T-1/r/worktree")],
        readable: vec![PathBuf::from("/ws/prompt.md")],
        drop_capabilities: true,
        tmp_size: Some(64 << 20),
        scratch: vec![Scratch {
            path: PathBuf::from("/ws/runs/T-1/r/tmp"),
            size: 64 << 20,
        }],
    };
    let argv = bwrap_argv(
        Path::new("/usr/bin/bwrap"),
        &view,
        Path::new("/ws/runs/T-1/r/worktree"),
        &["agent".into(), "--flag".into()],
        BwrapNet::Host,
    );
    let at = |needle: &str| argv.iter().position(|a| a == needle).unwrap();
    assert!(at("--ro-bind-try") < at("--bind"));
    assert!(argv.contains(&"--unshare-pid".to_owned()));
    assert!(argv.contains(&"--die-with-parent".to_owned()));
    assert_eq!(argv[at("--cap-drop") + 1], "ALL");
    assert_eq!(&argv[at("--")..], ["--", "agent", "--flag"]);
    // Every tmpfs has its size, the private /tmp first and the scratch TMPDIR after the binds.
    let sized: Vec<&str> = argv
        .windows(4)
        .filter(|w| w[0] == "--size" && w[2] == "--tmpfs")
        .map(|w| {
            assert_eq!(w[1], (64u64 << 20).to_string());
            w[3].as_str()
        })
        .collect();
    assert_eq!(sized, ["/tmp", "/ws/runs/T-1/r/tmp"]);
    assert_eq!(argv.iter().filter(|a| *a == "--tmpfs").count(), 2);
    assert!(at("--bind") < argv.iter().rposition(|a| a == "--tmpfs").unwrap());
    assert!(!argv.contains(&"--unshare-net".to_owned()));
}

#[test]
fn home_is_a_tmpfs_of_its_own_size_and_what_pidevops_put_inside_is_bound_on_top() {
    let home = PathBuf::from("/ws/runs/T-1/r/home");
    let pi = home.join(".pi-agent-0123");
    let view = AgentView {
        writable: vec![pi.clone(), PathBuf::from("/ws/runs/T-1/r/worktree")],
        readable: Vec::new(),
        drop_capabilities: false,
        tmp_size: Some(64 << 20),
        scratch: vec![
            Scratch {
                path: PathBuf::from("/ws/runs/T-1/r/tmp"),
                size: 64 << 20,
            },
            Scratch {
                path: home.clone(),
                size: 256 << 20,
            },
        ],
    };
    let argv = bwrap_argv(
        Path::new("/usr/bin/bwrap"),
        &view,
        Path::new("/ws/runs/T-1/r/worktree"),
        &["agent".into()],
        BwrapNet::Host,
    );
    let sized: Vec<(&str, &str)> = argv
        .windows(4)
        .filter(|w| w[0] == "--size" && w[2] == "--tmpfs")
        .map(|w| (w[3].as_str(), w[1].as_str()))
        .collect();
    let (home_size, tmp_size) = ((256u64 << 20).to_string(), (64u64 << 20).to_string());
    assert_eq!(
        sized,
        [
            ("/tmp", tmp_size.as_str()),
            ("/ws/runs/T-1/r/tmp", tmp_size.as_str()),
            ("/ws/runs/T-1/r/home", home_size.as_str()),
        ]
    );
    let bind = |path: &Path| {
        argv.windows(3)
            .position(|w| w[0] == "--bind" && w[1] == path.to_string_lossy() && w[1] == w[2])
            .unwrap_or_else(|| panic!("{} is not bound: {argv:?}", path.display()))
    };
    let home_tmpfs = argv
        .iter()
        .position(|a| *a == home.to_string_lossy())
        .unwrap();
    // The worktree before the tmpfs (it is not inside one), pi's directory after HOME's (else hidden by it).
    assert!(bind(Path::new("/ws/runs/T-1/r/worktree")) < home_tmpfs);
    assert!(bind(&pi) > home_tmpfs);
    // HOME itself is the tmpfs, not a bind of the directory on the workspace volume.
    assert!(!argv
        .windows(2)
        .any(|w| w[0] == "--bind" && w[1] == home.to_string_lossy()));
}

#[test]
fn an_own_network_is_a_new_namespace_with_the_proxy_socket_bound_in() {
    let view = AgentView::default();
    let socket = Path::new("/ws/runs/T-1/r/egress-1.sock");
    let argv = bwrap_argv(
        Path::new("/usr/bin/bwrap"),
        &view,
        Path::new("/ws"),
        &["agent".into()],
        BwrapNet::Own {
            proxy_socket: Some(socket),
        },
    );
    assert!(argv.contains(&"--unshare-net".to_owned()));
    let bind = argv
        .windows(3)
        .position(|w| w[0] == "--bind" && w[1] == socket.to_string_lossy())
        .unwrap();
    assert_eq!(argv[bind + 2], crate::dispatch::egress::SOCKET_IN_SANDBOX);
    let none = bwrap_argv(
        Path::new("/usr/bin/bwrap"),
        &view,
        Path::new("/ws"),
        &["agent".into()],
        BwrapNet::Own { proxy_socket: None },
    );
    assert!(none.contains(&"--unshare-net".to_owned()));
    assert!(!none
        .iter()
        .any(|a| a == crate::dispatch::egress::SOCKET_IN_SANDBOX));
}

#[test]
fn a_program_is_found_as_execvp_would() {
    assert_eq!(
        find_program("sh", Some("/nonexistent:/bin:/usr/bin")),
        Some(PathBuf::from("/bin/sh"))
    );
    assert_eq!(find_program("no-such-program-here", Some("/bin")), None);
    assert_eq!(find_program("/nonexistent/bwrap", None), None);
}
