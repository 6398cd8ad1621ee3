//! explain-sync over a generated 100k-object file, end to end through the `tenantplane` binary.
//!
//! `cargo bench -p tenantplane-cli --bench explain_sync` writes 100,000 tenant objects (a mix of
//! Pods, Services, ConfigMaps and Deployments, one in eight pods refused by the default policy)
//! as multi-document YAML and as a JSON List, runs `tenantplane explain-sync` on each three times,
//! and prints the median wall time beside a baseline measured in the same run: reading and
//! parsing the same file in process, without planning.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const OBJECTS: usize = 100_000;
const RUNS: usize = 3;

fn object(i: usize) -> Value {
    match i % 4 {
        0 => json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": format!("team-{}", i % 50), "labels": {"app": "web"}},
            "spec": {"hostNetwork": i.is_multiple_of(8), "containers": [{"name": "web", "image": "nginx:1.27",
                "securityContext": {"allowPrivilegeEscalation": false}}]}}),
        1 => json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("svc-{i}"), "namespace": format!("team-{}", i % 50)},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        2 => json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cfg-{i}"), "namespace": format!("team-{}", i % 50)},
            "data": {"key": "value"}}),
        _ => json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("dep-{i}"), "namespace": format!("team-{}", i % 50)},
            "spec": {"replicas": 2}}),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let yaml_path = dir.path().join("objects.yaml");
    let json_path = dir.path().join("objects.json");
    let objects: Vec<Value> = (0..OBJECTS).map(object).collect();
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&yaml_path).unwrap());
        for o in &objects {
            writeln!(f, "---\n{}", serde_norway::to_string(o).unwrap()).unwrap();
        }
    }
    std::fs::write(
        &json_path,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects})).unwrap(),
    )
    .unwrap();

    println!("explain-sync over {OBJECTS} objects (median of {RUNS} runs)");
    println!(
        "{:<6} {:>12} {:>14} {:>12} {:>8}",
        "format", "explain-sync", "objects/s", "parse only", "ratio"
    );
    for (format, path) in [("yaml", &yaml_path), ("json", &json_path)] {
        let explain = median(
            (0..RUNS)
                .map(|_| {
                    let start = Instant::now();
                    let status = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
                        .args(["explain-sync", path.to_str().unwrap(), "--fail-on", "none"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .unwrap();
                    assert!(status.success());
                    start.elapsed()
                })
                .collect(),
        );
        let parse = median(
            (0..RUNS)
                .map(|_| {
                    let start = Instant::now();
                    let text = std::fs::read_to_string(path).unwrap();
                    let docs = tenantplane_core::documents::parse("bench", &text);
                    assert_eq!(docs.len(), OBJECTS);
                    start.elapsed()
                })
                .collect(),
        );
        println!(
            "{format:<6} {:>10.0}ms {:>14.0} {:>10.0}ms {:>7.2}x",
            explain.as_secs_f64() * 1e3,
            OBJECTS as f64 / explain.as_secs_f64(),
            parse.as_secs_f64() * 1e3,
            explain.as_secs_f64() / parse.as_secs_f64()
        );
    }
}
