//! Plan over gRPC on loopback against the in-process core, measured in the same run.
//!
//! `cargo bench -p tenantplane-client --bench plan_roundtrip` serves the planner with the same
//! runtime as the `tenantplane-planner` binary and prints:
//! - single-object Plan round trip latency (p50, p99) through `PlannerClient::plan`;
//! - batch throughput in objects/s: remote (batches of 1000 objects through `PlannerClient::plan`,
//!   which serializes each object to JSON, sends the batch as four requests in flight asking for
//!   minimal plans, and derives the placements and rebuilds the decisions) and in process
//!   (`Planner::plan_all` plus `Plan::to_decision` on one core, what explain-sync computes per
//!   object), one batch of each in turn so that both meet the same machine load, and the CPU
//!   time per object of each (all threads of the process: for the remote batches, client and
//!   server together);
//! - one batch piece by piece, as one request (client JSON, protobuf both ways, the server's
//!   handler, the client's conversion back into the core's types), to show where the remote time
//!   goes.
//!
//! The whole process (server, client and in-process core) runs on mimalloc, the allocator of the
//! `tenantplane-planner` and `tenantplane` binaries.
//!
//! The objects mix the examples' workloads (Deployments, Services, ConfigMaps, Pods the default
//! policy rejects) so that CEL conditions, mapping and collision checks all run.

use std::time::{Duration, Instant};

use serde_json::json;
use tenantplane_api::Tenant;
use tenantplane_client::{ClientConfig, PlannerClient};
use tenantplane_core::decision::Stamp;
use tenantplane_core::planner::HostState;
use tenantplane_core::{CompiledPolicy, Planner, TenantObject};
use tenantplane_grpc::PlannerService;
use tenantplane_service::{GrpcApi, Server};

/// The allocator of the `tenantplane-planner` binary (and of the `tenantplane` CLI, a client), so
/// that the served planner, the client and the in-process core all allocate as they do in use.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SINGLE_CALLS: usize = 3000;
const BATCH: usize = 1000;
const BATCHES: usize = 100;

fn objects(n: usize) -> Vec<TenantObject> {
    (0..n)
        .map(|i| {
            let ns = format!("team-{}", i % 13);
            let value = match i % 4 {
                0 => json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": format!("web-{i}"), "namespace": ns, "labels": {"app": "web"}},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                "ports": [{"containerPort": 80}]}]}}}}),
                1 => json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("web-{i}"), "namespace": ns},
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
                2 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("settings-{i}"), "namespace": ns,
                        "annotations": {"tenantplane.io/tenant": "spoofed"}},
                    "data": {"LOG_LEVEL": "info", "FEATURES": "a,b,c"}}),
                _ => json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("debug-{i}"), "namespace": ns},
                    "spec": {"hostNetwork": i % 8 == 3,
                        "containers": [{"name": "c", "image": "busybox:1.36",
                            "securityContext": {"privileged": false}}]}}),
            };
            TenantObject::from_value(value).unwrap()
        })
        .collect()
}

