//! A stream's steps (docs/api.md section 14.2), planned as record queries are:
//! the walk (the records after the last one sent, in the contract's order, in
//! events of at most [`EVENT_RECORDS`]) and the late records (those a generation
//! added that sort before the last one sent), and the stream's position, which an
//! event's id names.
//!
//! A stream's position is the last record it sent (`after`) and the generation
//! whose added records it has accounted for (`generation`), with how many of the
//! next generation's late records it has sent (`late`). Everything the stream has
//! sent is then "every matching record up to `after` in that generation, and the
//! first `late` of the next one's late records"; what it sends next follows from
//! the position alone, so a client that resumes from an event's id gets exactly
//! what the stream would have sent after that event.
//!
//! The id is sealed like a cursor (`data::cursor`): by the service's cursor key, to
//! the stream's filters and token, the generation and late count, and the process
//! (a number drawn at its start), so that an id of another process, token or query
//! is told apart from one that continues this stream.

use std::sync::Arc;

use super::scope::cursor_scope;
use super::{stations, Plan, PlanError, Question, RecordQuestion, Request, Settings};
use crate::data::catalog::Catalog;
use crate::data::cursor::{Cursor, RecordIdentity};
use crate::data::key::Position;
use crate::data::load::Additions;
use crate::data::scan::RecordFilter;
use crate::domain::query::Endpoint;
use crate::domain::record::Kind;
use crate::domain::time::{Timestamp, Window};

/// The most records one event carries (docs/api.md section 14.2).
pub const EVENT_RECORDS: usize = 1000;

/// The instant one nanosecond after `instant`: the end of a window that holds it.
fn just_after(instant: Timestamp) -> Timestamp {
    match instant.nanos {
        999_999_999 => Timestamp {
            seconds: instant.seconds + 1,
            nanos: 0,
        },
        nanos => Timestamp {
            seconds: instant.seconds,
            nanos: nanos + 1,
        },
    }
}

/// A stream's question: its kind, filters and token (a records request), where it
/// starts (`from`), and the process that serves it.
#[derive(Debug)]
pub struct Stream {
    kind: Kind,
    request: Arc<Request>,
    from: Timestamp,
    process: u64,
}

/// Where a stream stands: see the module's doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamPosition {
    generation: u64,
    late: u32,
    after: Option<RecordIdentity>,
}

impl StreamPosition {
    /// The generation whose added records the stream has accounted for.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many of the next generation's late records it has sent.
    pub fn late(&self) -> u32 {
        self.late
    }

    /// The position once the next generation's late records are all sent.
    pub fn next_generation(&self) -> StreamPosition {
        StreamPosition {
            generation: self.generation + 1,
            late: 0,
            after: self.after.clone(),
        }
    }

    /// The position after `answer`'s records were sent: after its last record,
    /// and `late` more of the next generation's late records if they were late
    /// records (`late` is then their count so far).
    pub fn after_sending(&self, answer: &super::Answer, late: Option<u32>) -> StreamPosition {
        let after = match late {
            // Late records sort before `after`, which stays the last sent in order.
            Some(_) => self.after.clone(),
            None => answer.last_identity().or_else(|| self.after.clone()),
        };
        StreamPosition {
            generation: self.generation,
            late: late.unwrap_or(self.late),
            after,
        }
    }
}

/// Why an event id does not continue a stream: a new one starts over.
#[derive(Debug, thiserror::Error)]
#[error("the event id {reason}")]
pub struct ForeignId {
    reason: &'static str,
}

impl Stream {
    /// The stream of the records that `request` (of `/units` or `/metrics`) asks
    /// for, from its `from` (by default the time it arrived) on, in the process
    /// numbered `process`.
    pub fn new(request: Arc<Request>, process: u64) -> Stream {
        // Only the records endpoints have streams; a summary's kind is its records'.
        let kind = match request.endpoint {
            Endpoint::Metrics | Endpoint::MetricsSummary | Endpoint::MetricsControl => {
                Kind::Metrics
            }
            Endpoint::Units | Endpoint::UnitsSummary | Endpoint::Stations => Kind::Units,
        };
        let from = request.params.from().unwrap_or(request.arrived);
        Stream::with_from(kind, request, from, process)
    }

    fn with_from(kind: Kind, request: Arc<Request>, from: Timestamp, process: u64) -> Stream {
        Stream {
            kind,
            request,
            from,
            process,
        }
    }

    /// The request it was opened with.
    pub fn request(&self) -> &Arc<Request> {
        &self.request
    }

    /// The same stream for another request (a token whose stations changed).
    pub fn with_request(&self, request: Arc<Request>) -> Stream {
        Stream::with_from(self.kind, request, self.from, self.process)
    }

    /// A new stream's position: nothing sent, generation `generation` accounted for.
    pub fn start(&self, generation: u64) -> StreamPosition {
        StreamPosition {
            generation,
            late: 0,
            after: None,
        }
    }

    /// Whether the stream reads `station`: the token may see it, and the request
    /// names it (or names none).
    pub(crate) fn reads(&self, station: &str) -> bool {
        self.request.reads(station)
    }

    /// The id an event names `position` with.
    pub fn id(&self, position: &StreamPosition, settings: &Settings) -> String {
        let (flag, after) = match &position.after {
            Some(after) => ('a', after.clone()),
            None => ('n', self.sentinel()),
        };
        let cursor = Cursor {
            kind: self.kind,
            window: self.window(),
            after,
        };
        let scope = self.id_scope(position.generation, position.late, flag);
        format!(
            "{}.{}.{flag}{}",
            position.generation,
            position.late,
            cursor.encode(&settings.cursor_key.0, &scope)
        )
    }

