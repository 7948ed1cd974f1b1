//! A query's steps end to end, without actors: planned, asked of every shard that
//! holds its stations, and merged (in shard order or reversed); a page's cursor
//! resumes where the page ended; what is refused is refused before or after the
//! shards, as the contract's order says.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::data::load::{load, LoadOptions, OnInvalid};
use crate::data::shard::ShardData;
use crate::domain::auth::Tokens;
use crate::domain::query::QueryParams;
use crate::domain::time::parse_rfc3339;

const TOKEN: &str = "plan-tests";

/// Three stations' units, ten minutes apart, on `shards` shards.
fn generation(shards: usize) -> (Arc<Catalog>, Vec<Arc<ShardData>>) {
    let directory = tempfile::tempdir().unwrap();
    for station in ["A", "B", "C"] {
        let lines: String = (0..5)
            .map(|index| {
                format!(
                    r#"{{"station_id":"{station}","time_created":"2024-01-01T00:{index}{}:00Z","direction":"output","slot":"1","unit_serial":"SN{index}","result":"PASS"}}"#,
                    ["0", "5"][index % 2],
                ) + "\n"
            })
            .collect();
        std::fs::write(
            directory.path().join(format!("{station}.units.jsonl")),
            lines,
        )
        .unwrap();
    }
    let (generation, _) = load(&LoadOptions {
        directory: directory.path().to_owned(),
        shards,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 1,
        hot: None,
        cache: crate::data::sealed::cache::test_cache(),
    })
    .unwrap();
    let (catalog, shards) = (generation.catalog, generation.shards);
    (catalog, shards.into_iter().map(Arc::new).collect())
}

fn settings(max_records: usize) -> Settings {
    Settings {
        limits: Limits {
            max_records,
            ..Limits::default()
        },
        cursor_key: CursorKey::fixed(7),
        pass_results: vec!["pass".to_owned()],
    }
}

/// A request of `endpoint` with `query`, by a token that may see `stations`
/// (`"*"` or a JSON list).
fn request(endpoint: Endpoint, query: &str, stations: &str, settings: &Settings) -> Request {
    let tokens = format!(
        r#"{{"tokens": [{{"name": "plan", "sha256": "{}", "stations": {stations}}}]}}"#,
        Tokens::hash(TOKEN)
    );
    let arrived = parse_rfc3339("2024-01-02T00:00:00Z").unwrap();
    let principal = Tokens::parse(&tokens)
        .unwrap()
        .authenticate(Some(format!("Bearer {TOKEN}").as_bytes()), arrived)
        .unwrap();
    Request {
        endpoint,
        params: QueryParams::parse(endpoint, query, settings.limits).unwrap(),
        principal,
        arrived,
    }
}

/// `request` planned, asked of its shards and merged, the shards' answers taken
/// in shard order or `reversed`.
fn answer(
    data: &(Arc<Catalog>, Vec<Arc<ShardData>>),
    request: &Request,
    settings: &Settings,
    reversed: bool,
) -> Result<Answer, PlanError> {
    let (catalog, shards) = data;
    let plan = Plan::new(request, Arc::clone(catalog), settings)?;
    let mut answers: Vec<ShardAnswer> = plan
        .shard_questions()
        .map(|(shard, question)| question.answer(Arc::clone(&shards[shard])).unwrap())
        .collect();
    if reversed {
        answers.reverse();
    }
    plan.merge(answers, settings)
}

/// A page's records as JSON, and its cursor.
fn page(answer: Answer) -> (Vec<Value>, Option<String>) {
    let Answer(Elements::Page(page)) = answer else {
        panic!("a page of records was asked for")
    };
    let mut records = Vec::new();
    page.each_record(|index, parts| {
        assert_eq!(index, records.len());
        let mut json = Vec::new();
        parts.write_to(&mut json);
        records.push(serde_json::from_slice(&json).unwrap());
    });
    assert_eq!(records.len(), page.len());
    (records, page.next_cursor().map(str::to_owned))
}