/// CPU time of the whole process so far (every thread: client, server and in-process core).
fn process_cpu() -> Duration {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .expect("the process CPU clock is readable")
        .into()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let tenant = Tenant::new("bench", Default::default());
    let batch = objects(BATCH);

    runtime.block_on(async {
        // The service runtime the binary runs: metrics layer, health and reflection included.
        let loopback = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind(loopback, loopback, None).await.unwrap();
        let addr = server.grpc_addr();
        let api = GrpcApi::new().with_service(PlannerService::new().into_server());
        tokio::spawn(server.serve(api, std::future::pending()));
        let mut client = PlannerClient::connect(&ClientConfig::new(addr.to_string()))
            .await
            .unwrap();

        // Single object round trips (the first calls warm the connection and policy cache).
        let one = &batch[..1];
        for _ in 0..200 {
            client.plan(&tenant, None, None, one, &[]).await.unwrap();
        }
        let mut latencies = Vec::with_capacity(SINGLE_CALLS);
        for i in 0..SINGLE_CALLS {
            let object = &batch[i % BATCH..i % BATCH + 1];
            let start = Instant::now();
            client.plan(&tenant, None, None, object, &[]).await.unwrap();
            latencies.push(start.elapsed());
        }
        latencies.sort();

        // Batches, in process and over gRPC in turn, so that both meet the same machine load. In
        // process is the per-object work the server does, on one core: `Planner::plan_all` and
        // `Plan::to_decision` over objects already in memory.
        let planner = Planner::new(&tenant, CompiledPolicy::builtin_default());
        let host = HostState::default();
        client.plan(&tenant, None, None, &batch, &[]).await.unwrap();
        let (mut local, mut remote) = (Duration::ZERO, Duration::ZERO);
        let (mut local_cpu, mut remote_cpu) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..BATCHES {
            let cpu = process_cpu();
            let start = Instant::now();
            for object in &batch {
                let plan = planner.plan(object, &host);
                std::hint::black_box(plan.to_decision(
                    planner.tenant(),
                    object,
                    Stamp::now("bench"),
                ));
            }
            local += start.elapsed();
            local_cpu += process_cpu() - cpu;
            let cpu = process_cpu();
            let start = Instant::now();
            let planned = client.plan(&tenant, None, None, &batch, &[]).await.unwrap();
            assert_eq!(planned.len(), BATCH);
            drop(planned);
            remote += start.elapsed();
            remote_cpu += process_cpu() - cpu;
        }
        let local_rate = (BATCHES * BATCH) as f64 / local.as_secs_f64();
        let remote_rate = (BATCHES * BATCH) as f64 / remote.as_secs_f64();

        // Where a batch's time goes: the halves measured one by one, in process.
        let (pieces, response_bytes) = halves(&tenant, &batch).await;

        println!("Plan over gRPC on loopback (plaintext), default policy, {BATCH}-object batches");
        println!(
            "single object round trip: p50 {:.3} ms, p99 {:.3} ms ({SINGLE_CALLS} calls)",
            percentile(&latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        );
        println!("in process:  {local_rate:>10.0} objects/s");
        println!(
            "over gRPC:   {remote_rate:>10.0} objects/s ({:.0}% of in process)",
            remote_rate / local_rate * 100.0
        );
        let per_object = |cpu: Duration| cpu.as_secs_f64() * 1e6 / (BATCHES * BATCH) as f64;
        println!(
            "CPU per object: in process {:.2} us, over gRPC {:.2} us (client and server, all \
             threads: {:.1}x in process)",
            per_object(local_cpu),
            per_object(remote_cpu),
            remote_cpu.as_secs_f64() / local_cpu.as_secs_f64()
        );
        println!(
            "one {BATCH}-object batch, piece by piece (ms; response {response_bytes} bytes per object):"
        );
        for (name, time) in pieces {
            println!(
                "  {name:<44} {:>8.3}",
                time.as_secs_f64() * 1e3 / BATCHES as f64
            );
        }
    });
}

/// The pieces of one remote batch, each timed over [`BATCHES`] runs: the client's JSON encoding,
/// the protobuf encoding and decoding both ways, the service's handler, the client's conversion.
/// Also returns the size of the response per object.
async fn halves(tenant: &Tenant, batch: &[TenantObject]) -> (Vec<(&'static str, Duration)>, usize) {
    use prost::Message;
    use tenantplane_core::mapping::TenantPlacement;
    use tenantplane_grpc::convert::{from_proto, to_proto};
    use tenantplane_proto::planner::v1::planner_server::Planner as _;
    use tenantplane_proto::planner::v1::{PlanForm, PlanRequest, PlanResponse};

    let service = PlannerService::new();
    let placement = TenantPlacement::from(tenant);
    let mut times = [Duration::ZERO; 7];
    let mut response_bytes = 0;
    // Run 0 warms the policy cache and is not counted.
    for run in 0..=BATCHES {
        let mut laps = [Instant::now(); 8];
        let (objects, sent): (Vec<_>, Vec<_>) = batch
            .iter()
            .map(|o| from_proto::SentObject::encode(&placement, o))
            .unzip();
        let request = PlanRequest {
            tenant: Some(to_proto::tenant(tenant)),
            objects,
            plan_form: PlanForm::Minimal.into(),
            mapping_version: tenant.mapping_version().to_string(),
            ..Default::default()
        };
        laps[1] = Instant::now();
        let request = PlanRequest::decode(request.encode_to_vec().as_slice()).unwrap();
        laps[2] = Instant::now();
        let response = service.plan(tonic::Request::new(request)).await.unwrap();
        laps[3] = Instant::now();
        let bytes = response.into_inner().encode_to_vec();
        laps[4] = Instant::now();
        let mut response = PlanResponse::decode(bytes.as_slice()).unwrap();
        laps[5] = Instant::now();
        let plans = std::mem::take(&mut response.plans);
        let answer = from_proto::PlanAnswer::of(&response, &placement).unwrap();
        let planned: Vec<_> = plans
            .into_iter()
            .zip(sent)
            .enumerate()
            .map(|(i, (p, sent))| answer.object_plan(&format!("plans[{i}]"), p, sent).unwrap())
            .collect();
        laps[6] = Instant::now();
        drop(planned);
        laps[7] = Instant::now();
        response_bytes = bytes.len();
        if run > 0 {
            for (i, total) in times.iter_mut().enumerate() {
                *total += laps[i + 1] - laps[i];
            }
        }
    }
    let pieces = [
        "client: objects to JSON bytes and placements",
        "protobuf: request encode + decode",
        "server: Planner::plan handler",
        "server: response encode (and drop)",
        "client: response decode",
        "client: response to Plan + Decision",
        "client: drop the plans",
    ]
    .into_iter()
    .zip(times)
    .collect();
    (pieces, response_bytes / batch.len())
}
