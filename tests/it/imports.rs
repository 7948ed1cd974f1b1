//! Issue 33: no module of any crate of the workspace uses one that uses it back,
//! directly or through others.
//!
//! Read from the source with syn, by module path: every module of every crate
//! (lib, binaries, benches, this test binary), found from the crate's root file by
//! its `mod` items, and every path it names, in `use` items and in code alike
//! (`crate::`, `super::`, `self::`, a child module's name, or a module a `use`
//! named), resolved to the module it reaches. Test code (`#[cfg(test)]`) is left
//! out: a module's tests may use what they like.
//!
//! A parent may use its children (a `mod.rs` that re-exports or dispatches) and a
//! child its ancestors (`super::Shared`): those uses are not counted. Every other
//! use is, module to module, and no circle may close through them. (Paths inside
//! a macro's arguments are not read.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path below its crate's root; the root is empty.
type Module = Vec<String>;

/// One crate's modules, and the uses between them.
#[derive(Default)]
struct Crate {
    name: String,
    modules: BTreeSet<Module>,
    /// (user, used) -> the first path found that makes it.
    uses: BTreeMap<(Module, Module), String>,
    /// The same, for a module's uses of its ancestors and descendants, which
    /// `uses` leaves out.
    family: BTreeMap<(Module, Module), String>,
}

/// The root files of every crate of the workspace: each package's library,
/// binaries, benches and integration-test binaries.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut packages = vec![workspace.to_owned(), workspace.join("xtask")];
    for entry in std::fs::read_dir(workspace.join("crates")).unwrap() {
        packages.push(entry.unwrap().path());
    }
    let mut roots = Vec::new();
    for package in packages {
        let name = match package == workspace {
            true => "stq".to_owned(),
            false => package.file_name().unwrap().to_string_lossy().into_owned(),
        };
        for root in ["src/lib.rs", "src/main.rs"] {
            let path = package.join(root);
            if path.exists() {
                roots.push((format!("{name} {root}"), path));
            }
        }
        for (directory, inner) in [
            ("src/bin", None),
            ("benches", None),
            ("tests", Some("main.rs")),
        ] {
            let Ok(entries) = std::fs::read_dir(package.join(directory)) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let root = match inner {
                    Some(inner) if path.is_dir() => path.join(inner),
                    _ => path,
                };
                if root.extension().is_some_and(|extension| extension == "rs") && root.exists() {
                    let shown = root.strip_prefix(&package).unwrap().display().to_string();
                    roots.push((format!("{name} {shown}"), root));
                }
            }
        }
    }
    roots
}

pub(crate) fn is_test_only(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        attribute.path().is_ident("cfg")
            && attribute
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// The `#[path = "..."]` of a `mod` item, if it has one.
fn path_attribute(attributes: &[syn::Attribute]) -> Option<String> {
    attributes
        .iter()
        .find_map(|attribute| match &attribute.meta {
            syn::Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(text),
                    ..
                }) => Some(text.value()),
                _ => None,
            },
            _ => None,
        })
}

/// One module's items, where its children's files are, and its path.
pub(crate) struct Found {
    module: Module,
    pub(crate) items: Vec<syn::Item>,
    /// The directory a non-inline child `mod name;` is looked for in.
    children: PathBuf,
    pub(crate) file: PathBuf,
}

/// Every module of the crate at `root`, tests aside, with its items.
pub(crate) fn modules(root: &Path) -> Vec<Found> {
    let parse = |file: &Path| -> Vec<syn::Item> {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|error| panic!("{file:?}: {error}"));
        syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("{file:?}: {error}"))
            .items
    };
    let mut found = Vec::new();
    let mut pending = vec![Found {
        module: Vec::new(),
        items: parse(root),
        children: root.parent().unwrap().to_owned(),
        file: root.to_owned(),
    }];
    while let Some(current) = pending.pop() {
        for item in &current.items {
            let syn::Item::Mod(child) = item else {
                continue;
            };
            if is_test_only(&child.attrs) {
                continue;
            }
            let name = child.ident.to_string();
            let mut module = current.module.clone();
            module.push(name.clone());
            match (&child.content, path_attribute(&child.attrs)) {
                (Some((_, items)), _) => pending.push(Found {
                    module,
                    items: items.clone(),
                    children: current.children.join(&name),
                    file: current.file.clone(),
                }),
                (None, Some(path)) => {
                    let file = current.file.parent().unwrap().join(path);
                    pending.push(Found {
                        module,
                        items: parse(&file),
                        children: file.parent().unwrap().to_owned(),
                        file,
                    });
                }
                (None, None) => {
                    let flat = current.children.join(format!("{name}.rs"));
                    let (file, children) = match flat.exists() {
                        true => (flat, current.children.join(&name)),
                        false => {
                            let folder = current.children.join(&name);
                            (folder.join("mod.rs"), folder)
                        }
                    };
                    pending.push(Found {
                        module,
                        items: parse(&file),
                        children,
                        file,
                    });
                }
            }
        }
        found.push(current);
    }
    found
}

