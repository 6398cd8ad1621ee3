//! Test target selection shared by the semantics suites: the local server by
//! default, or the real cluster named by `TENANTPLANE_E2E_KUBECONFIG`, so the
//! same assertions run against both.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Api, Client, Config};
use tenantplane_local_apiserver::{LocalApiServer, LocalApiServerBuilder};

/// Environment variable naming a real cluster's kubeconfig.
pub const E2E_KUBECONFIG: &str = "TENANTPLANE_E2E_KUBECONFIG";

/// The API server a test talks to.
pub struct Target {
    pub client: Client,
    pub kubeconfig: PathBuf,
    server: Option<LocalApiServer>,
    _dir: tempfile::TempDir,
}

impl Target {
    /// The real cluster when `TENANTPLANE_E2E_KUBECONFIG` is set, else a fresh
    /// local server.
    pub async fn start() -> Self {
        Self::start_with(LocalApiServer::builder()).await
    }

    /// Like [`start`](Self::start) with a configured local server.
    pub async fn start_with(builder: LocalApiServerBuilder) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        if let Ok(path) = std::env::var(E2E_KUBECONFIG) {
            let kubeconfig = Kubeconfig::read_from(&path).expect("reading the e2e kubeconfig");
            let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("e2e kubeconfig");
            return Self {
                client: Client::try_from(config).expect("client"),
                kubeconfig: PathBuf::from(path),
                server: None,
                _dir: dir,
            };
        }
        let server = builder.start().await.expect("starting the local server");
        let kubeconfig = dir.path().join("kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, "semantics")
            .expect("writing kubeconfig");
        Self {
            client: server.client().await.expect("client"),
            kubeconfig,
            server: Some(server),
            _dir: dir,
        }
    }

    /// Creates a fresh namespace for one test and returns its name.
    pub async fn namespace(&self) -> String {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"generateName": "tp-semantics-"}
        }))
        .expect("namespace");
        let created = api
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the test namespace");
        created.metadata.name.expect("namespace name")
    }

    /// Deletes a test namespace (best effort, at the end of a test).
    pub async fn cleanup(self, namespace: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        // Already gone is fine: some tests delete their namespace themselves.
        let _ = api.delete(namespace, &DeleteParams::default()).await;
        if let Some(server) = self.server {
            server
                .shutdown()
                .await
                .expect("shutting the local server down");
        }
    }
}

/// The Kubernetes `Status` of a failed call (panics on success or on
/// non-API errors).
pub fn status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `check` until it returns true; fails the test after many tries.
/// Real clusters do some things asynchronously (namespace cleanup, garbage
/// collection, CRD establishment); this waits for them without asserting
/// on timing.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    // Up to two minutes: a loaded real cluster's namespace controller can
    // take most of a minute; the local server is done at once.
    for _ in 0..1200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never happened: {what}");
}
