//! The command line (docs/api.md section 1). Every flag can also come from an
//! environment variable `STQ_` + the flag in upper case with `-` as `_`; a flag on
//! the command line wins over its variable.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use stq_core::data::OnInvalid;
use stq_core::domain::time::Timestamp;
use stq_core::domain::Stations;
use stq_objects::Location;

mod export;
mod identity;
mod serve;
mod token;

pub use export::export;
pub use identity::IdentityArgs;
pub use serve::serve;
pub use token::token;

/// Where `stq serve` and `stq token` find the tokens file by default.
pub const DEFAULT_TOKENS_FILE: &str = "snapshots/tokens.json";

/// How many invalid lines a start that refuses its snapshot prints (`serve`,
/// `export` under `--on-invalid fail`): as many as `/files` shows of a file.
const INVALID_LINES_SHOWN: usize = 20;

/// `--on-invalid`: what a load does with invalid lines (the loader's [`OnInvalid`],
/// spelled for the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnInvalidLines {
    /// Do not start while any line is invalid; at a reload, hold back each file
    /// with invalid lines (it serves what it served) and advance the others.
    Fail,
    /// Skip each invalid line, and report it.
    Skip,
    /// Hold each file with invalid lines (serve none of its records, log every
    /// line) and start with the others; at a reload, as `fail` does.
    Hold,
}

