//! Bad input is refused with the field at fault; a changed profile says what to prune.

mod common;

use serde_json::json;
use tenantplane_api::IsolationProfile;
use tenantplane_isolation::{CompileError, ObjectRef, compile, decode};

/// Compiles a profile given as JSON for the fixture tenant.
fn compile_json(
    spec: serde_json::Value,
) -> Result<tenantplane_isolation::Compilation, CompileError> {
    let profile: IsolationProfile = decode(&json!({
        "apiVersion": "tenantplane.io/v1alpha1",
        "kind": "IsolationProfile",
        "metadata": { "name": "p" },
        "spec": spec,
    }))?;
    compile(&common::tenant(), &profile)
}

fn refused(spec: serde_json::Value) -> CompileError {
    compile_json(spec).expect_err("refused")
}

#[test]
fn an_unknown_level_names_spec_level() {
    let e = refused(json!({ "level": "extreme" }));
    assert_eq!(e.field, "spec.level");
    assert!(e.problem.contains("unknown variant `extreme`"), "{e}");
    assert!(e.to_string().starts_with("spec.level: "));
}

#[test]
fn an_invalid_quantity_names_its_entry() {
    let e = refused(json!({ "resourceQuota": { "hard": { "requests.memory": "16GB" } } }));
    assert_eq!(e.field, "spec.resourceQuota.hard[requests.memory]");
    assert!(e.problem.contains("unknown suffix \"GB\""), "{e}");
    let e = refused(json!({ "limitRange": { "max": { "cpu": "-1" } } }));
    assert_eq!(e.field, "spec.limitRange.max[cpu]");
    let e = refused(json!({ "resourceQuota": { "hard": { "requests cpu": "1" } } }));
    assert_eq!(e.field, "spec.resourceQuota.hard[requests cpu]");
    assert!(e.problem.contains("not a resource name"), "{e}");
}

#[test]
fn an_invalid_cidr_names_its_index() {
    let e = refused(json!({ "network": { "allowedEgressCidrs": ["10.0.0.0/8", "10.1.2.3/33"] } }));
    assert_eq!(
        e.to_string(),
        "spec.network.allowedEgressCidrs[1]: \"10.1.2.3/33\" is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32"
    );
    let e = refused(json!({ "network": { "allowedEgressCidrs": ["10.1.2.3/8"] } }));
    assert_eq!(e.field, "spec.network.allowedEgressCidrs[0]");
    assert!(e.problem.contains("the network is 10.0.0.0/8"), "{e}");
    let e = refused(json!({ "network": { "allowedEgressNamespaces": ["Kube_System"] } }));
    assert_eq!(e.field, "spec.network.allowedEgressNamespaces[0]");
}

#[test]
fn contradictory_overrides_name_the_override() {
    // Egress allow-lists with egress left open: at baseline, or turned off explicitly.
    let e = refused(
        json!({ "level": "baseline", "network": { "allowedEgressCidrs": ["10.0.0.0/8"] } }),
    );
    assert_eq!(e.field, "spec.network.allowedEgressCidrs");
    assert!(e.problem.contains("spec.level leaves egress open"), "{e}");
    let e = refused(
        json!({ "network": { "defaultDenyEgress": false, "allowedEgressNamespaces": ["monitoring"] } }),
    );
    assert_eq!(e.field, "spec.network.allowedEgressNamespaces");
    assert!(
        e.problem
            .contains("spec.network.defaultDenyEgress leaves egress open"),
        "{e}"
    );
    // A default request above the level's default limit, and a default above a lowered max.
    let e = refused(json!({ "limitRange": { "defaultRequest": { "cpu": "1" } } }));
    assert_eq!(e.field, "spec.limitRange.defaultRequest[cpu]");
    assert!(
        e.problem
            .contains("exceeds its default 500m (from spec.level)"),
        "{e}"
    );
    let e = refused(json!({ "limitRange": { "max": { "memory": "256Mi" } } }));
    assert_eq!(e.field, "spec.limitRange.max[memory]");
    // Node ports granted by the quota but refused at admission.
    let e = refused(json!({ "resourceQuota": { "hard": { "services.nodeports": "2" } } }));
    assert_eq!(e.field, "spec.resourceQuota.hard[services.nodeports]");
    assert!(e.problem.contains("from spec.level"), "{e}");
    compile_json(json!({ "services": { "denyNodePorts": false }, "resourceQuota": { "hard": { "services.nodeports": "2" } } }))
        .expect("node ports granted and not denied");
    let e = refused(
        json!({ "level": "baseline", "services": { "denyNodePorts": true }, "resourceQuota": { "hard": { "services.nodeports": "1" } } }),
    );
    assert_eq!(e.field, "spec.resourceQuota.hard[services.nodeports]");
}

