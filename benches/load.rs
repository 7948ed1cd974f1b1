//! Load benchmark of stq over loopback with wrk. Run it with `bash benches/load.sh`
//! (which installs wrk and builds the release binary), or `cargo bench --bench load`
//! when wrk is already there.
//!
//! It generates the 100-station dataset with `stq gen`, starts the release binary on
//! it, and drives four dashboard queries with wrk, each request with its own
//! parameters drawn from the data (real stations, serials and metric names, windows
//! inside the data's span). Then, for each query, it drives "the limit": a minimal
//! actix-web server with stq's worker count that answers every request with a fixed
//! JSON body of stq's mean body size, through the same paths and the same wrk
//! script. The ratio says how much of what HTTP over loopback allows on this machine
//! stq reaches. It prints a table and writes it as Markdown to
//! `target/load-report.md`.
//!
//! The limit server is this same binary started with `--serve-limit BYTES`: a process
//! of its own, like stq, so that both are measured the same way.
//!
//! `cargo bench --bench load -- --prepare` only makes the dataset, the tokens file and
//! the request paths, and exits: `benches/soak.sh` drives its load from them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _};
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// The `stq gen` flags of the dataset: 100 stations, a week, ~360 MB of JSONL.
const GEN_FLAGS: [&str; 10] = [
    "--stations",
    "100",
    "--days",
    "7",
    "--units-per-hour",
    "6",
    "--seed",
    "42",
    "--end",
    "2026-11-01T00:00:00Z",
];
/// The bearer token the benchmark sends; the tokens file lets it see every station.
const TOKEN: &str = "stq-load-benchmark";
/// Distinct request paths per query, so that no cache sees one request repeated.
const PATHS_PER_QUERY: usize = 5_000;
/// Paths per query checked one by one (status, data, body size) before the runs.
const SAMPLE_SIZE: usize = 200;
/// The share of sampled paths that must answer 200 with data, else the paths are wrong.
const MINIMUM_SHARE_WITH_DATA: f64 = 0.5;
const WRK_THREADS: u32 = 2;
/// Every query runs at this many connections; Q1 also at [`MANY_CONNECTIONS`].
const WRK_CONNECTIONS: u32 = 32;
/// A crowd of dashboards: Q1 is run once more with this many connections.
const MANY_CONNECTIONS: u32 = 256;
const WARM_UP_SECONDS: u64 = 1;
/// The measured duration per query and server; `LOAD_SECONDS` overrides it.
const DEFAULT_MEASURED_SECONDS: u64 = 5;
/// stq and the limit take turns this many times per query, so that a machine that
/// slows down or speeds up during the run does so for both; the report gives the
/// median of each and the median of the rounds' ratios.
const ROUNDS: usize = 3;
/// How long a server may take to load and say it is listening.
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// Seeds the path generator, so that every run sends the same requests.
const PATHS_SEED: u64 = 2026;
/// Sent by the limit server as `X-Request-Id`, as long as stq's UUIDs, so that
/// both answer with headers of about the same size.
const LIMIT_REQUEST_ID: &str = "00000000-0000-4000-8000-000000000000";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let result = if let Some(position) = arguments.iter().position(|a| a == "--serve-limit") {
        serve_limit(arguments.get(position + 1).map(String::as_str))
    } else if arguments.iter().any(|argument| argument == "--prepare") {
        // Checked before `--bench`, which `cargo bench` always passes.
        prepare()
    } else if arguments.iter().any(|argument| argument == "--bench") {
        run_benchmark()
    } else {
        // `cargo test --benches` runs bench binaries without `--bench`: a load run
        // of minutes has no place there.
        println!("load benchmark skipped: run it with `bash benches/load.sh`");
        Ok(())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("load benchmark failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where everything lives: the stq binary Cargo built for this bench, and the
/// working directory `target/load/`.
struct Layout {
    stq: PathBuf,
    target: PathBuf,
    work: PathBuf,
    wrk_script: PathBuf,
}

impl Layout {
    fn new() -> anyhow::Result<Layout> {
        // Cargo builds the package's binaries for a bench and names them here, so
        // the binary measured is always the current one (`target/release/stq`).
        let stq = PathBuf::from(env!("CARGO_BIN_EXE_stq"));
        let target = stq
            .parent()
            .and_then(Path::parent)
            .context("the stq binary is not in a target directory")?
            .to_path_buf();
        let work = target.join("load");
        fs::create_dir_all(&work)?;
        Ok(Layout {
            stq,
            wrk_script: Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/load/paths.lua"),
            target,
            work,
        })
    }

    fn snapshots(&self) -> PathBuf {
        self.work.join("snapshot")
    }

    fn pid_file(&self) -> PathBuf {
        self.work.join("pids")
    }
}

fn run_benchmark() -> anyhow::Result<()> {
    let started = Instant::now();
    let layout = Layout::new()?;
    let pids = PidFile::create(&layout.pid_file())?;
    let measured_seconds = measured_seconds()?;

    ensure_dataset(&layout)?;
    let dataset = Dataset::scan(&layout.snapshots())?;
    println!(
        "dataset: {} stations, {} unit and {} metric records, {:.1} MB of JSONL, {} to {}",
        dataset.stations.len(),
        dataset.unit_records,
        dataset.metric_records,
        dataset.jsonl_bytes as f64 / 1e6,
        rfc3339(dataset.first_second),
        rfc3339(dataset.end_second),
    );
    let tokens = write_tokens_file(&layout)?;
    let paths = write_paths(&layout, &dataset)?;

    let stq = start_stq(&layout.stq, &layout, &tokens, &pids, "stq")?;
    // `LOAD_CANDIDATE=/path/to/stq`: a second build measured in the same rounds, for
    // an interleaved A/B of two designs.
    let candidate = match std::env::var_os("LOAD_CANDIDATE") {
        Some(path) => Some(start_stq(
            Path::new(&path),
            &layout,
            &tokens,
            &pids,
            "candidate",
        )?),
        None => None,
    };
    let startup = Startup::measure(&stq, dataset.jsonl_bytes)?;
    println!(
        "stq ready at {}: loaded in {:.0} ms ({:.1} MB at {:.0} MB/s), RSS {:.1} MB = {:.2} x the JSONL bytes",
        stq.address,
        startup.load.milliseconds,
        startup.load.megabytes,
        startup.load.megabytes_per_second,
        startup.rss_bytes as f64 / 1e6,
        startup.rss_bytes as f64 / startup.jsonl_bytes as f64,
    );

    // `LOAD_QUERIES=Q1,Q3`: only these queries (a quicker, partial run).
    let only = std::env::var("LOAD_QUERIES").ok();
    let chosen = |query: &Query| {
        only.as_deref()
            .is_none_or(|names| names.split(',').any(|name| name.trim() == query.name))
    };
    let mut runs: Vec<(&'static Query, &PathBuf, u32)> = QUERIES
        .iter()
        .zip(&paths)
        .map(|(query, paths_file)| (query, paths_file, WRK_CONNECTIONS))
        .collect();
    runs.push((&QUERIES[0], &paths[0], MANY_CONNECTIONS));
    let mut outcomes = Vec::new();
    for (query, paths_file, connections) in runs {
        if !chosen(query) {
            continue;
        }
        outcomes.push(measure_query(
            &layout,
            Measured {
                query,
                paths_file,
                connections,
            },
            &stq,
            candidate.as_ref(),
            &pids,
            measured_seconds,
        )?);
    }
    let rss_after_runs = resident_bytes(stq.process.id())?;
    drop(stq);
    drop(candidate);

    let report = Report {
        outcomes,
        startup,
        rss_after_runs,
        machine: Machine::describe(),
        measured_seconds,
        candidate: std::env::var("LOAD_CANDIDATE").ok().map(|path| {
            match std::env::var("LOAD_CANDIDATE_ARGS") {
                Ok(arguments) => format!("{path} serve {arguments}"),
                Err(_) => path,
            }
        }),
    }
    .to_markdown();
    println!("\n{report}");
    let report_path = layout.target.join("load-report.md");
    fs::write(&report_path, &report)?;
    println!(
        "written to {}; the whole run took {:.0} s",
        report_path.display(),
        started.elapsed().as_secs_f64()
    );
    pids.remove();
    Ok(())
}

/// `cargo bench --bench load -- --prepare`: only the dataset, the tokens file and
/// the paths files under `target/load/`, the same as a benchmark run makes them,
/// for other drivers of the same load (`benches/soak.sh`) to reuse. Starts nothing.
fn prepare() -> anyhow::Result<()> {
    let layout = Layout::new()?;
    ensure_dataset(&layout)?;
    let dataset = Dataset::scan(&layout.snapshots())?;
    write_tokens_file(&layout)?;
    for path in write_paths(&layout, &dataset)? {
        println!("paths: {}", path.display());
    }
    println!("snapshot: {}", layout.snapshots().display());
    Ok(())
}

/// `LOAD_SECONDS`, for a quicker (noisier) run, else 10 s.
fn measured_seconds() -> anyhow::Result<u64> {
    match std::env::var("LOAD_SECONDS") {
        Ok(text) => text.parse().context("LOAD_SECONDS must be a whole number"),
        Err(_) => Ok(DEFAULT_MEASURED_SECONDS),
    }
}

// ---------------------------------------------------------------------------
// Processes

/// The pids of every process the benchmark starts, itself first, one per line:
/// `load.sh`'s trap stops them by pid when the benchmark is killed before its
/// guards can.
struct PidFile {
    path: PathBuf,
}

impl PidFile {
    fn create(path: &Path) -> anyhow::Result<PidFile> {
        fs::write(path, format!("{}\n", std::process::id()))?;
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }

    fn add(&self, pid: u32) -> anyhow::Result<()> {
        let mut file = OpenOptions::new().append(true).open(&self.path)?;
        writeln!(file, "{pid}")?;
        Ok(())
    }

    fn remove(self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A child process that is killed and reaped when dropped, so that no server or
/// wrk outlives the benchmark, also when it fails half-way.
struct Guarded {
    child: Child,
}

impl Guarded {
    fn spawn(command: &mut Command, pids: &PidFile) -> anyhow::Result<Guarded> {
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let guarded = Guarded { child };
        pids.add(guarded.id())?;
        Ok(guarded)
    }

    fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // Once reaped, `kill` does nothing: it never hits a reused pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that has said it is listening: its process, its base URL and the line
/// that said so.
struct Server {
    process: Guarded,
    address: String,
    ready_line: String,
}

/// Starts a server that logs a line with `listening on http://ADDRESS` to standard
/// error when ready, and waits for that line. Standard error keeps going to
/// `log_path`, so the pipe never fills.
fn start_server(command: &mut Command, log_path: &Path, pids: &PidFile) -> anyhow::Result<Server> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut process = Guarded::spawn(command, pids)?;
    let stderr = process.child.stderr.take().context("no stderr pipe")?;
    let (ready_sender, ready_receiver) = mpsc::channel();
    let mut log = File::create(log_path)?;
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if line.contains("listening on http://") {
                let _ = ready_sender.send(line);
            }
        }
    });

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match ready_receiver.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                let address =
                    listening_address(&line).with_context(|| format!("no address in {line:?}"))?;
                return Ok(Server {
                    process,
                    address,
                    ready_line: line,
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                if let Some(status) = process.child.try_wait()? {
                    bail!(
                        "the server exited ({status}) before listening; see {}",
                        log_path.display()
                    );
                }
            }
            Err(_) => bail!(
                "the server did not say it was listening; see {}",
                log_path.display()
            ),
        }
    }
}

/// `http://127.0.0.1:PORT` out of a line holding `listening on http://127.0.0.1:PORT`.
fn listening_address(line: &str) -> Option<String> {
    let rest = line.split_once("listening on ")?.1;
    let address = rest.split([',', ' ']).next()?.trim();
    address
        .starts_with("http://127.0.0.1:")
        .then(|| address.to_owned())
}

/// Resident memory of a process, from `VmRSS` in `/proc/PID/status`.
fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kilobytes = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .context("no VmRSS in /proc/PID/status")?
        .trim()
        .parse::<u64>()?;
    Ok(kilobytes * 1024)
}