/// The paths one module names, in its `use` items and its code, tests aside.
#[derive(Default)]
struct Paths {
    /// Each as its segments, `use` groups spread out.
    named: Vec<Vec<String>>,
    /// From `use` items: the name each brings in -> the path it stands for.
    used: Vec<(String, Vec<String>)>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attributes = match item {
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            syn::Item::Const(item) => &item.attrs,
            syn::Item::Static(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Enum(item) => &item.attrs,
            syn::Item::Trait(item) => &item.attrs,
            syn::Item::Macro(item) => &item.attrs,
            _ => &Vec::new(),
        };
        // Modules are read as modules of their own.
        if !is_test_only(attributes) && !matches!(item, syn::Item::Mod(_)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(function) = item {
            if is_test_only(&function.attrs) {
                return;
            }
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        fn spread(tree: &syn::UseTree, prefix: &mut Vec<String>, paths: &mut Paths) {
            match tree {
                syn::UseTree::Path(path) => {
                    prefix.push(path.ident.to_string());
                    spread(&path.tree, prefix, paths);
                    prefix.pop();
                }
                syn::UseTree::Name(name) => {
                    let mut path = prefix.clone();
                    let alias = match name.ident == "self" {
                        true => prefix.last().cloned().unwrap_or_default(),
                        false => {
                            path.push(name.ident.to_string());
                            name.ident.to_string()
                        }
                    };
                    paths.used.push((alias, path.clone()));
                    paths.named.push(path);
                }
                syn::UseTree::Rename(rename) => {
                    let mut path = prefix.clone();
                    if rename.ident != "self" {
                        path.push(rename.ident.to_string());
                    }
                    paths.used.push((rename.rename.to_string(), path.clone()));
                    paths.named.push(path);
                }
                syn::UseTree::Glob(_) => paths.named.push(prefix.clone()),
                syn::UseTree::Group(group) => {
                    for tree in &group.items {
                        spread(tree, prefix, paths);
                    }
                }
            }
        }
        spread(&item.tree, &mut Vec::new(), self);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string());
        self.named.push(segments.collect());
        syn::visit::visit_path(self, path);
    }
}

/// `path`, named in `module`, as a path from the crate's root, if it starts in
/// this crate: with `crate`, `self`, `super`, a child module's name, or a name
/// that a `use` gave a module (`aliases`).
fn absolute(
    path: &[String],
    module: &Module,
    aliases: &BTreeMap<String, Module>,
    modules: &BTreeSet<Module>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, mut rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (module.clone(), &path[1..]),
        "super" => (module.clone(), path),
        _ => {
            let mut child = module.clone();
            child.push(first.clone());
            match modules.contains(&child) {
                true => (module.clone(), path),
                false => (aliases.get(first)?.clone(), &path[1..]),
            }
        }
    };
    while rest.first().is_some_and(|segment| segment == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

fn longest_module(path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|length| path[..length].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// One crate's modules and the uses between them.
fn read_crate(name: String, root: &Path) -> Crate {
    let found = modules(root);
    let modules: BTreeSet<Module> = found.iter().map(|found| found.module.clone()).collect();
    let mut read = Crate {
        name,
        modules: modules.clone(),
        uses: BTreeMap::new(),
        family: BTreeMap::new(),
    };
    for Found { module, items, .. } in &found {
        let mut paths = Paths::default();
        for item in items {
            paths.visit_item(item);
        }
        // The modules that `use` items name by a name of their own.
        let mut aliases = BTreeMap::new();
        for (alias, path) in &paths.used {
            let path = absolute(path, module, &BTreeMap::new(), &modules);
            if let Some(target) = path.filter(|path| modules.contains(path)) {
                aliases.insert(alias.clone(), target);
            }
        }
        for named in &paths.named {
            let Some(path) = absolute(named, module, &aliases, &modules) else {
                continue;
            };
            let target = longest_module(&path, &modules).expect("the root is a module");
            // A parent using its child, or a child its ancestor, is counted apart.
            if target == *module {
                continue;
            }
            let uses = match target.starts_with(module) || module.starts_with(&target) {
                true => &mut read.family,
                false => &mut read.uses,
            };
            uses.entry((module.clone(), target))
                .or_insert_with(|| named.join("::"));
        }
    }
    read
}

/// The first circle of uses, each shown with a path that makes it.
fn circle(read: &Crate) -> Option<Vec<String>> {
    let mut uses: BTreeMap<&Module, Vec<&Module>> = BTreeMap::new();
    for (from, to) in read.uses.keys() {
        uses.entry(from).or_default().push(to);
    }
    // Depth-first, keeping the path: a module met again on it closes a circle.
    fn visit<'a>(
        module: &'a Module,
        uses: &BTreeMap<&'a Module, Vec<&'a Module>>,
        path: &mut Vec<&'a Module>,
        done: &mut BTreeSet<&'a Module>,
    ) -> Option<Vec<&'a Module>> {
        if done.contains(module) {
            return None;
        }
        if let Some(start) = path.iter().position(|on_path| *on_path == module) {
            let mut circle = path[start..].to_vec();
            circle.push(module);
            return Some(circle);
        }
        path.push(module);
        for used in uses.get(module).into_iter().flatten() {
            if let Some(circle) = visit(used, uses, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module);
        None
    }
    let mut done = BTreeSet::new();
    for module in uses.keys() {
        if let Some(circle) = visit(module, &uses, &mut Vec::new(), &mut done) {
            let name = |module: &Module| match module.is_empty() {
                true => "crate".to_owned(),
                false => module.join("::"),
            };
            return Some(
                circle
                    .windows(2)
                    .map(|pair| {
                        let path = &read.uses[&(pair[0].clone(), pair[1].clone())];
                        format!("{} uses {} ({path})", name(pair[0]), name(pair[1]))
                    })
                    .collect(),
            );
        }
    }
    None
}

#[test]
fn issue_33_no_module_of_any_crate_uses_one_that_uses_it_back() {
    let crates: Vec<Crate> = crate_roots()
        .into_iter()
        .map(|(name, root)| read_crate(name, &root))
        .collect();
    let circles: Vec<String> = crates
        .iter()
        .filter_map(|read| Some(format!("{}: {}", read.name, circle(read)?.join("; "))))
        .collect();
    assert!(
        circles.is_empty(),
        "modules use each other in a circle:\n{}",
        circles.join("\n")
    );
}

/// Each module of `read` taken as its room: the module of its first `depth`
/// segments (a module above that depth is a room of its own), and every use from
/// one room into another, a parent's use of its child and a child's of its parent
/// included.
fn rooms(read: &Crate, depth: usize) -> Crate {
    let room = |module: &Module| module[..module.len().min(depth)].to_vec();
    let mut rooms = Crate {
        name: format!("{} (rooms)", read.name),
        modules: read.modules.iter().map(room).collect(),
        uses: BTreeMap::new(),
        family: BTreeMap::new(),
    };
    for ((from, to), path) in read.uses.iter().chain(&read.family) {
        let (from, to) = (room(from), room(to));
        if from != to {
            rooms.uses.entry((from, to)).or_insert_with(|| path.clone());
        }
    }
    rooms
}

/// Issue 50: stq-core's rooms (`data::load`, `data::sealed`, `domain::query`, and
/// the layers `data` and `domain` themselves) stand in layers: no room uses one
/// that uses it back, counting a layer's own file (`data/mod.rs`) as a room, so
/// that the layer's door declares and re-exports and reaches into none of them.
/// The service crate's rooms (`cli`, `http`, `engine`, `store`, ...) likewise.
#[test]
fn issue_50_no_room_uses_one_that_uses_it_back_parents_and_children_included() {
    let crates: BTreeMap<String, Crate> = crate_roots()
        .into_iter()
        .map(|(name, root)| (name.clone(), read_crate(name, &root)))
        .collect();
    let circles: Vec<String> = [("stq-core src/lib.rs", 2), ("stq src/lib.rs", 1)]
        .into_iter()
        .filter_map(|(name, depth)| {
            let rooms = rooms(&crates[name], depth);
            Some(format!("{}: {}", rooms.name, circle(&rooms)?.join("; ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "rooms use each other in a circle:\n{}",
        circles.join("\n")
    );
}

/// The reading finds what it must: the crates, their modules in files and
/// folders, and uses by `crate::` and by `super::`, so that the test above cannot
/// pass by reading nothing.
#[test]
fn issue_33_the_module_reading_sees_every_crate_and_its_uses() {
    let crates: BTreeMap<String, Crate> = crate_roots()
        .into_iter()
        .map(|(name, root)| (name.clone(), read_crate(name, &root)))
        .collect();
    for name in [
        "stq src/lib.rs",
        "stq src/main.rs",
        "stq-core src/lib.rs",
        "stq-gen src/lib.rs",
        "xtask src/main.rs",
        "stq tests/it/main.rs",
    ] {
        assert!(
            crates.contains_key(name),
            "{name} not among {:?}",
            crates.keys()
        );
    }
    let core = &crates["stq-core src/lib.rs"];
    let module = |path: &str| -> Module { path.split("::").map(str::to_owned).collect() };
    for path in [
        "data::summary::units",
        "data::load::format::json_lines",
        "domain::record::fast",
    ] {
        assert!(core.modules.contains(&module(path)), "{path}");
    }
    assert!(core.modules.len() > 30, "{}", core.modules.len());
    let uses =
        |read: &Crate, from: &str, to: &str| read.uses.contains_key(&(module(from), module(to)));
    assert!(uses(core, "data::summary", "domain::query"));
    assert!(uses(core, "data::summary::units", "data::scan"));
    // `use super::buckets::...`: a sibling, by way of the parent.
    assert!(uses(core, "data::summary::units", "data::summary::buckets"));
    let service = &crates["stq src/lib.rs"];
    assert!(uses(service, "http::error", "engine"));
}