    /// The position `id` names, and the stream it continues (its `from` is the
    /// original stream's), if this process issued it for this stream's filters and
    /// token; else why not.
    pub fn resume(
        &self,
        id: &str,
        settings: &Settings,
    ) -> Result<(Stream, StreamPosition), ForeignId> {
        let malformed = ForeignId {
            reason: "is not one this process issued",
        };
        let mut parts = id.splitn(3, '.');
        let (Some(generation), Some(late), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed);
        };
        let (Ok(generation), Ok(late)) = (generation.parse::<u64>(), late.parse::<u32>()) else {
            return Err(malformed);
        };
        let mut characters = rest.chars();
        let flag = characters.next().ok_or(malformed)?;
        if flag != 'a' && flag != 'n' {
            return Err(ForeignId {
                reason: "is not one this process issued",
            });
        }
        let scope = self.id_scope(generation, late, flag);
        let cursor =
            Cursor::decode(characters.as_str(), &settings.cursor_key.0, &scope).map_err(|_| {
                ForeignId {
                    reason: "belongs to another process, token or query",
                }
            })?;
        if cursor.kind != self.kind {
            return Err(ForeignId {
                reason: "belongs to another endpoint",
            });
        }
        let stream = Stream::with_from(
            self.kind,
            Arc::clone(&self.request),
            cursor.window.from,
            self.process,
        );
        let position = StreamPosition {
            generation,
            late,
            after: (flag == 'a').then_some(cursor.after),
        };
        Ok((stream, position))
    }

    /// The plan of the walk's next event: the first [`EVENT_RECORDS`] matching
    /// records after `position`'s last one, from `from` on, in `catalog`.
    pub fn walk(
        &self,
        position: &StreamPosition,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Plan, PlanError> {
        let after = (position.after.as_ref()).map(|after| catalog.position_after(after));
        let cap = EVENT_RECORDS.min(settings.limits.max_records);
        self.plan(self.window(), after, cap, None, catalog)
    }

    /// The plan of the next batch of late records `additions` (those of
    /// `position`'s next generation) holds: the records it added that match and
    /// sort before the last one sent, in `catalog` (which holds them), after the
    /// `late` of them already sent, at most `--max-records`; `None` when none are
    /// left.
    pub fn late(
        &self,
        additions: &Additions,
        position: &StreamPosition,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Option<Plan>, PlanError> {
        let Some(after) = &position.after else {
            // Nothing sent: everything added is walked to.
            return Ok(None);
        };
        let last_sent = catalog.position_after(after);
        let mut late: Vec<Position> = Vec::new();
        for (station, added) in additions.added() {
            let Some(rank) = (self.reads(station))
                .then(|| catalog.rank(station))
                .flatten()
            else {
                continue;
            };
            late.extend(
                (added.of(self.kind).iter())
                    .filter(|key| key.instant >= self.from)
                    .map(|key| Position {
                        instant: key.instant,
                        station_rank: rank,
                        load_order: key.load_order,
                    })
                    .filter(|position| *position <= last_sent),
            );
        }
        late.sort_unstable();
        // Those not yet sent, at most `--max-records` of them: the next batch.
        let unsent = late.len().saturating_sub(position.late as usize);
        let batch: Vec<Position> = (late.into_iter())
            .skip(position.late as usize)
            .take(unsent.min(settings.limits.max_records))
            .collect();
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(None);
        };
        let window = Window {
            from: first.instant,
            to: just_after(last.instant),
        };
        // The window also holds records sent before: every record in it is
        // scanned, and the batch's kept (the plan's `only`), so that none of the
        // batch is left behind a cap.
        self.plan(window, None, usize::MAX, Some(batch), catalog)
            .map(Some)
    }

    fn plan(
        &self,
        window: Window,
        after: Option<Position>,
        cap: usize,
        only: Option<Vec<Position>>,
        catalog: Arc<Catalog>,
    ) -> Result<Plan, PlanError> {
        let params = &self.request.params;
        let filter = match self.kind {
            Kind::Units => RecordFilter::Units {
                unit_types: catalog.matcher(&params.unit_types)?,
                unit_serial: super::serial_matcher(&catalog, params)?,
                results: super::results_matcher(&catalog, &params.results)?,
                directions: params.directions,
            },
            Kind::Metrics => RecordFilter::Metrics {
                names: catalog.matcher(&params.names)?,
                unit_serial: super::serial_matcher(&catalog, params)?,
            },
        };
        let mut stations = stations(params, &self.request.principal, &catalog)?;
        if let Some(only) = &only {
            stations.retain(|rank| only.iter().any(|position| position.station_rank == *rank));
        }
        let question = RecordQuestion {
            kind: self.kind,
            window,
            after,
            filter,
            cap,
            limit: None,
            scope: None,
            only,
        };
        Ok(Plan {
            catalog,
            stations,
            question: Question::Records(question),
        })
    }

    /// The window a stream reads: from `from` on, without an end.
    fn window(&self) -> Window {
        Window {
            from: self.from,
            to: Timestamp::MAX,
        }
    }

    /// What an id names as its last record when it names none.
    fn sentinel(&self) -> RecordIdentity {
        RecordIdentity {
            instant: self.from,
            station_id: String::new(),
            path: String::new(),
            line: 0,
        }
    }

    /// What an id is sealed to: the stream's filters and token, the process, and
    /// the position's numbers.
    fn id_scope(&self, generation: u64, late: u32, flag: char) -> Vec<u8> {
        let mut scope = b"stream ".to_vec();
        scope.extend_from_slice(&self.process.to_be_bytes());
        scope.extend_from_slice(&generation.to_be_bytes());
        scope.extend_from_slice(&late.to_be_bytes());
        scope.push(flag as u8);
        scope.extend(cursor_scope(
            self.kind,
            &self.request.params,
            &self.request.principal,
        ));
        scope
    }
}
