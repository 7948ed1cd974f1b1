//! Synthetic snapshots: the engine behind `stq gen`.
//!
//! This module owns the generated data set end to end: which stations exist and
//! what they test, how units flow through their slots, and the exact bytes of the
//! snapshot files (`OUT/<station>/<UTC date>.{units,metrics}.jsonl`). It depends on
//! nothing else in the crate, so the files it writes are an independent check on
//! the loader rather than a mirror of it.
//!
//! The output is a pure function of [`GenOptions`]. Every station draws from its
//! own ChaCha8 stream, keyed by (seed, station index), so stations can be generated
//! on any number of threads in any order and still give byte-identical files.

use std::collections::VecDeque;
use std::f64::consts::TAU;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What to generate and where; see the module documentation for the layout.
#[derive(Clone, Debug)]
pub struct GenOptions {
    pub out: PathBuf,
    pub stations: u32,
    pub days: u32,
    pub units_per_hour: u32,
    pub seed: u64,
    /// Exclusive end of the generated span; the span is [end - days, end).
    pub end: DateTime<Utc>,
}

/// What a run wrote: files, unit and metric records, and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenSummary {
    pub files: usize,
    pub units: u64,
    pub metrics: u64,
    pub bytes: u64,
}

impl GenSummary {
    fn add(&mut self, other: GenSummary) {
        self.files += other.files;
        self.units += other.units;
        self.metrics += other.metrics;
        self.bytes += other.bytes;
    }
}

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// A station's fixed UTC offset and an IANA zone that uses it (for at least part
/// of the year: DST is deliberately ignored).
struct Zone {
    offset_minutes: i64,
    suffix: &'static str,
    name: &'static str,
}

#[rustfmt::skip]
const ZONES: [Zone; 8] = [
    Zone { offset_minutes: 0, suffix: "Z", name: "Etc/UTC" },
    Zone { offset_minutes: 60, suffix: "+01:00", name: "Europe/Berlin" },
    Zone { offset_minutes: -300, suffix: "-05:00", name: "America/New_York" },
    Zone { offset_minutes: 330, suffix: "+05:30", name: "Asia/Kolkata" },
    Zone { offset_minutes: 480, suffix: "+08:00", name: "Asia/Shanghai" },
    Zone { offset_minutes: 540, suffix: "+09:00", name: "Asia/Tokyo" },
    Zone { offset_minutes: -360, suffix: "-06:00", name: "America/Mexico_City" },
    Zone { offset_minutes: -180, suffix: "-03:00", name: "America/Sao_Paulo" },
];

/// One test step of a unit type. Limits are at least 3 sigma from the nominal value
/// (checked by a test), so a clamped draw is in limits and only a failing unit
/// produces a value outside them.
struct Test {
    name: &'static str,
    unit: &'static str,
    kind: &'static str,
    nominal: f64,
    sigma: f64,
    decimals: usize,
    lower: Option<f64>,
    upper: Option<f64>,
}

/// A measurement step; `.calibration()` turns it into a calibration step.
const fn step(
    name: &'static str,
    unit: &'static str,
    nominal: f64,
    sigma: f64,
    decimals: usize,
    lower: Option<f64>,
    upper: Option<f64>,
) -> Test {
    let kind = "measurement";
    Test {
        name,
        unit,
        kind,
        nominal,
        sigma,
        decimals,
        lower,
        upper,
    }
}

impl Test {
    const fn calibration(mut self) -> Test {
        self.kind = "calibration";
        self
    }
}

struct UnitType {
    name: &'static str,
    cycle_seconds: f64,
    tests: &'static [Test],
}

