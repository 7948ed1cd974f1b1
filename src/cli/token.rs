//! `stq token new | list | revoke` (docs/api.md section 1.5): the tokens file edited
//! from the command line.
//!
//! The file is read, edited and written by stq-core (`domain::auth`), through the
//! same types a server checks it with, so every entry the command does not touch is
//! written back as it was, in its place, and the new file replaces the old one
//! whole. Here is what the command prints.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use chrono::Utc;

use stq_core::domain::time::Timestamp;
use stq_core::domain::Tokens;

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
    let token = Tokens::add(path, args.name.clone(), args.stations, args.expires.clone())?;

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
        if expires
            .parse::<Timestamp>()
            .is_ok_and(|instant| instant <= Timestamp::from(Utc::now()))
        {
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
    print!(
        "{}",
        table(&Tokens::list(path, Timestamp::from(Utc::now()))?)
    );
    Ok(())
}

/// Removes the entry named `name`.
fn revoke(path: &Path, name: &str) -> anyhow::Result<()> {
    Tokens::revoke(path, name)?;
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