#[test]
fn bad_names_and_versions_are_refused() {
    let e = refused(json!({ "runtimeClass": { "required": "Not A Name" } }));
    assert_eq!(e.field, "spec.runtimeClass.required");
    let e = refused(json!({ "podSecurity": { "version": "1.34" } }));
    assert_eq!(e.field, "spec.podSecurity.version");
    let e = refused(json!({ "podSecurity": { "enforce": "strictest" } }));
    assert_eq!(e.field, "spec.podSecurity.enforce");
    let mut unnamed = common::profile("restricted");
    unnamed.metadata.name = None;
    assert_eq!(
        compile(&common::tenant(), &unnamed).unwrap_err().field,
        "metadata.name"
    );
    let options = tenantplane_isolation::CompileOptions {
        syncer_username: "x' || true || '".into(),
    };
    let e = tenantplane_isolation::compile_with(
        &common::tenant(),
        &common::profile("baseline"),
        &options,
    )
    .unwrap_err();
    assert_eq!(e.field, "options.syncerUsername");
}

#[test]
fn the_level_values_themselves_are_valid() {
    for level in common::LEVELS {
        compile_json(json!({ "level": level })).unwrap();
    }
}

#[test]
fn a_changed_profile_prunes_what_it_no_longer_compiles() {
    let before = common::compiled("strict");
    let after = common::compiled("baseline");
    let pruned: Vec<String> = after
        .prune(&before.refs())
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        pruned,
        [
            "NetworkPolicy/tenant-acme/tenantplane-allow-dns",
            "LimitRange/tenant-acme/tenantplane-limits",
            "ValidatingAdmissionPolicy/tenantplane-acme-no-node-ports",
            "ValidatingAdmissionPolicyBinding/tenantplane-acme-no-node-ports",
            "ValidatingAdmissionPolicy/tenantplane-acme-runtime-class",
            "ValidatingAdmissionPolicyBinding/tenantplane-acme-runtime-class",
            "ValidatingAdmissionPolicy/tenantplane-acme-image-pull-always",
            "ValidatingAdmissionPolicyBinding/tenantplane-acme-image-pull-always",
        ]
    );
    assert!(
        before.prune(&before.refs()).is_empty(),
        "nothing to prune when nothing changed"
    );
    assert!(
        before.prune(&after.refs()).is_empty(),
        "tightening only adds objects"
    );
}

#[test]
fn pruning_spares_namespaces_duplicates_and_version_changes() {
    let c = common::compiled("baseline");
    let r = |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
    };
    let old_quota = r(
        "v1",
        "ResourceQuota",
        Some("tenant-acme"),
        "tenantplane-old",
    );
    let previous = [
        r("v1", "Namespace", None, "tenant-elsewhere"),
        r(
            "admissionregistration.k8s.io/v1beta1",
            "ValidatingAdmissionPolicy",
            None,
            "tenantplane-acme-protect-managed",
        ),
        old_quota.clone(),
        old_quota.clone(),
    ];
    assert_eq!(c.prune(&previous), [old_quota]);
}

#[test]
fn object_refs_read_from_applied_objects() {
    let c = common::compiled("restricted");
    for (compiled, r) in c.objects.iter().zip(c.refs()) {
        assert_eq!(ObjectRef::from_object(&compiled.object), Some(r));
    }
    assert_eq!(ObjectRef::from_object(&json!({ "kind": "Pod" })), None);
}
