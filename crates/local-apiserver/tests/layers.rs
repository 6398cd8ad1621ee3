//! The crate's modules are layers (`src/lib.rs` draws them): a module may use modules of its
//! own layer and of the layers below, never one above, and no modules import each other in a
//! circle. Read from the source: every `crate::` path (and `super::` path) of every file under
//! `src/<layer>/`, test modules' `crate::` paths included for the layer rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. The files at the top of `src/` (`lib.rs`, `process.rs`) sit above them all.
const LAYERS: [&str; 5] = ["storage", "cel", "crd", "admission", "http"];

/// A module: its layer and file stem (`storage`, `store`).
type Module = (String, String);

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == layer)
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The code of a file without comments (`//` to the end of the line).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code before the file's unit tests, and the tests.
fn split_tests(code: &str) -> (&str, &str) {
    match code.find("#[cfg(test)]") {
        Some(at) => code.split_at(at),
        None => (code, ""),
    }
}

/// Reads a path tree after `crate::` at `at`: `a::b::c`, `a::{b, c::{d, e}}`, `a::b::{self, c}`;
/// each path's segments, `self` and renames left out.
fn path_trees(code: &[u8], mut at: usize) -> Vec<Vec<String>> {
    fn skip_space(code: &[u8], at: &mut usize) {
        while *at < code.len() && code[*at].is_ascii_whitespace() {
            *at += 1;
        }
    }
    fn ident(code: &[u8], at: &mut usize) -> String {
        let start = *at;
        while *at < code.len() && (code[*at].is_ascii_alphanumeric() || code[*at] == b'_') {
            *at += 1;
        }
        String::from_utf8_lossy(&code[start..*at]).into_owned()
    }
    fn tree(code: &[u8], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        skip_space(code, at);
        if code.get(*at) == Some(&b'{') {
            *at += 1;
            loop {
                skip_space(code, at);
                match code.get(*at) {
                    Some(b'}') => {
                        *at += 1;
                        return;
                    }
                    Some(b',') => *at += 1,
                    Some(_) => {
                        let before = *at;
                        tree(code, at, prefix, out);
                        // `as name` and anything unexpected: skip to the next item.
                        while *at < code.len() && !matches!(code[*at], b',' | b'}') {
                            *at += 1;
                        }
                        if *at == before {
                            *at += 1;
                        }
                    }
                    None => return,
                }
            }
        }
        let segment = ident(code, at);
        let mut path = prefix.to_vec();
        if !segment.is_empty() && segment != "self" {
            path.push(segment);
        }
        if code[*at..].starts_with(b"::") {
            *at += 2;
            tree(code, at, &path, out);
        } else {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    tree(code, &mut at, &[], &mut out);
    out
}

/// The modules a piece of code names through `crate::` (and, for a file of `layer`,
/// `super::`), with what each reference reads (for messages).
fn references(code: &str, layer: &str, follow_super: bool) -> Vec<(Module, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut prefixes = vec![("crate::", Vec::new())];
    if follow_super {
        prefixes.push(("super::", vec![layer.to_string()]));
    }
    for (prefix, base) in prefixes {
        for (at, _) in code.match_indices(prefix) {
            let preceded =
                at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
            if preceded || (prefix == "super::" && code[..at].ends_with("super::")) {
                continue;
            }
            for tail in path_trees(bytes, at + prefix.len()) {
                let mut path = base.clone();
                path.extend(tail);
                let text = format!("crate::{}", path.join("::"));
                let module = match path.as_slice() {
                    [layer, module, ..] if rank(layer).is_some() => (layer.clone(), module.clone()),
                    [layer] if rank(layer).is_some() => (layer.clone(), "mod".to_string()),
                    // Anything else of the crate is at its top: above every layer.
                    _ => ("lib".to_string(), path.first().cloned().unwrap_or_default()),
                };
                found.push((module, text));
            }
        }
    }
    found
}

struct Source {
    module: Module,
    path: PathBuf,
    code: String,
}

fn layered_sources() -> Vec<Source> {
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let layer = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            rank(&layer).is_some(),
            "src/{layer}/ is not a layer of tests/layers.rs: add it to LAYERS (and to the \
             picture in src/lib.rs) where it belongs"
        );
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            assert!(
                path.extension().is_some_and(|e| e == "rs"),
                "{}: layers hold files, not directories",
                path.display()
            );
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let code = without_comments(&std::fs::read_to_string(&path).unwrap());
            sources.push(Source {
                module: (layer.clone(), stem),
                path,
                code,
            });
        }
    }
    sources.sort_by(|a, b| a.module.cmp(&b.module));
    assert!(
        sources.len() > 20,
        "found only {} layered files",
        sources.len()
    );
    sources
}

#[test]
fn no_module_uses_a_higher_layer() {
    let mut violations = Vec::new();
    for source in layered_sources() {
        let (layer, _) = &source.module;
        let (code, tests) = split_tests(&source.code);
        let used = references(code, layer, true)
            .into_iter()
            .chain(references(tests, layer, false));
        for ((used_layer, _), text) in used {
            if rank(&used_layer).is_none_or(|used| used > rank(layer).unwrap()) {
                violations.push(format!(
                    "{} (layer {layer}) uses {text} (layer {used_layer})",
                    source.path.strip_prefix(src()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "modules that reach up a layer (bottom to top: {LAYERS:?}, then src/lib.rs):\n{}",
        violations.join("\n")
    );
}

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let sources = layered_sources();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for source in &sources {
        let (code, _) = split_tests(&source.code);
        let used = references(code, &source.module.0, true)
            .into_iter()
            .map(|(module, _)| module)
            .filter(|module| *module != source.module && rank(&module.0).is_some());
        edges.entry(source.module.clone()).or_default().extend(used);
    }
    // Depth-first search; a module met again on the current path closes a circle.
    fn visit(
        module: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.clone());
            return Some(circle);
        }
        if !done.insert(module.clone()) {
            return None;
        }
        path.push(module.clone());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in edges.keys() {
        let circle = visit(module, &edges, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "modules that import each other in a circle: {}",
            circle
                .unwrap()
                .iter()
                .map(|(layer, module)| format!("{layer}::{module}"))
                .collect::<Vec<_>>()
                .join(" -> ")
        );
    }
}

/// A layer's `mod.rs` says what the layer is and lists its modules; code lives in the modules,
/// where the checks above see what it uses.
#[test]
fn layer_mod_files_only_declare_modules() {
    for source in layered_sources() {
        if source.module.1 != "mod" {
            continue;
        }
        for line in source.code.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let declaration = line
                .strip_prefix("pub ")
                .unwrap_or(line)
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
                .is_some_and(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            assert!(
                declaration,
                "{}: `{line}` (a layer's mod.rs holds its documentation and `pub mod` lines only)",
                source.path.display()
            );
        }
    }
}

#[test]
fn the_reader_of_paths_reads_grouped_imports() {
    let code = "use crate::storage::{error::{ApiError, Cause}, store::Store};\n\
                use crate::cel::check::{self as cel_check, Ty};\n\
                let x = crate::admission::tokens::ISSUER; use super::names;";
    let found: Vec<String> = references(code, "storage", true)
        .into_iter()
        .map(|((layer, module), _)| format!("{layer}::{module}"))
        .collect();
    assert_eq!(
        found,
        [
            "storage::error",
            "storage::error",
            "storage::store",
            "cel::check",
            "cel::check",
            "admission::tokens",
            "storage::names",
        ]
    );
}
