//! The shards' answers to a plan merged into its answer: sorted hits into the
//! contract's order and a [`Page`] (with the cursor of the next one), or partial
//! summaries into rows. And the reading of a page's records, which every answer
//! format goes through ([`Page::each_record`]).

use std::sync::Arc;

use super::shard::Answered;
use super::{
    Answer, Elements, Page, Plan, PlanError, Question, RecordQuestion, Refusal, Settings,
    ShardAnswer,
};
use crate::data::catalog::Catalog;
use crate::data::cursor::Cursor;
use crate::data::key::Position;
use crate::data::merge::merge_sorted;
use crate::data::scan::{Hit, SealedJson};
use crate::data::sealed::is_sealed;
use crate::data::shard::ShardData;
use crate::data::stored::{Parts, RecordJson};
use crate::data::summary::{PartialSummary, Question as Summary, Rows};

/// One shard's reply: its data, and the blocks of its hits that are sealed records.
#[derive(Debug)]
pub(super) struct Part {
    data: Arc<ShardData>,
    sealed: SealedJson,
}

/// A hit and the index of the part (shard reply) that holds its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct PartHit {
    hit: Hit,
    part: usize,
}

/// A record of a page, not yet read: its JSON lies behind its station, its
/// stored form and its pieces, each a cache miss that waits on the one before.
#[derive(Clone, Copy)]
struct Record<'a> {
    data: &'a ShardData,
    sealed: &'a SealedJson,
    hit: &'a Hit,
}

impl Plan {
    /// The answer the shards' `answers` make: the page of its records, or its
    /// summary's rows. An unpaged query over `--max-records` records, or a summary
    /// of more rows, is refused.
    pub fn merge(
        &self,
        answers: Vec<ShardAnswer>,
        settings: &Settings,
    ) -> Result<Answer, PlanError> {
        match &self.question {
            Question::Records(question) => {
                let page = merge_records(answers, question.cap)?;
                let page = page.paginate(&self.catalog, question, settings)?;
                Ok(Answer(Elements::Page(page)))
            }
            Question::Summary(question) => {
                let catalog = &self.catalog;
                let max_records = settings.limits.max_records;
                let rows = match question {
                    Summary::Units(_) => {
                        merge_partials(answers, catalog, max_records, |answer| match answer {
                            Answered::Units(partial) => Some(partial),
                            _ => None,
                        })
                    }
                    Summary::Metrics(_) => {
                        merge_partials(answers, catalog, max_records, |answer| match answer {
                            Answered::Metrics(partial) => Some(partial),
                            _ => None,
                        })
                    }
                    Summary::Stations => {
                        merge_partials(answers, catalog, max_records, |answer| match answer {
                            Answered::Stations(partial) => Some(partial),
                            _ => None,
                        })
                    }
                    Summary::Control(_) => {
                        merge_partials(answers, catalog, max_records, |answer| match answer {
                            Answered::Control(partial) => Some(partial),
                            _ => None,
                        })
                    }
                }?;
                Ok(Answer(Elements::Rows(rows)))
            }
        }
    }
}

/// The shards' hits merged into the contract's order, the first `cap` of them.
fn merge_records(answers: Vec<ShardAnswer>, cap: usize) -> Result<Page, PlanError> {
    let mut parts = Vec::with_capacity(answers.len());
    let mut streams = Vec::with_capacity(answers.len());
    for (part, answer) in answers.into_iter().enumerate() {
        let ShardAnswer(Answered::Records { data, answer }) = answer else {
            return Err(PlanError::OtherAnswer);
        };
        parts.push(Part {
            data,
            sealed: answer.sealed,
        });
        streams.push(
            answer
                .hits
                .into_iter()
                .map(move |hit| PartHit { hit, part }),
        );
    }
    Ok(Page {
        hits: merge_sorted(streams, cap),
        parts,
        paged: false,
        next_cursor: None,
        last: None,
        generation: 0,
    })
}

/// The shards' partial summaries, which `partial` takes from their answers,
/// merged and rendered as rows; more rows than `max_records` is refused.
fn merge_partials<P: PartialSummary>(
    answers: Vec<ShardAnswer>,
    catalog: &Catalog,
    max_records: usize,
    partial: impl Fn(Answered) -> Option<P>,
) -> Result<Rows, PlanError> {
    let mut merged: Option<P> = None;
    for ShardAnswer(answer) in answers {
        let Some(partial) = partial(answer) else {
            return Err(PlanError::OtherAnswer);
        };
        match &mut merged {
            Some(merged) => merged.merge(partial),
            None => merged = Some(partial),
        }
    }
    let Some(merged) = merged else {
        return Ok(Rows::default());
    };
    if merged.row_count() > max_records {
        return Err(Refusal::TooManyRows { max_records }.into());
    }
    Ok(merged.finish(catalog)?)
}