#[rustfmt::skip]
const UNIT_TYPES: [UnitType; 5] = [
    UnitType { name: "pcb-main", cycle_seconds: 45.0, tests: &[
        step("voltage_3v3", "V", 3.30, 0.025, 2, Some(3.135), Some(3.465)),
        step("voltage_1v8", "V", 1.80, 0.012, 3, Some(1.71), Some(1.89)),
        step("voltage_5v0", "V", 5.00, 0.04, 2, Some(4.75), Some(5.25)),
        step("current_idle", "mA", 42.0, 3.0, 1, Some(30.0), Some(60.0)),
        step("current_active", "mA", 185.0, 12.0, 1, Some(120.0), Some(250.0)),
        step("temperature", "degC", 34.0, 2.5, 1, Some(15.0), Some(70.0)),
        step("boot_time", "ms", 820.0, 60.0, 0, None, Some(1500.0)),
        step("rssi", "dBm", -52.0, 4.0, 0, Some(-80.0), Some(-30.0)),
        step("clock_offset", "ppm", 0.0, 2.5, 2, Some(-20.0), Some(20.0)).calibration(),
        step("adc_gain", "ratio", 1.0, 0.0008, 4, Some(0.995), Some(1.005)).calibration(),
    ]},
    UnitType { name: "pcb-power", cycle_seconds: 60.0, tests: &[
        step("voltage_12v", "V", 12.0, 0.08, 2, Some(11.4), Some(12.6)),
        step("voltage_5v0", "V", 5.00, 0.04, 2, Some(4.75), Some(5.25)),
        step("voltage_3v3", "V", 3.30, 0.025, 2, Some(3.135), Some(3.465)),
        step("ripple", "mV", 18.0, 4.0, 1, None, Some(50.0)),
        step("efficiency", "%", 91.5, 0.8, 1, Some(88.0), None),
        step("current_idle", "mA", 12.5, 1.2, 1, Some(6.0), Some(25.0)),
        step("load_regulation", "%", 0.40, 0.12, 2, Some(-1.0), Some(1.0)),
        step("insulation_resistance", "MOhm", 500.0, 40.0, 0, Some(300.0), None),
        step("temperature", "degC", 41.0, 3.0, 1, Some(15.0), Some(85.0)),
        step("vref_offset", "mV", 0.0, 0.6, 2, Some(-3.0), Some(3.0)).calibration(),
    ]},
    UnitType { name: "display", cycle_seconds: 120.0, tests: &[
        step("voltage_3v3", "V", 3.30, 0.025, 2, Some(3.135), Some(3.465)),
        step("backlight_current", "mA", 64.0, 2.5, 1, Some(55.0), Some(75.0)),
        step("luminance", "cd/m2", 420.0, 25.0, 0, Some(300.0), Some(550.0)),
        step("contrast_ratio", "ratio", 1200.0, 80.0, 0, Some(900.0), None),
        step("color_temp", "K", 6500.0, 90.0, 0, Some(6200.0), Some(6800.0)),
        step("touch_latency", "ms", 18.0, 2.0, 1, None, Some(35.0)),
        step("boot_time", "ms", 1450.0, 90.0, 0, None, Some(2500.0)),
        step("temperature", "degC", 36.0, 2.5, 1, Some(15.0), Some(70.0)),
        step("gamma", "", 2.20, 0.02, 2, Some(2.1), Some(2.3)).calibration(),
        step("white_point_x", "", 0.3127, 0.0012, 4, Some(0.308), Some(0.317)).calibration(),
    ]},
    UnitType { name: "battery-pack", cycle_seconds: 240.0, tests: &[
        step("pack_voltage", "V", 11.10, 0.06, 2, Some(10.8), Some(12.6)),
        step("cell_voltage_min", "V", 3.700, 0.012, 3, Some(3.6), Some(4.2)),
        step("cell_voltage_max", "V", 3.712, 0.012, 3, Some(3.6), Some(4.2)),
        step("cell_imbalance", "mV", 12.0, 4.0, 1, None, Some(40.0)),
        step("internal_resistance", "mOhm", 42.0, 3.5, 1, None, Some(60.0)),
        step("capacity", "mAh", 5120.0, 60.0, 0, Some(4800.0), None),
        step("charge_current", "A", 2.000, 0.02, 3, Some(1.9), Some(2.1)),
        step("temperature", "degC", 27.0, 1.5, 1, Some(10.0), Some(45.0)),
        step("insulation_resistance", "MOhm", 500.0, 40.0, 0, Some(300.0), None),
        step("thermistor", "kOhm", 10.0, 0.08, 2, Some(9.5), Some(10.5)).calibration(),
    ]},
    UnitType { name: "enclosure", cycle_seconds: 90.0, tests: &[
        step("leak_rate", "Pa/s", 0.0042, 0.0009, 4, None, Some(0.01)),
        step("torque_screw", "Nm", 0.50, 0.012, 3, Some(0.45), Some(0.55)),
        step("gap_width", "mm", 0.350, 0.020, 3, Some(0.25), Some(0.45)),
        step("flatness", "mm", 0.020, 0.005, 3, None, Some(0.05)),
        step("weight", "g", 182.4, 0.8, 1, Some(178.0), Some(187.0)),
        step("button_force", "N", 2.60, 0.12, 2, Some(2.0), Some(3.2)),
        step("color_delta_e", "dE", 0.80, 0.2, 2, None, Some(2.0)),
        step("hipot_leakage", "uA", 1.80, 0.35, 2, None, Some(5.0)),
        step("scale_zero", "g", 0.0, 0.03, 2, Some(-0.2), Some(0.2)).calibration(),
        step("label_offset", "mm", 0.0, 0.12, 2, Some(-0.5), Some(0.5)).calibration(),
    ]},
];

/// How many fraction digits a station's firmware writes in `time_created`.
#[derive(Clone, Copy)]
enum Precision {
    Seconds,
    Millis,
    Micros,
}

