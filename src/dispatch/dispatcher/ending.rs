//! How a finished agent process ended, as its run's failure: made-up usage figures (fail closed), its provider's
//! limit, then its exit, signal, watchdog or stop. Pure; the attempt, the reviewer and the planner ask it.

use tokio_util::sync::CancellationToken;

use crate::config::profiles::AgentProfile;
use crate::dispatch::runner::{self, Ending};
use crate::dispatch::runs::{FailureKind, RunEvent};

/// A run whose agent did not exit 0 has failed, and how: `None` when it exited 0.
pub(super) fn badly_ended(
    finished: &runner::Finished,
    profile: &AgentProfile,
    stop: &CancellationToken,
    fail: &impl Fn(FailureKind, String, String) -> RunEvent,
) -> Option<RunEvent> {
    let failed = |kind, detail: String| Some(fail(kind, detail, finished.tail.clone()));
    // Usage figures it made up (out of bounds, not numbers): fail closed, as over budget, whatever else it said.
    if let Some(why) = &finished.said.refused {
        return failed(FailureKind::Budget, refused_detail(why));
    }
    // Its provider's limit, however the CLI then ended (some exit 0, some not): not the work's failure.
    if let Some(limit) = &finished.said.limit {
        if matches!(finished.ending, Ending::Exited(_) | Ending::Signaled(_)) {
            let resets = limit
                .resets_at
                .map(|at| format!(" (it lifts at {} UTC)", at.format("%Y-%m-%d %H:%M")))
                .unwrap_or_default();
            return failed(
                FailureKind::Limited,
                format!(
                    "the agent ran into its provider's usage or rate limit{resets}: {}",
                    limit.message
                ),
            );
        }
    }
    match &finished.ending {
        // pi in JSON mode exits 0 after a failed request: its output's last word is the error.
        Ending::Exited(0) => finished.said.error.as_ref().and_then(|error| {
            failed(
                FailureKind::Exit,
                format!("the agent exited 0, but its CLI's output ended in an error: {error}"),
            )
        }),
        // Its CLI's own word on why (a refused key, a failed request), bounded by the meter, beside the status.
        Ending::Exited(code) => failed(
            FailureKind::Exit,
            match &finished.said.error {
                Some(error) => {
                    format!("the agent exited with status {code}: its CLI said: {error}")
                }
                None => format!("the agent exited with status {code}"),
            },
        ),
        Ending::Signaled(signal) => failed(
            FailureKind::Exit,
            format!("the agent was killed by signal {signal}"),
        ),
        Ending::TimedOut => failed(
            FailureKind::Timeout,
            format!(
                "the agent ran longer than {} s and was killed",
                profile.timeout.as_secs_f64()
            ),
        ),
        Ending::Stalled => failed(
            FailureKind::Stalled,
            format!(
                "the agent printed nothing for {} s and was killed",
                profile.no_output_timeout.as_secs_f64()
            ),
        ),
        Ending::Flooded { limit } => failed(
            FailureKind::Flooded,
            format!(
                "the agent printed more than its output budget of {limit} bytes \
                 ([dispatch] output_max_mib) and was killed"
            ),
        ),
        Ending::Stopped if stop.is_cancelled() => failed(
            FailureKind::Interrupted,
            "interrupted: pidevops shut down while the agent ran".into(),
        ),
        Ending::Stopped => failed(
            FailureKind::Stopped,
            "stopped: the task was cancelled or moved on while the agent ran".into(),
        ),
        Ending::CannotStart(why) => failed(FailureKind::Workspace, why.clone()),
    }
}

/// A run whose usage figures were refused, in words.
pub(super) fn refused_detail(why: &str) -> String {
    format!(
        "over budget: its output's usage figures were refused ({why}), so what it spent is unknown"
    )
}
