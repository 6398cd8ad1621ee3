//! Object names as kube-apiserver validates them on create: each kind has a
//! name rule (looked up by group and kind, DNS-1123 subdomain unless the
//! kind says otherwise), applied to `metadata.name` and to
//! `metadata.generateName` as a prefix, with the messages and field causes of
//! apimachinery's `ValidateObjectMeta`. Names are generated from
//! `generateName` the way the API server's `SimpleNameGenerator` does.

use crate::storage::error::Cause;
use crate::storage::resources::ResourceType;

/// How a kind's names are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain, at most 253 characters (`NameIsDNSSubdomain`):
    /// most kinds, custom resources included.
    Dns1123Subdomain,
    /// RFC 1123 label, at most 63 characters (`NameIsDNSLabel`): Namespace,
    /// StatefulSet, and Service (Kubernetes 1.36 turns
    /// `RelaxedServiceNameValidation` on by default; earlier releases ask a
    /// DNS-1035 label, which also refuses a leading digit).
    Dns1123Label,
    /// An RFC 1123 subdomain of at most 52 characters (CronJob: the Jobs it
    /// creates add an 11-character suffix).
    CronJob,
    /// Only what a URL path segment needs (no `/` or `%`, not `.` or `..`):
    /// RBAC kinds, core/v1 Events and PodDisruptionBudgets, whose strategies
    /// validate no name rule of their own.
    PathSegment,
}

/// The name rule of a kind; kinds not listed use an RFC 1123 subdomain.
pub fn rule_for(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace" | "Service") | ("apps", "StatefulSet") => NameRule::Dns1123Label,
        ("", "Event")
        | ("policy", "PodDisruptionBudget")
        | (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        ) => NameRule::PathSegment,
        ("batch", "CronJob") => NameRule::CronJob,
        _ => NameRule::Dns1123Subdomain,
    }
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `RegexError`.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{format}')",
        examples.join(" or ")
    )
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

fn is_subdomain(value: &str) -> bool {
    value.split('.').all(is_label)
}

/// `IsDNS1123Label`.
pub fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !is_label(value) {
        if is_subdomain(value) {
            errors.push("must not contain dots".to_string());
        } else {
            errors.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errors
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push(max_len_error(253));
    }
    if !is_subdomain(value) {
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errors
}

/// `IsPathSegmentName` (or `IsPathSegmentPrefix` for a prefix).
fn path_segment_errors(value: &str, prefix: bool) -> Vec<String> {
    if !prefix && (value == "." || value == "..") {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|illegal| value.contains(*illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// apimachinery's `maskTrailingDash`: a generateName may end in '-'.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        // As the Go code does: the last two bytes become "a".
        format!("{}a", &name[..name.len() - 2])
    } else {
        name.to_string()
    }
}

impl NameRule {
    /// Why `name` breaks the rule (empty when it does not); `prefix` for a
    /// generateName, which may end in '-'.
    pub fn errors(self, name: &str, prefix: bool) -> Vec<String> {
        let masked;
        let name = if prefix && self != Self::PathSegment {
            masked = mask_trailing_dash(name);
            masked.as_str()
        } else {
            name
        };
        match self {
            Self::Dns1123Subdomain | Self::CronJob => dns1123_subdomain_errors(name),
            Self::Dns1123Label => dns1123_label_errors(name),
            // RBAC checks a generateName as a full name; the generic check a
            // prefix. Both refuse '/' and '%'.
            Self::PathSegment => path_segment_errors(name, false),
        }
    }
}

/// Largest generateName prefix kept before the random suffix
/// (`maxGeneratedNameLength`: 63 less the 5 random characters).
const MAX_GENERATED_PREFIX: usize = 58;

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A name generated from a generateName: the prefix (cut to 58 bytes) and
/// five random characters from the API server's alphabet.
pub fn generate(prefix: &str) -> String {
    let mut end = prefix.len().min(MAX_GENERATED_PREFIX);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    let suffix: String = uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect();
    format!("{}{suffix}", &prefix[..end])
}

/// The `metadata.name` / `metadata.generateName` causes of a create, as the
/// kind's validation reports them (generateName first, then the name, which
/// is already generated when only generateName was given).
pub fn create_causes(rt: &ResourceType, name: &str, generate_name: Option<&str>) -> Vec<Cause> {
    rule_causes(rule_for(&rt.group, &rt.kind), name, generate_name)
}

/// [`create_causes`] for an explicit rule.
pub fn rule_causes(rule: NameRule, name: &str, generate_name: Option<&str>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(prefix) = generate_name.filter(|p| !p.is_empty()) {
        for message in rule.errors(prefix, true) {
            causes.push(Cause::invalid("metadata.generateName", prefix, &message));
        }
    }
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
        return causes;
    }
    for message in rule.errors(name, false) {
        causes.push(Cause::invalid("metadata.name", name, &message));
    }
    if rule == NameRule::CronJob && name.len() > 52 {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "must be no more than 52 characters",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_by_group_and_kind() {
        assert_eq!(rule_for("", "Namespace"), NameRule::Dns1123Label);
        assert_eq!(rule_for("", "Service"), NameRule::Dns1123Label);
        assert_eq!(rule_for("", "ConfigMap"), NameRule::Dns1123Subdomain);
        assert_eq!(rule_for("", "Event"), NameRule::PathSegment);
        assert_eq!(
            rule_for("events.k8s.io", "Event"),
            NameRule::Dns1123Subdomain
        );
        assert_eq!(
            rule_for("rbac.authorization.k8s.io", "ClusterRole"),
            NameRule::PathSegment
        );
        assert_eq!(rule_for("apps", "Deployment"), NameRule::Dns1123Subdomain);
        assert_eq!(rule_for("apps", "StatefulSet"), NameRule::Dns1123Label);
        assert_eq!(rule_for("batch", "CronJob"), NameRule::CronJob);
        assert_eq!(
            rule_for("widgets.example.com", "Widget"),
            NameRule::Dns1123Subdomain
        );
    }

    #[test]
    fn messages_are_apimachinery_messages() {
        assert_eq!(
            dns1123_label_errors("api.v2"),
            vec!["must not contain dots"]
        );
        assert_eq!(
            dns1123_label_errors("Api"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(
            dns1123_subdomain_errors("Not_Valid"),
            vec![
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(
            dns1123_label_errors(&"a".repeat(64)),
            vec![max_len_error(63)]
        );
        assert!(dns1123_subdomain_errors("a.b-c.d1").is_empty());
        assert_eq!(
            NameRule::PathSegment.errors("a/b%c", false),
            vec!["may not contain '/'", "may not contain '%'"]
        );
        assert_eq!(
            NameRule::PathSegment.errors("..", false),
            vec!["may not be '..'"]
        );
        assert!(
            NameRule::PathSegment
                .errors("Any_Thing:1", false)
                .is_empty()
        );
    }

    #[test]
    fn generate_name_is_a_prefix() {
        assert!(NameRule::Dns1123Label.errors("web-", true).is_empty());
        assert!(!NameRule::Dns1123Label.errors("web-", false).is_empty());
        let causes = rule_causes(NameRule::Dns1123Subdomain, "Bad_x2b4c", Some("Bad_"));
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["metadata.generateName", "metadata.name"]);
        let generated = generate(&"x".repeat(70));
        assert_eq!(generated.len(), 63);
        assert!(generated.starts_with(&"x".repeat(58)));
    }

    #[test]
    fn cron_jobs_are_at_most_52_characters() {
        let causes = rule_causes(NameRule::CronJob, &"c".repeat(53), None);
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0]
                .message
                .ends_with("must be no more than 52 characters")
        );
    }
}
