//! A day's records as Parquet columns (docs/api.md section 13): every field of
//! SPEC.md 2.2 / 2.3 as a UTF-8 string (`time_created` as written), `tags` a list
//! of strings, `metadata` compact JSON text (null when absent), then `time`, the
//! record's instant (TIMESTAMP, nanoseconds, UTC), and on metrics `value_num`,
//! `limit_lower_num` and `limit_upper_num` (DOUBLE, null where the text is not a
//! number as `/metrics/summary` reads it: `stq_core::domain::record::numeric`).
//!
//! Rows come as the JSON `/units` and `/metrics` return, and are read with serde
//! into those columns, so a file holds exactly what the API answers. They are
//! gathered into Arrow arrays a batch at a time and written with zstd in row
//! groups of [`ROW_GROUP_ROWS`]; a part holds at most [`PART_ROWS`] rows.

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::builder::{
    Float64Builder, ListBuilder, StringBuilder, TimestampNanosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::Deserialize;
use serde_json::value::RawValue;
use stq_core::data::StorageFault;
use stq_core::domain::record::{numeric, Kind};
use stq_core::domain::time::Timestamp;
use stq_objects::{ObjectWriter, Objects, ObjectsError};

/// Rows gathered before they are handed to the writer as one batch.
const BATCH_ROWS: usize = 8_192;

/// Rows of a row group: small enough that its statistics (sorted by station)
/// let a reader skip most of a day's other stations, large enough that each
/// column chunk's dictionary and zstd frame pay for themselves.
const ROW_GROUP_ROWS: usize = 131_072;

/// Rows of a part before the next part of the day begins.
const PART_ROWS: u64 = 8 * 1_048_576;

/// zstd's level: 3, its own default. Level 1 was compared (BENCHMARKS.md):
/// 0.2% smaller files at 3, and export times within noise of each other, since
/// dictionary encoding of the columns does most of the work before zstd.
const ZSTD_LEVEL: i32 = 3;

/// Why an export did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The destination refused, or could not be reached (the message names it).
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    #[error("{path}: {source}")]
    Parquet {
        path: String,
        source: parquet::errors::ParquetError,
    },
    /// A store file failed a read of the records to export.
    #[error(transparent)]
    Storage(#[from] StorageFault),
    /// A record's JSON the export cannot read: never the JSON stq writes.
    #[error("a record of {station} does not read as {kind}: {source}")]
    Record {
        station: String,
        kind: Kind,
        source: serde_json::Error,
    },
}

/// A record as `/units` or `/metrics` returns it: the fields both kinds have, then
/// each kind's own, absent where the record is of the other kind. One flat struct:
/// serde's `flatten` would buffer every field before handing it over (a third of
/// the export's time went to it and the allocations it makes).
#[derive(Deserialize)]
struct Row<'a> {
    #[serde(borrow)]
    station_id: Cow<'a, str>,
    #[serde(borrow)]
    slot: Cow<'a, str>,
    #[serde(borrow)]
    unit_serial: Cow<'a, str>,
    #[serde(borrow)]
    time_created: Cow<'a, str>,
    #[serde(borrow)]
    tz: Cow<'a, str>,
    #[serde(borrow)]
    mode: Cow<'a, str>,
    #[serde(borrow)]
    tags: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    unit_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    direction: Option<Cow<'a, str>>,
    #[serde(borrow)]
    result: Option<Cow<'a, str>>,
    /// `None` where absent or `null`.
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    value: Option<Cow<'a, str>>,
    #[serde(borrow)]
    unit: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "type")]
    metric_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    limit_upper: Option<Cow<'a, str>>,
    #[serde(borrow)]
    limit_lower: Option<Cow<'a, str>>,
}

/// A field a record of its kind always has.
fn required<'r, 'a>(
    field: &'r Option<Cow<'a, str>>,
    name: &'static str,
) -> Result<&'r str, serde_json::Error> {
    field
        .as_deref()
        .ok_or_else(|| serde::de::Error::missing_field(name))
}

/// The string columns of each kind, in SPEC.md's order (`tags` after `mode`).
const COMMON_COLUMNS: [&str; 6] = [
    "station_id",
    "slot",
    "unit_serial",
    "time_created",
    "tz",
    "mode",
];
const UNIT_COLUMNS: [&str; 3] = ["unit_type", "direction", "result"];
const METRIC_COLUMNS: [&str; 6] = [
    "name",
    "value",
    "unit",
    "type",
    "limit_upper",
    "limit_lower",
];
const NUMBER_COLUMNS: [&str; 3] = ["value_num", "limit_lower_num", "limit_upper_num"];

