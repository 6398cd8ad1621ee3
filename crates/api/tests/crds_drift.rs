//! deploy/crds/ is generated from the Rust types; this test fails when the two drift apart.
//! Regenerate with `cargo run -p tenantplane-cli -- crds > deploy/crds/tenantplane.io.yaml`
//! (or run this test with `TENANTPLANE_BLESS=1`).

use std::path::PathBuf;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/tenantplane.io.yaml")
}

#[test]
fn deploy_crds_match_the_rust_types() {
    let generated = tenantplane_api::crds_yaml();
    let path = checked_in();
    if std::env::var_os("TENANTPLANE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}); run with TENANTPLANE_BLESS=1",
            path.display()
        )
    });
    assert!(
        on_disk == generated,
        "{} has drifted from the Rust types in crates/api; regenerate it with \
         `cargo run -p tenantplane-cli -- crds > deploy/crds/tenantplane.io.yaml`",
        path.display()
    );
}

#[test]
fn every_crd_is_cluster_scoped_v1alpha1_with_status_and_columns() {
    for crd in tenantplane_api::crds() {
        assert_eq!(crd.spec.group, "tenantplane.io");
        assert_eq!(crd.spec.scope, "Cluster", "{}", crd.spec.names.kind);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        assert!(
            version
                .additional_printer_columns
                .as_ref()
                .is_some_and(|c| c.len() >= 2)
        );
    }
}

#[test]
fn cross_field_rules_are_cel_validations_in_the_schema() {
    let yaml = tenantplane_api::crds_yaml();
    for rule in [
        "has(self.spec.hostNamespace) || size(self.metadata.name) <= 56",
        "self == oldSelf",
        "self.action != 'Reject' || has(self.fieldPath)",
    ] {
        assert!(
            yaml.contains(rule),
            "missing x-kubernetes-validations rule {rule}"
        );
    }
}
