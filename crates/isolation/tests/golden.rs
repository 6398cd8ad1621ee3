//! Golden output per level (and for a profile with overrides), byte for byte. Regenerate with
//! `TENANTPLANE_BLESS=1 cargo test -p tenantplane-isolation --test golden` and review the diff:
//! every change here changes what lands in tenants' host namespaces.

mod common;

use std::path::PathBuf;

#[test]
fn compiled_objects_match_the_golden_files() {
    for (name, compilation) in common::all_compilations() {
        let yaml = serde_norway::to_string(&compilation).unwrap();
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(format!("{name}.yaml"));
        if std::env::var_os("TENANTPLANE_BLESS").is_some() {
            std::fs::write(&path, &yaml).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} ({e}); bless with TENANTPLANE_BLESS=1", path.display()));
        pretty_assertions::assert_eq!(
            golden,
            yaml,
            "{} differs from the compiler's output; if the change is intended, bless with TENANTPLANE_BLESS=1",
            path.display()
        );
    }
}

#[test]
fn each_level_compiles_the_documented_objects() {
    let names = |c: &tenantplane_isolation::Compilation| {
        c.refs()
            .iter()
            .map(|r| format!("{}/{}", r.kind, r.name))
            .collect::<Vec<_>>()
    };
    let common = [
        "Namespace/tenant-acme",
        "NetworkPolicy/tenantplane-default-deny",
    ];
    let baseline = names(&common::compiled("baseline"));
    assert_eq!(
        baseline,
        [
            &common[..],
            &[
                "NetworkPolicy/tenantplane-allow-intra-tenant",
                "ResourceQuota/tenantplane-quota",
                "ValidatingAdmissionPolicy/tenantplane-acme-protect-managed",
                "ValidatingAdmissionPolicyBinding/tenantplane-acme-protect-managed",
            ],
        ]
        .concat()
    );
    let restricted = [
        &common[..],
        &[
            "NetworkPolicy/tenantplane-allow-dns",
            "NetworkPolicy/tenantplane-allow-intra-tenant",
            "ResourceQuota/tenantplane-quota",
            "LimitRange/tenantplane-limits",
            "ValidatingAdmissionPolicy/tenantplane-acme-protect-managed",
            "ValidatingAdmissionPolicyBinding/tenantplane-acme-protect-managed",
            "ValidatingAdmissionPolicy/tenantplane-acme-no-node-ports",
            "ValidatingAdmissionPolicyBinding/tenantplane-acme-no-node-ports",
        ],
    ]
    .concat();
    assert_eq!(
        [
            &restricted[..],
            &[
                "ValidatingAdmissionPolicy/tenantplane-acme-image-pull-always",
                "ValidatingAdmissionPolicyBinding/tenantplane-acme-image-pull-always"
            ]
        ]
        .concat(),
        names(&common::compiled("restricted"))
    );
    assert_eq!(
        [
            &restricted[..],
            &[
                "ValidatingAdmissionPolicy/tenantplane-acme-runtime-class",
                "ValidatingAdmissionPolicyBinding/tenantplane-acme-runtime-class",
                "ValidatingAdmissionPolicy/tenantplane-acme-image-pull-always",
                "ValidatingAdmissionPolicyBinding/tenantplane-acme-image-pull-always",
            ]
        ]
        .concat(),
        names(&common::compiled("strict"))
    );
}

#[test]
fn every_object_carries_its_provenance() {
    for (name, compilation) in common::all_compilations() {
        for compiled in &compilation.objects {
            let meta = &compiled.object["metadata"];
            let p = &compiled.provenance;
            assert_eq!(meta["labels"]["tenantplane.io/managed"], "true", "{name}");
            assert_eq!(meta["labels"]["tenantplane.io/tenant"], "acme");
            let annotations = &meta["annotations"];
            assert_eq!(
                annotations["tenantplane.io/isolation-profile"],
                p.profile.as_str()
            );
            assert_eq!(
                annotations["tenantplane.io/isolation-profile-generation"],
                p.generation.to_string().as_str()
            );
            assert_eq!(
                annotations["tenantplane.io/isolation-field"],
                p.field_paths.join(",").as_str()
            );
            assert!(!p.field_paths.is_empty() && !p.explanation.is_empty());
            let namespaced = !matches!(
                compiled.object["kind"].as_str().unwrap(),
                "Namespace" | "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding"
            );
            assert_eq!(meta.get("namespace").is_some(), namespaced);
            if namespaced {
                assert_eq!(meta["namespace"], "tenant-acme");
            }
        }
    }
}

#[test]
fn overrides_are_recorded_as_the_fields_that_produced_each_object() {
    let c = common::compiled("overrides");
    let fields = |kind: &str, name: &str| {
        c.objects
            .iter()
            .find(|o| o.object["kind"] == kind && o.object["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name} compiled"))
            .provenance
            .field_paths
            .clone()
    };
    assert_eq!(
        fields("NetworkPolicy", "tenantplane-allow-egress-cidrs"),
        ["spec.network.allowedEgressCidrs"]
    );
    assert_eq!(
        fields("ResourceQuota", "tenantplane-quota"),
        [
            "spec.level",
            "spec.resourceQuota.hard[count/deployments.apps]",
            "spec.resourceQuota.hard[requests.cpu]"
        ]
    );
    assert_eq!(
        fields(
            "ValidatingAdmissionPolicy",
            "tenantplane-acme-runtime-class"
        ),
        ["spec.runtimeClass.required"]
    );
    assert_eq!(
        fields("Namespace", "tenant-acme"),
        [
            "spec.level",
            "spec.podSecurity.audit",
            "spec.podSecurity.version"
        ]
    );
    let quota = c
        .objects
        .iter()
        .find(|o| o.object["kind"] == "ResourceQuota")
        .unwrap();
    assert_eq!(quota.object["spec"]["hard"]["requests.cpu"], "12");
    assert_eq!(
        quota.object["spec"]["hard"]["requests.memory"], "16Gi",
        "the level's value stays"
    );
}