impl Precision {
    fn truncate(self, micros: i64) -> i64 {
        let step = match self {
            Precision::Seconds => MICROS_PER_SECOND,
            Precision::Millis => 1_000,
            Precision::Micros => 1,
        };
        micros - micros.rem_euclid(step)
    }
}

/// Everything about a station that stays fixed for the whole span.
struct Station {
    id: String,
    zone: &'static Zone,
    precision: Precision,
    mode: &'static str,
    line: u32,
    slots: usize,
    unit_types: Vec<usize>,
    fail_rate: f64,
    /// Some firmware writes every number as a JSON string.
    quoted_numbers: bool,
    operator_base: u32,
    fixture_base: u32,
}

impl Station {
    fn new(index: u32, stations: u32, rng: &mut ChaCha8Rng) -> Station {
        // Wide enough that byte order of the ids equals their numeric order.
        let width = stations.to_string().len().max(2);
        let (mode, fail_rate) = match rng.gen_range(0..100) {
            0..=79 => ("production", rng.gen_range(0.02..0.06)),
            80..=91 => ("engineering", rng.gen_range(0.08..0.15)),
            _ => ("rework", rng.gen_range(0.06..0.2)),
        };
        let precision = match rng.gen_range(0..8) {
            0 => Precision::Seconds,
            1 => Precision::Micros,
            _ => Precision::Millis,
        };
        let mut unit_types: Vec<usize> = (0..UNIT_TYPES.len()).collect();
        let keep = rng.gen_range(1..=3);
        for position in 0..keep {
            unit_types.swap(position, rng.gen_range(position..UNIT_TYPES.len()));
        }
        unit_types.truncate(keep);
        Station {
            id: format!("ST-{:0width$}", index + 1),
            zone: &ZONES[rng.gen_range(0..ZONES.len())],
            precision,
            mode,
            line: rng.gen_range(1..=6),
            slots: rng.gen_range(1..=4),
            unit_types,
            fail_rate,
            quoted_numbers: rng.gen_bool(0.15),
            operator_base: rng.gen_range(1..=90),
            fixture_base: rng.gen_range(0..=40),
        }
    }
}

/// A unit's pass through the station, copied into each of its records so a
/// record renders without looking anything up.
#[derive(Clone, Copy)]
struct Unit {
    serial: u32,
    unit_type: usize,
    slot: usize,
    shift: usize,
    operator: u32,
    retest: bool,
    failed_test: Option<usize>,
    cycle_millis: i64,
    /// Whether the unit records carry metadata; a few are logged with `null`.
    metadata: bool,
}

#[derive(Clone, Copy)]
enum Event {
    Input,
    Output,
    Metric {
        test: usize,
        value: f64,
        quoted: bool,
    },
}

#[derive(Clone, Copy)]
struct Record {
    micros: i64,
    /// Generation order: breaks ties so input < metrics < output at equal times.
    sequence: u64,
    unit: Unit,
    event: Event,
}

impl Record {
    fn is_unit(&self) -> bool {
        !matches!(self.event, Event::Metric { .. })
    }
}

/// A failed unit waiting to come back for a retest once its output is written.
struct Retest {
    serial: u32,
    unit_type: usize,
    ready_after: i64,
}

/// The instants of the whole run: records fall in [first, last) microseconds.
/// Both ends are whole seconds inside the requested span, so truncating a time to
/// any precision can neither leave the span nor reorder records.
#[derive(Clone, Copy)]
struct Span {
    first: i64,
    last: i64,
}

