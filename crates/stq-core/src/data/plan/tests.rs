//! A query's steps end to end, without actors: planned, asked of every shard that
//! holds its stations, and merged (in shard order or reversed); a page's cursor
//! resumes where the page ended; what is refused is refused before or after the
//! shards, as the contract's order says.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::data::load::{load, LoadOptions, OnInvalid};
use crate::data::shard::ShardData;
use crate::domain::auth::{hash_token, Tokens};
use crate::domain::query::parse;
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
        hash_token(TOKEN)
    );
    let arrived = parse_rfc3339("2024-01-02T00:00:00Z").unwrap();
    let principal = Tokens::parse(&tokens)
        .unwrap()
        .authenticate(Some(format!("Bearer {TOKEN}").as_bytes()), arrived)
        .unwrap();
    Request {
        endpoint,
        params: parse(endpoint, query, settings.limits).unwrap(),
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