// ---------------------------------------------------------------------------
// Dataset

/// Generates the dataset unless the one there was made with the same flags: the
/// stamp file is written last, so a generation cut short is made again.
fn ensure_dataset(layout: &Layout) -> anyhow::Result<()> {
    let directory = layout.snapshots();
    let stamp = directory.join("gen-flags.txt");
    let flags = GEN_FLAGS.join(" ");
    if fs::read_to_string(&stamp).is_ok_and(|stamped| stamped == flags) {
        println!("reusing the dataset in {} ({flags})", directory.display());
        return Ok(());
    }
    if directory.exists() {
        fs::remove_dir_all(&directory)?;
    }
    println!(
        "generating the dataset in {} ({flags})",
        directory.display()
    );
    let started = Instant::now();
    let status = Command::new(&layout.stq)
        .arg("gen")
        .arg("--out")
        .arg(&directory)
        .args(GEN_FLAGS)
        .status()
        .context("cannot run stq gen")?;
    ensure!(status.success(), "stq gen failed: {status}");
    fs::write(&stamp, flags)?;
    println!("generated in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// What the request paths are drawn from: the stations, each station's serials and
/// metric names, and the span of the data.
struct Dataset {
    stations: Vec<String>,
    serials: BTreeMap<String, Vec<String>>,
    metric_names: BTreeMap<String, Vec<String>>,
    /// The span `[first_second, end_second)` in Unix seconds, from the unit records.
    first_second: i64,
    end_second: i64,
    unit_records: u64,
    metric_records: u64,
    jsonl_bytes: u64,
}

#[derive(Deserialize)]
struct UnitLine {
    station_id: String,
    unit_serial: Option<String>,
    time_created: String,
}

#[derive(Deserialize)]
struct MetricLine {
    station_id: String,
    name: String,
}

impl Dataset {
    /// Reads every `*.units.jsonl` and `*.metrics.jsonl` file below `directory`.
    /// `LOAD_SPAN=last-day`: only the data's last 24 hours, which stq keeps hot at
    /// its default `--hot 24h` (Q1 to Q6 "on the hot window"); windows
    /// of 24 hours are then that day, and Q4's serials those with a record in it.
    fn scan(directory: &Path) -> anyhow::Result<Dataset> {
        let last_day = match std::env::var("LOAD_SPAN") {
            Ok(span) if span == "last-day" => true,
            Ok(span) => bail!("LOAD_SPAN is `last-day` or unset, not `{span}`"),
            Err(_) => false,
        };
        // Per station, each serial and the second of its latest record.
        let mut serials: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        let mut metric_names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut seconds = (i64::MAX, i64::MIN);
        let (mut unit_records, mut metric_records, mut jsonl_bytes) = (0, 0, 0);
        for entry in walkdir::WalkDir::new(directory).sort_by_file_name() {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy();
            if name.ends_with(".jsonl") {
                jsonl_bytes += entry.metadata()?.len();
            }
            let is_units = name.ends_with(".units.jsonl");
            if !is_units && !name.ends_with(".metrics.jsonl") {
                continue;
            }
            let reader = BufReader::new(File::open(entry.path())?);
            for (number, line) in reader.lines().enumerate() {
                let line = line?;
                let context = || format!("{}:{}", entry.path().display(), number + 1);
                if is_units {
                    let unit: UnitLine = serde_json::from_str(&line).with_context(context)?;
                    let second = chrono::DateTime::parse_from_rfc3339(&unit.time_created)
                        .with_context(context)?
                        .timestamp();
                    seconds = (seconds.0.min(second), seconds.1.max(second));
                    let station = serials.entry(unit.station_id).or_default();
                    if let Some(serial) = unit.unit_serial.filter(|serial| !serial.is_empty()) {
                        let latest = station.entry(serial).or_insert(second);
                        *latest = (*latest).max(second);
                    }
                    unit_records += 1;
                } else {
                    let metric: MetricLine = serde_json::from_str(&line).with_context(context)?;
                    let names = metric_names.entry(metric.station_id).or_default();
                    if !names.contains(&metric.name) {
                        names.insert(metric.name);
                    }
                    metric_records += 1;
                }
            }
        }
        ensure!(
            unit_records > 0,
            "no unit records in {}",
            directory.display()
        );
        let end_second = seconds.1 + 1;
        let first_second = match last_day {
            true => (end_second - 86_400).max(seconds.0),
            false => seconds.0,
        };
        let serials: BTreeMap<String, Vec<String>> = (serials.into_iter())
            .map(|(station, latest)| {
                let serials = (latest.into_iter())
                    .filter(|(_, second)| *second >= first_second)
                    .map(|(serial, _)| serial);
                (station, serials.collect())
            })
            .collect();
        let metric_names = (metric_names.into_iter())
            .map(|(station, names)| (station, names.into_iter().collect()))
            .collect();
        Ok(Dataset {
            stations: serials.keys().cloned().collect(),
            serials,
            metric_names,
            first_second,
            end_second,
            unit_records,
            metric_records,
            jsonl_bytes,
        })
    }

    fn random_station(&self, random: &mut ChaCha8Rng) -> &str {
        self.stations.choose(random).expect("stations")
    }

    /// A window of `seconds` at a random place inside the data's span.
    fn random_window(&self, random: &mut ChaCha8Rng, seconds: i64) -> (String, String) {
        let latest_start = (self.end_second - seconds).max(self.first_second);
        let from = random.gen_range(self.first_second..=latest_start);
        (rfc3339(from), rfc3339(from + seconds))
    }

    /// The whole span of the data.
    fn whole_window(&self) -> (String, String) {
        (rfc3339(self.first_second), rfc3339(self.end_second))
    }
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(second: i64) -> String {
    chrono::DateTime::from_timestamp(second, 0)
        .expect("a second inside chrono's range")
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A tokens file with one token that may see every station.
fn write_tokens_file(layout: &Layout) -> anyhow::Result<PathBuf> {
    let mut hasher = Command::new(&layout.stq)
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run stq hash-token")?;
    hasher
        .stdin
        .take()
        .context("no stdin pipe")?
        .write_all(TOKEN.as_bytes())?;
    let output = hasher.wait_with_output()?;
    ensure!(output.status.success(), "stq hash-token failed");
    let sha256 = String::from_utf8(output.stdout)?.trim().to_owned();
    let tokens = serde_json::json!({
        "tokens": [{"name": "load-benchmark", "sha256": sha256, "stations": "*"}]
    });
    let path = layout.work.join("tokens.json");
    fs::write(&path, serde_json::to_string_pretty(&tokens)?)?;
    Ok(path)
}

// ---------------------------------------------------------------------------
// Queries

/// One dashboard query: how to draw one request path of it from the data.
struct Query {
    name: &'static str,
    description: &'static str,
    draw_path: fn(&Dataset, &mut ChaCha8Rng) -> String,
}

const QUERIES: [Query; 11] = [
    Query {
        name: "Q1",
        description: "/units, 1 station, 1 h",
        draw_path: one_station_hour_of_units,
    },
    Query {
        name: "Q2",
        description: "/metrics, 5 stations, 2 names, 24 h",
        draw_path: five_stations_day_of_two_metrics,
    },
    Query {
        name: "Q3",
        description: "/units, all stations, 15 min",
        draw_path: all_stations_quarter_hour_of_units,
    },
    Query {
        name: "Q4",
        description: "/units, 1 serial, both directions, 7 d",
        draw_path: one_serial_whole_span,
    },
    Query {
        name: "Q5",
        description: "/units, all stations, 24 h",
        draw_path: all_stations_day_of_units,
    },
    Query {
        name: "Q6",
        description: "/units/summary, all stations, 24 h, 1 h buckets",
        draw_path: all_stations_day_of_yields,
    },
    Query {
        name: "Q7",
        description: "/units, 1 station, 1 h of the last day (the hot window)",
        draw_path: one_station_hour_of_the_last_day,
    },
    Query {
        name: "H1",
        description: "/units, 1 station, 1 h, 3 days back",
        draw_path: one_station_hour_three_days_back,
    },
    Query {
        name: "H2",
        description: "/units/summary, all stations, 7 d, 1 d buckets",
        draw_path: all_stations_week_of_daily_yields,
    },
    // Last, so that the queries before draw the same paths as before them.
    Query {
        name: "Q6z",
        description: "/units/summary, all stations, 24 h, 1 h buckets of Europe/Berlin",
        draw_path: all_stations_day_of_local_yields,
    },
    Query {
        name: "Q8",
        description: "/metrics/summary, all stations, 24 h",
        draw_path: all_stations_day_of_measurement_statistics,
    },
];

/// Q1: one station's finished units over an hour (the default direction, output).
fn one_station_hour_of_units(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let station = dataset.random_station(random);
    let (from, to) = dataset.random_window(random, 3600);
    format!("/units?station_ids={station}&from={from}&to={to}")
}

/// Q2: two metric names over a day on five stations; the names are drawn from
/// those the five stations record, as a dashboard panel would offer them.
fn five_stations_day_of_two_metrics(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let stations: Vec<&String> = dataset.stations.choose_multiple(random, 5).collect();
    let offered: BTreeSet<&String> = stations
        .iter()
        .filter_map(|station| dataset.metric_names.get(*station))
        .flatten()
        .collect();
    let offered: Vec<&String> = offered.into_iter().collect();
    let names: Vec<&str> = offered
        .choose_multiple(random, 2)
        .map(|name| name.as_str())
        .collect();
    let station_ids: Vec<&str> = stations.iter().map(|station| station.as_str()).collect();
    let (from, to) = dataset.random_window(random, 24 * 3600);
    format!(
        "/metrics?station_ids={}&names={}&from={from}&to={to}",
        station_ids.join(","),
        names.join(",")
    )
}

/// Q3: every station's finished units over a quarter of an hour.
fn all_stations_quarter_hour_of_units(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let (from, to) = dataset.random_window(random, 15 * 60);
    format!("/units?from={from}&to={to}")
}

/// Q4: one unit's way through its station, both directions, over the whole week.
fn one_serial_whole_span(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let station = dataset.random_station(random);
    let serial = dataset.serials[station]
        .choose(random)
        .expect("every station has units");
    let (from, to) = dataset.whole_window();
    format!(
        "/units?station_ids={station}&serial_number={serial}&direction=input,output&from={from}&to={to}"
    )
}

/// Q5: every station's finished units over a day: what a yield dashboard would
/// fetch without summaries, Q6's raw counterpart.
fn all_stations_day_of_units(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let (from, to) = dataset.random_window(random, 24 * 3600);
    format!("/units?from={from}&to={to}")
}

/// Q6: the yield table of every station over a day, by hour: reads what Q5 reads
/// and sends rows instead of records.
fn all_stations_day_of_yields(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let (from, to) = dataset.random_window(random, 24 * 3600);
    format!("/units/summary?from={from}&to={to}&bucket=1h")
}

/// Q7: Q1 within the last day, the records `--hot 24h` keeps hot.
fn one_station_hour_of_the_last_day(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let station = dataset.random_station(random);
    let from = random.gen_range(dataset.end_second - 23 * 3600..=dataset.end_second - 3600);
    let (from, to) = (rfc3339(from), rfc3339(from + 3600));
    format!("/units?station_ids={station}&from={from}&to={to}")
}

/// H1: one station's hour three days before the data's end: sealed at the
/// default `--hot`.
fn one_station_hour_three_days_back(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let station = dataset.random_station(random);
    let three_days_back = dataset.end_second - 3 * 86_400;
    let from = random.gen_range(three_days_back - 86_400..=three_days_back - 3600);
    let (from, to) = (rfc3339(from), rfc3339(from + 3600));
    format!("/units?station_ids={station}&from={from}&to={to}")
}

/// H2: every station's yield of each day of the week; the window starts
/// at a random second of the first hour, so that no two paths are the same.
fn all_stations_week_of_daily_yields(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    let from = dataset.first_second + random.gen_range(0..3600);
    let (from, to) = (rfc3339(from), rfc3339(dataset.end_second));
    format!("/units/summary?from={from}&to={to}&bucket=1d")
}

/// Q6z: Q6 cut at a plant's local hours, the shape its cost target is
/// set on.
fn all_stations_day_of_local_yields(dataset: &Dataset, random: &mut ChaCha8Rng) -> String {
    all_stations_day_of_yields(dataset, random) + "&tz=Europe/Berlin"
}

/// Q8: every station's statistics and capability of each measurement over a day,
/// a capability table. By hour it would be 12 MB of rows, which no
/// dashboard draws.
fn all_stations_day_of_measurement_statistics(
    dataset: &Dataset,
    random: &mut ChaCha8Rng,
) -> String {
    let (from, to) = dataset.random_window(random, 24 * 3600);
    format!("/metrics/summary?from={from}&to={to}")
}

/// Draws `PATHS_PER_QUERY` paths per query into `target/load/paths-QN.txt`, the
/// list wrk's script picks from.
fn write_paths(layout: &Layout, dataset: &Dataset) -> anyhow::Result<Vec<PathBuf>> {
    let mut random = ChaCha8Rng::seed_from_u64(PATHS_SEED);
    QUERIES
        .iter()
        .map(|query| {
            let mut text = String::new();
            for _ in 0..PATHS_PER_QUERY {
                text.push_str(&(query.draw_path)(dataset, &mut random));
                text.push('\n');
            }
            let path = layout.work.join(format!("paths-{}.txt", query.name));
            fs::write(&path, text)?;
            Ok(path)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// stq

fn start_stq(
    binary: &Path,
    layout: &Layout,
    tokens: &Path,
    pids: &PidFile,
    name: &str,
) -> anyhow::Result<Server> {
    println!("starting {}", binary.display());
    let mut command = Command::new(binary);
    // `LOAD_CANDIDATE_ARGS="--max-concurrent-queries 100000"`: flags for the
    // candidate only, to A/B a setting with one build (`LOAD_CANDIDATE` names it).
    if name == "candidate" {
        if let Ok(arguments) = std::env::var("LOAD_CANDIDATE_ARGS") {
            command.args(["serve"]).args(arguments.split_whitespace());
        } else {
            command.arg("serve");
        }
    } else {
        command.arg("serve");
    }
    command
        // Port 0: the kernel picks a free port, and stq logs the one it got.
        .args(["--listen", "127.0.0.1:0"])
        // Two servers may run at once (`LOAD_CANDIDATE`).
        .args(["--admin-listen", "127.0.0.1:0"])
        .arg("--snapshots")
        .arg(layout.snapshots())
        .arg("--tokens")
        .arg(tokens)
        .env("RUST_LOG", "info");
    start_server(&mut command, &layout.work.join(format!("{name}.log")), pids)
}

/// stq's start-up: what its ready line says, and its resident memory then.
struct Startup {
    load: LoadFigures,
    rss_bytes: u64,
    jsonl_bytes: u64,
}

impl Startup {
    fn measure(stq: &Server, jsonl_bytes: u64) -> anyhow::Result<Startup> {
        let load = LoadFigures::parse(&stq.ready_line)
            .with_context(|| format!("no load figures in {:?}", stq.ready_line))?;
        Ok(Startup {
            load,
            rss_bytes: resident_bytes(stq.process.id())?,
            jsonl_bytes,
        })
    }
}

/// `loaded in N ms (X MB at Y MB/s)` from stq's ready line.
struct LoadFigures {
    milliseconds: f64,
    megabytes: f64,
    megabytes_per_second: f64,
}

impl LoadFigures {
    fn parse(line: &str) -> Option<LoadFigures> {
        let rest = line.split_once("loaded in ")?.1;
        let (milliseconds, rest) = rest.split_once(" ms (")?;
        let (megabytes, rest) = rest.split_once(" MB at ")?;
        let (rate, _) = rest.split_once(" MB/s")?;
        Some(LoadFigures {
            milliseconds: milliseconds.trim().parse().ok()?,
            megabytes: megabytes.trim().parse().ok()?,
            megabytes_per_second: rate.trim().parse().ok()?,
        })
    }
}

// ---------------------------------------------------------------------------
// The limit server

/// The limit server's mode of this binary: every request gets `200` with the same
/// JSON body of `BYTES` bytes, on as many workers as stq has (one per CPU).
fn serve_limit(body_bytes: Option<&str>) -> anyhow::Result<()> {
    use actix_web::{web, App, HttpResponse, HttpServer};

    let body_bytes: usize = body_bytes
        .context("usage: --serve-limit BYTES")?
        .parse()
        .context("BYTES must be a whole number")?;
    let body = web::Bytes::from(fixed_json_body(body_bytes));
    let workers = thread::available_parallelism().map_or(1, std::num::NonZero::get);
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            let body = body.clone();
            App::new().default_service(web::to(move || {
                let body = body.clone();
                async move {
                    HttpResponse::Ok()
                        .content_type("application/json")
                        .insert_header(("x-request-id", LIMIT_REQUEST_ID))
                        .body(body)
                }
            }))
        })
        .workers(workers)
        .bind("127.0.0.1:0")?;
        let address = server.addrs().first().copied().context("no address")?;
        eprintln!(
            "limit server: {body_bytes} bytes per body, {workers} workers, listening on http://{address}"
        );
        server.run().await?;
        Ok(())
    })
}

/// A JSON object of exactly `bytes` bytes (at least 10).
fn fixed_json_body(bytes: usize) -> String {
    format!("{{\"pad\":\"{}\"}}", "x".repeat(bytes.saturating_sub(10)))
}

fn start_limit(
    layout: &Layout,
    query: &Query,
    body_bytes: usize,
    pids: &PidFile,
) -> anyhow::Result<Server> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(["--serve-limit", &body_bytes.to_string()]);
    let log = layout.work.join(format!("limit-{}.log", query.name));
    start_server(&mut command, &log, pids)
}

// ---------------------------------------------------------------------------
// Measuring

/// What one query gave: the sample check against stq, and wrk's figures for stq and
/// for the limit.
struct Outcome {
    query: &'static Query,
    connections: u32,
    sample: SampleCheck,
    /// The round with the median request rate, for each server.
    stq: WrkFigures,
    limit: WrkFigures,
    /// stq's rate over the limit's, round by round, in ascending order.
    ratios: Vec<f64>,
    /// The same for `LOAD_CANDIDATE`, when one is measured.
    candidate: Option<(WrkFigures, Vec<f64>)>,
}

impl Outcome {
    fn median_ratio(&self) -> f64 {
        median(&self.ratios)
    }

    fn name(&self) -> String {
        if self.connections == WRK_CONNECTIONS {
            self.query.name.to_owned()
        } else {
            format!("{} @{}", self.query.name, self.connections)
        }
    }
}

/// The median of values in ascending order.
fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

/// What one run measures: a query's paths at a number of connections.
struct Measured<'a> {
    query: &'static Query,
    paths_file: &'a Path,
    connections: u32,
}

/// The round whose request rate is the median of the rounds.
fn median_round(mut rounds: Vec<WrkFigures>) -> WrkFigures {
    rounds.sort_by(|left, right| {
        left.requests_per_second()
            .total_cmp(&right.requests_per_second())
    });
    rounds.swap_remove(rounds.len() / 2)
}

fn measure_query(
    layout: &Layout,
    measured: Measured<'_>,
    stq: &Server,
    candidate: Option<&Server>,
    pids: &PidFile,
    measured_seconds: u64,
) -> anyhow::Result<Outcome> {
    let Measured {
        query,
        paths_file,
        connections,
    } = measured;
    println!(
        "\n{} {}, {connections} connections",
        query.name, query.description
    );
    let paths: Vec<String> = fs::read_to_string(paths_file)?
        .lines()
        .map(str::to_owned)
        .collect();
    println!("  e.g. {}", paths[0]);
    let sample = SampleCheck::run(&stq.address, &paths[..SAMPLE_SIZE.min(paths.len())])?;
    sample.print();
    ensure!(
        sample.share_with_data() >= MINIMUM_SHARE_WITH_DATA,
        "{}: only {:.0}% of the sampled paths answer 200 with data",
        query.name,
        100.0 * sample.share_with_data()
    );

    let run = |server: &str, address: &str, round: usize| -> anyhow::Result<WrkFigures> {
        let label = format!("{server}-{}-{connections}-round-{round}", query.name);
        let wrk = Wrk {
            layout,
            address,
            paths_file,
            pids,
            connections,
        };
        wrk.run(&format!("{label}-warm-up"), WARM_UP_SECONDS)?;
        let figures = wrk.run(&label, measured_seconds)?;
        figures.print(server, &sample);
        Ok(figures)
    };
    let body_bytes = sample.mean_body_bytes().round() as usize;
    let limit = start_limit(layout, query, body_bytes, pids)?;
    let mut stq_rounds = Vec::with_capacity(ROUNDS);
    let mut limit_rounds = Vec::with_capacity(ROUNDS);
    let mut candidate_rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        stq_rounds.push(run("stq", &stq.address, round)?);
        if let Some(candidate) = candidate {
            candidate_rounds.push(run("candidate", &candidate.address, round)?);
        }
        limit_rounds.push(run("limit", &limit.address, round)?);
    }
    drop(limit);
    let ratios = |rounds: &[WrkFigures]| {
        let mut ratios: Vec<f64> = rounds
            .iter()
            .zip(&limit_rounds)
            .map(|(server, limit)| server.requests_per_second() / limit.requests_per_second())
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    };
    let stq_ratios = ratios(&stq_rounds);
    let candidate = if candidate_rounds.is_empty() {
        None
    } else {
        let candidate_ratios = ratios(&candidate_rounds);
        Some((median_round(candidate_rounds), candidate_ratios))
    };
    Ok(Outcome {
        query,
        connections,
        sample,
        stq: median_round(stq_rounds),
        limit: median_round(limit_rounds),
        ratios: stq_ratios,
        candidate,
    })
}

