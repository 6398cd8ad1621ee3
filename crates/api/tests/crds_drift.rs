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

/// Every `format` in the schemas, with the JSON path of the node that carries it.
fn formats(node: &serde_json::Value, path: &str, out: &mut Vec<(String, String, String)>) {
    match node {
        serde_json::Value::Object(map) => {
            if let Some(format) = map.get("format").and_then(|f| f.as_str()) {
                let ty = map.get("type").and_then(|t| t.as_str()).unwrap_or("");
                out.push((path.to_string(), ty.to_string(), format.to_string()));
            }
            for (key, child) in map {
                formats(child, &format!("{path}.{key}"), out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                formats(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A real API server accepts a CRD with a format it does not know, warns
/// (`unrecognized format "uint32"`) and ignores it; the recognized ones are listed in
/// apiextensions-apiserver's pkg/apiserver/validation/formats.go.
#[test]
fn every_schema_format_is_one_kubernetes_recognizes() {
    const STRING_FORMATS: [&str; 26] = [
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "k8s-short-name",
        "k8s-long-name",
    ];
    let mut found = Vec::new();
    for crd in tenantplane_api::crds() {
        let value = serde_json::to_value(&crd).unwrap();
        formats(&value["spec"]["versions"], &crd.spec.names.kind, &mut found);
    }
    assert!(
        !found.is_empty(),
        "the schemas declare formats (date-time, int64)"
    );
    let unrecognized: Vec<_> = found
        .into_iter()
        .filter(|(_, ty, format)| match ty.as_str() {
            "integer" => format != "int32" && format != "int64",
            "number" => format != "float" && format != "double",
            "string" | "" => {
                !STRING_FORMATS.contains(&format.replace('-', "").as_str())
                    && !STRING_FORMATS.contains(&format.as_str())
            }
            _ => true,
        })
        .collect();
    assert!(
        unrecognized.is_empty(),
        "formats Kubernetes does not recognize: {unrecognized:#?}"
    );
}
