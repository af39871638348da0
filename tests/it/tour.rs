//! The README's five-minute local tour, run as written (`scripts/tour.sh` takes its ```sh blocks verbatim, in
//! order, and checks what the tour promises: three tasks run and pushed, T-1 landed on `main` and two in review, `/health` passing, a clean
//! SIGTERM), against the binary this test run built.

use std::path::Path;

use crate::common::server::BIN;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() {
    let _cores = crate::common::heavy().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir = Path::new(BIN).parent().expect("the binary's directory");
    let out = tokio::process::Command::new("bash")
        .arg(root.join("scripts/tour.sh"))
        .env("PIDEVOPS_BIN_DIR", bin_dir)
        .kill_on_drop(true)
        .output()
        .await
        .expect("bash runs the tour");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("tour: every step of the README's tour worked"),
        "{stdout}\n{stderr}"
    );
}
