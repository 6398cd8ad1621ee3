//! drift: a Drifted decision recorded, and its correction made, held back or not made. What
//! drifted and the decisions are [`reconcile::drift`]'s; here is when. Under `Revert` the first
//! two drifts in a row are corrected at once; from the third (a tug of war: something keeps
//! changing what tenantplane sets) the correction waits, twice as long each time up to the
//! longest backoff, and a Drifted decision is recorded at the third and then at every power of
//! two (each correction is recorded: it writes). Under `Record` nothing is written, and the
//! drifted object stays under watch until it holds what tenantplane sets again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use tenantplane_core::TenantObject;
use tenantplane_core::decision::Decision;
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

/// The uid of the host object a change shows written.
pub(super) fn uid_of(change: &Changed) -> Option<String> {
    match change {
        Changed::Written(v) => v
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
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
        let recorded = self
            .record_drifted(
                key,
                &k,
                &step.decision,
                &content,
                regarding(),
                uid_of(&change),
                &seen,
                started,
            )
            .await;
        let Some(drift_id) = recorded else {
            self.keep_watching(key, change);
            return;
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
        let wait = self.correction_wait(&k, times, version.as_deref(), &seen, &drift_id);
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

    /// Records `drifted`, the Drifted decision about the host object (uid `uid`) of the ledger
    /// key `k` (`regarding` the tenant object, seen before as `seen`), with a Warning Event on
    /// the host object, unless this very drift was recorded before or it is a tug of war's drift
    /// that is not one of the third or a power of two. The id of the Drifted decision a
    /// correction names; `None` when it could not be recorded (retried).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_drifted(
        &self,
        key: &Key,
        k: &str,
        drifted: &Decision,
        content: &str,
        regarding: Option<ObjectReference>,
        uid: Option<String>,
        seen: &Seen,
        started: Instant,
    ) -> Option<String> {
        let times = drifted.drift.as_ref().map_or(1, |d| d.times);
        match (seen.same, &seen.drift_id) {
            (true, Some(id)) => Some(id.clone()),
            _ if times <= CORRECTED_AT_ONCE + 1 || times.is_power_of_two() => {
                let recorded = self
                    .recorder
                    .record(k, drifted, content, regarding, started)
                    .await;
                self.recorded_or_retried(key, recorded, "corrected")?;
                if let Some(target) = &drifted.target {
                    record::report_on_object(self.shared.host.clone(), target, uid, drifted);
                }
                Some(drifted.id.clone())
            }
            (_, last) => {
                trace::describe(&tracing::Span::current(), drifted);
                Some(last.clone().unwrap_or_else(|| drifted.id.clone()))
            }
        }
    }

    /// Remembers the `times`th drift in a row of the host object of the ledger key `k` (shown
    /// at `version`, seen before as `seen`, recorded by `drift_id`), and how long its correction
    /// waits: nothing for the first ones, then the backoff of a retried key, counted from when
    /// the drift was first seen.
    pub(super) fn correction_wait(
        &self,
        k: &str,
        times: u32,
        version: Option<&str>,
        seen: &Seen,
        drift_id: &str,
    ) -> Duration {
        let due = seen
            .due
            .unwrap_or_else(|| Instant::now() + self.correction_delay(times));
        self.recorder
            .ledger()
            .drifted(k, times, version, Some(due), drift_id);
        due.saturating_duration_since(Instant::now())
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
