//! The `stq` binary: parses the command line and runs a subcommand.

use std::io::{IsTerminal as _, Read as _};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use stq::cli::{Cli, Command, GenArgs, LogFormat};
use stq_core::data::{LoadError, LoadReport};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (log_format, access_log) = match &cli.command {
        Some(Command::Serve(args)) => (args.log_format, args.access_log),
        None => (cli.serve.log_format, cli.serve.access_log),
        Some(_) => (LogFormat::Text, false),
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if !access_log {
        filter = filter.add_directive("stq::access=off".parse().expect("a valid directive"));
    }
    // Lines are written by a thread of their own, so that the HTTP workers never
    // wait on standard error; none is dropped, an access log must be whole. That
    // thread drains every queued line into the buffer, then flushes: one write per
    // burst, not per line.
    let (writer, _flush_on_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::BufWriter::new(std::io::stderr()));
    let logs = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter);
    match log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    // A panic is one log line in the log's own format, not raw text on stderr: a
    // JSON log must stay JSON. The request it hit is logged beside it, by id.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        // One line: "panicked at FILE:LINE:COLUMN: MESSAGE".
        let text = info.to_string().replace('\n', " ");
        tracing::error!(thread = thread.name().unwrap_or("unnamed"), "{text}");
    }));

    let result = match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => stq::cli::serve(args).map(|()| ExitCode::SUCCESS),
        Command::Check(args) => check(&args.snapshots),
        Command::Gen(args) => generate(args).map(|()| ExitCode::SUCCESS),
        Command::Export(args) => stq::cli::export(args).map(|()| ExitCode::SUCCESS),
        Command::HashToken => hash_token().map(|()| ExitCode::SUCCESS),
        Command::Token(command) => stq::cli::token(command).map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|error| {
        eprintln!("stq: {error:#}");
        ExitCode::FAILURE
    })
}

/// `stq check`: 0 when every line is valid, 1 when one is not, 2 when the snapshot
/// cannot be read at all.
fn check(directory: &std::path::Path) -> anyhow::Result<ExitCode> {
    let report = match LoadReport::check(directory, stq::cli::cpus()) {
        Ok(report) => report,
        Err(error @ (LoadError::MissingDirectory(_) | LoadError::Io { .. })) => {
            eprintln!("stq: {error}");
            return Ok(ExitCode::from(2));
        }
        Err(error) => return Err(error.into()),
    };
    for file in &report.files {
        let records = match file.kind {
            Some(kind) => format!("{} {kind} records", file.records),
            // An OpenHTF file holds both kinds.
            None => format!(
                "{} unit records, {} metric records",
                file.units, file.metrics
            ),
        };
        println!("{}: {records}, {} invalid", file.path, file.invalid);
    }
    for line in &report.invalid {
        println!("{line}");
    }
    println!(
        "{} files, {} records ({} units, {} metrics), {} stations, {} invalid lines",
        report.files.len(),
        report.units + report.metrics,
        report.units,
        report.metrics,
        report.stations,
        report.invalid.len()
    );
    Ok(if report.invalid.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn generate(args: GenArgs) -> anyhow::Result<()> {
    let end = match &args.end {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .with_context(|| format!("--end {text:?} is not an RFC 3339 date-time"))?
            .with_timezone(&chrono::Utc),
        None => {
            let now = chrono::Utc::now().timestamp();
            chrono::DateTime::from_timestamp(now - now.rem_euclid(3600), 0)
                .context("the clock is out of range")?
        }
    };
    let summary = stq_gen::generate(&stq_gen::GenOptions {
        out: args.out.clone(),
        stations: args.stations,
        days: args.days,
        units_per_hour: args.units_per_hour,
        seed: args.seed,
        end,
    })
    .with_context(|| format!("cannot write the snapshot to {}", args.out.display()))?;
    println!(
        "wrote {} files to {}: {} unit records, {} metric records, {} bytes",
        summary.files,
        args.out.display(),
        summary.units,
        summary.metrics,
        summary.bytes
    );
    Ok(())
}

/// Prints the SHA-256 of the token on standard input, less one trailing line end.
fn hash_token() -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("cannot read the token from standard input")?;
    let token = input
        .strip_suffix("\r\n")
        .or_else(|| input.strip_suffix('\n'))
        .unwrap_or(&input);
    println!("{}", stq_core::domain::Tokens::hash(token));
    Ok(())
}