/// A sample of a query's paths sent one by one: how many answer 200 with data,
/// and the mean body size (which the limit server then answers with).
struct SampleCheck {
    requested: usize,
    with_data: usize,
    statuses: BTreeMap<u16, usize>,
    body_bytes: usize,
    first_failure: Option<String>,
}

impl SampleCheck {
    fn run(address: &str, paths: &[String]) -> anyhow::Result<SampleCheck> {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        let mut check = SampleCheck {
            requested: 0,
            with_data: 0,
            statuses: BTreeMap::new(),
            body_bytes: 0,
            first_failure: None,
        };
        for path in paths {
            let answer = agent
                .get(&format!("{address}{path}"))
                .set("Authorization", &format!("Bearer {TOKEN}"))
                .call();
            let response = match answer {
                Ok(response) => response,
                Err(ureq::Error::Status(_, response)) => response,
                Err(error) => return Err(anyhow!("GET {path}: {error}")),
            };
            let status = response.status();
            let mut body = Vec::new();
            response.into_reader().read_to_end(&mut body)?;
            check.record(path, status, &body);
        }
        Ok(check)
    }

    fn record(&mut self, path: &str, status: u16, body: &[u8]) {
        self.requested += 1;
        self.body_bytes += body.len();
        *self.statuses.entry(status).or_default() += 1;
        let has_data = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|value| value["data"].as_array().map(|data| !data.is_empty()))
            .unwrap_or(false);
        if status == 200 && has_data {
            self.with_data += 1;
        } else if self.first_failure.is_none() {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
            self.first_failure = Some(format!("{path} -> {status} {text}"));
        }
    }

    fn share_with_data(&self) -> f64 {
        self.with_data as f64 / self.requested.max(1) as f64
    }

    fn mean_body_bytes(&self) -> f64 {
        self.body_bytes as f64 / self.requested.max(1) as f64
    }

    fn print(&self) {
        println!(
            "  sample of {}: {:.1}% answer 200 with data, statuses {:?}, mean body {:.0} bytes",
            self.requested,
            100.0 * self.share_with_data(),
            self.statuses,
            self.mean_body_bytes()
        );
        if let Some(failure) = &self.first_failure {
            println!("  first without data: {failure}");
        }
    }
}