/// Writes the snapshot tree under `options.out`, one worker per core taking
/// stations from a shared counter. Files of the same name are replaced; other
/// files already in `out` are left alone.
pub fn generate(options: &GenOptions) -> io::Result<GenSummary> {
    let start = options
        .end
        .checked_sub_signed(Duration::days(i64::from(options.days)))
        .ok_or_else(|| invalid_input("the span starts before the supported calendar"))?;
    let whole_second = |micros: i64| micros - micros.rem_euclid(MICROS_PER_SECOND);
    let span = Span {
        first: whole_second(start.timestamp_micros() + MICROS_PER_SECOND - 1),
        last: whole_second(options.end.timestamp_micros()),
    };
    fs::create_dir_all(&options.out)?;

    let next_station = &AtomicU32::new(0);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let workers = cores.min(options.stations as usize).max(1);
    let outcomes = crossbeam::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(move |_| -> io::Result<GenSummary> {
                    let mut summary = GenSummary::default();
                    loop {
                        let index = next_station.fetch_add(1, Ordering::Relaxed);
                        if index >= options.stations {
                            return Ok(summary);
                        }
                        match generate_station(options, index, span) {
                            Ok(station) => summary.add(station),
                            Err(error) => {
                                // Stop the other workers from starting new stations.
                                next_station.store(options.stations, Ordering::Relaxed);
                                return Err(error);
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(crossbeam::thread::ScopedJoinHandle::join)
            .collect::<Vec<_>>()
    })
    .map_err(|_| io::Error::other("a generator thread panicked"))?;

    let mut summary = GenSummary::default();
    for outcome in outcomes {
        summary.add(outcome.map_err(|_| io::Error::other("a generator thread panicked"))??);
    }
    Ok(summary)
}

fn generate_station(options: &GenOptions, index: u32, span: Span) -> io::Result<GenSummary> {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    rng.set_stream(u64::from(index));
    let station = Station::new(index, options.stations, &mut rng);
    let mut summary = GenSummary::default();
    let total = i128::from(options.days) * 24 * i128::from(options.units_per_hour);
    let length = i128::from(span.last - span.first);
    if total == 0 || length <= 0 {
        return Ok(summary);
    }
    let directory = options.out.join(&station.id);
    fs::create_dir_all(&directory)?;

    let mut generator = StationRun {
        station: &station,
        rng,
        span,
        records: Vec::new(),
        sequence: 0,
        retests: VecDeque::new(),
        slot_free_at: vec![i64::MIN; station.slots],
    };
    let mut day_end = (span.first.div_euclid(MICROS_PER_DAY) + 1) * MICROS_PER_DAY;
    for number in 0..total {
        // Stratified jitter: one arrival somewhere in each equal share of the span,
        // so arrivals are irregular but the count is exact and they stay in order.
        let share_start = span.first + (length * number / total) as i64;
        let share_end = span.first + (length * (number + 1) / total) as i64;
        let arrival = share_start + generator.rng.gen_range(0..(share_end - share_start).max(1));
        // Every later record is at or after this arrival, so earlier days are final.
        while arrival >= day_end {
            generator.flush_day(day_end, &directory, &mut summary)?;
            day_end += MICROS_PER_DAY;
        }
        generator.process_unit(arrival);
    }
    while !generator.records.is_empty() {
        generator.flush_day(day_end, &directory, &mut summary)?;
        day_end += MICROS_PER_DAY;
    }
    Ok(summary)
}

/// The moving state of one station's run: records not yet written (at most about
/// a day of them), failed units waiting for a retest, and when each slot frees up.
struct StationRun<'a> {
    station: &'a Station,
    rng: ChaCha8Rng,
    span: Span,
    records: Vec<Record>,
    sequence: u64,
    retests: VecDeque<Retest>,
    slot_free_at: Vec<i64>,
}

impl StationRun<'_> {
    fn process_unit(&mut self, arrival: i64) {
        let rng = &mut self.rng;
        let station = self.station;
        let retest = match self.retests.front() {
            Some(waiting) if waiting.ready_after < arrival && rng.gen_bool(0.6) => {
                self.retests.pop_front()
            }
            _ => None,
        };
        let (serial, unit_type) = match &retest {
            Some(waiting) => (waiting.serial, waiting.unit_type),
            None => (
                rng.gen(),
                station.unit_types[rng.gen_range(0..station.unit_types.len())],
            ),
        };
        let kind = &UNIT_TYPES[unit_type];
        let (slot, _) = self
            .slot_free_at
            .iter()
            .enumerate()
            .min_by_key(|(_, free_at)| **free_at)
            .unwrap_or((0, &0));

        let cycle =
            (kind.cycle_seconds * rng.gen_range(0.7..1.6) * MICROS_PER_SECOND as f64) as i64;
        let output = (arrival + cycle).min(self.span.last - 1);
        self.slot_free_at[slot] = output;

        // Retests mostly pass: the fixture or the contact was the usual culprit.
        let fail_rate = if retest.is_some() {
            0.3
        } else {
            station.fail_rate
        };
        let failed_test = rng
            .gen_bool(fail_rate)
            .then(|| rng.gen_range(0..kind.tests.len()));
        if failed_test.is_some() && retest.is_none() && rng.gen_bool(0.7) && self.retests.len() < 64
        {
            self.retests.push_back(Retest {
                serial,
                unit_type,
                ready_after: output,
            });
        }
        let local_seconds =
            arrival.div_euclid(MICROS_PER_SECOND) + station.zone.offset_minutes * 60;
        let shift = match local_seconds.rem_euclid(86_400) / 3_600 {
            6..=13 => 0,
            14..=21 => 1,
            _ => 2,
        };
        let unit = Unit {
            serial,
            unit_type,
            slot,
            shift,
            operator: station.operator_base + shift as u32 * 3 + rng.gen_range(0..3),
            retest: retest.is_some(),
            failed_test,
            cycle_millis: (output - arrival) / 1_000,
            metadata: rng.gen_bool(0.97),
        };

        self.push(arrival, unit, Event::Input);
        let spacing = (output - arrival) / (kind.tests.len() as i64 + 1);
        for (position, test) in kind.tests.iter().enumerate() {
            let at =
                arrival + spacing * (position as i64 + 1) + self.rng.gen_range(0..spacing / 2 + 1);
            let value = sample(test, failed_test == Some(position), &mut self.rng);
            let quoted = station.quoted_numbers || self.rng.gen_bool(0.02);
            self.push(
                at,
                unit,
                Event::Metric {
                    test: position,
                    value,
                    quoted,
                },
            );
        }
        self.push(output, unit, Event::Output);
    }

    fn push(&mut self, micros: i64, unit: Unit, event: Event) {
        let micros = self.station.precision.truncate(micros);
        self.records.push(Record {
            micros,
            sequence: self.sequence,
            unit,
            event,
        });
        self.sequence += 1;
    }

    /// Writes the records before `day_end` (all of one UTC day) to that day's files.
    fn flush_day(
        &mut self,
        day_end: i64,
        directory: &Path,
        summary: &mut GenSummary,
    ) -> io::Result<()> {
        self.records
            .sort_unstable_by_key(|record| (record.micros, record.sequence));
        let count = self
            .records
            .partition_point(|record| record.micros < day_end);
        if count == 0 {
            return Ok(());
        }
        let day = utc(day_end - MICROS_PER_DAY)?.date_naive();
        let mut line = Vec::with_capacity(512);
        for (suffix, units) in [("units", true), ("metrics", false)] {
            let mut selected = self.records[..count]
                .iter()
                .filter(|record| record.is_unit() == units)
                .peekable();
            if selected.peek().is_none() {
                continue;
            }
            let file = File::create(directory.join(format!("{day}.{suffix}.jsonl")))?;
            let mut writer = BufWriter::with_capacity(1 << 16, file);
            for record in selected {
                line.clear();
                render(self.station, record, &mut line)?;
                writer.write_all(&line)?;
                summary.bytes += line.len() as u64;
                if units {
                    summary.units += 1;
                } else {
                    summary.metrics += 1;
                }
            }
            writer.flush()?;
            summary.files += 1;
        }
        self.records.drain(..count);
        Ok(())
    }
}

/// A value for `test`: within limits, or beyond one of them when it is the test
/// that fails the unit. Rounded to the test's decimals, as an instrument reports.
fn sample(test: &Test, failing: bool, rng: &mut ChaCha8Rng) -> f64 {
    let step = 10f64.powi(-(test.decimals as i32));
    let draw = standard_normal(rng);
    if !failing {
        return round_to(
            test.nominal + test.sigma * draw.clamp(-2.5, 2.5),
            test.decimals,
        );
    }
    let excess = test.sigma * (0.5 + draw.abs().min(4.0));
    let above = match (test.lower, test.upper) {
        (Some(_), Some(_)) => rng.gen_bool(0.5),
        (lower, _) => lower.is_none(),
    };
    match (above, test.lower, test.upper) {
        (true, _, Some(upper)) => {
            let value = round_to(upper + excess, test.decimals);
            if value > upper {
                value
            } else {
                value + step
            }
        }
        (false, Some(lower), _) => {
            let value = round_to(lower - excess, test.decimals);
            if value < lower {
                value
            } else {
                value - step
            }
        }
        _ => test.nominal,
    }
}

fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box-Muller; 1 - u keeps the logarithm's argument in (0, 1].
    let radius = (-2.0 * (1.0 - rng.gen::<f64>()).ln()).sqrt();
    radius * (TAU * rng.gen::<f64>()).cos()
}

