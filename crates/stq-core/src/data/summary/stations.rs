//! `/stations` (docs/api.md section 10.3): each station's record counts and the
//! `time_created` of its first and last record, as written.

use std::borrow::Cow;

use itertools::Itertools as _;
use serde::Deserialize;

use super::{PartialSummary, Rows};
use crate::data::catalog::Catalog;
use crate::data::fault::StorageFault;
use crate::data::scan::ShardStation;
use crate::data::station::StationData;
use crate::data::stored::StoredRecord;

/// One station's line of `/stations`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StationSummary {
    rank: u32,
    units: u64,
    metrics: u64,
    /// `time_created` as written, of the station's first and last record.
    first: String,
    last: String,
}

/// One shard's lines of `/stations`.
#[derive(Debug)]
pub(crate) struct StationsPartial {
    stations: Vec<StationSummary>,
}

impl StationsPartial {
    /// The lines of a shard's `stations` that hold records.
    pub(super) fn summarize<'a>(
        stations: impl Iterator<Item = (ShardStation, &'a StationData)>,
    ) -> Result<StationsPartial, StorageFault> {
        Ok(StationsPartial {
            stations: stations
                .filter_map(|(station, data)| station_summary(station.rank, data).transpose())
                .try_collect()?,
        })
    }
}

impl PartialSummary for StationsPartial {
    fn merge(&mut self, other: StationsPartial) {
        self.stations.extend(other.stations);
    }

    fn row_count(&self) -> usize {
        self.stations.len()
    }

    fn finish(mut self, catalog: &Catalog) -> Result<Rows, StorageFault> {
        self.stations.sort_by_key(|station| station.rank);
        let mut rows = Rows::default();
        for station in self.stations {
            rows.push(|row| {
                row.field("station_id", &catalog.stations[station.rank as usize]);
                row.field("units", &station.units);
                row.field("metrics", &station.metrics);
                row.field("first", &station.first);
                row.field("last", &station.last);
            });
        }
        Ok(rows)
    }
}

/// A station's counts and its first and last record of either kind.
fn station_summary(rank: u32, data: &StationData) -> Result<Option<StationSummary>, StorageFault> {
    let Some((first, last)) = data.first_and_last() else {
        return Ok(None);
    };
    let time_created = |bytes: StoredRecord| {
        #[derive(Deserialize)]
        struct Time<'a> {
            #[serde(borrow)]
            time_created: Cow<'a, str>,
        }
        let mut json = Vec::new();
        data.write_json(bytes, &mut json)?;
        let time: Time =
            serde_json::from_slice(&json).expect("a record's JSON, rendered at load, has its time");
        Ok::<_, StorageFault>(time.time_created.into_owned())
    };
    Ok(Some(StationSummary {
        rank,
        units: data.unit_count() as u64,
        metrics: data.metric_count() as u64,
        first: time_created(first.1)?,
        last: time_created(last.1)?,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{generation, summarize, METRICS_A, UNITS_A, UNITS_B};
    use super::super::Question;

    #[test]
    fn stations_show_counts_and_their_first_and_last_times_as_written() {
        let generation = generation(
            &[
                ("a.metrics.jsonl", METRICS_A),
                ("a.units.jsonl", UNITS_A),
                ("b.units.jsonl", UNITS_B),
            ],
            2,
        );
        let rows = summarize(&generation, &Question::Stations, true);
        assert_eq!(
            rows,
            [
                json!({"station_id": "A", "units": 3, "metrics": 3,
                       "first": "2024-01-01T00:10:00Z", "last": "2024-01-01T00:30:00Z"}),
                json!({"station_id": "B", "units": 2, "metrics": 0,
                       "first": "2024-01-01T00:10:00Z", "last": "2024-01-01T01:20:00Z"}),
            ]
        );
    }
}