/// One wrk run against one server, through `benches/load/paths.lua`.
struct Wrk<'a> {
    layout: &'a Layout,
    address: &'a str,
    paths_file: &'a Path,
    pids: &'a PidFile,
    connections: u32,
}

impl Wrk<'_> {
    /// Runs wrk for `seconds` and parses the `LOAD-RESULT` line its script prints;
    /// wrk's whole output is kept in `target/load/wrk-LABEL.txt`.
    fn run(&self, label: &str, seconds: u64) -> anyhow::Result<WrkFigures> {
        let mut command = Command::new("wrk");
        command
            .arg("--latency")
            .args(["--threads", &WRK_THREADS.to_string()])
            .args(["--connections", &self.connections.to_string()])
            .args(["--duration", &format!("{seconds}s")])
            // Slow answers count in the latencies instead of vanishing as timeouts.
            .args(["--timeout", "10s"])
            .arg("--script")
            .arg(&self.layout.wrk_script)
            .arg(self.address)
            .arg("--")
            .arg(self.paths_file)
            .arg(TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut process = Guarded::spawn(&mut command, self.pids)
            .context("cannot run wrk (is it installed? `bash benches/load.sh` installs it)")?;
        let mut output = String::new();
        process
            .child
            .stdout
            .take()
            .context("no stdout pipe")?
            .read_to_string(&mut output)?;
        let status = process.child.wait()?;
        fs::write(self.layout.work.join(format!("wrk-{label}.txt")), &output)?;
        ensure!(status.success(), "wrk failed ({status}):\n{output}");
        WrkFigures::parse(&output).with_context(|| format!("no LOAD-RESULT line in:\n{output}"))
    }
}

