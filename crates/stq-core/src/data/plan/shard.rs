//! What one shard is asked of a plan, about its own stations, and what it answers:
//! the first `cap` matching records, or a partial summary (docs/api.md section
//! 10), never records.

use std::sync::Arc;

use super::{Plan, Question, ShardAnswer, ShardQuestion};
use crate::data::catalog::Catalog;
use crate::data::fault::StorageFault;
use crate::data::scan::{ScanAnswer, ScanRequest, ShardStation};
use crate::data::shard::ShardData;
use crate::data::summary::{
    ControlPartial, MetricPartial, Partial, StationsPartial, SummaryRequest, UnitPartial,
};

/// What a shard is asked, by the kind of question.
#[derive(Debug)]
pub(super) enum Asked {
    Records(ScanRequest),
    Summary(SummaryRequest),
}

#[derive(Debug)]
pub(super) enum Answered {
    /// The hits and the shard data they point into, so that the bytes can be
    /// copied straight into a response; the JSON of the sealed hits comes with
    /// them (see [`ScanAnswer`]).
    Records {
        data: Arc<ShardData>,
        answer: ScanAnswer,
    },
    /// `/units/summary`.
    Units(UnitPartial),
    /// `/metrics/summary`.
    Metrics(MetricPartial),
    /// `/stations`.
    Stations(StationsPartial),
    /// `/metrics/control`.
    Control(ControlPartial),
}

impl From<Partial> for Answered {
    fn from(partial: Partial) -> Answered {
        match partial {
            Partial::Units(partial) => Answered::Units(partial),
            Partial::Metrics(partial) => Answered::Metrics(partial),
            Partial::Stations(partial) => Answered::Stations(partial),
            Partial::Control(partial) => Answered::Control(partial),
        }
    }
}

impl Plan {
    /// What each shard that holds some of the plan's stations is asked, with the
    /// shard's number; shards without any are left out.
    pub fn shard_questions(&self) -> impl Iterator<Item = (usize, ShardQuestion)> + '_ {
        stations_by_shard(&self.catalog, &self.stations).map(|(shard, stations)| {
            let asked = match &self.question {
                Question::Records(question) => Asked::Records(ScanRequest {
                    stations,
                    window: question.window,
                    after: question.after,
                    filter: question.filter.clone(),
                    cap: question.cap,
                    pick: question.pick.clone(),
                }),
                Question::Summary(question) => Asked::Summary(SummaryRequest {
                    stations,
                    question: question.clone(),
                }),
            };
            let question = ShardQuestion {
                catalog: Arc::clone(&self.catalog),
                asked,
            };
            (shard, question)
        })
    }
}

impl ShardQuestion {
    /// The generation the question is about: a shard answers it from its data of
    /// that generation only.
    pub fn generation(&self) -> u64 {
        self.catalog.generation()
    }

    /// The answer of `data`, the shard's data of the question's generation; a
    /// store file that fails a read of the answer's is its fault.
    pub fn answer(self, data: Arc<ShardData>) -> Result<ShardAnswer, StorageFault> {
        debug_assert_eq!(data.generation(), self.generation());
        match &self.asked {
            Asked::Records(request) => data.fetch_ahead_records(request),
            Asked::Summary(request) => {
                if let Some(window) = request.question.window() {
                    data.fetch_ahead(&request.stations, window);
                }
            }
        }
        Ok(ShardAnswer(match &self.asked {
            Asked::Records(request) => Answered::Records {
                answer: data.scan(request)?,
                data,
            },
            Asked::Summary(request) => data.summarize(request, self.catalog.symbols())?.into(),
        }))
    }
}

/// A plan's stations grouped by the shard that holds them; shards without any are
/// left out.
fn stations_by_shard(
    catalog: &Catalog,
    stations: &[u32],
) -> impl Iterator<Item = (usize, Vec<ShardStation>)> {
    let mut per_shard: Vec<Vec<ShardStation>> = vec![Vec::new(); catalog.shard_count()];
    for &rank in stations {
        let placement = catalog.placement(rank);
        per_shard[placement.shard as usize].push(ShardStation {
            rank,
            station_index: placement.station_index,
        });
    }
    per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, stations)| !stations.is_empty())
}
