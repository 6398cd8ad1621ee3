//! Reading the CLI's inputs: files, directories and stdin, as Kubernetes documents.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::de::DeserializeOwned;
use tenantplane_core::documents::{self, Origin};

use crate::commands::explain_sync::InputError;

/// Output formats shared by the commands that print records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// JSON for tools.
    Json,
    /// YAML for tools and people.
    Yaml,
}

/// The text of a file, or of stdin for `-`.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Reads exactly one resource of type `T` from a file.
pub fn read_resource<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = read_text(path)?;
    serde_norway::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid {}",
            path.display(),
            short_type_name::<T>()
        )
    })
}

fn short_type_name<T>() -> &'static str {
    std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("resource")
}

/// One input: a file, or stdin (`-`), with its text.
#[derive(Debug)]
pub struct Input {
    /// The path as given, or `-`.
    pub source: String,
    /// The whole text.
    pub text: String,
}

/// Every input under `paths` (directories walked in sorted order for .yaml, .yml, .json), in
/// order; unreadable paths are an error.
pub fn read_inputs(paths: &[PathBuf]) -> anyhow::Result<Vec<Input>> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    files
        .into_iter()
        .map(|file| {
            Ok(Input {
                text: read_text(&file)?,
                source: file.display().to_string(),
            })
        })
        .collect()
}

/// Every document under `paths` ([`read_inputs`]), in order, each with its origin; unreadable
/// paths are an error, bad documents are not.
pub fn read_documents(
    paths: &[PathBuf],
) -> anyhow::Result<Vec<(Origin, Result<serde_json::Value, InputError>)>> {
    let mut out = Vec::new();
    for input in read_inputs(paths)? {
        for doc in documents::parse(&input.source, &input.text) {
            out.push(match doc {
                Ok(d) => (d.origin, Ok(d.value)),
                Err(e) => (e.origin.clone(), Err(InputError::from(e))),
            });
        }
    }
    Ok(out)
}

fn collect_files(path: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if path.as_os_str() == "-" || !path.is_dir() {
        if path.as_os_str() != "-" && !path.exists() {
            anyhow::bail!("{}: no such file or directory", path.display());
        }
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading directory {}", path.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading directory {}", path.display()))?;
    entries.sort();
    for entry in entries {
        let is_manifest = entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if entry.is_dir() || is_manifest {
            collect_files(&entry, files)?;
        }
    }
    Ok(())
}
