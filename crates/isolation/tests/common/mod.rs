//! Inputs shared by the isolation tests: the fixtures under tests/fixtures/.
// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::path::PathBuf;

use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_isolation::{Compilation, compile, decode};

pub const LEVELS: [&str; 3] = ["baseline", "restricted", "strict"];

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let value: serde_json::Value = serde_norway::from_str(&text).unwrap();
    decode(&value).unwrap()
}

pub fn tenant() -> Tenant {
    read("tenant.yaml")
}

/// `profile-<name>.yaml`: one per level, and `overrides`.
pub fn profile(name: &str) -> IsolationProfile {
    read(&format!("profile-{name}.yaml"))
}

/// The compilation of `profile-<name>.yaml` for the fixture tenant.
pub fn compiled(name: &str) -> Compilation {
    compile(&tenant(), &profile(name)).unwrap()
}

/// Every profile fixture's compilation, named.
pub fn all_compilations() -> Vec<(&'static str, Compilation)> {
    LEVELS
        .iter()
        .chain(&["overrides"])
        .map(|name| (*name, compiled(name)))
        .collect()
}
