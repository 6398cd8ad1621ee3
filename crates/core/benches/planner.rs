//! Placements and verdicts per second, in process, on one core.
//!
//! `cargo bench -p tenantplane-core --bench planner` prints criterion's figures; throughput is
//! reported per object. `place` is the mapping alone; `plan` adds the default SyncPolicy's
//! verdict (CEL for Pods) and the collision check; `decide` adds the decision record (id, time,
//! input digest) that explain-sync prints for each object.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use tenantplane_core::decision::Stamp;
use tenantplane_core::mapping::{TenantPlacement, place};
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Planner, TenantObject};

fn objects(n: usize) -> Vec<TenantObject> {
    (0..n)
        .map(|i| {
            let v = match i % 4 {
                0 => json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("web-{i}"), "namespace": "shop", "labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx",
                        "securityContext": {"allowPrivilegeEscalation": false}}]}}),
                1 => json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{i}"), "namespace": "shop"},
                    "spec": {"ports": [{"port": 80}]}}),
                2 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cfg-{i}"), "namespace": "shop"}, "data": {"a": "b"}}),
                _ => json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": format!("dep-{i}"), "namespace": "shop"}}),
            };
            TenantObject::from_value(v).unwrap()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let objs = objects(1000);
    let tenant = TenantPlacement {
        tenant: "acme".into(),
        host_namespace: "tenant-acme".into(),
        mapping: tenantplane_core::MappingVersion::V2,
    };
    let mut group = c.benchmark_group("planner");
    group.throughput(Throughput::Elements(objs.len() as u64));
    group.bench_function("place", |b| {
        b.iter(|| {
            for o in &objs {
                black_box(place(&tenant, o));
            }
        })
    });
    let planner = Planner::new(
        &tenantplane_api::Tenant::new("acme", Default::default()),
        CompiledPolicy::builtin_default(),
    );
    let host = HostState::default();
    group.bench_function("plan (place + verdict + collision + translation)", |b| {
        b.iter(|| {
            for o in &objs {
                black_box(planner.plan(o, &host));
            }
        })
    });
    group.bench_function("decide (plan + decision record)", |b| {
        b.iter(|| {
            for (p, o) in objs.iter().map(|o| planner.plan(o, &host)).zip(&objs) {
                black_box(p.to_decision(
                    planner.tenant(),
                    o,
                    Stamp::now("tenantplane explain-sync"),
                ));
            }
        })
    });
    group.finish();

    let policy = CompiledPolicy::builtin_default();
    let pod = &objs[0];
    let config_map = &objs[2];
    let mut single = c.benchmark_group("verdict");
    single.bench_function("pod (CEL guards)", |b| {
        b.iter(|| black_box(policy.evaluate(pod)))
    });
    single.bench_function("configmap (no CEL)", |b| {
        b.iter(|| black_box(policy.evaluate(config_map)))
    });
    single.bench_function("pod to CEL value", |b| {
        b.iter(|| black_box(kube_cel::cel::to_value(&pod.object).unwrap()))
    });
    single.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
