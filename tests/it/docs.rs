//! Issue 24, "docs that are true": the documents say what the code does, and a test
//! holds them to it where a test can. Every flag `stq serve --help` prints (the real
//! binary's) has its row in README's flag table and in docs/api.md section 1.1, with
//! the variable the binary reads, and neither table has a row for a flag the binary
//! lacks; every error code `src/http/error.rs` gives is in docs/api.md's table of
//! codes (section 7.4) and in README's list; every file or directory README names or
//! links to exists in the repository, and every anchor it links to is a heading.
//! The files are read from the repository (`CARGO_MANIFEST_DIR`), as committed.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::common::run;

fn repository_file(relative_path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative_path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {relative_path}: {error}"))
}

/// The text of `document` from the heading line `heading` to the next heading of
/// the same or a higher level (lines in fenced code blocks are no headings).
fn section<'a>(document: &'a str, heading: &str) -> &'a str {
    let level = heading.bytes().take_while(|&byte| byte == b'#').count();
    let mut start = None;
    let mut fenced = false;
    let mut at = 0;
    for line in document.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            match start {
                None if line.trim_end() == heading => start = Some(at),
                None => {}
                Some(start) => {
                    let hashes = line.bytes().take_while(|&byte| byte == b'#').count();
                    if (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
                        return &document[start..at];
                    }
                }
            }
        }
        at += line.len();
    }
    &document[start.unwrap_or_else(|| panic!("no heading {heading:?}"))..]
}

/// A table's rows whose first cell is a flag: (the flag, without its argument; the
/// second cell, the variable, without backquotes).
fn flag_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let flag = cells.first()?.strip_prefix("| `--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let variable = cells.get(1)?.trim().trim_matches('`').to_owned();
            Some((format!("--{name}"), variable))
        })
        .collect()
}

/// `stq serve --help`'s flags, each with the variable clap says it reads (`[env:
/// STQ_...=]`), `--help` aside.
fn serve_flags() -> Vec<(String, Option<String>)> {
    let output = run(&["serve", "--help"], None, &[], Duration::from_secs(30));
    assert!(output.status.success(), "stq serve --help: {output:?}");
    let help = String::from_utf8(output.stdout).unwrap();
    // Each option's block starts at a line that starts with `-`, and runs to the next.
    let mut flags: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let option = trimmed
            .split_whitespace()
            .find_map(|word| word.strip_prefix("--"))
            .filter(|_| trimmed.starts_with('-'));
        match option {
            Some(word) => {
                let name: String = word
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                flags.push((format!("--{name}"), line.to_owned()));
            }
            None => {
                if let Some((_, block)) = flags.last_mut() {
                    block.push('\n');
                    block.push_str(line);
                }
            }
        }
    }
    let flags: Vec<(String, Option<String>)> = flags
        .into_iter()
        .filter(|(flag, _)| flag != "--help")
        .map(|(flag, block)| {
            let variable = block.split("[env: ").nth(1).map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            });
            (flag, variable)
        })
        .collect();
    assert!(
        flags.len() >= 20 && flags.iter().any(|(flag, _)| flag == "--listen"),
        "stq serve --help did not read as expected:\n{help}"
    );
    flags
}

/// Holds a table's flag rows to the binary's flags: each flag once, with its
/// variable, and no other.
fn assert_table_matches(
    document: &str,
    rows: &[(String, String)],
    flags: &[(String, Option<String>)],
) {
    let mut problems = Vec::new();
    for (flag, variable) in flags {
        let found: Vec<&(String, String)> = rows.iter().filter(|(row, _)| row == flag).collect();
        match (found.as_slice(), variable) {
            ([], _) => problems.push(format!("no row for {flag}")),
            ([(_, written)], Some(variable)) if written != variable => problems.push(format!(
                "{flag}: the row says `{written}`, the binary reads `{variable}`"
            )),
            ([_], _) => {}
            _ => problems.push(format!("{flag} has {} rows", found.len())),
        }
    }
    let known: BTreeSet<&str> = flags.iter().map(|(flag, _)| flag.as_str()).collect();
    for (row, _) in rows {
        if !known.contains(row.as_str()) {
            problems.push(format!("a row for {row}, which stq serve does not have"));
        }
    }
    assert!(
        problems.is_empty(),
        "{document}'s table of stq serve's flags:\n{}",
        problems.join("\n")
    );
}

