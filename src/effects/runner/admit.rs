//! The cap on a task's outbound calls, where the call is decided: the task's `outbound:<task>` stream read, the
//! pure `cap::verdict` asked, and its answer recorded (a call counted, a trip, an effect withheld).

use anyhow::Context;
use chrono::Utc;

use super::{Effects, EffectsProgress, Settled, ACTOR};
use crate::board::{BoardError, Loaded};
use crate::effects::cap::{self, OutboundEvent, Verdict};
use crate::effects::provider::ProviderPolicy;
use crate::effects::{EffectEvent, ProviderAction, Request};
use crate::tasks::{Command, Reason, TaskId};

/// How many times a call's count is decided again after another loop counted a call of the same task first.
const CAP_RACES: usize = 8;

impl<P: ProviderPolicy> Effects<P> {
    /// Whether the cap on the task's outbound calls lets this call go (`cap::verdict` decides, from the task's
    /// `outbound:<task>` stream and its last clearing). `None`: it may go, and with `count` it was counted
    /// (`outbound.call` at that stream's next version; a race lost to another loop is decided again on the
    /// stream as it is then). Held back: the trip recorded (`outbound.capped`, the same compare-and-set), the
    /// task flagged if it is not, and `effect.withheld` at `version + 1` of the effect's stream, which settles it.
    /// An effect of no task is never capped.
    pub(super) async fn admit(
        &self,
        request: &Request<P::Action>,
        action: &P::Action,
        version: i64,
        count: bool,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        let Some(task) = request.task.filter(|_| self.cap.limit().is_some()) else {
            return Ok(None);
        };
        let name = cap::stream(task);
        for _ in 0..CAP_RACES {
            let recorded = self
                .log
                .store()
                .read_stream(&name)
                .await
                .with_context(|| format!("reading {name}"))?;
            let ledger = recorded
                .iter()
                .map(|e| Ok((e.position, serde_json::from_slice(&e.body)?)))
                .collect::<Result<Vec<(i64, OutboundEvent)>, serde_json::Error>>()
                .with_context(|| format!("{name} holds an event that is not an outbound event"))?;
            let next = recorded.last().and_then(|e| e.stream_version).unwrap_or(0) + 1;
            let loaded = self.board.load(task).await?;
            let cleared = loaded.as_ref().and_then(|l| {
                l.events
                    .iter()
                    .rev()
                    .find(|e| e.event_type == "task.needs_human_cleared")
                    .map(|e| e.position)
            });
            let now = Utc::now();
            let reason = match cap::verdict(self.cap, task, &ledger, cleared, now) {
                Verdict::Send if !count => return Ok(None),
                Verdict::Send => {
                    let call = OutboundEvent::Call {
                        at: now,
                        key: request.key.clone(),
                        action: action.name().to_owned(),
                    };
                    if self.append_outbound(&name, task, next, &call).await? {
                        return Ok(None);
                    }
                    continue;
                }
                Verdict::Trip { calls, cap, reason } => {
                    let capped = OutboundEvent::Capped {
                        at: now,
                        calls,
                        cap,
                        key: request.key.clone(),
                    };
                    if !self.append_outbound(&name, task, next, &capped).await? {
                        continue;
                    }
                    tracing::warn!(%task, calls, cap, "a task reached the cap on outbound calls");
                    reason
                }
                Verdict::Held { reason } => reason,
            };
            return self
                .withhold(request, action, version, loaded.as_ref(), &reason, progress)
                .await
                .map(Some);
        }
        anyhow::bail!(
            "{name} kept changing under {} ({CAP_RACES} races lost)",
            request.key
        )
    }

    /// An effect the cap holds back: its task flagged for a person if it is not (a closed task cannot be, and
    /// keeps its state), then `effect.withheld` with the reason, so what was held back is on record.
    async fn withhold(
        &self,
        request: &Request<P::Action>,
        action: &P::Action,
        version: i64,
        loaded: Option<&Loaded>,
        reason: &str,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        if let Some(loaded) = loaded.filter(|l| l.task.needs_human().is_none()) {
            let flag = Command::FlagNeedsHuman {
                reason: Reason::summarize(reason),
            };
            match self.board.execute(loaded.task.id(), &flag, ACTOR).await {
                Ok(_) | Err(BoardError::Refused(_)) => {}
                Err(error) => {
                    return Err(error).context("flagging the task at the cap on outbound calls")
                }
            }
        }
        let now = Utc::now();
        let withheld = EffectEvent::Withheld {
            at: now,
            key: request.key.clone(),
            reason: reason.to_owned(),
        };
        if !self
            .append(&request.key, request.task, version + 1, &withheld)
            .await
            .context("recording an effect withheld")?
        {
            // Another loop moved this effect on meanwhile: its stream says what became of it.
            return Ok(Settled::Waiting(now + chrono::Duration::seconds(1)));
        }
        metrics::counter!("pidevops_effects_total", "provider" => self.policy.provider(), "action" => action.name(), "outcome" => "withheld")
            .increment(1);
        tracing::info!(key = %request.key, %reason, "effect withheld");
        progress.withheld += 1;
        Ok(Settled::Yes)
    }

    /// Appends `event` as version `version` of the task's `outbound:<task>` stream; `Ok(false)`: another loop
    /// took that version first.
    async fn append_outbound(
        &self,
        name: &str,
        task: TaskId,
        version: i64,
        event: &OutboundEvent,
    ) -> anyhow::Result<bool> {
        let body =
            serde_json::to_vec(event).with_context(|| format!("encoding {}", event.kind()))?;
        self.append_to(name, version, event.kind(), event.at(), Some(task), body)
            .await
            .with_context(|| format!("recording {} in {name}", event.kind()))
    }
}
