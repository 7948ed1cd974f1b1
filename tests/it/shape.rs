//! Issue 33: the code's size, counted. stq-core's front door stays small (at most
//! [`PUB_ITEMS`] items declared `pub`), no source file is longer than
//! [`FILE_LINES`] lines and no function longer than [`FUNCTION_LINES`].
//!
//! Read from the source with syn, module by module as `imports` finds them, so
//! test code (`#[cfg(test)]` modules, whether inline or in files of their own, and
//! `#[cfg(test)]` items) is left out. What a module's tests need is the tests'
//! business; what production code holds is not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

use crate::imports::{is_test_only, modules};

/// stq-core's items declared `pub`, at most: module-level items, `pub mod`, each
/// name a `pub use` exports (once: a re-export of an item declared `pub` in a
/// module of its own is that item), and the functions and constants of `impl`
/// blocks (not fields, not variants, not a trait's methods, which are as public
/// as it). Every item only stq-core uses is `pub(crate)`. A module the service
/// names only types of is private and its layer re-exports those types; a
/// function that makes or reads a type is that type's (`LoadOptions::start`,
/// `QueryParams::parse`, `Tokens::add`), so `data`'s modules are all private, and
/// `domain`'s but `jwt`, `record` and `time`, whose functions belong to no one
/// type. What is left is what the service, benches, example, fuzz targets and
/// tests name and the types their signatures reach: the domain (tokens and `stq
/// token`'s edits of the tokens file, a JSON Web Token's shape, header and
/// claims, the query string and the endpoint table, times, records and their
/// checks), loading (a process's first generation, a reload, the `--watch-poll`
/// looks, what a reload added to each station), the store's writer and the
/// files an `s3://` store's mirror needs, a generation and its catalog and
/// shards, the block cache's bound and figures, and the plan: a request, its
/// questions to the shards and their answers, the answer's writing, and a
/// stream, which plans its own events; a store file's fault while serving and
/// the stations it asks to read again. The aim is 100 (issue 50); the count is
/// what the code holds, so that an item added is an item counted.
const PUB_ITEMS: usize = 128;
/// A source file's lines, at most, once its inline `#[cfg(test)] mod tests` is
/// left out.
const FILE_LINES: usize = 1_200;
/// A function's lines, at most, from `fn` to its closing brace.
const FUNCTION_LINES: usize = 120;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The root files of every crate's production code: the service's library and
/// binary, each library under `crates/`, and xtask.
fn production_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut roots = vec![
        workspace.join("src/lib.rs"),
        workspace.join("src/main.rs"),
        workspace.join("xtask/src/main.rs"),
    ];
    let mut packages: Vec<PathBuf> = std::fs::read_dir(workspace.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    packages.sort();
    for package in packages {
        for root in ["src/lib.rs", "src/main.rs"] {
            let path = package.join(root);
            if path.exists() {
                roots.push(path);
            }
        }
    }
    roots
}

fn shown(workspace: &Path, file: &Path) -> String {
    file.strip_prefix(workspace)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// The names a `pub use` tree exports; a glob counts once.
fn exported_names(tree: &syn::UseTree, names: &mut Vec<String>) {
    match tree {
        syn::UseTree::Path(path) => exported_names(&path.tree, names),
        syn::UseTree::Name(name) => names.push(name.ident.to_string()),
        syn::UseTree::Rename(rename) => names.push(rename.rename.to_string()),
        syn::UseTree::Glob(_) => names.push("*".to_owned()),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                exported_names(tree, names);
            }
        }
    }
}

