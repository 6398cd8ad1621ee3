//! The syncer's Prometheus metrics, served on its admin port's `/metrics` beside the gRPC server
//! metrics of `tenantplane-service`:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `tenantplane_sync_decisions_total` | counter | `tenant`, `outcome` |
//! | `tenantplane_sync_decision_duration_seconds` | histogram | `outcome` |
//! | `tenantplane_sync_rpc_duration_seconds` | histogram | `rpc_service`, `rpc_method`, `grpc_code` |
//! | `tenantplane_sync_queue_depth` | gauge | `tenant` |
//! | `tenantplane_sync_tenant_served` | gauge (1 while this replica serves the Tenant) | `tenant` |
//! | `tenantplane_sync_shard_members` | gauge (live replicas in this replica's view; sharded only) | |
//!
//! A decision's duration runs from the moment its tenant object left the queue (its span opens)
//! to the decision recorded and its host write done.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tenantplane_core::decision::Outcome;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    tenant: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc_service: String,
    rpc_method: String,
    grpc_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The syncer's metrics; cheap to clone (clones share the series).
#[derive(Clone, Debug)]
pub struct SyncMetrics {
    decisions: Family<DecisionLabels, Counter>,
    decision_seconds: HistogramFamily<OutcomeLabels>,
    rpc_seconds: HistogramFamily<RpcLabels>,
    queue_depth: Family<TenantLabels, Gauge>,
    served: Family<TenantLabels, Gauge>,
    shard_members: Gauge,
}

impl Default for SyncMetrics {
    /// Metrics that are kept but not registered anywhere (tests, embedding without `/metrics`).
    fn default() -> Self {
        SyncMetrics {
            decisions: Family::default(),
            // 1 ms to about 65 s.
            decision_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
            // 100 µs to about 3.3 s.
            rpc_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
            }),
            queue_depth: Family::default(),
            served: Family::default(),
            shard_members: Gauge::default(),
        }
    }
}

impl SyncMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = SyncMetrics::default();
        registry.register(
            "tenantplane_sync_decisions",
            "Sync decisions recorded, by tenant and outcome",
            metrics.decisions.clone(),
        );
        registry.register(
            "tenantplane_sync_decision_duration_seconds",
            "Time from a tenant object leaving the queue to its decision recorded and written, by outcome",
            metrics.decision_seconds.clone(),
        );
        registry.register(
            "tenantplane_sync_rpc_duration_seconds",
            "Planner and isolation-compiler calls made by the syncer, by service, method and status code",
            metrics.rpc_seconds.clone(),
        );
        registry.register(
            "tenantplane_sync_queue_depth",
            "Tenant objects waiting in a tenant's work queue (not counting those being decided)",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "tenantplane_sync_tenant_served",
            "1 for each Tenant this replica serves (runs the tenant runtime of)",
            metrics.served.clone(),
        );
        registry.register(
            "tenantplane_sync_shard_members",
            "Live syncer replicas in this replica's view of the shard Leases",
            metrics.shard_members.clone(),
        );
        metrics
    }

    /// Counts a recorded decision and how long it took.
    pub fn decided(&self, tenant: &str, outcome: Outcome, took: Duration) {
        self.decisions
            .get_or_create(&DecisionLabels {
                tenant: tenant.to_string(),
                outcome: outcome.as_str().to_string(),
            })
            .inc();
        self.decision_seconds
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str().to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Times a call to `service`/`method` that ended with `code`.
    pub fn rpc(&self, service: &str, method: &str, code: tonic::Code, took: Duration) {
        self.rpc_seconds
            .get_or_create(&RpcLabels {
                rpc_service: service.to_string(),
                rpc_method: method.to_string(),
                grpc_code: format!("{code:?}"),
            })
            .observe(took.as_secs_f64());
    }

    /// The queue depth gauge of `tenant`.
    pub fn queue_depth(&self, tenant: &str) -> Gauge {
        self.queue_depth
            .get_or_create(&TenantLabels {
                tenant: tenant.to_string(),
            })
            .clone()
    }

    /// Whether this replica serves `tenant` (runs its tenant runtime).
    pub fn serving(&self, tenant: &str, serving: bool) {
        let labels = TenantLabels {
            tenant: tenant.to_string(),
        };
        if serving {
            self.served.get_or_create(&labels).set(1);
        } else {
            self.served.remove(&labels);
        }
    }

    /// The live replicas in this replica's view of the shard.
    pub fn shard_members(&self, members: usize) {
        self.shard_members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
    }

    /// Drops the queue depth series of a tenant no longer served.
    pub fn forget_tenant(&self, tenant: &str) {
        self.queue_depth.remove(&TenantLabels {
            tenant: tenant.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_names_decisions_by_tenant_and_outcome() {
        let mut registry = Registry::default();
        let metrics = SyncMetrics::register(&mut registry);
        metrics.decided("acme", Outcome::Rejected, Duration::from_millis(3));
        metrics.decided("acme", Outcome::Rejected, Duration::from_millis(5));
        metrics.rpc(
            "tenantplane.planner.v1.Planner",
            "Plan",
            tonic::Code::Ok,
            Duration::from_millis(2),
        );
        metrics.queue_depth("acme").set(7);
        metrics.serving("acme", true);
        metrics.serving("globex", true);
        metrics.serving("globex", false);
        metrics.shard_members(2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"tenantplane_sync_decisions_total{tenant="acme",outcome="Rejected"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"tenantplane_sync_decision_duration_seconds_count{outcome="Rejected"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"tenantplane_sync_rpc_duration_seconds_count{rpc_service="tenantplane.planner.v1.Planner",rpc_method="Plan",grpc_code="Ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tenantplane_sync_queue_depth{tenant="acme"} 7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tenantplane_sync_tenant_served{tenant="acme"} 1"#)
                && !text.contains(r#"tenant_served{tenant="globex"}"#),
            "the Tenants this replica serves, and only those: {text}"
        );
        assert!(text.contains("tenantplane_sync_shard_members 2"), "{text}");
        metrics.forget_tenant("acme");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains(r#"tenantplane_sync_queue_depth{"#), "{text}");
    }
}