impl From<OnInvalidLines> for OnInvalid {
    fn from(choice: OnInvalidLines) -> OnInvalid {
        match choice {
            OnInvalidLines::Fail => OnInvalid::Fail,
            OnInvalidLines::Skip => OnInvalid::Skip,
            OnInvalidLines::Hold => OnInvalid::Hold,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "stq",
    version,
    about = "Station Telemetry Query Service: serves test-station records over HTTP",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// With no subcommand, stq serves with these flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

// Parsed once at the start: the size of `serve`'s flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load a snapshot and serve it over HTTP (the default).
    Serve(ServeArgs),
    /// Validate every snapshot file and report invalid lines.
    Check(CheckArgs),
    /// Write a synthetic, realistic snapshot.
    Gen(GenArgs),
    /// Write the snapshot's records as Apache Parquet, partitioned by day, for
    /// DuckDB, ClickHouse, Spark, Trino or polars.
    Export(ExportArgs),
    /// Read a token on standard input and print its SHA-256 for the tokens file.
    HashToken,
    /// Make, list or revoke the tokens of the tokens file; a running stq sees the
    /// change at its next reload (SIGHUP, or --watch).
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token from 32 random bytes of the operating system, add its entry to
    /// the tokens file (created if missing), and print the token, this once only.
    New(TokenNewArgs),
    /// Print each entry's name, stations and expiry (never a hash).
    List(TokensFileArgs),
    /// Remove the entry named NAME from the tokens file.
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TokensFileArgs {
    /// Tokens file, rewritten whole by writing a new file and renaming it over the old.
    #[arg(long, env = "STQ_TOKENS", default_value = DEFAULT_TOKENS_FILE)]
    pub tokens: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct TokenNewArgs {
    /// Name of the entry; no other entry of the file may have it.
    #[arg(long, env = "STQ_NAME", value_parser = parse_token_name)]
    pub name: String,

    /// The stations the token may see: comma-separated station ids, or `*` for every
    /// station, present and future.
    #[arg(long, env = "STQ_STATIONS", value_parser = str::parse::<Stations>)]
    pub stations: Stations,

    /// From this instant on the token is refused: an RFC 3339 date-time such as
    /// `2027-01-01T00:00:00Z` [default: never].
    #[arg(long, env = "STQ_EXPIRES", value_parser = parse_expires)]
    pub expires: Option<String>,

    #[command(flatten)]
    pub file: TokensFileArgs,
}

#[derive(Debug, Clone, Args)]
pub struct TokenRevokeArgs {
    /// Name of the entry to remove.
    pub name: String,

    #[command(flatten)]
    pub file: TokensFileArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "STQ_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// Snapshot directory, scanned recursively.
    #[arg(long, env = "STQ_SNAPSHOTS", default_value = "snapshots")]
    pub snapshots: PathBuf,

    /// Tokens file (JSON with SHA-256 hashes; `stq token` edits it).
    #[arg(long, env = "STQ_TOKENS", default_value = DEFAULT_TOKENS_FILE)]
    pub tokens: PathBuf,

    /// Number of station shards; every HTTP worker holds a replica of each, so a
    /// query never leaves its worker's thread [default: CPUs].
    #[arg(long, env = "STQ_SHARDS")]
    pub shards: Option<NonZeroUsize>,

    /// Most records one response may hold without `limit`; also the largest `limit`.
    #[arg(long, env = "STQ_MAX_RECORDS", default_value_t = NonZeroUsize::new(100_000).unwrap())]
    pub max_records: NonZeroUsize,

    /// Most station ids one request may name.
    #[arg(long, env = "STQ_MAX_STATIONS", default_value_t = NonZeroUsize::new(1000).unwrap())]
    pub max_stations: NonZeroUsize,

    /// What an invalid snapshot line does: stop the start, be skipped and counted, or
    /// hold its file while the others are served.
    #[arg(long, env = "STQ_ON_INVALID", value_enum, default_value_t = OnInvalidLines::Fail)]
    pub on_invalid: OnInvalidLines,

    /// Address of the admin listener, which serves Prometheus metrics at /metrics.
    #[arg(long, env = "STQ_ADMIN_LISTEN", default_value = "127.0.0.1:9464")]
    pub admin_listen: String,

    /// Log lines as plain text or as JSON objects.
    #[arg(long, env = "STQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// A file whose whole content (at least 32 bytes) is the secret that seals
    /// cursors; replicas given the same file accept each other's cursors [default:
    /// a random key per process].
    #[arg(long, env = "STQ_CURSOR_KEY_FILE")]
    pub cursor_key_file: Option<PathBuf>,

    /// The `result` values, compared ignoring ASCII case, that count as a pass in
    /// `/units/summary` (comma-separated or repeated).
    #[arg(long = "pass-results", env = "STQ_PASS_RESULTS", value_delimiter = ',', default_value = "pass", value_parser = parse_pass_result)]
    pub pass_results: Vec<String>,

    /// Log one line per request (target `stq::access`). Off by default: at tens of
    /// thousands of requests a second it costs about a tenth of the CPU, and the
    /// admin listener's metrics count the same requests.
    #[arg(long, env = "STQ_ACCESS_LOG")]
    pub access_log: bool,

    /// Reload on its own when a snapshot file or the tokens file changes (SIGHUP
    /// always reloads).
    #[arg(long, env = "STQ_WATCH")]
    pub watch: bool,

    /// With --watch, look at every snapshot file's size, modification time and
    /// inode this often (e.g. `1s`) instead of relying on the system's change
    /// notification, which misses what other hosts write to a network file system
    /// [default: none; `1s` on NFS, CIFS/SMB and FUSE].
    #[arg(long, env = "STQ_WATCH_POLL", value_parser = parse_duration, requires = "watch")]
    pub watch_poll: Option<Duration>,

    /// An origin that browsers may call stq from, e.g. `https://grafana.example.com`
    /// (repeatable; `*` for any). None by default.
    #[arg(long = "cors-origin", env = "STQ_CORS_ORIGIN", value_delimiter = ',', value_parser = parse_origin)]
    pub cors_origins: Vec<String>,

    /// HTTP worker threads, each with its own router and a replica of every shard
    /// [default: CPUs].
    #[arg(long, env = "STQ_WORKERS")]
    pub workers: Option<NonZeroUsize>,

    /// Longest query string accepted, in bytes as sent (still percent-encoded); at
    /// most 65000, as the HTTP layer refuses a longer request target itself.
    #[arg(long, env = "STQ_MAX_QUERY_BYTES", default_value = "8192", value_parser = parse_max_query_bytes)]
    pub max_query_bytes: NonZeroUsize,

    /// Longest time window a request may ask for, the default 24 h window included,
    /// e.g. `31d` or `12h` [default: none].
    #[arg(long, env = "STQ_MAX_WINDOW", value_parser = parse_duration)]
    pub max_window: Option<Duration>,

    /// The hot window: a station's records in whole four-hour periods older than
    /// this, counted back from its newest record, are sealed in compressed blocks
    /// (about a twelfth of the memory; answers are the same, history's slower);
    /// `all` keeps every record hot.
    #[arg(long, env = "STQ_HOT", default_value = "24h", value_parser = parse_hot)]
    pub hot: HotWindow,

    /// Memory for sealed history held decoded, shared by the HTTP workers, e.g.
    /// `512MiB` or `2GiB`: a query that reads the same hours again finds them
    /// decoded; beyond it, the least recently used leave.
    #[arg(long, env = "STQ_CACHE_SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub cache_size: u64,

    /// Longest time a query may take before it is answered 503 `timeout`.
    #[arg(long, env = "STQ_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Queries computing at once (sending an answer does not count); beyond it a
    /// request waits at most 100 ms, then gets 503 `overloaded` [default: 4 x CPUs].
    #[arg(long, env = "STQ_MAX_CONCURRENT_QUERIES")]
    pub max_concurrent_queries: Option<NonZeroUsize>,

    /// Longest time a client may take to send a request head, or stay idle on a
    /// kept-alive connection, or leave a response unread, before the connection is
    /// closed.
    #[arg(long, env = "STQ_CLIENT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub client_timeout: Duration,

    /// Longest `wait` a request may ask for (docs/api.md section 14.1), at most `10m`.
    #[arg(long, env = "STQ_MAX_WAIT", default_value = "60s", value_parser = parse_max_wait)]
    pub max_wait: Duration,

    /// Requests held by `wait` at once; beyond it a request is answered at once, as
    /// without `wait`.
    #[arg(long, env = "STQ_MAX_WAITING", default_value_t = NonZeroUsize::new(10_000).unwrap())]
    pub max_waiting: NonZeroUsize,

    /// Streams open at once (`/units/stream`, `/metrics/stream`); beyond it a new one
    /// is answered 503 `overloaded`.
    #[arg(long, env = "STQ_MAX_STREAMS", default_value_t = NonZeroUsize::new(10_000).unwrap())]
    pub max_streams: NonZeroUsize,

    /// Directory (made if missing) or `s3://BUCKET/PREFIX` where stq keeps what it
    /// derives from the snapshot files, so that a restart, or a replica on the same
    /// files, reads from it what the files still hold unchanged instead of parsing
    /// it again. S3 takes the AWS_* variables [default: none: everything in memory].
    #[arg(long, env = "STQ_STORE")]
    pub store: Option<Location>,

    /// With `--store s3://`, the local directory (made if missing) that holds a copy
    /// of the store's objects, which queries and starts read [default:
    /// $CACHE_DIRECTORY, else $XDG_CACHE_HOME/stq, else ~/.cache/stq, then
    /// /s3/BUCKET/PREFIX].
    #[arg(long, env = "STQ_STORE_CACHE")]
    pub store_cache: Option<PathBuf>,

    /// Directory (made if missing) or `s3://BUCKET/PREFIX` the server keeps `stq
    /// export --parquet`'s files in: each day once it is older than every
    /// station's hot window, and again when a later record changes it [default:
    /// none].
    #[arg(long, env = "STQ_EXPORT")]
    pub export: Option<Location>,

    /// HTTPS and JSON Web Tokens (docs/api.md section 16).
    #[command(flatten)]
    pub identity: IdentityArgs,
}

impl ServeArgs {
    pub fn max_concurrent_queries(&self) -> usize {
        self.max_concurrent_queries
            .map_or_else(|| 4 * cpus(), NonZeroUsize::get)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Snapshot directory, scanned recursively.
    #[arg(long, env = "STQ_SNAPSHOTS", default_value = "snapshots")]
    pub snapshots: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Directory (made if missing) or `s3://BUCKET/PREFIX` to write
    /// `units/day=YYYY-MM-DD/part-N.parquet` and `metrics/day=.../part-N.parquet`
    /// under; the day partitions the export covers are replaced whole. S3 takes
    /// its settings from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP`.
    #[arg(long, env = "STQ_PARQUET")]
    pub parquet: Location,

    /// Snapshot directory, scanned recursively.
    #[arg(long, env = "STQ_SNAPSHOTS", default_value = "snapshots")]
    pub snapshots: PathBuf,

    /// Only records at or after this instant (RFC 3339) [default: all].
    #[arg(long, env = "STQ_FROM", value_parser = parse_instant)]
    pub from: Option<Timestamp>,

    /// Only records before this instant (RFC 3339) [default: all].
    #[arg(long, env = "STQ_TO", value_parser = parse_instant)]
    pub to: Option<Timestamp>,

    /// Only these stations (comma-separated ids) [default: every station].
    #[arg(long = "station-ids", env = "STQ_STATION_IDS", value_delimiter = ',')]
    pub station_ids: Option<Vec<String>>,

    /// What an invalid snapshot line does: stop the export, be skipped and counted,
    /// or hold its file (export the others).
    #[arg(long, env = "STQ_ON_INVALID", value_enum, default_value_t = OnInvalidLines::Fail)]
    pub on_invalid: OnInvalidLines,
}

#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// Directory to write the snapshot into (created if missing).
    #[arg(long, env = "STQ_OUT")]
    pub out: PathBuf,

    /// Number of stations.
    #[arg(long, env = "STQ_STATIONS", default_value_t = 10)]
    pub stations: u32,

    /// Days of data, ending at `--end`.
    #[arg(long, env = "STQ_DAYS", default_value_t = 7)]
    pub days: u32,

    /// Units processed per station and hour (each gives an input and an output
    /// record and about ten metric records).
    #[arg(long, env = "STQ_UNITS_PER_HOUR", default_value_t = 6)]
    pub units_per_hour: u32,

    /// Seed of the pseudo-random generator.
    #[arg(long, env = "STQ_SEED", default_value_t = 1)]
    pub seed: u64,

    /// Exclusive end of the data, RFC 3339 [default: the start of the current hour].
    #[arg(long, env = "STQ_END")]
    pub end: Option<String>,
}

/// The largest `--max-query-bytes` that can take effect: the `http` crate, under
/// actix-web, refuses a request target over 65,534 bytes with a bare 400 before stq
/// sees the request, and the path comes before the query.
pub const MAX_QUERY_BYTES_CEILING: usize = 65_000;

fn parse_max_query_bytes(text: &str) -> Result<NonZeroUsize, String> {
    let bytes: NonZeroUsize = text
        .parse()
        .map_err(|_| format!("not a whole number from 1 to {MAX_QUERY_BYTES_CEILING}"))?;
    if bytes.get() > MAX_QUERY_BYTES_CEILING {
        return Err(format!(
            "at most {MAX_QUERY_BYTES_CEILING}: the HTTP layer refuses a longer request target \
             (400) before stq could answer 414"
        ));
    }
    Ok(bytes)
}

/// A duration above zero, as `humantime` reads it: `10s`, `250ms`, `12h`, `31d`, `1h 30m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be longer than zero".to_owned()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!(
            "{error}; write e.g. `10s`, `250ms`, `12h` or `31d`"
        )),
    }
}

