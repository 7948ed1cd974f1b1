//! `stq token new | list | revoke` (docs/api.md section 1.5): the tokens file edited
//! from the command line.
//!
//! The file is read through the same types a server checks it with
//! ([`TokensFile`]), so every entry the command does not touch is written back as it
//! was, in its place. The new file is written beside the old one and renamed over
//! it: a server reloading meanwhile reads the old file or the new one, never half of
//! one.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rand::rngs::OsRng;
use rand::RngCore as _;

use stq_core::domain::auth::{Stations, TokensError, TokensFile};
use stq_core::domain::time::{parse_rfc3339, Timestamp};

use super::{TokenCommand, TokenNewArgs};

/// Runs a `stq token` subcommand.
pub fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::New(args) => new(args),
        TokenCommand::List(args) => list(&args.tokens),
        TokenCommand::Revoke(args) => revoke(&args.file.tokens, &args.name),
    }
}

/// Makes a token, adds its entry, then prints the token: a token is printed only
/// once its entry is in the file.
fn new(args: TokenNewArgs) -> anyhow::Result<()> {
    let path = &args.file.tokens;
    let mut file = match read(path) {
        Ok(file) => file,
        Err(TokensError::Read { cause, .. }) if cause.kind() == ErrorKind::NotFound => {
            TokensFile::default()
        }
        Err(error) => return Err(error.into()),
    };
    let mut random = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut random)
        .context("the operating system's random generator failed")?;
    let token = file
        .add_token(
            args.name.clone(),
            args.stations,
            args.expires.clone(),
            &random,
        )
        .with_context(|| format!("{} is unchanged", path.display()))?;
    write(path, &file)?;

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{token}")
        .and_then(|()| stdout.flush())
        .with_context(|| {
            format!(
                "token `{}` was added to {} but could not be printed; remove it with \
                 `stq token revoke {}`",
                args.name,
                path.display(),
                args.name
            )
        })?;
    eprintln!(
        "stq: added token `{}` to {}. It is shown only this once; a running stq \
         accepts it after its next reload (SIGHUP, or at once with --watch).",
        args.name,
        path.display()
    );
    if let Some(expires) = &args.expires {
        if parse_rfc3339(expires).is_some_and(|instant| instant <= Timestamp::now()) {
            eprintln!(
                "stq: warning: token `{}` has already expired ({expires})",
                args.name
            );
        }
    }
    Ok(())
}

/// Prints each entry's name, stations and expiry, one per line under a header; never
/// a digest.
fn list(path: &Path) -> anyhow::Result<()> {
    let file = read(path)?;
    let now = Timestamp::now();
    let rows: Vec<[String; 3]> = file
        .tokens
        .iter()
        .map(|entry| {
            let stations = match &entry.stations {
                Stations::Every(star) => star.clone(),
                Stations::List(stations) if stations.is_empty() => "(none)".to_owned(),
                Stations::List(stations) => stations.join(","),
            };
            let expires = match &entry.expires {
                None => "never".to_owned(),
                Some(text) if parse_rfc3339(text).is_some_and(|instant| instant <= now) => {
                    format!("{text} (expired)")
                }
                Some(text) => text.clone(),
            };
            [entry.name.clone(), stations, expires]
        })
        .collect();
    print!("{}", table(&rows));
    Ok(())
}

/// Removes the entry named `name`.
fn revoke(path: &Path, name: &str) -> anyhow::Result<()> {
    let mut file = read(path)?;
    file.revoke(name)
        .with_context(|| format!("{} is unchanged", path.display()))?;
    write(path, &file)?;
    println!(
        "revoked token `{name}` in {}; a running stq refuses it after its next reload",
        path.display()
    );
    Ok(())
}

/// The rows under a header, in columns two spaces apart.
fn table(rows: &[[String; 3]]) -> String {
    let header = ["NAME", "STATIONS", "EXPIRES"].map(str::to_owned);
    let mut widths = [0; 3];
    for row in std::iter::once(&header).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let line = format!(
            "{:name$}  {:stations$}  {}",
            row[0],
            row[1],
            row[2],
            name = widths[0],
            stations = widths[1]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The tokens file at `path`, checked as `stq serve` checks it.
fn read(path: &Path) -> Result<TokensFile, TokensError> {
    let text = fs::read_to_string(path).map_err(|cause| TokensError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    TokensFile::parse(&text).map_err(|reason| TokensError::Invalid {
        path: path.display().to_string(),
        reason,
    })
}

/// Writes `file` to a new file beside `path` and renames it over `path` (over the
/// file a symbolic link at `path` points to, which stays a link).
fn write(path: &Path, file: &TokensFile) -> anyhow::Result<()> {
    // Never write a file that `stq serve` would refuse.
    let json = file
        .checked_json()
        .map_err(|reason| anyhow::anyhow!("the new tokens file: {reason}"))?;
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let directory = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut suffix = [0u8; 8];
    OsRng
        .try_fill_bytes(&mut suffix)
        .context("the operating system's random generator failed")?;
    let temporary = directory.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        hex::encode(suffix)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut new = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        // The new file keeps the old one's owner and group where this user may give
        // them (root may: a service reading the file through its group, as the
        // Debian package's does, still can), and its permissions.
        if let Ok(old) = fs::metadata(&target) {
            let _ = std::os::unix::fs::fchown(&new, Some(old.uid()), Some(old.gid()));
            new.set_permissions(old.permissions())?;
        }
        new.write_all(json.as_bytes())?;
        new.sync_all()?;
        fs::rename(&temporary, &target)?;
        // The rename itself survives a crash once the directory is synced; where a
        // directory cannot be opened, the rename is done all the same.
        let _ = File::open(&directory).and_then(|directory| directory.sync_all());
        Ok(())
    })();
    written.map_err(|error| {
        let _ = fs::remove_file(&temporary);
        anyhow::Error::new(error)
            .context(format!("cannot write the tokens file {}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_24_the_list_is_in_columns_under_a_header() {
        let rows = [
            ["ops".to_owned(), "*".to_owned(), "never".to_owned()],
            [
                "line-1-dashboard".to_owned(),
                "ST-01,ST-02".to_owned(),
                "2027-01-01T00:00:00Z".to_owned(),
            ],
        ];
        assert_eq!(
            table(&rows),
            "NAME              STATIONS     EXPIRES\n\
             ops               *            never\n\
             line-1-dashboard  ST-01,ST-02  2027-01-01T00:00:00Z\n"
        );
        assert_eq!(table(&[]), "NAME  STATIONS  EXPIRES\n");
    }
}
