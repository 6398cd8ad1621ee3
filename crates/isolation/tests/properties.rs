//! Properties over generated profiles: compilation is deterministic (same input, byte-identical
//! output, stable names and order), and an override always wins over its level and is recorded
//! as the field that produced the object.

mod common;

use proptest::prelude::*;
use serde_json::{Value, json};
use tenantplane_api::IsolationProfile;
use tenantplane_isolation::{Compilation, CompileError, compile, decode};

fn level() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&common::LEVELS[..])
}

/// A whole-number quantity with a suffix, as written in a profile.
fn quantity() -> impl Strategy<Value = String> {
    (
        0u32..5000,
        prop::sample::select(&["", "m", "k", "Mi", "Gi"][..]),
    )
        .prop_map(|(n, suffix)| format!("{n}{suffix}"))
}

fn optional_bool() -> impl Strategy<Value = Option<bool>> {
    prop::option::of(any::<bool>())
}

/// A profile spec with any subset of the overrides set.
fn spec() -> impl Strategy<Value = Value> {
    (
        level(),
        (
            optional_bool(),
            optional_bool(),
            optional_bool(),
            optional_bool(),
        ),
        prop::collection::btree_map(
            prop::sample::select(
                &["pods", "requests.cpu", "limits.memory", "count/jobs.batch"][..],
            ),
            quantity(),
            0..3,
        ),
        prop::option::of(prop::sample::select(
            &["baseline", "restricted", "privileged"][..],
        )),
        optional_bool(),
        prop::option::of(prop::sample::select(&["gvisor", "kata", "kata.qemu"][..])),
    )
        .prop_map(
            |(level, (ingress, egress, dns, intra), hard, enforce, pull, class)| {
                let mut spec = json!({ "level": level });
                let mut network = serde_json::Map::new();
                for (key, value) in [
                    ("defaultDenyIngress", ingress),
                    ("defaultDenyEgress", egress),
                    ("allowDns", dns),
                    ("allowIntraTenant", intra),
                ] {
                    if let Some(v) = value {
                        network.insert(key.into(), json!(v));
                    }
                }
                spec["network"] = Value::Object(network);
                spec["resourceQuota"] = json!({ "hard": hard });
                if let Some(enforce) = enforce {
                    spec["podSecurity"] = json!({ "enforce": enforce });
                }
                if let Some(pull) = pull {
                    spec["imagePullPolicy"] = json!({ "requireAlways": pull });
                }
                if let Some(class) = class {
                    spec["runtimeClass"] = json!({ "required": class });
                }
                spec
            },
        )
}

fn profile(spec: &Value, generation: i64) -> IsolationProfile {
    decode(&json!({
        "apiVersion": "tenantplane.io/v1alpha1",
        "kind": "IsolationProfile",
        "metadata": { "name": "generated", "generation": generation },
        "spec": spec,
    }))
    .expect("generated profiles are well-formed")
}

fn run(spec: &Value) -> Result<Compilation, CompileError> {
    compile(&common::tenant(), &profile(spec, 3))
}

fn find<'a>(
    c: &'a Compilation,
    kind: &str,
    name: &str,
) -> Option<&'a tenantplane_isolation::CompiledObject> {
    c.objects
        .iter()
        .find(|o| o.object["kind"] == kind && o.object["metadata"]["name"] == name)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn same_input_gives_byte_identical_output(spec in spec()) {
        let first = run(&spec);
        let second = run(&spec);
        prop_assert_eq!(&first, &second);
        if let (Ok(a), Ok(b)) = (first, second) {
            prop_assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
            let refs = a.refs();
            let mut unique = refs.clone();
            unique.sort();
            unique.dedup();
            prop_assert_eq!(unique.len(), refs.len(), "object identities are unique");
        }
    }

    #[test]
    fn an_override_wins_over_its_level_and_is_recorded(spec in spec()) {
        // Overrides may contradict a level's values (quota vs limit range): then the refusal
        // names an override field, never the level.
        let compilation = match run(&spec) {
            Ok(c) => c,
            Err(e) => {
                prop_assert!(e.field.starts_with("spec.") && e.field != "spec.level", "{}", e);
                return Ok(());
            }
        };
        let quota = find(&compilation, "ResourceQuota", "tenantplane-quota").expect("every level has a quota");
        for (resource, value) in spec["resourceQuota"]["hard"].as_object().unwrap() {
            prop_assert_eq!(&quota.object["spec"]["hard"][resource], value);
            let field = format!("spec.resourceQuota.hard[{resource}]");
            prop_assert!(quota.provenance.field_paths.contains(&field));
        }
        let namespace = &compilation.objects[0];
        if let Some(enforce) = spec.pointer("/podSecurity/enforce") {
            prop_assert_eq!(&namespace.object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], enforce);
            prop_assert!(namespace.provenance.field_paths.contains(&"spec.podSecurity.enforce".to_string()));
        }
        let runtime_class = find(&compilation, "ValidatingAdmissionPolicy", "tenantplane-acme-runtime-class");
        match spec.pointer("/runtimeClass/required") {
            Some(class) => {
                let vap = runtime_class.expect("a required class compiles a policy");
                let expression = vap.object["spec"]["validations"][0]["expression"].as_str().unwrap();
                let wanted = format!("== '{}'", class.as_str().unwrap());
                prop_assert!(expression.ends_with(&wanted), "{} in {}", wanted, expression);
                prop_assert_eq!(&vap.provenance.field_paths, &vec!["spec.runtimeClass.required".to_string()]);
            }
            None => prop_assert_eq!(runtime_class.is_some(), spec["level"] == "strict"),
        }
        if let Some(pull) = spec.pointer("/imagePullPolicy/requireAlways") {
            let vap = find(&compilation, "ValidatingAdmissionPolicy", "tenantplane-acme-image-pull-always");
            prop_assert_eq!(vap.is_some(), pull.as_bool().unwrap());
        }
        let deny = find(&compilation, "NetworkPolicy", "tenantplane-default-deny");
        let types: Vec<&str> = deny
            .map(|d| d.object["spec"]["policyTypes"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect())
            .unwrap_or_default();
        let effective = |key: &str, level_value: bool| {
            spec["network"].get(key).map_or(level_value, |v| v.as_bool().unwrap())
        };
        prop_assert_eq!(types.contains(&"Ingress"), effective("defaultDenyIngress", true));
        prop_assert_eq!(types.contains(&"Egress"), effective("defaultDenyEgress", spec["level"] != "baseline"));
        let dns = find(&compilation, "NetworkPolicy", "tenantplane-allow-dns").is_some();
        prop_assert_eq!(dns, types.contains(&"Egress") && effective("allowDns", true));
    }

    #[test]
    fn the_generation_is_recorded_and_changes_nothing_else(spec in spec(), generation in 0i64..1_000_000) {
        let at = |g| compile(&common::tenant(), &profile(&spec, g));
        if let (Ok(a), Ok(b)) = (at(generation), at(generation + 1)) {
            prop_assert_eq!(a.refs(), b.refs());
            prop_assert!(b.prune(&a.refs()).is_empty());
            for o in &b.objects {
                prop_assert_eq!(o.provenance.generation, generation + 1);
            }
        }
    }
}