/// The schema of a kind's files.
fn schema(kind: Kind) -> SchemaRef {
    let text = |name: &str| Field::new(name, DataType::Utf8, false);
    let mut fields: Vec<Field> = COMMON_COLUMNS.iter().map(|name| text(name)).collect();
    fields.push(Field::new(
        "tags",
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        false,
    ));
    match kind {
        Kind::Units => {
            fields.extend(UNIT_COLUMNS.iter().map(|name| text(name)));
            fields.push(Field::new("metadata", DataType::Utf8, true));
        }
        Kind::Metrics => fields.extend(METRIC_COLUMNS.iter().map(|name| text(name))),
    }
    // Null only for an instant a 64-bit count of nanoseconds cannot hold (before
    // 1677 or after 2262), which stq's own dates allow.
    fields.push(Field::new(
        "time",
        DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        true,
    ));
    if kind == Kind::Metrics {
        fields.extend(
            NUMBER_COLUMNS
                .iter()
                .map(|name| Field::new(*name, DataType::Float64, true)),
        );
    }
    Arc::new(Schema::new(fields))
}

/// The columns being gathered for the next batch.
struct Columns {
    kind: Kind,
    /// The string columns in schema order, `metadata` apart.
    texts: Vec<StringBuilder>,
    tags: ListBuilder<StringBuilder>,
    metadata: StringBuilder,
    time: TimestampNanosecondBuilder,
    numbers: [Float64Builder; 3],
    rows: usize,
}

impl Columns {
    fn new(kind: Kind) -> Columns {
        let texts = COMMON_COLUMNS.len()
            + match kind {
                Kind::Units => UNIT_COLUMNS.len(),
                Kind::Metrics => METRIC_COLUMNS.len(),
            };
        Columns {
            kind,
            texts: (0..texts).map(|_| StringBuilder::new()).collect(),
            tags: ListBuilder::new(StringBuilder::new()),
            metadata: StringBuilder::new(),
            time: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            numbers: std::array::from_fn(|_| Float64Builder::new()),
            rows: 0,
        }
    }

    /// Adds the record whose API JSON is `json` and whose instant is `instant`.
    fn push(&mut self, json: &[u8], instant: Timestamp) -> Result<(), serde_json::Error> {
        let row: Row = serde_json::from_slice(json)?;
        // Each kind's own texts (three or six), checked before any column grows.
        let (own, count) = match self.kind {
            Kind::Units => (
                [
                    required(&row.unit_type, "unit_type")?,
                    required(&row.direction, "direction")?,
                    required(&row.result, "result")?,
                    "",
                    "",
                    "",
                ],
                UNIT_COLUMNS.len(),
            ),
            Kind::Metrics => (
                [
                    required(&row.name, "name")?,
                    required(&row.value, "value")?,
                    required(&row.unit, "unit")?,
                    required(&row.metric_type, "type")?,
                    required(&row.limit_upper, "limit_upper")?,
                    required(&row.limit_lower, "limit_lower")?,
                ],
                METRIC_COLUMNS.len(),
            ),
        };
        let common = [
            &row.station_id,
            &row.slot,
            &row.unit_serial,
            &row.time_created,
            &row.tz,
            &row.mode,
        ];
        let texts = (common.into_iter().map(|text| &**text)).chain(own.into_iter().take(count));
        for (builder, text) in self.texts.iter_mut().zip(texts) {
            builder.append_value(text);
        }
        for tag in &row.tags {
            self.tags.values().append_value(tag);
        }
        self.tags.append(true);
        match self.kind {
            Kind::Units => match row.metadata {
                None => self.metadata.append_null(),
                Some(raw) => self.metadata.append_value(raw.get()),
            },
            Kind::Metrics => {
                let numbers = [&row.value, &row.limit_lower, &row.limit_upper];
                for (builder, text) in self.numbers.iter_mut().zip(numbers) {
                    builder.append_option(text.as_deref().and_then(numeric));
                }
            }
        }
        let nanos = (instant.seconds.checked_mul(1_000_000_000))
            .and_then(|nanos| nanos.checked_add(i64::from(instant.nanos)));
        self.time.append_option(nanos);
        self.rows += 1;
        Ok(())
    }

    /// The rows gathered so far as a batch of `schema`, and empty builders.
    fn take(&mut self, schema: &SchemaRef) -> RecordBatch {
        let mut arrays: Vec<ArrayRef> = Vec::new();
        let (common, own) = self.texts.split_at_mut(COMMON_COLUMNS.len());
        arrays.extend(
            common
                .iter_mut()
                .map(|builder| Arc::new(builder.finish()) as ArrayRef),
        );
        arrays.push(Arc::new(self.tags.finish()));
        arrays.extend(
            own.iter_mut()
                .map(|builder| Arc::new(builder.finish()) as ArrayRef),
        );
        if self.kind == Kind::Units {
            arrays.push(Arc::new(self.metadata.finish()));
        }
        arrays.push(Arc::new(self.time.finish()));
        if self.kind == Kind::Metrics {
            arrays.extend(
                self.numbers
                    .iter_mut()
                    .map(|builder| Arc::new(builder.finish()) as ArrayRef),
            );
        }
        self.rows = 0;
        RecordBatch::try_new(Arc::clone(schema), arrays).expect("the columns follow the schema")
    }
}