/// Every item of stq-core's production code declared `pub`, each as
/// `file: kind name`.
fn public_items(workspace: &Path) -> Vec<String> {
    let public = |visibility: &syn::Visibility| matches!(visibility, syn::Visibility::Public(_));
    let mut found = Vec::new();
    for module in modules(&workspace.join("crates/stq-core/src/lib.rs")) {
        let file = shown(workspace, &module.file);
        let mut add = |kind: &str, name: String| found.push(format!("{file}: {kind} {name}"));
        for item in &module.items {
            let (visibility, kind, name) = match item {
                syn::Item::Const(item) => (&item.vis, "const", item.ident.to_string()),
                syn::Item::Enum(item) => (&item.vis, "enum", item.ident.to_string()),
                syn::Item::Fn(item) => (&item.vis, "fn", item.sig.ident.to_string()),
                syn::Item::Mod(item) => (&item.vis, "mod", item.ident.to_string()),
                syn::Item::Static(item) => (&item.vis, "static", item.ident.to_string()),
                syn::Item::Struct(item) => (&item.vis, "struct", item.ident.to_string()),
                syn::Item::Trait(item) => (&item.vis, "trait", item.ident.to_string()),
                syn::Item::Type(item) => (&item.vis, "type", item.ident.to_string()),
                syn::Item::Union(item) => (&item.vis, "union", item.ident.to_string()),
                syn::Item::Use(item) if public(&item.vis) && !is_test_only(&item.attrs) => {
                    let mut names = Vec::new();
                    exported_names(&item.tree, &mut names);
                    for name in names {
                        add("use", name);
                    }
                    continue;
                }
                syn::Item::Impl(block) if !is_test_only(&block.attrs) => {
                    let owner = match &*block.self_ty {
                        syn::Type::Path(path) => {
                            path.path.segments.last().unwrap().ident.to_string()
                        }
                        _ => "_".to_owned(),
                    };
                    for member in &block.items {
                        let (visibility, kind, name, attributes) = match member {
                            syn::ImplItem::Fn(member) => {
                                (&member.vis, "fn", &member.sig.ident, &member.attrs)
                            }
                            syn::ImplItem::Const(member) => {
                                (&member.vis, "const", &member.ident, &member.attrs)
                            }
                            syn::ImplItem::Type(member) => {
                                (&member.vis, "type", &member.ident, &member.attrs)
                            }
                            _ => continue,
                        };
                        if public(visibility) && !is_test_only(attributes) {
                            add(kind, format!("{owner}::{name}"));
                        }
                    }
                    continue;
                }
                _ => continue,
            };
            let attributes = match item {
                syn::Item::Const(item) => &item.attrs,
                syn::Item::Enum(item) => &item.attrs,
                syn::Item::Fn(item) => &item.attrs,
                syn::Item::Mod(item) => &item.attrs,
                syn::Item::Static(item) => &item.attrs,
                syn::Item::Struct(item) => &item.attrs,
                syn::Item::Trait(item) => &item.attrs,
                syn::Item::Type(item) => &item.attrs,
                syn::Item::Union(item) => &item.attrs,
                _ => unreachable!("matched above"),
            };
            if public(visibility) && !is_test_only(attributes) {
                add(kind, name);
            }
        }
    }
    // A `pub use` of an item declared `pub` in a module of its own is that item
    // again, at a shorter path: counted once.
    let declared: std::collections::BTreeSet<String> = (found.iter())
        .filter(|item| !item.contains(": use "))
        .filter_map(|item| Some(item.rsplit_once(' ')?.1.to_owned()))
        .collect();
    found.retain(|item| match item.split_once(": use ") {
        Some((_, name)) => !declared.contains(name),
        None => true,
    });
    found
}

/// The lines an inline module spans, its attributes (and doc comments) included.
fn lines_of(module: &syn::ItemMod) -> Option<(usize, usize)> {
    let (braces, _) = module.content.as_ref()?;
    let first = module
        .attrs
        .iter()
        .map(|attribute| attribute.pound_token.span.start().line)
        .chain([module.mod_token.span.start().line])
        .min()?;
    Some((first, braces.span.close().end().line))
}

/// Every production source file with its lines, an inline `#[cfg(test)] mod`
/// (attributes and all) left out.
fn production_files(workspace: &Path) -> BTreeMap<PathBuf, usize> {
    let mut files = BTreeMap::new();
    for root in production_roots(workspace) {
        for module in modules(&root) {
            // An inline module is read as a module of its own, from its parent's
            // file: a file's lines are counted once, from its top level, which is
            // read first.
            if files.contains_key(&module.file) {
                continue;
            }
            let text = std::fs::read_to_string(&module.file).unwrap();
            let mut lines = text.lines().count();
            for item in &module.items {
                if let syn::Item::Mod(inline) = item {
                    if let Some((first, last)) = lines_of(inline) {
                        if is_test_only(&inline.attrs) {
                            lines -= last + 1 - first;
                        }
                    }
                }
            }
            files.insert(module.file.clone(), lines);
        }
    }
    files
}

/// Every production function, free or associated or a trait's default, with its
/// length: from `fn` to its closing brace.
#[derive(Default)]
struct Functions {
    file: String,
    /// `file: name` -> lines.
    lengths: Vec<(String, usize)>,
    owner: Vec<String>,
}

