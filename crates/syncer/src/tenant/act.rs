//! act: a decision's host write, through the [`Writer`](crate::writer::Writer): the create,
//! server-side apply or delete with the precondition on the host object the decision saw. Its
//! outcome goes back where it belongs: the write to the own-write rules of the caches until the
//! host watch shows it, the recorded action confirmed carried out; or, when it failed, the
//! failure to [`reconcile::failure::unapplied`], whose decision is recorded, and a retry.

use std::time::Instant;

use serde_json::Value;
use tracing::Instrument as _;

use super::caches::OwnWrite;
use super::{Key, Worker};
use crate::reconcile::{self, Step};
use crate::record::{COMPONENT, Recorded, reference_of};
use crate::trace;
use crate::writer::{Write, WriteFailure};

impl Worker {
    /// Performs the step's host write; confirms its recorded action carried out, or records
    /// why it was not. Returns false when the key was requeued.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn act(
        &self,
        key: &Key,
        k: &str,
        step: &Step,
        recorded: Recorded,
        content: &str,
        tenant_object: Option<&Value>,
        started: Instant,
    ) -> bool {
        let Some(write) = &step.write else {
            return true;
        };
        let kind = self.caches.kind(key.kind);
        let at = self.caches.write_started(key.kind, write.name());
        let result = self
            .shared
            .host_writer
            .write(
                &kind.host_api,
                &kind.ar.kind,
                &self.caches.placement.host_namespace,
                write,
            )
            .await;
        match result {
            Ok(written) => {
                let own = match write {
                    Write::Delete { uid, .. } => uid.clone().map(OwnWrite::deleted),
                    _ => written.map(OwnWrite::written),
                };
                self.caches.write_done(at, own);
                self.recorder.carried_out(recorded);
                true
            }
            Err(e) => {
                self.caches.write_done(at, None);
                // A decision of its own (Failed), in a span of its own under the one it failed:
                // the log says the decision was not applied. A 409 means the host object changed
                // since the decision (someone wrote at the name): decided again on fresh state.
                let span = trace::follow_up_span(&step.decision);
                let failed = reconcile::failure::unapplied(
                    &step.decision,
                    &e,
                    trace::stamp_in(&span, COMPONENT),
                );
                let _ = self
                    .recorder
                    .record(
                        k,
                        &failed,
                        content,
                        tenant_object.map(reference_of),
                        started,
                    )
                    .instrument(span)
                    .await;
                if e.failure == WriteFailure::Refused {
                    // The same content is refused again: looked at again when it changes
                    // (its watch event) and at the resync, not in a backoff loop.
                    self.succeeded(key);
                } else {
                    self.backoff(key);
                }
                false
            }
        }
    }
}