fn round_to(value: f64, decimals: usize) -> f64 {
    let scale = 10f64.powi(decimals as i32);
    let rounded = (value * scale).round() / scale;
    // Avoid writing "-0.00".
    if rounded == 0.0 {
        0.0
    } else {
        rounded
    }
}

/// Appends one JSON line. Numbers are written as text so that fixed decimals
/// such as `3.30` reach the file as an instrument would print them.
fn render(station: &Station, record: &Record, line: &mut Vec<u8>) -> io::Result<()> {
    let unit = &record.unit;
    let kind = &UNIT_TYPES[unit.unit_type];
    // Ids, slots, serials and the fixed words below are `[a-z0-9-]` built here and
    // need no escaping; table strings go through serde_json so that editing a
    // table can never break a line.
    let (id, slot, serial) = (&station.id, unit.slot + 1, unit.serial);
    write!(line, "{{\"station_id\":\"{id}\",\"slot\":\"slot-{slot}\"")?;
    write!(
        line,
        ",\"unit_serial\":\"SN-{id}-{serial:08X}\",\"time_created\":\""
    )?;
    write_time(line, station, record.micros)?;
    write!(line, "\",\"tz\":")?;
    json_string(line, station.zone.name)?;
    write!(line, ",\"mode\":")?;
    json_string(line, station.mode)?;
    let shift = ["shift-a", "shift-b", "shift-c"][unit.shift];
    write!(line, ",\"tags\":[\"line-{}\",\"{shift}\"", station.line)?;
    if unit.retest {
        write!(line, ",\"retest\"")?;
    }
    write!(line, "]")?;

    match record.event {
        Event::Input | Event::Output => {
            let output = matches!(record.event, Event::Output);
            let result = match (output, unit.failed_test) {
                (false, _) => "",
                (true, None) => "pass",
                (true, Some(_)) => "fail",
            };
            let direction = if output { "output" } else { "input" };
            write!(line, ",\"unit_type\":")?;
            json_string(line, kind.name)?;
            write!(
                line,
                ",\"direction\":\"{direction}\",\"result\":\"{result}\""
            )?;
            write!(line, ",\"metadata\":")?;
            if !unit.metadata {
                write!(line, "null}}")?;
            } else {
                let fixture = station.fixture_base + unit.slot as u32 + 1;
                write!(
                    line,
                    "{{\"operator\":\"op-{}\",\"fixture\":\"FX-{fixture}\",\"retest\":{}",
                    unit.operator, unit.retest
                )?;
                if output {
                    write!(line, ",\"cycle_ms\":{}", unit.cycle_millis)?;
                    if let Some(failed) = unit.failed_test {
                        write!(line, ",\"failed_test\":")?;
                        json_string(line, kind.tests[failed].name)?;
                    }
                }
                write!(line, "}}}}")?;
            }
        }
        Event::Metric {
            test,
            value,
            quoted,
        } => {
            let test = &kind.tests[test];
            write!(line, ",\"name\":")?;
            json_string(line, test.name)?;
            let quote = if quoted { "\"" } else { "" };
            let decimals = test.decimals;
            write!(
                line,
                ",\"value\":{quote}{value:.decimals$}{quote},\"unit\":"
            )?;
            json_string(line, test.unit)?;
            write!(line, ",\"type\":")?;
            json_string(line, test.kind)?;
            // A missing limit is an empty string: the test is one-sided.
            for (key, limit) in [("limit_upper", test.upper), ("limit_lower", test.lower)] {
                match limit {
                    Some(limit) => write!(line, ",\"{key}\":{quote}{limit}{quote}")?,
                    None => write!(line, ",\"{key}\":\"\"")?,
                }
            }
            write!(line, "}}")?;
        }
    }
    line.push(b'\n');
    Ok(())
}