#[test]
fn pages_resume_where_their_cursor_ends_whatever_the_shards() {
    let settings = settings(100);
    for shards in [1, 2, 3] {
        let data = generation(shards);
        let whole = request(Endpoint::Units, "", r#""*""#, &settings);
        let (all, cursor) = page(answer(&data, &whole, &settings, false).unwrap());
        assert_eq!((all.len(), cursor), (15, None));
        let (reversed, _) = page(answer(&data, &whole, &settings, true).unwrap());
        assert_eq!(reversed, all, "{shards} shards");
        let times: Vec<&str> = (all.iter())
            .map(|record| record["time_created"].as_str().unwrap())
            .collect();
        assert!(times.windows(2).all(|pair| pair[0] <= pair[1]), "{times:?}");

        let mut paged = Vec::new();
        let mut query = "limit=4".to_owned();
        loop {
            let asked = request(Endpoint::Units, &query, r#""*""#, &settings);
            let (records, cursor) = page(answer(&data, &asked, &settings, shards > 1).unwrap());
            paged.extend(records);
            match cursor {
                Some(cursor) => query = format!("limit=4&cursor={cursor}"),
                None => break,
            }
        }
        assert_eq!(paged, all, "{shards} shards");
    }
}

#[test]
fn a_forbidden_station_is_refused_and_a_foreign_cursor_too() {
    let settings = settings(100);
    let data = generation(2);
    let asked = request(Endpoint::Units, "station_ids=A,B", r#"["A"]"#, &settings);
    assert!(matches!(
        answer(&data, &asked, &settings, false),
        Err(PlanError::Refused(Refusal::Forbidden { stations })) if stations == ["B"]
    ));

    let first = request(Endpoint::Units, "limit=1", r#""*""#, &settings);
    let (_, cursor) = page(answer(&data, &first, &settings, false).unwrap());
    let query = format!("limit=1&cursor={}", cursor.unwrap());
    let elsewhere = request(Endpoint::Metrics, &query, r#""*""#, &settings);
    assert!(matches!(
        answer(&data, &elsewhere, &settings, false),
        Err(PlanError::Refused(Refusal::Cursor { .. }))
    ));
}

#[test]
fn more_records_or_rows_than_max_records_are_refused() {
    let settings = settings(2);
    let data = generation(2);
    let records = request(Endpoint::Units, "", r#""*""#, &settings);
    assert!(matches!(
        answer(&data, &records, &settings, false),
        Err(PlanError::Refused(Refusal::ResultTooLarge {
            max_records: 2
        }))
    ));
    // Paged, the same query is answered a page at a time.
    let paged = request(Endpoint::Units, "limit=2", r#""*""#, &settings);
    assert!(answer(&data, &paged, &settings, false).is_ok());
    let stations = request(Endpoint::Stations, "", r#""*""#, &settings);
    assert!(matches!(
        answer(&data, &stations, &settings, false),
        Err(PlanError::Refused(Refusal::TooManyRows { max_records: 2 }))
    ));
}

#[test]
fn answers_to_another_question_fail_the_merge_without_a_panic() {
    let settings = settings(100);
    let (catalog, shards) = generation(2);
    let records = request(Endpoint::Units, "", r#""*""#, &settings);
    let stations = request(Endpoint::Stations, "", r#""*""#, &settings);
    let records = Plan::new(&records, Arc::clone(&catalog), &settings).unwrap();
    let stations = Plan::new(&stations, Arc::clone(&catalog), &settings).unwrap();
    let answers: Vec<ShardAnswer> = (stations.shard_questions())
        .map(|(shard, question)| question.answer(Arc::clone(&shards[shard])).unwrap())
        .collect();
    assert!(matches!(
        records.merge(answers, &settings),
        Err(PlanError::OtherAnswer)
    ));
}

/// A unit line of `station` at 2024-01-01T`hh:mm`:00Z.
fn unit_line(station: &str, time: &str, serial: usize) -> String {
    format!(
        r#"{{"station_id":"{station}","time_created":"2024-01-01T{time}:00Z","direction":"output","slot":"1","unit_serial":"SN{serial}","result":"PASS"}}"#
    ) + "\n"
}

/// `plan` asked of every shard of `shards` and merged.
fn executed(plan: &Plan, shards: &[Arc<ShardData>], settings: &Settings) -> Answer {
    let answers: Vec<ShardAnswer> = (plan.shard_questions())
        .map(|(shard, question)| question.answer(Arc::clone(&shards[shard])).unwrap())
        .collect();
    plan.merge(answers, settings).unwrap()
}

/// Every event a stream sends from where it stands up to `generation`, given
/// the additions of the generations since (`since`): each event's records
/// and id.
fn events(
    stream: &mut Stream,
    since: &[(u64, &Additions)],
    (catalog, shards): &(Arc<Catalog>, Vec<Arc<ShardData>>),
    settings: &Settings,
) -> Vec<(Vec<Value>, String)> {
    let mut events = Vec::new();
    while let Some(plan) =
        (stream.next(since.iter().copied(), Arc::clone(catalog), settings)).unwrap()
    {
        let answer = executed(&plan, shards, settings);
        let id = stream.answered(&answer, catalog, settings);
        let (records, _) = page(answer);
        match id {
            Some(id) => events.push((records, id)),
            None => assert!(records.is_empty()),
        }
    }
    events
}

fn labels(events: &[(Vec<Value>, String)]) -> Vec<String> {
    (events.iter())
        .flat_map(|(records, _)| records)
        .map(|record| format!("{} {}", record["station_id"], record["time_created"]))
        .collect()
}

/// Issue 49: a stream sends its backlog (the walk of the records from `from`,
/// in events of at most `--max-records`), then a generation's additions that it
/// reads, and never the others; an id resumes it after its event, the walk of
/// the old generation leaving out what the new one added, which follows it.
#[test]
fn issue_49_a_stream_walks_its_backlog_then_sends_what_generations_add() {
    let directory = tempfile::tempdir().unwrap();
    for station in ["A", "B", "C"] {
        let lines: String = (0..5)
            .map(|index| unit_line(station, &format!("00:{index}0"), index))
            .collect();
        let path = directory.path().join(format!("{station}.units.jsonl"));
        std::fs::write(path, lines).unwrap();
    }
    let mut options = LoadOptions {
        directory: directory.path().to_owned(),
        shards: 2,
        on_invalid: OnInvalid::Fail,
        generation: 1,
        threads: 1,
        hot: None,
        cache: crate::data::sealed::cache::test_cache(),
    };
    let served = |generation: crate::data::catalog::Generation| {
        let shards = generation.shards.into_iter().map(Arc::new).collect();
        (generation.catalog, shards)
    };
    let first = served(load(&options).unwrap().0);
    let settings = settings(4);
    let query = "from=2024-01-01T00:10:00Z&station_ids=A,B";
    let asked = Arc::new(request(Endpoint::Units, query, r#""*""#, &settings));
    let catalog = Arc::clone(&first.0);
    let mut stream = Stream::open(Arc::clone(&asked), 7, catalog, &settings).unwrap();
    assert_eq!((stream.generation(), stream.caught_up()), (1, false));
    let backlog = events(&mut stream, &[], &first, &settings);
    // A and B from 00:10 on, four an event: 4, 4, and then an empty walk that
    // sends nothing (a full event cannot tell it was the last).
    let sizes: Vec<usize> = backlog.iter().map(|(records, _)| records.len()).collect();
    assert_eq!(sizes, [4, 4]);
    let walked = labels(&backlog);
    assert_eq!(walked.len(), 8);
    assert!(
        walked.windows(2).all(|pair| pair[0][4..] <= pair[1][4..]),
        "{walked:?}"
    );
    assert!(stream.caught_up());

    let mut appended = std::fs::OpenOptions::new()
        .append(true)
        .open(directory.path().join("A.units.jsonl"))
        .unwrap();
    use std::io::Write as _;
    appended
        .write_all((unit_line("A", "01:00", 10) + &unit_line("A", "00:45", 11)).as_bytes())
        .unwrap();
    std::fs::write(
        directory.path().join("C.units.jsonl"),
        unit_line("C", "02:00", 12),
    )
    .unwrap();
    options.generation = 2;
    let (second, report) = crate::data::load::reload(&first.0, &first.1, &options).unwrap();
    let second = served(second);
    let since = [(2, &report.additions)];
    let added = events(&mut stream, &since, &second, &settings);
    assert_eq!(
        labels(&added),
        [
            r#""A" "2024-01-01T00:45:00Z""#,
            r#""A" "2024-01-01T01:00:00Z""#
        ]
    );
    assert_eq!((stream.generation(), stream.caught_up()), (2, true));
    assert!(events(&mut stream, &since, &second, &settings).is_empty());

    // Resumed after the backlog's first event, in the new generation: the rest
    // of the old walk, then the new records, each once.
    let mut resumed = stream.resume(&backlog[0].1, &settings).unwrap();
    assert_eq!((resumed.generation(), resumed.caught_up()), (1, false));
    let rest = labels(&events(&mut resumed, &since, &second, &settings));
    assert_eq!(rest[..4], walked[4..]);
    assert_eq!(rest[4..], labels(&added));
    assert!(stream.resume("1.0.cnot-an-id", &settings).is_none());

    // A request for a station the token may not see is refused at the open.
    let forbidden = request(Endpoint::Units, "station_ids=C", r#"["A"]"#, &settings);
    let opened = Stream::open(Arc::new(forbidden), 7, Arc::clone(&second.0), &settings);
    assert!(matches!(
        opened,
        Err(PlanError::Refused(Refusal::Forbidden { .. }))
    ));
}
