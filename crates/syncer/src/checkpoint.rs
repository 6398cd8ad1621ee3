//! Signed checkpoints of the decision log, published outside it: at an interval and at
//! shutdown, this replica signs the log's head (sequence, hash, time) with its checkpoint key
//! and publishes it
//!
//! - in a ConfigMap of its own in the host cluster (`tenantplane-decision-log-checkpoints-<replica>`
//!   in the syncer's namespace, label `tenantplane.io/decision-log-checkpoints=true`), which keeps
//!   the last [`HISTORY`] checkpoints as JSON Lines (`checkpoints.jsonl`): what
//!   `tenantplane audit checkpoints` and `audit verify --checkpoints-from-cluster` read;
//! - in an Event about that ConfigMap (reason `DecisionLogCheckpoint`);
//! - on a span of its own, `tenantplane.decision_log.checkpoint`, with the checkpoint as
//!   attributes (so a tracing backend keeps a copy too).
//!
//! The key is an Ed25519 private key, PKCS#8 PEM or 32 raw bytes, read from a file or from a
//! Secret of the host cluster (docs/decision-log.md, "Signed checkpoints").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;
use tenantplane_decision_log::DecisionStore;
use tenantplane_decision_log::signed::{self, SignedCheckpoint, SigningKey};
use tracing::Instrument as _;

use crate::record::COMPONENT;

/// Checkpoints a replica's ConfigMap keeps.
pub const HISTORY: usize = 32;

/// The label on every replica's checkpoint ConfigMap.
pub const LABEL: &str = "tenantplane.io/decision-log-checkpoints";

/// The ConfigMap key holding the checkpoints, as JSON Lines, oldest first.
pub const DATA_KEY: &str = "checkpoints.jsonl";

/// The Secret key holding the private key when it comes from a Secret.
pub const SECRET_KEY: &str = "ed25519.pem";

/// Where the checkpoint key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// A file: PKCS#8 PEM or 32 raw bytes.
    File(std::path::PathBuf),
    /// A Secret of the host cluster, its [`SECRET_KEY`] entry.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// How this replica signs and publishes checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// The private key.
    pub key: KeySource,
    /// The log's name in the signed text.
    pub origin: String,
    /// How often a checkpoint is signed.
    pub interval: Duration,
    /// The namespace of the ConfigMap (the syncer's own).
    pub namespace: String,
    /// This replica's name (in the ConfigMap's name).
    pub replica: String,
}

/// Reads the checkpoint key.
pub async fn load_key(host: &Client, source: &KeySource) -> anyhow::Result<SigningKey> {
    match source {
        KeySource::File(path) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading the checkpoint key {}", path.display()))?;
            Ok(signed::signing_key(&bytes, &path.display().to_string())?)
        }
        KeySource::Secret { namespace, name } => {
            let secret = Api::<Secret>::namespaced(host.clone(), namespace)
                .get(name)
                .await
                .with_context(|| format!("reading the checkpoint key Secret {namespace}/{name}"))?;
            let bytes = secret
                .data
                .and_then(|mut d| d.remove(SECRET_KEY))
                .with_context(|| {
                    format!("the Secret {namespace}/{name} has no {SECRET_KEY} entry")
                })?;
            Ok(signed::signing_key(
                &bytes.0,
                &format!("Secret {namespace}/{name} key {SECRET_KEY}"),
            )?)
        }
    }
}

/// Signs and publishes this replica's checkpoints.
pub struct Publisher {
    store: Arc<dyn DecisionStore>,
    key: SigningKey,
    config: CheckpointConfig,
    host: Client,
    history: Mutex<Vec<SignedCheckpoint>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// A publisher continuing the history its ConfigMap already holds.
    pub async fn new(
        store: Arc<dyn DecisionStore>,
        host: Client,
        config: CheckpointConfig,
    ) -> anyhow::Result<Publisher> {
        let key = load_key(&host, &config.key).await?;
        let existing = Api::<ConfigMap>::namespaced(host.clone(), &config.namespace)
            .get_opt(&configmap_name(&config.replica))
            .await
            .context("reading this replica's checkpoint ConfigMap")?;
        let history = existing
            .and_then(|c| c.data)
            .and_then(|mut d| d.remove(DATA_KEY))
            .map(|text| signed::read_jsonl(text.as_bytes()))
            .transpose()
            .context("reading the checkpoints this replica published before")?
            .unwrap_or_default();
        Ok(Publisher {
            store,
            key,
            config,
            host,
            history: Mutex::new(history),
        })
    }