#[test]
fn issue_24_every_serve_flag_is_in_readme_and_the_api_reference() {
    let flags = serve_flags();

    let readme = repository_file("README.md");
    let running = section(&readme, "## Running stq");
    assert_table_matches("README.md", &flag_rows(running), &flags);
    // And in the synopsis above the table.
    for (flag, _) in &flags {
        assert!(
            running.contains(&format!("[{flag}")),
            "README's synopsis of stq serve lacks {flag}"
        );
    }

    let api = repository_file("docs/api.md");
    let serve = section(&api, "### 1.1 `stq serve`");
    assert_table_matches("docs/api.md section 1.1", &flag_rows(serve), &flags);
}

/// The codes `ApiError::code` gives, read from its source.
fn error_codes() -> BTreeSet<String> {
    let source = repository_file("src/http/error.rs");
    let start = source
        .find("pub fn code(&self)")
        .expect("ApiError::code in src/http/error.rs");
    let body = &source[start..];
    let body = &body[..body[1..].find("\n    fn ").map_or(body.len(), |at| at + 1)];
    let codes: BTreeSet<String> = body
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|text| {
            !text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .map(str::to_owned)
        .collect();
    assert!(codes.len() >= 15, "only {codes:?} in src/http/error.rs");
    codes
}

#[test]
fn issue_24_every_error_code_is_in_the_api_reference() {
    let api = repository_file("docs/api.md");
    let table = section(&api, "### 7.4 Error codes");
    let readme = repository_file("README.md");
    let queries = section(&readme, "## Queries");
    let missing: Vec<String> = error_codes()
        .into_iter()
        .filter_map(|code| {
            let mut places = Vec::new();
            if !table.contains(&format!("| `{code}` |")) {
                places.push("docs/api.md section 7.4");
            }
            if !queries.contains(&format!("`{code}`")) {
                places.push("README's list of codes");
            }
            (!places.is_empty()).then(|| format!("`{code}` is not in {}", places.join(", ")))
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, punctuation but `-`
/// and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(document: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut anchors = BTreeSet::new();
    for line in document.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            anchors.insert(anchor(line.trim_start_matches('#')));
        }
    }
    anchors
}

/// README's text outside fenced code blocks.
fn prose(document: &str) -> String {
    let mut fenced = false;
    let mut prose = String::new();
    for line in document.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
}

/// The repository paths in README's inline code: words like `tests/it/page.rs`,
/// `snapshots/` or `BENCHMARKS.md` (a path under a top-level entry, or a file name
/// with a known extension); not URLs, endpoints (`/units`) or globs (`*.jsonl`).
fn paths_in_code(prose: &str, top_level: &BTreeSet<String>) -> BTreeSet<String> {
    const EXTENSIONS: [&str; 10] = [
        ".md", ".rs", ".sh", ".py", ".toml", ".json", ".jsonl", ".png", ".lua", ".txt",
    ];
    let path_like = |word: &str| {
        !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-/".contains(&b))
            && !word.starts_with('/')
            && !word.contains("//")
    };
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(str::split_whitespace)
        .filter(|word| path_like(word))
        .filter(|word| {
            let first = word.split('/').next().unwrap_or_default();
            match word.contains('/') {
                true => top_level.contains(first),
                false => {
                    EXTENSIONS.iter().any(|extension| word.ends_with(extension))
                        && !word.starts_with('.')
                }
            }
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn issue_24_every_path_readme_names_exists() {
    // Named, and said to be kept outside the repository.
    const OUTSIDE: [&str; 2] = ["SPEC.md", "CONTRACT.md"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = repository_file("README.md");
    let prose = prose(&readme);
    let top_level: BTreeSet<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "target")
        .collect();

    let mut problems = Vec::new();
    let links: Vec<&str> = prose
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .collect();
    assert!(links.len() >= 10, "README's links: {links:?}");
    for target in &links {
        let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
        let file = if path.is_empty() { "README.md" } else { path };
        if !root.join(file).exists() {
            problems.push(format!("a link to {file}, which does not exist"));
            continue;
        }
        if !fragment.is_empty() && !anchors(&repository_file(file)).contains(fragment) {
            problems.push(format!("a link to {target}: {file} has no such heading"));
        }
    }

    let paths = paths_in_code(&prose, &top_level);
    assert!(
        paths.len() >= 8 && paths.contains(".ci/run"),
        "README's paths as read: {paths:?}"
    );
    for path in paths {
        if !OUTSIDE.contains(&path.as_str()) && !root.join(&path).exists() {
            problems.push(format!("`{path}`, which does not exist"));
        }
    }
    assert!(
        problems.is_empty(),
        "README.md names:\n{}",
        problems.join("\n")
    );
}