/// wrk's counters of one run, as `paths.lua`'s done() prints them (latencies in
/// microseconds).
#[derive(Deserialize)]
struct WrkFigures {
    requests: f64,
    bytes: f64,
    duration_us: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    connect_errors: f64,
    read_errors: f64,
    write_errors: f64,
    timeout_errors: f64,
    non_2xx_or_3xx: f64,
}

impl WrkFigures {
    fn parse(output: &str) -> Option<WrkFigures> {
        let json = output
            .lines()
            .find_map(|line| line.strip_prefix("LOAD-RESULT "))?;
        serde_json::from_str(json).ok()
    }

    fn requests_per_second(&self) -> f64 {
        self.requests / (self.duration_us / 1e6)
    }

    /// Bytes wrk read per response, headers included.
    fn bytes_per_response(&self) -> f64 {
        self.bytes / self.requests.max(1.0)
    }

    /// Non-2xx answers and socket errors, or None when there were none.
    fn errors(&self) -> Option<String> {
        let counts = [
            ("non-2xx/3xx", self.non_2xx_or_3xx),
            ("connect", self.connect_errors),
            ("read", self.read_errors),
            ("write", self.write_errors),
            ("timeout", self.timeout_errors),
        ];
        let errors: Vec<String> = counts
            .iter()
            .filter(|(_, count)| *count > 0.0)
            .map(|(kind, count)| format!("{kind} {count:.0}"))
            .collect();
        (!errors.is_empty()).then(|| errors.join(", "))
    }

