//! stq's repository tasks, in the cargo xtask manner: `cargo xtask TASK` (the alias
//! is in `.cargo/config.toml`). It sits at the top of the workspace, above the
//! service crate it reads, so that no crate under `crates/` points up.
//!
//! `cargo xtask deb-assets OUT` writes what the Debian package installs beside the
//! binary, made from stq's own command line so that it always says what the
//! binary does:
//!
//! - `OUT/man/`: a man page for `stq` and one for each subcommand (`stq-serve.1`, ...);
//! - `OUT/completions/`: `stq.bash`, `_stq` (zsh) and `stq.fish`.
//!
//! debian/build.sh runs it at package-build time. It is a workspace member outside
//! the default members, so `cargo build` and stq's own build never compile it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory as _;
use clap_complete::Shell;

const USAGE: &str = "usage: cargo xtask deb-assets OUT_DIRECTORY";

fn main() -> ExitCode {
    let mut arguments = std::env::args_os().skip(1);
    let (Some(task), Some(out), None) = (arguments.next(), arguments.next(), arguments.next())
    else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if task != "deb-assets" {
        eprintln!("xtask: no task {}; {USAGE}", task.to_string_lossy());
        return ExitCode::from(2);
    }
    let out = PathBuf::from(out);
    match write(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: cannot write to {}: {error}", out.display());
            ExitCode::FAILURE
        }
    }
}

fn write(out: &Path) -> std::io::Result<()> {
    let mut command = stq::cli::Cli::command().disable_help_subcommand(true);
    // Names the subcommands `stq-serve`, ... for their pages' file names.
    command.build();
    let man = out.join("man");
    std::fs::create_dir_all(&man)?;
    man_pages(&command, &man)?;
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command.clone(), "stq", &completions)?;
    }
    Ok(())
}

/// A page for `command` and one for each of its subcommands, every page naming
/// stq's version (clap gives only the top command one).
fn man_pages(command: &clap::Command, out: &Path) -> std::io::Result<()> {
    for subcommand in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        man_pages(subcommand, out)?;
    }
    clap_mangen::Man::new(command.clone())
        .source(concat!("stq ", env!("CARGO_PKG_VERSION")))
        .manual("stq manual")
        .generate_to(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The package's `/etc/stq/stq.env` names every variable of `stq serve`.
    #[test]
    fn the_environment_file_names_every_serve_variable() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../debian/stq.env");
        let text = std::fs::read_to_string(file).unwrap();
        let command = stq::cli::Cli::command();
        let serve = command.find_subcommand("serve").unwrap();
        let mut missing = Vec::new();
        for argument in serve.get_arguments() {
            let Some(variable) = argument.get_env() else {
                continue;
            };
            let variable = variable.to_string_lossy();
            let named = text.lines().any(|line| {
                line.trim_start_matches('#')
                    .trim_start()
                    .starts_with(&format!("{variable}="))
            });
            if !named {
                missing.push(variable.into_owned());
            }
        }
        assert!(missing.is_empty(), "{file} lacks {missing:?}");
    }

    /// HTTPS and JSON Web Tokens are shown in the env file, commented out: the
    /// package serves plain HTTP and the tokens file until told otherwise.
    #[test]
    fn the_environment_file_shows_tls_and_jwt_commented_out() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../debian/stq.env");
        let text = std::fs::read_to_string(file).unwrap();
        for variable in [
            "STQ_TLS_CERT",
            "STQ_TLS_KEY",
            "STQ_JWT_JWKS",
            "STQ_JWT_ISSUER",
            "STQ_JWT_AUDIENCE",
            "STQ_JWT_STATIONS_CLAIM",
        ] {
            let shown = format!("#{variable}=");
            assert!(
                text.lines().any(|line| line.starts_with(&shown)),
                "{file} lacks {shown}"
            );
            let set = format!("{variable}=");
            assert!(
                !text.lines().any(|line| line.starts_with(&set)),
                "{file} sets {variable}"
            );
        }
        // The key's directory the comment names is the one postinst makes.
        let postinst = include_str!("../../debian/postinst");
        assert!(text.contains("/etc/stq/tls/stq.key"));
        assert!(postinst.contains("install -d -m 0750 -o root -g stq /etc/stq/tls"));
    }

    #[test]
    fn it_writes_man_pages_and_completions() {
        let out = std::env::temp_dir().join(format!("stq-xtask-test-{}", std::process::id()));
        write(&out).unwrap();
        for file in [
            "man/stq.1",
            "man/stq-serve.1",
            "man/stq-token-new.1",
            "completions/stq.bash",
            "completions/_stq",
            "completions/stq.fish",
        ] {
            let text = std::fs::read_to_string(out.join(file)).unwrap();
            assert!(text.contains("stq"), "{file}");
        }
        let serve = std::fs::read_to_string(out.join("man/stq-serve.1")).unwrap();
        assert!(serve.contains("STQ_SNAPSHOTS"), "{serve}");
        assert!(serve.contains(env!("CARGO_PKG_VERSION")), "{serve}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}
