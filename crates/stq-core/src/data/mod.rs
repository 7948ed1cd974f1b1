//! The data layer: records held in memory and read back in the contract's order.
//!
//! A snapshot is loaded ([`load`]) into an immutable [`catalog::Generation`]:
//! per-station B-tree maps ordered by time ([`station`]) grouped into shards
//! ([`shard`]), and a catalog that says where each station lives. A query is a
//! [`scan`] of each shard it touches and a [`merge`] of their sorted hits; a page
//! ends in a [`cursor`] that says where the next one starts. A [`summary`] is
//! computed by each shard over its own stations and merged. The [`store`] keeps a
//! generation on disk, so that a start rebuilds it instead of parsing it again.

pub mod catalog;
pub mod cursor;
pub(crate) mod digest;
pub(crate) mod hot;
pub mod key;
pub mod load;
pub mod memory;
pub mod merge;
pub mod scan;
pub(crate) mod sealed;
pub use sealed::cache;
pub mod shard;
pub mod station;
pub mod store;
pub mod stored;
pub mod summary;
pub mod symbols;
pub(crate) mod threads;
pub(crate) mod tier;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Every module of `data/` (a file, tests aside) by its path below the crate
    /// root, with the modules of `data/` its `use` lines name, read from the source.
    fn imports() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut directories = vec![source.join("data")];
        while let Some(directory) = directories.pop() {
            for entry in std::fs::read_dir(directory).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    directories.push(path);
                } else if path.extension().is_some_and(|extension| extension == "rs")
                    && path.file_name().is_some_and(|name| name != "tests.rs")
                {
                    files.push(path);
                }
            }
        }
        let module_of = |path: &Path| -> Vec<String> {
            let relative = path.strip_prefix(&source).unwrap().with_extension("");
            let mut module: Vec<String> = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            module
        };
        let modules: BTreeSet<Vec<String>> = files.iter().map(|path| module_of(path)).collect();
        let mut imports = BTreeMap::new();
        for path in &files {
            let module = module_of(path);
            let text = std::fs::read_to_string(path).unwrap();
            // What the module itself uses, not its tests.
            let text = text.split("#[cfg(test)]").next().unwrap();
            let mut named = BTreeSet::new();
            for line in text.lines() {
                let Some(used) = line
                    .strip_prefix("use ")
                    .or_else(|| line.strip_prefix("pub use "))
                else {
                    continue;
                };
                let mut segments: Vec<String> = used
                    .split("::")
                    .take_while(|segment| !segment.starts_with('{'))
                    .map(|segment| {
                        let segment = segment.trim_end_matches(';');
                        segment.split(' ').next().unwrap_or(segment).to_owned()
                    })
                    .collect();
                let absolute: Vec<String> = match segments.first().map(String::as_str) {
                    Some("crate") => segments.split_off(1),
                    Some("super") => {
                        let mut parent = module.clone();
                        parent.pop();
                        parent.extend(segments.split_off(1));
                        parent
                    }
                    _ => continue,
                };
                // The longest prefix that is a module of `data/`.
                if let Some(length) = (1..=absolute.len())
                    .rev()
                    .find(|&length| modules.contains(&absolute[..length]))
                {
                    if absolute[..length] != module[..] {
                        named.insert(absolute[..length].to_vec());
                    }
                }
            }
            imports.insert(module, named);
        }
        imports
    }

    /// Issue 21: `catalog`, `incremental` and `snapshot` imported each other in a
    /// circle. No module of `data/` imports one that imports it back, directly or
    /// through others.
    #[test]
    fn issue_21_no_module_of_data_imports_one_that_imports_it_back() {
        let imports = imports();
        assert!(imports.len() > 20, "{:?}", imports.keys());
        assert!(
            imports[&vec!["data".to_owned(), "catalog".to_owned()]].contains(&vec![
                "data".into(),
                "load".into(),
                "files".into()
            ])
        );
        // Depth-first, keeping the path: a module met again on it closes a circle.
        fn visit(
            module: &Vec<String>,
            imports: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
            path: &mut Vec<Vec<String>>,
            done: &mut BTreeSet<Vec<String>>,
        ) {
            if done.contains(module) {
                return;
            }
            if let Some(start) = path.iter().position(|on_path| on_path == module) {
                let circle: Vec<String> = path[start..]
                    .iter()
                    .map(|module| module.join("::"))
                    .collect();
                panic!(
                    "modules import each other in a circle: {}",
                    circle.join(" -> ")
                );
            }
            path.push(module.clone());
            for imported in imports.get(module).into_iter().flatten() {
                visit(imported, imports, path, done);
            }
            path.pop();
            done.insert(module.clone());
        }
        let mut done = BTreeSet::new();
        for module in imports.keys() {
            visit(module, &imports, &mut Vec::new(), &mut done);
        }
    }
}