impl Functions {
    fn add(&mut self, signature: &syn::Signature, body: &syn::Block) {
        let lines =
            body.brace_token.span.close().end().line + 1 - signature.fn_token.span.start().line;
        let name = &signature.ident;
        let owner = self
            .owner
            .last()
            .map_or(String::new(), |owner| format!("{owner}::"));
        self.lengths
            .push((format!("{}: {owner}{name}", self.file), lines));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        match item {
            // Modules are read as modules of their own.
            syn::Item::Mod(_) => {}
            syn::Item::Fn(function) if !is_test_only(&function.attrs) => {
                self.add(&function.sig, &function.block);
            }
            syn::Item::Impl(block) if !is_test_only(&block.attrs) => {
                let owner = match &*block.self_ty {
                    syn::Type::Path(path) => path.path.segments.last().unwrap().ident.to_string(),
                    _ => "_".to_owned(),
                };
                self.owner.push(owner);
                syn::visit::visit_item_impl(self, block);
                self.owner.pop();
            }
            syn::Item::Trait(block) if !is_test_only(&block.attrs) => {
                self.owner.push(block.ident.to_string());
                syn::visit::visit_item_trait(self, block);
                self.owner.pop();
            }
            _ => {}
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if !is_test_only(&function.attrs) {
            self.add(&function.sig, &function.block);
        }
    }

    fn visit_trait_item_fn(&mut self, function: &'ast syn::TraitItemFn) {
        if let Some(body) = &function.default {
            if !is_test_only(&function.attrs) {
                self.add(&function.sig, body);
            }
        }
    }
}

fn function_lengths(workspace: &Path) -> Vec<(String, usize)> {
    let mut functions = Functions::default();
    for root in production_roots(workspace) {
        for module in modules(&root) {
            functions.file = shown(workspace, &module.file);
            for item in &module.items {
                functions.visit_item(item);
            }
        }
    }
    functions.lengths
}

#[test]
fn issue_33_stq_core_declares_few_pub_items() {
    let items = public_items(workspace());
    assert!(
        items.len() <= PUB_ITEMS,
        "stq-core declares {} items `pub`, more than {PUB_ITEMS}:\n{}",
        items.len(),
        items.join("\n")
    );
}

#[test]
fn issue_33_no_source_file_is_longer_than_1200_lines() {
    let long: Vec<String> = production_files(workspace())
        .into_iter()
        .filter(|(_, lines)| *lines > FILE_LINES)
        .map(|(file, lines)| format!("{}: {lines} lines", shown(workspace(), &file)))
        .collect();
    assert!(
        long.is_empty(),
        "files longer than {FILE_LINES} lines (tests aside):\n{}",
        long.join("\n")
    );
}

#[test]
fn issue_33_no_function_is_longer_than_120_lines() {
    let long: Vec<String> = function_lengths(workspace())
        .into_iter()
        .filter(|(_, lines)| *lines > FUNCTION_LINES)
        .map(|(function, lines)| format!("{function}: {lines} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "functions longer than {FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The reading finds what it must, so that the tests above cannot pass by reading
/// nothing: items of each kind, files of every crate, functions long and short.
#[test]
fn issue_33_the_shape_reading_sees_items_files_and_functions() {
    let items = public_items(workspace());
    for expected in [
        "crates/stq-core/src/lib.rs: mod data",
        "crates/stq-core/src/data/catalog.rs: struct Catalog",
        "crates/stq-core/src/data/catalog.rs: fn Catalog::stations",
    ] {
        assert!(items.iter().any(|item| item == expected), "{expected}");
    }
    let files = production_files(workspace());
    for expected in [
        "src/main.rs",
        "src/http/mod.rs",
        "crates/stq-core/src/data/catalog.rs",
        "crates/stq-gen/src/lib.rs",
        "xtask/src/main.rs",
    ] {
        assert!(
            files.contains_key(&workspace().join(expected)),
            "{expected}"
        );
    }
    assert!(
        !files.keys().any(|file| file.ends_with("tests.rs")),
        "a test file was read as production code"
    );
    let functions: BTreeMap<String, usize> = function_lengths(workspace()).into_iter().collect();
    assert!(functions.len() > 500, "{}", functions.len());
    assert!(functions.contains_key("src/main.rs: main"));
    assert!(functions.contains_key("crates/stq-core/src/data/catalog.rs: Catalog::stations"));
}

/// ARCHITECTURE.md's bytes, at most: a map is read whole or not at all.
const ARCHITECTURE_BYTES: usize = 12_000;

/// BENCHMARKS.md's lines, at most: today's figures, not a diary of how they came.
const BENCHMARKS_LINES: usize = 600;

#[test]
fn issue_50_benchmarks_md_stays_a_document_of_the_present() {
    let text = std::fs::read_to_string(workspace().join("BENCHMARKS.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= BENCHMARKS_LINES,
        "BENCHMARKS.md is {lines} lines, more than {BENCHMARKS_LINES}"
    );
    // Its headings name areas, not the step of the work or the day they came in.
    for heading in text.lines().filter(|line| line.starts_with('#')) {
        let dated = heading.split_whitespace().any(|word| {
            let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-');
            word.len() == 10 && word.starts_with("20") && word.as_bytes()[4] == b'-'
        });
        assert!(!dated, "BENCHMARKS.md heading with a date: {heading}");
        assert!(
            !heading.to_lowercase().contains("issue"),
            "BENCHMARKS.md heading naming an issue: {heading}"
        );
    }
}

#[test]
fn issue_33_architecture_md_is_short_and_its_crates_exist() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    assert!(
        text.len() <= ARCHITECTURE_BYTES,
        "ARCHITECTURE.md is {} bytes, more than {ARCHITECTURE_BYTES}",
        text.len()
    );
    // Every crate of the workspace is on the map, and every crate the map gives a
    // section is there.
    let mut packages: Vec<String> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    packages.sort();
    for package in &packages {
        assert!(
            text.contains(package.as_str()),
            "ARCHITECTURE.md does not name crates/{package}"
        );
    }
    for section in text
        .lines()
        .filter_map(|line| line.strip_prefix("### `crates/"))
    {
        let package = section.split('`').next().unwrap();
        assert!(
            packages.iter().any(|known| known == package),
            "ARCHITECTURE.md maps crates/{package}, which is not there"
        );
    }
}
