//! Compiles every `.proto` file under the workspace's `proto/` directory with protox (a protobuf
//! compiler in pure Rust, so nobody needs protoc) and generates prost messages plus tonic clients
//! and servers. A new API package only needs its `.proto` file: the module tree is generated too.

use std::path::{Path, PathBuf};
use std::{env, fs, io};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let root = root.canonicalize()?;
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect_protos(&root, &mut files)?;
    files.sort();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    let mut compiler = protox::Compiler::new([&root])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(&files)?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("tenantplane_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        // Map fields (a placement's labels and annotations) as BTreeMaps: sorted by key like the
        // core's MetadataMap, so neither side hashes and each converts in key order.
        .btree_map(".")
        .include_file("tenantplane.rs")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}

/// Every `.proto` file below `dir`, recursively.
fn collect_protos(dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect_protos(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            files.push(path);
        }
    }
    Ok(())
}
