//! Properties of the mapping and the collision check, over arbitrary names: long, unicode, dots,
//! uppercase, and names built to collide (`-x-` inside names and namespaces, `x-` prefixes, `-x`
//! suffixes, maximum lengths). Whatever a tenant control plane (or a malformed file) hands the
//! core, it never panics, always yields a valid host name, never lets two sources share a host
//! object, and under mapping v2 never maps two objects of one tenant to one host name.

use std::sync::LazyLock;

use proptest::prelude::*;
use serde_json::{Value, json};
use tenantplane_core::collision::{self, Collision, HostObjectMeta};
use tenantplane_core::decision::Outcome;
use tenantplane_core::mapping::{
    HostNameForm, MappingVersion, NameSyntax, SEPARATOR, TenantPlacement, host_name, place,
    provenance,
};
use tenantplane_core::planner::SharedNames;
use tenantplane_core::{CompiledPolicy, Plan, Planner, TenantObject, documents};

static DEFAULT_POLICY: LazyLock<CompiledPolicy> = LazyLock::new(CompiledPolicy::builtin_default);

fn arbitrary_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?",
        "[a-z0-9.-]{1,300}",
        "[A-Za-z0-9._ -]{1,80}",
        "\\PC{1,40}",
        "[a-z]{60,70}",
    ]
}

fn kind() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop_oneof![
        Just(("v1", "Service")),
        Just(("v1", "Endpoints")),
        Just(("v1", "ConfigMap")),
        Just(("v1", "Pod")),
        Just(("networking.k8s.io/v1", "Ingress")),
        Just(("example.com/v1", "Widget")),
    ]
}

fn object(api_version: &str, kind: &str, namespace: &str, name: &str, uid: &str) -> TenantObject {
    TenantObject::from_value(json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": uid}}))
    .unwrap()
}

fn tenant(name: &str) -> TenantPlacement {
    TenantPlacement {
        tenant: name.to_string(),
        host_namespace: format!("tenant-{name}"),
        mapping: MappingVersion::V1,
    }
}

/// The Tenant `acme` on mapping `version`.
fn tenant_resource(version: &str) -> tenantplane_api::Tenant {
    serde_json::from_value(
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"mappingVersion": version, "controlPlane": {"kubeconfigSecret":
            {"namespace": "tenant-acme", "name": "k", "key": "config"}}}}),
    )
    .unwrap()
}