impl Page {
    /// The page a record query's merged records make: all of them, or `limit` of
    /// them and the cursor of the rest; or `result_too_large` for an unpaged query
    /// over `max_records`.
    fn paginate(
        mut self,
        catalog: &Catalog,
        question: &RecordQuestion,
        settings: &Settings,
    ) -> Result<Page, Refusal> {
        let max_records = settings.limits.max_records;
        self.paged = question.limit.is_some();
        self.generation = catalog.generation();
        self.next_cursor = match question.limit {
            None if self.hits.len() > max_records => {
                return Err(Refusal::ResultTooLarge { max_records })
            }
            None => None,
            Some(limit) if self.hits.len() > limit => {
                self.hits.truncate(limit);
                let after = self
                    .hits
                    .last()
                    .expect("a full page has a last record")
                    .hit
                    .position;
                let cursor = Cursor {
                    kind: question.kind,
                    window: question.window,
                    after: catalog.identity_of(after),
                };
                let scope = question
                    .scope
                    .as_deref()
                    .expect("paged queries have a cursor scope");
                Some(cursor.encode(&settings.cursor_key.0, scope))
            }
            Some(_) => None,
        };
        self.last = (self.hits.last()).map(|last| last.hit.position);
        Ok(self)
    }

    /// The position of its last record.
    pub(super) fn last(&self) -> Option<Position> {
        self.last
    }

    /// The generation it was read from.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// How many records it holds.
    pub(crate) fn len(&self) -> usize {
        self.hits.len()
    }

    /// The length of its records' JSON, all told, known without reading a record:
    /// what an answer's buffer is sized by.
    pub(crate) fn json_bytes(&self) -> usize {
        self.records()
            .map(|record| match is_sealed(record.hit.bytes) {
                // A sealed hit's `bytes` locate its JSON among its scan's blocks.
                true => record.sealed.length(record.hit.bytes),
                false => record.hit.bytes.length as usize,
            })
            .sum()
    }

    /// The next page's cursor; `None` on the last page or without `limit`.
    pub(crate) fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    /// Whether the query asked for pages (`limit`): then a page without a next
    /// cursor is the last.
    pub(crate) fn paged(&self) -> bool {
        self.paged
    }

    /// Hands each record's parts, in order, to `write`, with its index.
    ///
    /// A record's bytes lie behind three places (its station, which says where
    /// its station's arena and pieces are; its stored form; its pieces), each a
    /// cache miss that waits on the one before; a sealed one's behind where its
    /// JSON ends in its block. Asking for each a few records
    /// ahead lets the misses of several records overlap. Each record's station
    /// and stored form are read once: the stages hand on what they read in two
    /// small rings.
    pub(crate) fn each_record<'a>(&'a self, mut write: impl FnMut(usize, Parts<'a>)) {
        let records = self.records();
        let mut locations = records.clone().skip(LOCATION_AHEAD);
        let mut located = records.map(|record| {
            let json = record.json();
            json.prefetch_stored();
            json
        });
        // Record k's located JSON waits in `stored[k % STORED_AHEAD]` until it is
        // read; its parts wait in `ready[k % PIECES_AHEAD]` until they are written.
        let mut stored: [Option<RecordJson<'a>>; STORED_AHEAD] = [None; STORED_AHEAD];
        let mut ready: [Option<Parts<'a>>; PIECES_AHEAD] = [None; PIECES_AHEAD];
        for slot in &mut stored {
            *slot = located.next();
        }
        for (slot, json) in ready.iter_mut().zip(&mut stored) {
            *slot = json.take().map(read_parts);
        }
        for index in 0.. {
            let Some(parts) = ready[index % PIECES_AHEAD].take() else {
                break;
            };
            // The hints go out before this record is written, so that their misses
            // overlap the writing.
            if let Some(ahead) = locations.next() {
                ahead.prefetch_location();
            }
            stored[index % STORED_AHEAD] = located.next();
            let next = index + PIECES_AHEAD;
            ready[index % PIECES_AHEAD] = stored[next % STORED_AHEAD].take().map(read_parts);
            write(index, parts);
        }
    }

    /// The records, in order.
    fn records(&self) -> impl Iterator<Item = Record<'_>> + Clone + '_ {
        self.hits.iter().map(|part_hit| {
            let part = &self.parts[part_hit.part];
            Record {
                data: &part.data,
                sealed: &part.sealed,
                hit: &part_hit.hit,
            }
        })
    }
}

/// How many records ahead [`Page::each_record`] asks for what locates a record
/// (its station, or a sealed one's JSON end), its stored form, and its pieces.
const LOCATION_AHEAD: usize = 12;
const STORED_AHEAD: usize = 8;
const PIECES_AHEAD: usize = 4;

/// A record's parts, read from its stored form, and its pieces asked for.
fn read_parts(json: RecordJson<'_>) -> Parts<'_> {
    let parts = json.parts();
    parts.prefetch();
    parts
}

impl<'a> Record<'a> {
    /// Its response JSON.
    fn json(&self) -> RecordJson<'a> {
        self.data.json(self.hit, self.sealed)
    }

    /// Hints the CPU to load what locates its JSON (see
    /// [`ShardData::prefetch_location`]).
    fn prefetch_location(&self) {
        self.data.prefetch_location(self.hit, self.sealed);
    }
}
