//! A stream's steps (docs/api.md section 14.2), planned as record queries are,
//! and the stream's position, which an event's id names.
//!
//! A stream sends the backlog, the walk of the generation it opened on (the
//! matching records from `from` on, in the contract's order, in events of at
//! most [`EVENT_RECORDS`]), and then each later generation's additions that
//! match, in the contract's order among themselves. Its position says which of
//! these it has sent: while it walks, the generation walked and the last record
//! sent (`after`); once the walk is done (`caught_up`), the generation whose
//! additions it has sent, and how many of the next generation's additions
//! (`added`) it has accounted for. What it sends next follows from the position
//! and the generations' additions alone, never from when the steps ran: a
//! client that resumes from an event's id gets what the stream would have sent
//! after that event, in the same order. The walk of an older generation leaves
//! out what the generations since added ([`Pick::Except`]), which the stream
//! sends with their own generation.
//!
//! The id is sealed like a cursor (`data::cursor`): by the service's cursor key, to
//! the stream's filters and token, the generation and additions count, and the process
//! (a number drawn at its start), so that an id of another process, token or query
//! is told apart from one that continues this stream.

use std::sync::Arc;

use super::scope::cursor_scope;
use super::{stations, Plan, PlanError, Question, RecordQuestion, Request, Settings};
use crate::data::catalog::Catalog;
use crate::data::cursor::{Cursor, RecordIdentity};
use crate::data::key::Position;
use crate::data::load::Additions;
use crate::data::scan::{Pick, RecordFilter};
use crate::domain::query::Endpoint;
use crate::domain::record::Kind;
use crate::domain::time::{Timestamp, Window};

/// The most records one event carries (docs/api.md section 14.2).
const EVENT_RECORDS: usize = 1000;

/// The most records one event carries under `settings`: at most `--max-records`.
fn event_records(settings: &Settings) -> usize {
    EVENT_RECORDS.min(settings.limits.max_records)
}

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

/// A stream: its question (its kind, filters and token, a records request), where
/// it starts (`from`), the process that serves it, and where it stands. The
/// service asks it for the plan of its [`next`](Stream::next) event and tells it
/// when that plan is [`answered`](Stream::answered); the stream keeps its own
/// position between the two.
#[derive(Debug)]
pub struct Stream {
    kind: Kind,
    request: Arc<Request>,
    from: Timestamp,
    process: u64,
    position: StreamPosition,
    /// What the plan [`Stream::next`] gave last moves the position to once
    /// answered.
    planned: Option<Planned>,
    /// The additions of the generation after the position's, placed in a
    /// catalog: kept while the stream sends them event by event.
    placed: Option<Placed>,
}

/// Where a planned step leaves the stream once answered.
#[derive(Debug)]
enum Planned {
    /// After the walk's records that the answer holds.
    Walk,
    /// At this position, among a generation's additions.
    Added(StreamPosition),
}

/// One generation's additions that a stream reads, placed in a catalog.
#[derive(Debug)]
struct Placed {
    /// The generation that added them.
    generation: u64,
    /// The generation of the catalog they are placed in.
    catalog: u64,
    additions: StreamAdditions,
}

/// Where a stream stands: see the module's doc.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StreamPosition {
    generation: u64,
    /// Once caught up: how many of the next generation's additions (those in
    /// the stream's stations and window, matching or not) are accounted for.
    added: u32,
    /// While walking: the last record sent.
    after: Option<RecordIdentity>,
    /// The walk of `generation` is done.
    caught_up: bool,
}

impl StreamPosition {
    /// A new stream's position: nothing sent, the backlog walked in generation
    /// `generation`.
    fn start(generation: u64) -> StreamPosition {
        StreamPosition {
            generation,
            added: 0,
            after: None,
            caught_up: false,
        }
    }

    /// The position once the next generation's additions are all sent.
    fn next_generation(&self) -> StreamPosition {
        StreamPosition {
            generation: self.generation + 1,
            added: 0,
            after: None,
            caught_up: true,
        }
    }

    /// The position after the walk sent `answer`'s records (read from
    /// `catalog`): caught up when the event held fewer than an event may, since
    /// the walk had no more.
    fn after_walking(
        &self,
        answer: &super::Answer,
        catalog: &Catalog,
        settings: &Settings,
    ) -> StreamPosition {
        match answer.count() < event_records(settings) {
            true => StreamPosition {
                generation: self.generation,
                added: 0,
                after: None,
                caught_up: true,
            },
            false => StreamPosition {
                after: (answer.last_identity(catalog)).or_else(|| self.after.clone()),
                ..self.clone()
            },
        }
    }
}

/// One generation's additions that a stream reads (in its stations and window),
/// in the contract's order, placed in one catalog: what a generation's events
/// are sent from.
#[derive(Debug)]
struct StreamAdditions {
    positions: Vec<Position>,
}