/// Names a tenant control plane accepts, built from the pieces that make readable names
/// ambiguous: `-x-`, `x-`, `-x`, and lengths up to each syntax's maximum.
fn adversarial_name(max: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a"),
        Just("x"),
        Just("b"),
        Just("0"),
        Just("-x-"),
        Just("x-"),
        Just("-x"),
        Just("-"),
        Just("."),
        Just("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ];
    prop::collection::vec(piece, 1..14).prop_map(move |pieces| {
        let mut name: String = pieces.concat();
        name.truncate(max);
        // a Kubernetes name starts and ends with an alphanumeric character
        let name = name.trim_matches(|c| c == '-' || c == '.').to_string();
        if name.is_empty() {
            "x".to_string()
        } else {
            name
        }
    })
}

/// Namespace names: DNS-1123 labels (no dots), at most 63 characters.
fn adversarial_namespace() -> impl Strategy<Value = String> {
    adversarial_name(63).prop_map(|n| {
        let n = n.replace('.', "x");
        n.trim_matches('-').to_string()
    })
}

fn v2(kind: &str, namespace: &str, name: &str) -> (String, HostNameForm) {
    host_name(MappingVersion::V2, "acme", "", kind, namespace, name)
}

fn meta(p: &tenantplane_core::Placement) -> HostObjectMeta {
    HostObjectMeta {
        api_version: p.api_version.clone(),
        kind: p.kind.clone(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        labels: p.labels.clone().into_iter().collect(),
        annotations: p.annotations.clone().into_iter().collect(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn host_names_are_always_valid_for_the_kind_and_deterministic(
        (api_version, kind) in kind(), namespace in arbitrary_name(), name in arbitrary_name()
    ) {
        let o = object(api_version, kind, &namespace, &name, "u");
        let a = place(&tenant("acme"), &o);
        let b = place(&tenant("acme"), &o);
        prop_assert_eq!(&a, &b);
        let group = o.identity.group();
        prop_assert!(NameSyntax::for_kind(group, kind).is_valid(&a.name), "{:?} for {}", a.name, kind);
    }

    #[test]
    fn provenance_round_trips_to_the_source_identity(
        (api_version, kind) in kind(), namespace in arbitrary_name(), name in arbitrary_name(),
        uid in "[a-f0-9-]{0,36}"
    ) {
        let o = object(api_version, kind, &namespace, &name, &uid);
        let p = place(&tenant("acme"), &o);
        let back = provenance(&p.labels.into_iter().collect(), &p.annotations.into_iter().collect()).unwrap();
        prop_assert_eq!(back.tenant, "acme");
        prop_assert_eq!(back.source, o.identity);
    }

    #[test]
    fn distinct_sources_sharing_a_host_name_always_conflict(
        (api_version, kind) in kind(),
        ns_a in arbitrary_name(), name_a in arbitrary_name(),
        ns_b in arbitrary_name(), name_b in arbitrary_name(),
        tenant_b in prop_oneof![Just("acme"), Just("globex")],
    ) {
        // Force shared names with the readable scheme's built-in ambiguity half of the time.
        let (ns_b, name_b) = if name_b.len() % 2 == 0 {
            (ns_a.clone(), name_a.clone())
        } else {
            (ns_b, name_b)
        };
        let a = object(api_version, kind, &ns_a, &name_a, "uid-a");
        let b = object(api_version, kind, &ns_b, &name_b, "uid-b");
        let pa = place(&tenant("acme"), &a);
        let pb = place(&tenant(tenant_b), &b);
        if pa.name == pb.name {
            let verdict = collision::check(tenant_b, &b.identity, &pb, Some(&meta(&pa)));
            prop_assert!(matches!(verdict, Collision::Conflict { .. }), "{:?}", verdict);
        }
    }

    #[test]
    fn readable_scheme_collisions_are_caught(
        a in "[a-z]{1,8}", b in "[a-z]{1,8}", c in "[a-z]{1,8}"
    ) {
        // `a-x-b` in `c` and `a` in `b-x-c` both map to `a-x-b-x-c`.
        let first = object("v1", "ConfigMap", &c, &format!("{a}-x-{b}"), "1");
        let second = object("v1", "ConfigMap", &format!("{b}-x-{c}"), &a, "2");
        let p1 = place(&tenant("acme"), &first);
        let p2 = place(&tenant("acme"), &second);
        prop_assert_eq!(&p1.name, &p2.name);
        let verdict = collision::check("acme", &second.identity, &p2, Some(&meta(&p1)));
        prop_assert!(matches!(verdict, Collision::Conflict { .. }), "{:?}", verdict);
        prop_assert_eq!(collision::check("acme", &first.identity, &p1, Some(&meta(&p1))), Collision::UpdateOwn);
    }

    #[test]
    fn under_v1_a_reference_to_a_shared_name_is_checked_against_the_object_that_takes_it(
        a in "[a-z]{1,8}", b in "[a-z]{1,8}", c in "[a-z]{1,8}", order in 0usize..6,
    ) {
        // `c/reader` names ConfigMap `a-x-b` of `c`, whose v1 host name `b-x-c/a` shares: refused
        // when `b-x-c/a` takes it (first by namespace and name), whatever order the batch is in.
        let shared = object("v1", "ConfigMap", &c, &format!("{a}-x-{b}"), "1");
        let taker = object("v1", "ConfigMap", &format!("{b}-x-{c}"), &a, "2");
        let reader = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "reader", "namespace": c, "uid": "3"},
            "spec": {"containers": [{"name": "main", "image": "app"}],
                     "volumes": [{"name": "config", "configMap": {"name": format!("{a}-x-{b}")}}]}}))
        .unwrap();
        let mut batch = vec![&shared, &taker, &reader];
        for _ in 0..order % 3 {
            batch.rotate_left(1);
        }
        if order >= 3 {
            batch.swap(0, 1);
        }
        let taken = (format!("{b}-x-{c}"), a.clone()) < (c.clone(), format!("{a}-x-{b}"));
        for (mapping, refused) in [("v1", taken), ("v2", false)] {
            let planner = Planner::new(&tenant_resource(mapping), CompiledPolicy::builtin_default());
            let plans = planner.plan_batch(&batch, &Default::default());
            let read = batch.iter().position(|o| o.identity.kind == "Pod").unwrap();
            if refused {
                prop_assert_eq!(plans[read].outcome, Outcome::Rejected);
                prop_assert_eq!(&plans[read].reason, "ReferenceToForeignHostObject");
                prop_assert_eq!(
                    plans[read].verdict.field_path.as_deref(),
                    Some("spec.volumes[0].configMap.name")
                );
                let by = format!("ConfigMap/{b}-x-{c}/{a} of tenant acme");
                prop_assert!(plans[read].message.contains(&by), "{}", plans[read].message);
            } else {
                prop_assert_eq!(plans[read].outcome, Outcome::Synced, "{}", plans[read].message);
            }
        }
    }

    #[test]
    fn shared_names_settled_one_plan_after_the_other_are_settled_as_in_one_batch(
        objects in prop::collection::vec(
            (any::<bool>(), 0usize..5, 0usize..5, 0usize..5, any::<bool>()), 1..9),
        mapping in prop_oneof![Just("v1"), Just("v2")],
    ) {
        // ConfigMaps and Pods whose names and namespaces make v1 host names meet (`c/a-x-b` and
        // `b-x-c/a`), Pods naming ConfigMaps by such names, some Pods refused by the policy.
        const NAMES: [&str; 5] = ["a", "a-x-b", "b", "a-x-b-x-c", "x"];
        const NAMESPACES: [&str; 5] = ["c", "b-x-c", "b", "x-c", "c-x-b"];
        let objects: Vec<TenantObject> = objects
            .iter()
            .map(|&(pod, name, namespace, reference, refused)| {
                let (name, namespace) = (NAMES[name], NAMESPACES[namespace]);
                let value = if pod {
                    json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {"hostNetwork": refused, "containers": [{"name": "main", "image": "app"}],
                                 "volumes": [{"name": "c", "configMap": {"name": NAMES[reference]}}]}})
                } else {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": namespace}})
                };
                TenantObject::from_value(value).unwrap()
            })
            .collect();
        let planner = Planner::new(&tenant_resource(mapping), CompiledPolicy::builtin_default());
        let host = Default::default();
        let batch: Vec<&TenantObject> = objects.iter().collect();
        let in_one_batch = planner.plan_batch(&batch, &host);

        let shared = SharedNames::new(
            planner.placement(),
            objects.iter().enumerate().map(|(i, o)| (i, &o.identity)),
        );
        let mut held = shared.holding();
        let mut streamed: Vec<Option<Plan>> = vec![None; objects.len()];
        for (i, object) in objects.iter().enumerate() {
            let (plan, references) = planner.plan_and_references(object, &host);
            if shared.holds(&plan, &references) {
                held.hold(i, object.identity.clone(), plan, references);
            } else {
                streamed[i] = Some(plan);
            }
            for (at, plan) in held.passed(i) {
                prop_assert!(streamed[at].is_none(), "{at} given back twice");
                streamed[at] = Some(plan);
            }
        }
        let streamed: Vec<Plan> = streamed
            .into_iter()
            .map(|p| p.expect("every plan given back by the end"))
            .collect();
        prop_assert_eq!(streamed, in_one_batch);
    }

    #[test]
    fn v2_never_maps_two_objects_of_one_tenant_and_kind_to_one_host_name(
        kind in prop_oneof![Just("ConfigMap"), Just("Service"), Just("Pod")],
        ns_a in adversarial_namespace(), name_a in adversarial_name(253),
        ns_b in adversarial_namespace(), name_b in adversarial_name(253),
        swap in any::<bool>(),
    ) {
        // Half of the time, the pair v1 confuses: `a-x-b` in `c` and `a` in `b-x-c`.
        let (ns_b, name_b) = if swap && !name_b.contains('.') {
            (format!("{name_b}-x-{ns_a}"), name_a.clone())
        } else {
            (ns_b, name_b)
        };
        let ns_b: String = ns_b.chars().take(63).collect();
        let ns_b = ns_b.trim_matches('-').to_string();
        prop_assume!((&ns_a, &name_a) != (&ns_b, &name_b) && !ns_b.is_empty());
        let (a, form_a) = v2(kind, &ns_a, &name_a);
        let (b, form_b) = v2(kind, &ns_b, &name_b);
        prop_assert_ne!(&a, &b, "{}/{} and {}/{}", ns_a, name_a, ns_b, name_b);
        for (host, form, ns, name) in [(&a, form_a, &ns_a, &name_a), (&b, form_b, &ns_b, &name_b)] {
            prop_assert!(NameSyntax::for_kind("", kind).is_valid(host), "{} for {}", host, kind);
            match form {
                // a readable name splits back into exactly its source
                HostNameForm::Readable => {
                    prop_assert_eq!(host.matches(SEPARATOR).count(), 1);
                    prop_assert_eq!(host.split_once(SEPARATOR), Some((name.as_str(), ns.as_str())));
                }
                // a hashed name never contains the separator, so it never equals a readable one
                HostNameForm::Hashed => prop_assert!(!host.contains(SEPARATOR), "{}", host),
            }
        }
    }

    #[test]
    fn v1_and_v2_agree_wherever_the_readable_name_splits_back(
        ns in adversarial_namespace(), name in adversarial_name(253),
    ) {
        let v1 = host_name(MappingVersion::V1, "acme", "", "ConfigMap", &ns, &name);
        let v2 = v2("ConfigMap", &ns, &name);
        if v2.1 == HostNameForm::Readable {
            prop_assert_eq!(v1, v2);
        }
    }

    #[test]
    fn nothing_panics_on_arbitrary_documents(text in "\\PC{0,400}") {
        for doc in documents::parse("fuzz", &text).into_iter().flatten() {
            if let Ok(o) = TenantObject::from_value(doc.value) {
                let _ = place(&tenant("acme"), &o);
                let _ = DEFAULT_POLICY.evaluate(&o);
            }
        }
    }

    #[test]
    fn nothing_panics_on_arbitrary_json_objects(v in arbitrary_json()) {
        let candidate = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": v});
        let o = TenantObject::from_value(candidate).unwrap();
        let _ = DEFAULT_POLICY.evaluate(&o);
        let _ = TenantObject::from_value(o.object["spec"].clone());
    }
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("hostNetwork".to_string()),
                    Just("containers".to_string()),
                    Just("securityContext".to_string()),
                    Just("volumes".to_string()),
                    "[a-z]{1,6}".prop_map(|s| s),
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