    /// Signs the log's head now and publishes it.
    pub async fn publish(&self) -> anyhow::Result<SignedCheckpoint> {
        let head = self.store.head().await.context("reading the log's head")?;
        let checkpoint =
            SignedCheckpoint::sign(&self.key, &self.config.origin, &head, Timestamp::now());
        let span = tracing::info_span!(
            "tenantplane.decision_log.checkpoint",
            tenantplane.checkpoint.origin = %checkpoint.origin,
            tenantplane.checkpoint.sequence = checkpoint.sequence,
            tenantplane.checkpoint.hash = %checkpoint.hash,
            tenantplane.checkpoint.time = %checkpoint.time,
            tenantplane.checkpoint.key_id = %checkpoint.key_id,
            tenantplane.checkpoint.signature = %checkpoint.signature,
        );
        self.publish_signed(checkpoint).instrument(span).await
    }

    async fn publish_signed(
        &self,
        checkpoint: SignedCheckpoint,
    ) -> anyhow::Result<SignedCheckpoint> {
        let text = {
            let mut history = self.history.lock().expect("checkpoint history lock");
            if let Some(last) = history.last()
                && last.sequence > checkpoint.sequence
            {
                tracing::error!(
                    previous = last.sequence,
                    now = checkpoint.sequence,
                    "the decision log is behind the checkpoint this replica signed before: \
                     truncated, or an older copy restored"
                );
            }
            history.push(checkpoint.clone());
            let drop = history.len().saturating_sub(HISTORY);
            history.drain(..drop);
            signed::to_jsonl(&history)?
        };
        let name = configmap_name(&self.config.replica);
        let configmap = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.config.namespace,
                "labels": {LABEL: "true", "app.kubernetes.io/managed-by": COMPONENT},
            },
            "data": {
                DATA_KEY: text,
                "latest": checkpoint.summary(),
                "keyId": checkpoint.key_id,
            },
        });
        let api = Api::<ConfigMap>::namespaced(self.host.clone(), &self.config.namespace);
        let written = api
            .patch(
                &name,
                &PatchParams::apply(COMPONENT).force(),
                &Patch::Apply(&configmap),
            )
            .await
            .with_context(|| format!("publishing the checkpoint in ConfigMap {name}"))?;
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(name),
            namespace: Some(self.config.namespace.clone()),
            uid: written.metadata.uid,
            ..Default::default()
        };
        let recorder = Recorder::new(
            self.host.clone(),
            Reporter {
                controller: COMPONENT.into(),
                instance: Some(self.config.replica.clone()),
            },
        );
        let event = Event {
            type_: EventType::Normal,
            reason: "DecisionLogCheckpoint".into(),
            note: Some(serde_json::to_string(&checkpoint)?),
            action: "Sign".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "publishing the checkpoint Event failed");
        }
        tracing::info!(checkpoint = %checkpoint.summary(), "decision log checkpoint published");
        Ok(checkpoint)
    }

    /// Publishes a checkpoint every interval, until its task is dropped.
    pub async fn run(&self) {
        loop {
            if let Err(e) = self.publish().await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "publishing a decision log checkpoint failed"
                );
            }
            tokio::time::sleep(self.config.interval).await;
        }
    }
}

/// The ConfigMap of `replica`'s checkpoints: a DNS-1123 name.
pub fn configmap_name(replica: &str) -> String {
    let replica: String = replica
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = format!("tenantplane-decision-log-checkpoints-{replica}");
    name.chars()
        .take(253)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// Every replica's published checkpoints in `namespace`.
pub async fn published(host: &Client, namespace: &str) -> anyhow::Result<Vec<SignedCheckpoint>> {
    let list = Api::<ConfigMap>::namespaced(host.clone(), namespace)
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL}=true")))
        .await
        .with_context(|| format!("listing the checkpoint ConfigMaps in {namespace}"))?;
    let mut all = Vec::new();
    for c in list.items {
        let name = c.metadata.name.unwrap_or_default();
        if let Some(text) = c.data.and_then(|mut d| d.remove(DATA_KEY)) {
            all.extend(
                signed::read_jsonl(text.as_bytes())
                    .with_context(|| format!("ConfigMap {namespace}/{name}"))?,
            );
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configmap_names_are_dns_names() {
        assert_eq!(
            configmap_name("Syncer_0"),
            "tenantplane-decision-log-checkpoints-syncer-0"
        );
    }
}