    fn print(&self, server: &str, sample: &SampleCheck) {
        println!(
            "  {server:5}: {:>9.0} req/s, p50 {}, p99 {}, {:.0} bytes/response read by wrk \
             (mean body of the sample {:.0})",
            self.requests_per_second(),
            milliseconds(self.latency_p50_us),
            milliseconds(self.latency_p99_us),
            self.bytes_per_response(),
            sample.mean_body_bytes(),
        );
        if let Some(errors) = self.errors() {
            println!("  {server:5}: ERRORS: {errors}");
        }
    }
}

/// Microseconds as milliseconds with three significant digits or so.
fn milliseconds(microseconds: f64) -> String {
    let milliseconds = microseconds / 1000.0;
    if milliseconds < 10.0 {
        format!("{milliseconds:.2} ms")
    } else {
        format!("{milliseconds:.1} ms")
    }
}

// ---------------------------------------------------------------------------
// Report

/// The machine the numbers come from.
struct Machine {
    cpus: String,
    cpu_model: String,
    kernel: String,
}

impl Machine {
    fn describe() -> Machine {
        let nproc = Command::new("nproc")
            .output()
            .ok()
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
        let cpu_model = fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        });
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|text| text.trim().to_owned());
        let unknown = || "unknown".to_owned();
        Machine {
            cpus: nproc.unwrap_or_else(unknown),
            cpu_model: cpu_model.unwrap_or_else(unknown),
            kernel: kernel.unwrap_or_else(unknown),
        }
    }
}