/// The parts of one day of one kind, written in turn.
pub(super) struct DayWriter<'a> {
    destination: &'a Objects,
    /// The partition's name, `units/day=YYYY-MM-DD`.
    partition: &'a str,
    schema: SchemaRef,
    columns: Columns,
    part: Option<Part<'a>>,
    written: Written,
}

/// A part being written: its Parquet writer, over the object it is put as (a
/// file under a temporary name, or bytes for one PUT).
struct Part<'a> {
    writer: ArrowWriter<ObjectWriter<'a>>,
    /// Its name within the partition.
    name: String,
    rows: u64,
}

/// What a day's writer left: its parts' names (within the partition), records
/// and bytes.
#[derive(Debug, Default)]
pub(super) struct Written {
    pub(super) names: Vec<String>,
    pub(super) records: u64,
    pub(super) bytes: u64,
}

impl<'a> DayWriter<'a> {
    pub(super) fn new(kind: Kind, destination: &'a Objects, partition: &'a str) -> DayWriter<'a> {
        DayWriter {
            destination,
            partition,
            schema: schema(kind),
            columns: Columns::new(kind),
            part: None,
            written: Written::default(),
        }
    }

    /// Adds the record whose API JSON is `json`.
    pub(super) fn push(&mut self, json: &[u8], instant: Timestamp) -> Result<(), ExportError> {
        if let Err(source) = self.columns.push(json, instant) {
            return Err(ExportError::Record {
                station: station_of(json),
                kind: self.columns.kind,
                source,
            });
        }
        if self.columns.rows >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the gathered rows to the part being written, beginning one if none is.
    fn flush(&mut self) -> Result<(), ExportError> {
        if self.columns.rows == 0 {
            return Ok(());
        }
        let batch = self.columns.take(&self.schema);
        let part = match &mut self.part {
            Some(part) => part,
            None => self.part.insert(self.begin_part()?),
        };
        part.writer
            .write(&batch)
            .map_err(|source| ExportError::Parquet {
                path: object_path(self.destination, self.partition, &part.name),
                source,
            })?;
        part.rows += batch.num_rows() as u64;
        if part.rows >= PART_ROWS {
            self.end_part()?;
        }
        Ok(())
    }

    fn begin_part(&self) -> Result<Part<'a>, ExportError> {
        let name = format!("part-{}.parquet", self.written.names.len());
        let object = self
            .destination
            .writer(&format!("{}/{name}", self.partition))?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(ZSTD_LEVEL).expect("a level zstd has"),
            ))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let writer = ArrowWriter::try_new(object, Arc::clone(&self.schema), Some(properties))
            .map_err(|source| ExportError::Parquet {
                path: object_path(self.destination, self.partition, &name),
                source,
            })?;
        Ok(Part {
            writer,
            name,
            rows: 0,
        })
    }

    /// Closes the part being written and puts it, whole, under its name.
    fn end_part(&mut self) -> Result<(), ExportError> {
        let Some(part) = self.part.take() else {
            return Ok(());
        };
        let object = part
            .writer
            .into_inner()
            .map_err(|source| ExportError::Parquet {
                path: object_path(self.destination, self.partition, &part.name),
                source,
            })?;
        let bytes = object.finish()?;
        self.written.names.push(part.name);
        self.written.records += part.rows;
        self.written.bytes += bytes;
        Ok(())
    }

    /// Writes what is left, closes the last part, and says what the day holds. A
    /// part left unfinished by an error is dropped, and with it its temporary
    /// file or bytes: no object of it is left.
    pub(super) fn finish(mut self) -> Result<Written, ExportError> {
        self.flush()?;
        self.end_part()?;
        Ok(std::mem::take(&mut self.written))
    }
}

/// `DEST/units/day=YYYY-MM-DD/part-N.parquet`, for a message.
fn object_path(destination: &Objects, partition: &str, name: &str) -> String {
    format!("{}/{partition}/{name}", destination.location())
}

/// The `station_id` of a record's JSON, for a message.
fn station_of(json: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Station<'a> {
        #[serde(borrow)]
        station_id: Cow<'a, str>,
    }
    serde_json::from_slice::<Station>(json).map_or_else(
        |_| "a station".to_owned(),
        |station| station.station_id.into_owned(),
    )
}