/// `--max-wait`: a duration from 1 s to 10 min, in whole seconds.
fn parse_max_wait(text: &str) -> Result<Duration, String> {
    let wait = parse_duration(text)?;
    if wait < Duration::from_secs(1) || wait > Duration::from_secs(600) || wait.subsec_nanos() != 0
    {
        return Err("must be whole seconds from `1s` to `10m`".to_owned());
    }
    Ok(wait)
}

/// A number of bytes, as `bytesize` reads it: `512MiB`, `2GiB`, `1.5 GB`, `65536`.
fn parse_size(text: &str) -> Result<u64, String> {
    text.parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|error| format!("{error}; write e.g. `512MiB` or `2GiB`"))
}

/// `--hot`: a duration, or `None` for `all` (every record hot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotWindow(pub Option<Duration>);

fn parse_hot(text: &str) -> Result<HotWindow, String> {
    match text {
        "all" => Ok(HotWindow(None)),
        _ => parse_duration(text)
            .map(|duration| HotWindow(Some(duration)))
            .map_err(|error| format!("{error}, or `all`")),
    }
}

/// An origin as browsers send it: `scheme://host[:port]`, nothing more; or `*`.
fn parse_origin(text: &str) -> Result<String, String> {
    if text == "*" {
        return Ok(text.to_owned());
    }
    let uri: actix_web::http::Uri = text
        .parse()
        .map_err(|error| format!("not an origin: {error}"))?;
    let plain = matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.host().is_some()
        && uri
            .path_and_query()
            .is_none_or(|path| matches!(path.as_str(), "" | "/"))
        && !text.ends_with('/');
    if plain {
        Ok(text.to_owned())
    } else {
        Err("an origin is scheme://host[:port], e.g. https://grafana.example.com".to_owned())
    }
}