struct Report {
    outcomes: Vec<Outcome>,
    startup: Startup,
    rss_after_runs: u64,
    machine: Machine,
    measured_seconds: u64,
    /// `LOAD_CANDIDATE`'s path, when a second build was measured.
    candidate: Option<String>,
}

impl Report {
    fn to_markdown(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "wrk {WRK_THREADS} threads, {WRK_CONNECTIONS} connections (Q1 also \
             {MANY_CONNECTIONS}), {PATHS_PER_QUERY} paths per query; {ROUNDS} rounds per query in which stq and the limit take turns, {} s each \
             after a {WARM_UP_SECONDS} s warm-up; req/s, latencies and bytes are each server's \
             median round, stq/limit the median of the rounds' ratios. The limit: actix-web \
             with stq's worker count, a fixed body of stq's mean body size.\n",
            self.measured_seconds
        );
        if let Some(candidate) = &self.candidate {
            let _ = writeln!(
                text,
                "The candidate, `{candidate}`, ran in the same rounds, after stq and before \
                 the limit.\n"
            );
        }
        text.push_str(&self.queries_table());
        let errors = self.errors();
        if !errors.is_empty() {
            text.push('\n');
            for line in errors {
                let _ = writeln!(text, "- {line}");
            }
        }
        text.push('\n');
        text.push_str(&self.startup_table());
        text.push('\n');
        text.push_str(&table(
            &["machine", ""],
            &[
                vec!["nproc".into(), self.machine.cpus.clone()],
                vec!["CPU".into(), self.machine.cpu_model.clone()],
                vec!["kernel".into(), self.machine.kernel.clone()],
            ],
        ));
        text
    }

    fn queries_table(&self) -> String {
        let mut header = vec![
            "query",
            "stq req/s",
            "limit req/s",
            "stq/limit",
            "rounds' ratios",
            "stq p50",
            "stq p99",
            "limit p50",
            "limit p99",
            "stq bytes/resp (wrk)",
            "stq body (sample)",
            "limit bytes/resp (wrk)",
        ];
        if self.candidate.is_some() {
            header.extend(["candidate req/s", "candidate/limit", "candidate p99"]);
        }
        let rows: Vec<Vec<String>> = self
            .outcomes
            .iter()
            .map(|outcome| {
                let (stq, limit) = (&outcome.stq, &outcome.limit);
                let mut row = vec![
                    format!("{} {}", outcome.name(), outcome.query.description),
                    format!("{:.0}", stq.requests_per_second()),
                    format!("{:.0}", limit.requests_per_second()),
                    format!("{:.2}", outcome.median_ratio()),
                    outcome
                        .ratios
                        .iter()
                        .map(|ratio| format!("{ratio:.2}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    milliseconds(stq.latency_p50_us),
                    milliseconds(stq.latency_p99_us),
                    milliseconds(limit.latency_p50_us),
                    milliseconds(limit.latency_p99_us),
                    format!("{:.0}", stq.bytes_per_response()),
                    format!("{:.0}", outcome.sample.mean_body_bytes()),
                    format!("{:.0}", limit.bytes_per_response()),
                ];
                if let Some((candidate, ratios)) = &outcome.candidate {
                    row.extend([
                        format!("{:.0}", candidate.requests_per_second()),
                        format!("{:.2}", median(ratios)),
                        milliseconds(candidate.latency_p99_us),
                    ]);
                }
                row
            })
            .collect();
        table(&header, &rows)
    }

    /// One line per run that had non-2xx answers or socket errors.
    fn errors(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for outcome in &self.outcomes {
            let candidate = outcome.candidate.as_ref().map(|(figures, _)| figures);
            let servers = [("stq", Some(&outcome.stq)), ("limit", Some(&outcome.limit))]
                .into_iter()
                .chain([("candidate", candidate)]);
            for (server, figures) in servers {
                if let Some(errors) = figures.and_then(WrkFigures::errors) {
                    lines.push(format!("{} {server}: {errors}", outcome.name()));
                }
            }
        }
        lines
    }

    fn startup_table(&self) -> String {
        let startup = &self.startup;
        let megabytes = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1e6);
        table(
            &["start-up", ""],
            &[
                vec![
                    "load time".into(),
                    format!("{:.0} ms", startup.load.milliseconds),
                ],
                vec![
                    "load rate".into(),
                    format!(
                        "{:.0} MB/s ({:.1} MB)",
                        startup.load.megabytes_per_second, startup.load.megabytes
                    ),
                ],
                vec!["RSS after load".into(), megabytes(startup.rss_bytes)],
                vec!["RSS after the runs".into(), megabytes(self.rss_after_runs)],
                vec!["JSONL bytes".into(), megabytes(startup.jsonl_bytes)],
                vec![
                    "RSS / JSONL".into(),
                    format!(
                        "{:.2}",
                        startup.rss_bytes as f64 / startup.jsonl_bytes as f64
                    ),
                ],
            ],
        )
    }
}

/// A Markdown table with padded columns, readable as plain text too.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut text = line(header.iter().map(ToString::to_string).collect());
    text.push_str(&line(
        widths.iter().map(|width| "-".repeat(*width)).collect(),
    ));
    for row in rows {
        text.push_str(&line(row.clone()));
    }
    text
}
