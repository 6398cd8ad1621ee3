//! Compiles the Kubernetes protobuf definitions the server decodes request bodies against
//! (`src/protobuf.rs`) into a FileDescriptorSet in `OUT_DIR`.
//!
//! The definitions come from the `k8s-rs-pb` crate (a build dependency), which ships the
//! `generated.proto` files of every Kubernetes API group beside its rust-protobuf code, so
//! this repository vendors none. Its embedded descriptors cannot be used: the generated
//! `file_descriptor()` of every file that has imports names itself where its imports belong
//! (`super::v1::file_descriptor()`) and deadlocks on first use, so none of its code is built
//! (no version feature). The `.proto` files are found through `cargo metadata` and compiled
//! with protox (pure Rust: nobody needs protoc).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

/// The Kubernetes version whose definitions k8s-rs-pb ships under `src/<version>/`: the one of
/// the workspace's k8s-openapi, whose schemas `src/protobuf.rs` reads the JSON rules from.
const KUBERNETES_VERSION: &str = "v1_34";

/// The packages of the groups the server serves; their imports (meta/v1, runtime, schema,
/// resource, intstr) come along.
const PACKAGES: &[&str] = &[
    "api/core/v1",
    "api/apps/v1",
    "api/batch/v1",
    "api/policy/v1",
    "api/rbac/v1",
    "api/autoscaling/v1",
    "api/autoscaling/v2",
    "api/discovery/v1",
    "api/networking/v1",
    "api/node/v1",
    "api/coordination/v1",
    "api/events/v1",
    "api/admissionregistration/v1",
    "api/authorization/v1",
    "api/authentication/v1",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    let root = package_dir("k8s-rs-pb")?
        .join("src")
        .join(KUBERNETES_VERSION);
    let mut compiler = protox::Compiler::new([&root])?;
    compiler.include_source_info(false).include_imports(true);
    compiler.open_files(PACKAGES.iter().map(|p| format!("{p}/generated.proto")))?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("kubernetes_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    Ok(())
}

/// The directory of a package in this crate's dependency graph, as `cargo metadata` reports
/// it (the registry's source cache, or a vendored copy).
fn package_dir(name: &str) -> Result<PathBuf, Box<dyn Error>> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--filter-platform"])
        .arg(env::var("HOST")?)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == name)
        .and_then(|package| package["manifest_path"].as_str())
        .and_then(|manifest| Path::new(manifest).parent())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("cargo metadata lists no package {name}").into())
}
