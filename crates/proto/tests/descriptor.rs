//! The generated code and the descriptor set cover every API package under proto/.

use prost::Message;
use prost_types::FileDescriptorSet;

#[test]
fn descriptor_set_holds_every_service_and_its_imports() {
    let set = FileDescriptorSet::decode(tenantplane_proto::FILE_DESCRIPTOR_SET).unwrap();
    let files: Vec<_> = set.file.iter().map(|f| f.name()).collect();
    for expected in [
        "google/protobuf/timestamp.proto",
        "tenantplane/types/v1/types.proto",
        "tenantplane/planner/v1/planner.proto",
        "tenantplane/isolation/v1/isolation.proto",
    ] {
        assert!(
            files.contains(&expected),
            "{expected} missing from {files:?}"
        );
    }
    let services: Vec<_> = set
        .file
        .iter()
        .flat_map(|f| {
            f.service
                .iter()
                .map(move |s| format!("{}.{}", f.package(), s.name()))
        })
        .collect();
    assert!(services.contains(&"tenantplane.planner.v1.Planner".to_string()));
    assert!(services.contains(&"tenantplane.isolation.v1.IsolationCompiler".to_string()));
}

#[test]
fn a_servers_set_holds_its_services_files_and_their_imports_only() {
    let files = |services: &[&str]| -> Vec<String> {
        let set = tenantplane_proto::file_descriptor_set_of(services);
        let set = FileDescriptorSet::decode(set.as_slice()).unwrap();
        let mut names: Vec<String> = set.file.iter().map(|f| f.name().to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(
        files(&["tenantplane.planner.v1.Planner"]),
        [
            "google/protobuf/timestamp.proto",
            "tenantplane/planner/v1/planner.proto",
            "tenantplane/types/v1/types.proto",
        ]
    );
    assert_eq!(
        files(&["tenantplane.decisions.v1.DecisionLog"]),
        [
            "google/protobuf/timestamp.proto",
            "tenantplane/decisions/v1/decisions.proto",
            "tenantplane/types/v1/types.proto",
        ]
    );
    assert!(files(&["grpc.health.v1.Health"]).is_empty());
}

#[test]
fn every_enum_starts_with_unspecified() {
    let set = FileDescriptorSet::decode(tenantplane_proto::FILE_DESCRIPTOR_SET).unwrap();
    for file in set
        .file
        .iter()
        .filter(|f| f.package().starts_with("tenantplane."))
    {
        let nested = file.message_type.iter().flat_map(|m| m.enum_type.iter());
        for e in file.enum_type.iter().chain(nested) {
            let zero = e.value.iter().find(|v| v.number() == 0).unwrap();
            assert!(
                zero.name().ends_with("_UNSPECIFIED"),
                "{}.{}: zero value {} is not *_UNSPECIFIED",
                file.package(),
                e.name(),
                zero.name()
            );
        }
    }
}

#[test]
fn every_service_rpc_message_and_field_is_commented() {
    let set = FileDescriptorSet::decode(tenantplane_proto::FILE_DESCRIPTOR_SET).unwrap();
    for file in set
        .file
        .iter()
        .filter(|f| f.package().starts_with("tenantplane."))
    {
        let info = file.source_code_info.as_ref().unwrap();
        let commented = |path: &[i32]| {
            info.location
                .iter()
                .any(|l| l.path == path && !l.leading_comments().trim().is_empty())
        };
        // FileDescriptorProto field numbers: message_type = 4, enum_type = 5, service = 6;
        // DescriptorProto.field = 2, EnumDescriptorProto.value = 2, ServiceDescriptorProto.method = 2.
        for (i, m) in file.message_type.iter().enumerate() {
            let i = i as i32;
            assert!(commented(&[4, i]), "{}: message {}", file.name(), m.name());
            for (j, f) in m.field.iter().enumerate() {
                assert!(
                    commented(&[4, i, 2, j as i32]),
                    "{}: field {}.{}",
                    file.name(),
                    m.name(),
                    f.name()
                );
            }
        }
        for (i, e) in file.enum_type.iter().enumerate() {
            let i = i as i32;
            assert!(commented(&[5, i]), "{}: enum {}", file.name(), e.name());
            for (j, v) in e.value.iter().enumerate() {
                assert!(
                    commented(&[5, i, 2, j as i32]),
                    "{}: {}",
                    file.name(),
                    v.name()
                );
            }
        }
        for (i, s) in file.service.iter().enumerate() {
            let i = i as i32;
            assert!(commented(&[6, i]), "{}: service {}", file.name(), s.name());
            for (j, m) in s.method.iter().enumerate() {
                assert!(
                    commented(&[6, i, 2, j as i32]),
                    "{}: rpc {}",
                    file.name(),
                    m.name()
                );
            }
        }
    }
}
