//! drift: a Drifted decision recorded, and its correction made, held back or not made. What
//! drifted and the decisions are [`reconcile::drift`]'s; here is when. Under `Revert` the first
//! two drifts in a row are corrected at once; from the third (a tug of war: something keeps
//! changing what tenantplane sets) the correction waits, twice as long each time up to the
//! longest backoff, and a Drifted decision is recorded at the third and then at every power of
//! two (each correction is recorded: it writes). Under `Record` nothing is written, and the
//! drifted object stays under watch until it holds what tenantplane sets again.

use std::time::{Duration, Instant};

use serde_json::Value;
use tenantplane_core::TenantObject;
use tracing::Instrument as _;

use super::caches::{Changed, LiveView};
use super::{Key, Worker};
use crate::reconcile::{self, Step};
use crate::record::{self, COMPONENT, reference_of};
use crate::tenant_status::Seen;
use crate::trace;

/// Drifts in a row corrected at once; from the next one on, corrections back off.
const CORRECTED_AT_ONCE: u32 = 2;

/// What identifies the host object that showed a drift, so that the same drift seen again is
/// not counted again: its resourceVersion, or for a delete the deleted object's uid.
pub(super) fn version_of(change: &Changed) -> Option<String> {
    match change {
        Changed::Written(v) => v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        Changed::Deleted(vanished) => Some(format!("deleted {}", vanished.uid)),
        Changed::Nothing => None,
    }
}

impl Worker {
    /// A Drifted step (`step`, decided on the host change `change`, seen before as `seen`)
    /// through record → correct.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn drift(
        &self,
        key: &Key,
        object: &TenantObject,
        step: Step,
        change: Changed,
        seen: Seen,
        live: &LiveView,
        started: Instant,
    ) {
        let k = self.caches.key_string(key);
        let content = reconcile::observed_digest(&object.object);
        let regarding = || Some(reference_of(&object.object));
        let times = step.decision.drift.as_ref().map_or(1, |d| d.times);
        let version = version_of(&change);
        let drift_id = match (seen.same, seen.drift_id) {
            (true, Some(id)) => id,
            _ if times <= CORRECTED_AT_ONCE + 1 || times.is_power_of_two() => {
                let recorded = self
                    .recorder
                    .record(&k, &step.decision, &content, regarding(), started)
                    .await;
                if self
                    .recorded_or_retried(key, recorded, "corrected")
                    .is_none()
                {
                    self.keep_watching(key, change);
                    return;
                }
                if let Some(target) = &step.decision.target {
                    let uid = match &change {
                        Changed::Written(v) => v
                            .pointer("/metadata/uid")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        _ => None,
                    };
                    record::report_on_object(self.shared.host.clone(), target, uid, &step.decision);
                }
                step.decision.id.clone()
            }
            (_, last) => {
                trace::describe(&tracing::Span::current(), &step.decision);
                last.unwrap_or_else(|| step.decision.id.clone())
            }
        };
        let Some(write) = step.correction.clone() else {
            // Record: left as it is, and looked at again at each change until it holds what
            // tenantplane sets.
            self.recorder
                .ledger()
                .drifted(&k, times, version.as_deref(), None, &drift_id);
            self.caches.remember_in_place(key, object, &step);
            self.keep_watching(key, change);
            self.succeeded(key);
            return;
        };
        let due = seen
            .due
            .unwrap_or_else(|| Instant::now() + self.correction_delay(times));
        self.recorder
            .ledger()
            .drifted(&k, times, version.as_deref(), Some(due), &drift_id);
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            self.keep_watching(key, change);
            self.queue.push_after(key.clone(), wait);
            return;
        }
        let span = trace::follow_up_span(&step.decision);
        let (decision, write) = reconcile::drift::correction(
            &step.decision,
            &drift_id,
            write,
            trace::stamp_in(&span, COMPONENT),
        );
        let correction = Step {
            decision,
            write: Some(write),
            status_up: None,
            correction: None,
        };
        async {
            let recorded = self
                .recorder
                .record(&k, &correction.decision, &content, regarding(), started)
                .await;
            let Some(recorded) = self.recorded_or_retried(key, recorded, "corrected") else {
                return;
            };
            let acted = self
                .act(
                    key,
                    &k,
                    &correction,
                    recorded,
                    &content,
                    Some(&object.object),
                    started,
                )
                .await;
            if acted {
                self.settle(key, object, correction, live.host.as_ref())
                    .await;
            }
        }
        .instrument(span)
        .await;
    }

    /// Keeps what showed a drift (the host object as the host sent it, or its delete) for the
    /// key's next decision.
    fn keep_watching(&self, key: &Key, change: Changed) {
        self.caches.keep_host_change(key, change);
    }

    /// How long the correction of the `times`th drift in a row waits: nothing for the first
    /// ones, then the backoff of a retried key.
    fn correction_delay(&self, times: u32) -> Duration {
        if times <= CORRECTED_AT_ONCE {
            return Duration::ZERO;
        }
        let t = &self.shared.tuning;
        t.backoff_base
            .saturating_mul(1u32 << (times - CORRECTED_AT_ONCE).min(16))
            .min(t.backoff_max)
    }
}