/// A `--pass-results` item: trimmed, not empty.
fn parse_pass_result(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a pass result must not be empty".to_owned());
    }
    Ok(text.to_owned())
}

/// A `--name` for a new token: not empty, no control characters (it is printed in
/// `stq token list` and in messages).
fn parse_token_name(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("a token's name must not be empty".to_owned());
    }
    if text.chars().any(char::is_control) {
        return Err("a token's name must not hold control characters".to_owned());
    }
    Ok(text.to_owned())
}

/// `--expires`: a date-time in the grammar of the contract's section 4, kept as
/// written.
fn parse_instant(text: &str) -> Result<Timestamp, String> {
    text.parse()
        .map_err(|_| "not an RFC 3339 date-time; write e.g. `2026-11-24T00:00:00Z`".to_owned())
}

fn parse_expires(text: &str) -> Result<String, String> {
    match text.parse::<Timestamp>() {
        Ok(_) => Ok(text.to_owned()),
        Err(_) => Err(
            "not an RFC 3339 date-time; write e.g. `2027-01-01T00:00:00Z` or \
             `2027-01-01T08:00:00+01:00`"
                .to_owned(),
        ),
    }
}

/// The number of CPUs, the default for shards and workers.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_means_serve_with_flags() {
        let cli = Cli::try_parse_from(["stq", "--listen", "127.0.0.1:0", "--shards", "3"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.listen, "127.0.0.1:0");
        assert_eq!(cli.serve.shards.map(NonZeroUsize::get), Some(3));
        assert_eq!(cli.serve.max_records.get(), 100_000);
        assert_eq!(cli.serve.max_stations.get(), 1000);
        assert_eq!(cli.serve.on_invalid, OnInvalidLines::Fail);
        assert_eq!(cli.serve.max_query_bytes.get(), 8192);
        assert_eq!(cli.serve.max_window, None);
        assert_eq!(cli.serve.request_timeout, Duration::from_secs(10));
        assert_eq!(cli.serve.client_timeout, Duration::from_secs(5));
        assert_eq!(cli.serve.max_concurrent_queries(), 4 * cpus());
    }

    #[test]
    fn durations_read_as_the_flags_document_them() {
        let serve = |flags: &[&str]| {
            Cli::try_parse_from(std::iter::once("stq").chain(flags.iter().copied()))
                .map(|cli| cli.serve)
        };
        let args = serve(&["--max-window", "31d", "--request-timeout", "250ms"]).unwrap();
        assert_eq!(args.max_window, Some(Duration::from_secs(31 * 86_400)));
        assert_eq!(args.request_timeout, Duration::from_millis(250));
        assert_eq!(
            serve(&["--client-timeout", "1h 30m"])
                .unwrap()
                .client_timeout,
            Duration::from_secs(5400)
        );
        for bad in ["0s", "10", "ten seconds", "-5s", ""] {
            assert!(serve(&["--max-window", bad]).is_err(), "{bad}");
        }
        assert!(serve(&["--max-concurrent-queries", "0"]).is_err());
        assert_eq!(
            serve(&["--max-query-bytes", "65000"])
                .unwrap()
                .max_query_bytes
                .get(),
            65_000
        );
        for bad in ["0", "65001", "1000000", "-1", "8k"] {
            assert!(serve(&["--max-query-bytes", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn subcommands_parse() {
        let cli = Cli::try_parse_from(["stq", "serve", "--on-invalid", "skip"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Serve(args)) if args.on_invalid == OnInvalidLines::Skip)
        );
        let cli = Cli::try_parse_from(["stq", "check", "--snapshots", "x"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Check(args)) if args.snapshots.as_os_str() == "x")
        );
        assert!(Cli::try_parse_from(["stq", "serve", "--max-records", "0"]).is_err());
        assert!(Cli::try_parse_from(["stq", "serve", "--on-invalid", "maybe"]).is_err());
        let cli = Cli::try_parse_from(["stq", "--on-invalid", "hold"]).unwrap();
        assert_eq!(OnInvalid::from(cli.serve.on_invalid), OnInvalid::Hold);
        let cli = Cli::try_parse_from([
            "stq",
            "--cors-origin",
            "https://a.example",
            "--cors-origin",
            "http://b.example:3000",
        ])
        .unwrap();
        assert_eq!(
            cli.serve.cors_origins,
            ["https://a.example", "http://b.example:3000"]
        );
        for bad in [
            "a.example",
            "https://a.example/",
            "https://a.example/x",
            "ftp://a.example",
        ] {
            assert!(
                Cli::try_parse_from(["stq", "--cors-origin", bad]).is_err(),
                "{bad}"
            );
        }
    }

    /// Issue 34: `stq serve --help` (and so the man page) offers `hold` and says
    /// what it does.
    #[test]
    fn issue_34_the_help_offers_hold() {
        let help = Cli::command()
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        let at = help.find("--on-invalid").unwrap();
        let flag = &help[at..help[at..]
            .find("\n      --")
            .map_or(help.len(), |end| at + end)];
        let words = flag.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("hold: Hold each file with invalid lines")
                && words.contains("start with the others"),
            "{flag}"
        );
    }

    /// Issue 34: `--watch-poll` takes a duration, and only with `--watch`.
    #[test]
    fn issue_34_watch_poll_is_a_duration_for_the_watch() {
        let cli = Cli::try_parse_from(["stq", "--watch", "--watch-poll", "1s"]).unwrap();
        assert_eq!(cli.serve.watch_poll, Some(Duration::from_secs(1)));
        assert_eq!(
            Cli::try_parse_from(["stq", "--watch"])
                .unwrap()
                .serve
                .watch_poll,
            None
        );
        for bad in [
            &["--watch-poll", "1s"][..],
            &["--watch", "--watch-poll", "0s"],
            &["--watch", "--watch-poll", "1"],
        ] {
            assert!(
                Cli::try_parse_from(std::iter::once("stq").chain(bad.iter().copied())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn issue_24_token_subcommands_parse() {
        let cli = Cli::try_parse_from([
            "stq",
            "token",
            "new",
            "--name",
            "line-2",
            "--stations",
            " ST-02, ST-01,,ST-02 ",
            "--expires",
            "2027-01-01T00:00:00Z",
        ])
        .unwrap();
        let Some(Command::Token(TokenCommand::New(args))) = cli.command else {
            panic!("not token new");
        };
        assert_eq!(args.name, "line-2");
        assert_eq!(
            args.stations,
            Stations::List(vec!["ST-02".to_owned(), "ST-01".to_owned()])
        );
        assert_eq!(args.expires.as_deref(), Some("2027-01-01T00:00:00Z"));
        // The same default as `stq serve`.
        assert_eq!(args.file.tokens.as_os_str(), DEFAULT_TOKENS_FILE);
        assert_eq!(
            Cli::try_parse_from(["stq"])
                .unwrap()
                .serve
                .tokens
                .as_os_str(),
            DEFAULT_TOKENS_FILE
        );

        let cli = Cli::try_parse_from(["stq", "token", "new", "--name", "ops", "--stations", "*"])
            .unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Token(TokenCommand::New(TokenNewArgs { stations, expires: None, .. })))
                if stations == Stations::Every("*".to_owned())
        ));
        let cli = Cli::try_parse_from(["stq", "token", "list", "--tokens", "t.json"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Token(TokenCommand::List(args))) if args.tokens.as_os_str() == "t.json"
        ));
        let cli = Cli::try_parse_from(["stq", "token", "revoke", "ops"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Token(TokenCommand::Revoke(args))) if args.name == "ops"
        ));

        for bad in [
            &["token", "new", "--stations", "*"][..],
            &["token", "new", "--name", "x"],
            &["token", "new", "--name", "", "--stations", "*"],
            &["token", "new", "--name", "a\tb", "--stations", "*"],
            &["token", "new", "--name", "x", "--stations", " , "],
            &[
                "token",
                "new",
                "--name",
                "x",
                "--stations",
                "*",
                "--expires",
                "2027-01-01",
            ],
            &[
                "token",
                "new",
                "--name",
                "x",
                "--stations",
                "*",
                "--expires",
                "2027-01-01 00:00:00Z",
            ],
            &["token", "revoke"],
            &["token"],
        ] {
            assert!(
                Cli::try_parse_from(std::iter::once("stq").chain(bad.iter().copied())).is_err(),
                "{bad:?}"
            );
        }
    }

    /// Issue 32: `--cache-size` reads binary and decimal units, and refuses what
    /// is not a size.
    #[test]
    fn issue_32_cache_sizes_read_as_the_flag_documents_them() {
        let serve = |flags: &[&str]| {
            Cli::try_parse_from(std::iter::once("stq").chain(flags.iter().copied()))
                .map(|cli| cli.serve)
        };
        assert_eq!(serve(&[]).unwrap().cache_size, 1 << 30);
        for (text, bytes) in [
            ("512MiB", 512 << 20),
            ("2GiB", 2 << 30),
            ("1 GB", 1_000_000_000),
            ("65536", 65_536),
        ] {
            assert_eq!(
                serve(&["--cache-size", text]).unwrap().cache_size,
                bytes,
                "{text}"
            );
        }
        for bad in ["lots", "-1GiB", "1 parsec", ""] {
            assert!(serve(&["--cache-size", bad]).is_err(), "{bad}");
        }
    }
}