impl Stream {
    /// The stream of the records that `request` (of `/units` or `/metrics`) asks
    /// for, from its `from` (by default the time it arrived) on, in the process
    /// numbered `process`, opened on `catalog`'s generation: refused as its
    /// first event's plan would be (stations the token may not see, filters
    /// that do not fit).
    pub fn open(
        request: Arc<Request>,
        process: u64,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Stream, PlanError> {
        // Only the records endpoints have streams; a summary's kind is its records'.
        let kind = match request.endpoint {
            Endpoint::Metrics | Endpoint::MetricsSummary | Endpoint::MetricsControl => {
                Kind::Metrics
            }
            Endpoint::Units | Endpoint::UnitsSummary | Endpoint::Stations => Kind::Units,
        };
        let from = request.params.from().unwrap_or(request.arrived);
        let position = StreamPosition::start(catalog.generation());
        let stream = Stream::at(kind, request, from, process, position);
        stream.walk(std::iter::empty(), catalog, settings)?;
        Ok(stream)
    }

    fn at(
        kind: Kind,
        request: Arc<Request>,
        from: Timestamp,
        process: u64,
        position: StreamPosition,
    ) -> Stream {
        Stream {
            kind,
            request,
            from,
            process,
            position,
            planned: None,
            placed: None,
        }
    }

    /// The request it was opened with, or restarted with last.
    pub fn request(&self) -> &Arc<Request> {
        &self.request
    }

    /// The generation it walks, or whose additions it has sent: the changes
    /// after it are what [`Stream::next`] needs.
    pub fn generation(&self) -> u64 {
        self.position.generation
    }

    /// Whether the backlog is sent: the stream sends generations' additions now.
    pub fn caught_up(&self) -> bool {
        self.position.caught_up
    }

    /// Starts over from `from`, for `request` (its own, or one for a token whose
    /// stations changed), with the backlog walked in generation `generation`:
    /// what follows a `reset`.
    pub fn restart(&mut self, request: Arc<Request>, generation: u64) {
        *self = Stream::at(
            self.kind,
            request,
            self.from,
            self.process,
            StreamPosition::start(generation),
        );
    }

    /// The plan of the next event, read in `catalog` (the newest generation's):
    /// the walk's next records, or else the next of the generations' additions
    /// that match; `since` are the changes installed after
    /// [`Stream::generation`] up to `catalog`'s, each as its generation and what
    /// it added. `None` once everything up to `catalog` is sent. Generations
    /// whose additions hold nothing the stream sends are passed over.
    pub fn next<'a, Since>(
        &mut self,
        since: Since,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Option<Plan>, PlanError>
    where
        Since: IntoIterator<Item = (u64, &'a Additions)>,
        Since::IntoIter: Clone,
    {
        self.planned = None;
        let since = since.into_iter();
        if !self.position.caught_up {
            let walked = self.position.generation;
            let later = (since.filter(move |(generation, _)| *generation > walked))
                .map(|(_, additions)| additions);
            let plan = self.walk(later, catalog, settings)?;
            self.planned = Some(Planned::Walk);
            return Ok(Some(plan));
        }
        loop {
            let next = self.position.generation + 1;
            let Some((_, additions)) = since.clone().find(|(generation, _)| *generation == next)
            else {
                return Ok(None);
            };
            let placed = (self.placed.as_ref()).is_some_and(|placed| {
                placed.generation == next && placed.catalog == catalog.generation()
            });
            if !placed {
                self.placed = Some(Placed {
                    generation: next,
                    catalog: catalog.generation(),
                    additions: self.additions(additions, &catalog),
                });
            }
            let additions = &self.placed.as_ref().expect("placed above").additions;
            match self.added(additions, Arc::clone(&catalog), settings)? {
                Some((plan, after)) => {
                    self.planned = Some(Planned::Added(after));
                    return Ok(Some(plan));
                }
                None => self.position = self.position.next_generation(),
            }
        }
    }

    /// Moves past the event [`Stream::next`] planned last, whose records are
    /// `answer`'s (read from `catalog`): the id that names the new position, for
    /// the event to send, if `answer` holds records; `None` if it holds none (and
    /// no event is sent), or nothing was planned.
    pub fn answered(
        &mut self,
        answer: &super::Answer,
        catalog: &Catalog,
        settings: &Settings,
    ) -> Option<String> {
        self.position = match self.planned.take()? {
            Planned::Walk => self.position.after_walking(answer, catalog, settings),
            Planned::Added(after) => after,
        };
        (answer.count() > 0).then(|| self.id(settings))
    }

    /// The id an event names the stream's position with.
    fn id(&self, settings: &Settings) -> String {
        let position = &self.position;
        let (flag, after) = match (&position.after, position.caught_up) {
            (_, true) => ('c', self.sentinel()),
            (Some(after), false) => ('a', after.clone()),
            (None, false) => ('n', self.sentinel()),
        };
        let cursor = Cursor {
            kind: self.kind,
            window: self.window(),
            after,
        };
        let scope = self.id_scope(position.generation, position.added, flag);
        format!(
            "{}.{}.{flag}{}",
            position.generation,
            position.added,
            cursor.encode(&settings.cursor_key.0, &scope)
        )
    }

    /// The stream that `id` continues, at the position it names (its `from` is
    /// the original stream's), if this process issued it for this stream's
    /// endpoint, filters and token; else `None`, and this stream starts over.
    pub fn resume(&self, id: &str, settings: &Settings) -> Option<Stream> {
        let mut parts = id.splitn(3, '.');
        let (generation, added, rest) = (parts.next()?, parts.next()?, parts.next()?);
        let (generation, added) = (generation.parse::<u64>().ok()?, added.parse::<u32>().ok()?);
        let mut characters = rest.chars();
        let flag = characters
            .next()
            .filter(|flag| ['a', 'n', 'c'].contains(flag))?;
        let scope = self.id_scope(generation, added, flag);
        let cursor = Cursor::decode(characters.as_str(), &settings.cursor_key.0, &scope).ok()?;
        if cursor.kind != self.kind {
            return None;
        }
        let position = StreamPosition {
            generation,
            added,
            after: (flag == 'a').then_some(cursor.after),
            caught_up: flag == 'c',
        };
        Some(Stream::at(
            self.kind,
            Arc::clone(&self.request),
            cursor.window.from,
            self.process,
            position,
        ))
    }

    /// The plan of the walk's next event: the first [`EVENT_RECORDS`] matching
    /// records after the position's last one, from `from` on, of the position's
    /// generation, read in `catalog`, which may be newer: `since` are the
    /// additions of every generation after the position's up to `catalog`'s,
    /// left out of the walk.
    fn walk<'a>(
        &self,
        since: impl IntoIterator<Item = &'a Additions>,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Plan, PlanError> {
        let position = &self.position;
        let after = (position.after.as_ref()).map(|after| catalog.position_after(after));
        let mut later: Vec<Position> = (since.into_iter())
            .flat_map(|additions| self.positions(additions, &catalog))
            .filter(|position| after.is_none_or(|after| *position > after))
            .collect();
        let pick = match later.is_empty() {
            true => Pick::All,
            false => {
                later.sort_unstable();
                Pick::Except(later.into())
            }
        };
        let cap = event_records(settings);
        self.plan(self.window(), after, cap, pick, catalog)
    }

    /// The additions of one generation (`additions`) that the stream reads, in
    /// the contract's order, placed in `catalog` (which holds them).
    fn additions(&self, additions: &Additions, catalog: &Catalog) -> StreamAdditions {
        let mut positions: Vec<Position> = self.positions(additions, catalog).collect();
        positions.sort_unstable();
        StreamAdditions { positions }
    }

    /// The plan of the next event of the position's next generation, whose
    /// additions are `added`: the matching records among the next
    /// [`EVENT_RECORDS`] (at most `--max-records`) of them not yet accounted for,
    /// in `catalog`, and the position once they are sent; `None` when none are
    /// left.
    fn added(
        &self,
        added: &StreamAdditions,
        catalog: Arc<Catalog>,
        settings: &Settings,
    ) -> Result<Option<(Plan, StreamPosition)>, PlanError> {
        let position = &self.position;
        let cap = event_records(settings);
        let start = (position.added as usize).min(added.positions.len());
        let batch = &added.positions[start..(start + cap).min(added.positions.len())];
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(None);
        };
        let window = Window {
            from: first.instant,
            to: just_after(last.instant),
        };
        let next = StreamPosition {
            added: position.added + batch.len() as u32,
            ..position.clone()
        };
        let plan = self.plan(window, None, batch.len(), Pick::Only(batch.into()), catalog)?;
        Ok(Some((plan, next)))
    }