/// The station's local wall time with its offset, at the station's precision.
fn write_time(line: &mut Vec<u8>, station: &Station, micros: i64) -> io::Result<()> {
    let local = utc(micros + station.zone.offset_minutes * 60 * MICROS_PER_SECOND)?;
    write!(
        line,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        local.year(),
        local.month(),
        local.day(),
        local.hour(),
        local.minute(),
        local.second()
    )?;
    let fraction = micros.rem_euclid(MICROS_PER_SECOND);
    match station.precision {
        Precision::Seconds => {}
        Precision::Millis => write!(line, ".{:03}", fraction / 1_000)?,
        Precision::Micros => write!(line, ".{fraction:06}")?,
    }
    line.extend_from_slice(station.zone.suffix.as_bytes());
    Ok(())
}

fn json_string(line: &mut Vec<u8>, text: &str) -> io::Result<()> {
    serde_json::to_writer(line, text).map_err(io::Error::from)
}

fn utc(micros: i64) -> io::Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| invalid_input("time outside the supported calendar"))
}

fn invalid_input(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::Value;
    use std::collections::{BTreeMap, BTreeSet};

    /// A fresh directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(label: &str) -> TempDir {
            let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
            let path = std::env::temp_dir()
                .join(format!("stq-gen-{label}-{}-{nanos}", std::process::id()));
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// An end with a fraction, so the span's edges are not whole seconds.
    fn options(out: &Path, seed: u64) -> GenOptions {
        GenOptions {
            out: out.to_path_buf(),
            stations: 5,
            days: 2,
            units_per_hour: 5,
            seed,
            end: Utc.with_ymd_and_hms(2024, 3, 10, 12, 34, 56).unwrap()
                + Duration::milliseconds(789),
        }
    }

    /// Every file of a tree by its path relative to the root.
    fn read_tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        let mut pending = vec![root.to_path_buf()];
        while let Some(directory) = pending.pop() {
            for entry in fs::read_dir(&directory).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    let relative = path.strip_prefix(root).unwrap().to_path_buf();
                    files.insert(relative, fs::read(&path).unwrap());
                }
            }
        }
        files
    }

    fn number_or_text(value: &Value) -> Option<f64> {
        match value {
            Value::Number(number) => number.as_f64(),
            Value::String(text) if text.is_empty() => None,
            Value::String(text) => Some(text.parse().unwrap()),
            other => panic!("not a number or a string: {other}"),
        }
    }

    #[test]
    fn same_options_give_identical_trees_and_the_seed_matters() {
        let (first, second, reseeded) = (TempDir::new("a"), TempDir::new("b"), TempDir::new("c"));
        let summary = generate(&options(&first.0, 7)).unwrap();
        assert_eq!(generate(&options(&second.0, 7)).unwrap(), summary);
        generate(&options(&reseeded.0, 8)).unwrap();

        let tree = read_tree(&first.0);
        assert_eq!(tree.len(), summary.files);
        assert_eq!(
            tree.values().map(|bytes| bytes.len() as u64).sum::<u64>(),
            summary.bytes
        );
        assert_eq!(read_tree(&second.0), tree);
        assert_ne!(read_tree(&reseeded.0), tree);
    }

    #[test]
    fn every_line_is_a_valid_record_in_its_day_file_and_in_order() {
        let root = TempDir::new("valid");
        let options = options(&root.0, 11);
        let summary = generate(&options).unwrap();
        let start = options.end - Duration::days(i64::from(options.days));
        // Sorted, to compare whatever order the JSON map keeps its keys in.
        let unit_keys = "direction metadata mode result slot station_id tags time_created tz \
            unit_serial unit_type";
        let metric_keys = "limit_lower limit_upper mode name slot station_id tags time_created \
            type tz unit unit_serial value";
        let (mut units, mut metrics) = (0, 0);

        for (path, bytes) in read_tree(&root.0) {
            let station = path.parent().unwrap().to_str().unwrap().to_owned();
            let name = path.file_name().unwrap().to_str().unwrap();
            let (date, suffix) = name.split_once('.').unwrap();
            let is_units = match suffix {
                "units.jsonl" => true,
                "metrics.jsonl" => false,
                other => panic!("unexpected file {other}"),
            };
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.ends_with('\n'), "{name} must end with a line end");
            let mut previous = None;
            for line in text.lines() {
                assert!(line.starts_with("{\"station_id\":"), "{line}");
                let record: Value = serde_json::from_str(line).unwrap();
                let object = record.as_object().unwrap();
                let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
                keys.sort_unstable();
                let wanted = if is_units { unit_keys } else { metric_keys };
                assert_eq!(keys.join(" "), wanted, "{line}");
                assert_eq!(object["station_id"], station.as_str());

                let written = object["time_created"].as_str().unwrap();
                assert_eq!(&written[10..11], "T", "{written}");
                let zone = ZONES.iter().find(|zone| zone.name == object["tz"]).unwrap();
                assert!(
                    written.ends_with(zone.suffix),
                    "{written} is not in {}",
                    zone.name
                );
                let instant = DateTime::parse_from_rfc3339(written)
                    .unwrap()
                    .with_timezone(&Utc);
                assert!(
                    start <= instant && instant < options.end,
                    "{written} is outside the span"
                );
                assert_eq!(
                    instant.date_naive().to_string(),
                    date,
                    "{written} is in the wrong file"
                );
                assert!(
                    previous <= Some(instant),
                    "{written} is out of order in {path:?}"
                );
                previous = Some(instant);

                if is_units {
                    units += 1;
                    let direction = object["direction"].as_str().unwrap();
                    let result = object["result"].as_str().unwrap();
                    match direction {
                        "input" => assert_eq!(result, ""),
                        "output" => assert!(result == "pass" || result == "fail", "{line}"),
                        other => panic!("bad direction {other}"),
                    }
                    assert!(object["metadata"].is_object() || object["metadata"].is_null());
                } else {
                    metrics += 1;
                    assert!(!object["name"].as_str().unwrap().is_empty());
                    assert!(number_or_text(&object["value"]).is_some(), "{line}");
                    let upper = number_or_text(&object["limit_upper"]);
                    let lower = number_or_text(&object["limit_lower"]);
                    assert!(upper.is_some() || lower.is_some(), "{line}");
                }
            }
        }
        assert_eq!((units, metrics), (summary.units, summary.metrics));
    }

    #[test]
    fn fixed_decimals_and_quoted_numbers_reach_the_file() {
        let root = TempDir::new("decimals");
        generate(&options(&root.0, 3)).unwrap();
        let text: String = read_tree(&root.0)
            .into_values()
            .map(|bytes| String::from_utf8(bytes).unwrap())
            .collect();
        // serde_json::Value would have written these as 3.3 and 5.0.
        assert!(text.contains("\"value\":3.30,") || text.contains("\"value\":\"3.30\""));
        assert!(text.contains("\"value\":5.00,") || text.contains("\"value\":\"5.00\""));
        assert!(text.contains("\"limit_lower\":3.135"));
        assert!(
            text.contains("\"value\":\""),
            "some values are JSON strings"
        );
        assert!(
            text.contains("\"limit_lower\":\"\""),
            "some limits are one-sided"
        );
        let negative_zero = text.split("\"value\":").skip(1).any(|rest| {
            let number = rest
                .trim_start_matches('"')
                .split([',', '"'])
                .next()
                .unwrap_or("");
            number.starts_with('-') && number.trim_matches(['-', '0', '.']).is_empty()
        });
        assert!(!negative_zero, "no value is written as a negative zero");
    }

    #[test]
    fn counts_follow_the_rate_and_failures_match_the_limits() {
        let root = TempDir::new("counts");
        let options = options(&root.0, 5);
        let summary = generate(&options).unwrap();
        let processed = u64::from(options.stations * options.days * 24 * options.units_per_hour);
        assert_eq!(summary.units, 2 * processed);
        assert!(
            (8 * processed..=12 * processed).contains(&summary.metrics),
            "{summary:?}"
        );

        // A unit fails exactly when one of its measurements is outside its limits.
        let (mut failed, mut out_of_limits) = (BTreeSet::new(), BTreeSet::new());
        let (mut inputs, mut outputs) = (0, 0);
        for (path, bytes) in read_tree(&root.0) {
            for line in String::from_utf8(bytes).unwrap().lines() {
                let record: Value = serde_json::from_str(line).unwrap();
                let serial = record["unit_serial"].as_str().unwrap().to_owned();
                if path.to_str().unwrap().ends_with(".units.jsonl") {
                    match record["direction"].as_str().unwrap() {
                        "input" => inputs += 1,
                        _ => outputs += 1,
                    }
                    if record["result"] == "fail" {
                        failed.insert(serial);
                    }
                } else {
                    let value = number_or_text(&record["value"]).unwrap();
                    let above =
                        number_or_text(&record["limit_upper"]).is_some_and(|upper| value > upper);
                    let below =
                        number_or_text(&record["limit_lower"]).is_some_and(|lower| value < lower);
                    if above || below {
                        out_of_limits.insert(serial);
                    }
                }
            }
        }
        assert_eq!((inputs, outputs), (processed, processed));
        assert!(!failed.is_empty());
        assert_eq!(failed, out_of_limits);
    }

    #[test]
    fn station_ids_sort_numerically() {
        let root = TempDir::new("ids");
        let options = GenOptions {
            stations: 100,
            days: 1,
            units_per_hour: 1,
            ..options(&root.0, 1)
        };
        generate(&options).unwrap();
        let names: Vec<String> = fs::read_dir(&root.0)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        let sorted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let expected: Vec<String> = (1..=100).map(|number| format!("ST-{number:03}")).collect();
        assert_eq!(sorted.into_iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn nothing_to_generate_writes_no_files() {
        let root = TempDir::new("empty");
        let options = GenOptions {
            units_per_hour: 0,
            ..options(&root.0, 1)
        };
        assert_eq!(generate(&options).unwrap(), GenSummary::default());
        assert_eq!(fs::read_dir(&root.0).unwrap().count(), 0);
    }

    #[test]
    fn test_tables_keep_passing_values_inside_their_limits() {
        for kind in &UNIT_TYPES {
            for test in kind.tests {
                let label = format!("{}/{}", kind.name, test.name);
                assert!(
                    test.lower.is_some() || test.upper.is_some(),
                    "{label} has no limit"
                );
                assert!(
                    test.lower
                        .iter()
                        .all(|&lower| lower <= test.nominal - 3.0 * test.sigma),
                    "{label}"
                );
                assert!(
                    test.upper
                        .iter()
                        .all(|&upper| upper >= test.nominal + 3.0 * test.sigma),
                    "{label}"
                );
                // Rounding must not move a value by more than a fraction of its spread.
                assert!(
                    10f64.powi(-(test.decimals as i32)) <= test.sigma / 2.0,
                    "{label}"
                );
                // A physical quantity keeps its sign, passing or failing.
                if test.nominal != 0.0 {
                    let sign = test.nominal.signum();
                    assert_eq!(
                        (test.nominal - sign * 2.5 * test.sigma).signum(),
                        sign,
                        "{label}"
                    );
                    for limit in [test.lower, test.upper].into_iter().flatten() {
                        if limit.signum() == sign {
                            assert_eq!((limit - sign * 4.5 * test.sigma).signum(), sign, "{label}");
                        }
                    }
                }
            }
        }
    }
}