    /// The positions, in `catalog`, of what `additions` added to the stations the
    /// stream reads, from `from` on, of its kind.
    fn positions<'a>(
        &'a self,
        additions: &'a Additions,
        catalog: &'a Catalog,
    ) -> impl Iterator<Item = Position> + 'a {
        (additions.added())
            .filter_map(|(station, added)| {
                let rank = (self.request.reads(station)).then(|| catalog.rank(station))??;
                Some((rank, added))
            })
            .flat_map(move |(rank, added)| {
                (added.of(self.kind).iter())
                    .filter(|key| key.instant >= self.from)
                    .map(move |key| Position {
                        instant: key.instant,
                        station_rank: rank,
                        load_order: key.load_order,
                    })
            })
    }

    fn plan(
        &self,
        window: Window,
        after: Option<Position>,
        cap: usize,
        pick: Pick,
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
        if let Pick::Only(only) = &pick {
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
            pick,
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
    fn id_scope(&self, generation: u64, added: u32, flag: char) -> Vec<u8> {
        let mut scope = b"stream ".to_vec();
        scope.extend_from_slice(&self.process.to_be_bytes());
        scope.extend_from_slice(&generation.to_be_bytes());
        scope.extend_from_slice(&added.to_be_bytes());
        scope.push(flag as u8);
        scope.extend(cursor_scope(
            self.kind,
            &self.request.params,
            &self.request.principal,
        ));
        scope
    }
}
