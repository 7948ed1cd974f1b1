//! CONTRACT sections 1 and 3 (issue 24): `stq token new | list | revoke` and tokens
//! that expire. The CLI edits a tokens file that a running `stq serve` reads at its
//! next reload; an expired token is refused like an unknown one, and its 401 says
//! it expired.
//!
//! Nothing here bounds how long something may take: expiry is watched by polling
//! until the refusal appears, and each request is judged by when it was sent.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use serde_json::{json, Value};

/// What `run` allows one CLI call (it cannot hang: it only edits a file).
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// The challenge of a 401 to a presented Bearer token, unknown or expired.
const INVALID_TOKEN: &str = r#"Bearer realm="stq", error="invalid_token""#;

fn text(bytes: &[u8]) -> String {
    strip_ansi(&String::from_utf8_lossy(bytes))
}

#[track_caller]
fn assert_exit_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// `stq token ARGS --tokens FILE`.
fn token_cli(args: &[&str], tokens: &Path) -> Output {
    let tokens = path_string(tokens);
    let mut all = vec!["token"];
    all.extend_from_slice(args);
    all.extend(["--tokens", &tokens]);
    run(&all, None, &[], CLI_TIMEOUT)
}

/// `stq token new ...`: the token it printed, checked for its form.
#[track_caller]
fn new_token(args: &[&str], tokens: &Path) -> String {
    let mut all = vec!["new"];
    all.extend_from_slice(args);
    let output = token_cli(&all, tokens);
    assert_exit_code(&output, 0);
    let stdout = text(&output.stdout);
    let token = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("one line: {stdout:?}"));
    assert!(!token.contains('\n'), "one line: {stdout:?}");
    let encoded = token
        .strip_prefix("stq_")
        .unwrap_or_else(|| panic!("stq_ first: {token:?}"));
    // 32 bytes in base64url without padding.
    assert_eq!(encoded.len(), 43, "{token:?}");
    assert!(
        encoded
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'),
        "{token:?}"
    );
    token.to_owned()
}

fn entries(tokens: &Path) -> Vec<Value> {
    let file: Value = serde_json::from_slice(&std::fs::read(tokens).unwrap()).unwrap();
    file["tokens"].as_array().unwrap().clone()
}

fn names(tokens: &Path) -> Vec<String> {
    entries(tokens)
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_owned())
        .collect()
}

fn now_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

#[test]
fn issue_24_token_new_list_and_revoke_round_trip() {
    let directory = temporary_directory();
    let tokens = directory.path().join("tokens.json");

    // Created when missing.
    let ops = new_token(&["--name", "ops", "--stations", "*"], &tokens);
    assert_eq!(
        entries(&tokens),
        [json!({"name": "ops", "sha256": sha256_hex(&ops), "stations": "*"})]
    );

    // An entry written by hand, put first, is kept as written and where it is.
    let upper = sha256_hex("by-hand").to_uppercase();
    let by_hand = json!({
        "name": "by-hand",
        "sha256": upper,
        "stations": ["ST-09", "ST-01"],
        "expires": "2099-01-01t00:00:00.5+01:00"
    });
    let mut file = entries(&tokens);
    file.insert(0, by_hand.clone());
    std::fs::write(&tokens, json!({ "tokens": file }).to_string()).unwrap();

    let line = new_token(
        &[
            "--name",
            "line",
            "--stations",
            "ST-01, ST-02,ST-01",
            "--expires",
            "2099-06-01T12:00:00Z",
        ],
        &tokens,
    );
    assert_ne!(line, ops);
    assert_eq!(
        entries(&tokens),
        [
            by_hand.clone(),
            json!({"name": "ops", "sha256": sha256_hex(&ops), "stations": "*"}),
            json!({
                "name": "line",
                "sha256": sha256_hex(&line),
                "stations": ["ST-01", "ST-02"],
                "expires": "2099-06-01T12:00:00Z"
            }),
        ]
    );

    // `list`: names, stations, expiry; never a digest nor a token.
    let output = token_cli(&["list"], &tokens);
    assert_exit_code(&output, 0);
    let listed = text(&output.stdout);
    for needle in [
        "by-hand",
        "ST-09,ST-01",
        "2099-01-01t00:00:00.5+01:00",
        "ops",
        "never",
        "line",
        "ST-01,ST-02",
        "2099-06-01T12:00:00Z",
    ] {
        assert!(listed.contains(needle), "{needle:?} in:\n{listed}");
    }
    for secret in [
        sha256_hex(&ops),
        sha256_hex(&line),
        upper.clone(),
        upper.to_lowercase(),
        ops.clone(),
        line.clone(),
    ] {
        for output in [&output.stdout, &output.stderr] {
            assert!(!text(output).contains(&secret), "{secret} in:\n{listed}");
        }
    }
    assert_eq!(
        listed.lines().count(),
        4,
        "a header and three entries:\n{listed}"
    );

    // A name already there: exit 1, the file unchanged to the byte.
    let before = std::fs::read(&tokens).unwrap();
    let output = token_cli(&["new", "--name", "line", "--stations", "*"], &tokens);
    assert_exit_code(&output, 1);
    assert!(output.stdout.is_empty(), "no token printed");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("`line`") && stderr.contains("already"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&tokens).unwrap(), before);

    // An unknown name to revoke: exit 1, the file unchanged.
    let output = token_cli(&["revoke", "nobody"], &tokens);
    assert_exit_code(&output, 1);
    assert!(text(&output.stderr).contains("`nobody`"), "{output:?}");
    assert_eq!(std::fs::read(&tokens).unwrap(), before);

    // Revoke: the others stay as they were, in their order.
    assert_exit_code(&token_cli(&["revoke", "ops"], &tokens), 0);
    assert_eq!(names(&tokens), ["by-hand", "line"]);
    assert_eq!(entries(&tokens)[0], by_hand);
    let output = token_cli(&["list"], &tokens);
    assert_exit_code(&output, 0);
    assert!(
        !text(&output.stdout)
            .lines()
            .any(|row| row.starts_with("ops ")),
        "{}",
        text(&output.stdout)
    );

    // The new files were renamed into place: nothing is left beside them.
    let left: Vec<_> = std::fs::read_dir(directory.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["tokens.json"]);

    // A file stq would refuse is refused here too, and left alone.
    std::fs::write(
        &tokens,
        r#"{"tokens": [{"name": "x", "sha256": "00", "stations": "*"}]}"#,
    )
    .unwrap();
    let before = std::fs::read(&tokens).unwrap();
    let output = token_cli(&["new", "--name", "y", "--stations", "*"], &tokens);
    assert_exit_code(&output, 1);
    assert!(output.stdout.is_empty());
    assert_eq!(std::fs::read(&tokens).unwrap(), before);
}

#[test]
fn issue_24_token_commands_default_to_the_tokens_file_serve_uses() {
    // No --tokens: `snapshots/tokens.json`, as `stq serve` (run from the package
    // root); listing only reads it.
    let output = run(&["token", "list"], None, &[], CLI_TIMEOUT);
    assert_exit_code(&output, 0);
    let listed = text(&output.stdout);
    assert!(
        listed.contains("line-1-dashboard") && listed.contains("ST-01,ST-02"),
        "{listed}"
    );
    // STQ_TOKENS, as for `stq serve`.
    let directory = temporary_directory();
    let tokens = directory.path().join("from-env.json");
    let output = run(
        &["token", "new", "--name", "env", "--stations", "ST-01"],
        None,
        &[("STQ_TOKENS", &path_string(&tokens))],
        CLI_TIMEOUT,
    );
    assert_exit_code(&output, 0);
    assert_eq!(names(&tokens), ["env"]);
}

#[test]
fn issue_24_tokens_made_and_revoked_by_the_cli_reach_a_running_stq_at_its_reload() {
    let fixture = Fixture::main();
    let reader = new_token(
        &["--name", "reader", "--stations", "ST-03"],
        &fixture.tokens,
    );
    let server = Server::start(&fixture, &[]);
    let metrics = format!("/metrics?{WINDOW}");

    // The token `stq token new` printed works, with the stations it was given.
    assert_records(
        &server.get(&metrics, Some(&reader)).ok().data,
        &fixture.expect(&Query::metrics().scope(&["ST-03"])),
        "a token from stq token new",
    );
    server
        .get(&format!("{metrics}&station_ids=ST-01"), Some(&reader))
        .error(403, "forbidden");

    // Revoke it and make another while stq runs: nothing changes until a reload.
    assert_exit_code(&token_cli(&["revoke", "reader"], &fixture.tokens), 0);
    let late = new_token(&["--name", "late", "--stations", "*"], &fixture.tokens);
    server.get(&metrics, Some(&reader)).ok();
    server.get(&metrics, Some(&late)).error(401, "unauthorized");

    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);

    let refused = server.get(&metrics, Some(&reader));
    refused.error(401, "unauthorized");
    assert_eq!(refused.header("www-authenticate"), Some(INVALID_TOKEN));
    let message = refused.json()["error"]["message"].clone();
    assert!(!message.as_str().unwrap().contains("expired"), "{message}");
    assert_records(
        &server.get(&metrics, Some(&late)).ok().data,
        &fixture.expect(&Query::metrics()),
        "a token made while stq ran, after the reload",
    );
    // The suite's own tokens, untouched by the CLI, still work.
    server.get(&metrics, Some(OPS)).ok();
    server.get(&metrics, Some(ST03)).ok();
}

#[test]
fn issue_24_a_token_expires_while_stq_runs() {
    let fixture = Fixture::main();
    let server = Server::start(&fixture, &[]);
    let units = format!("/units?{WINDOW}");
    let unknown = server.get(&units, Some("no-such-token"));
    unknown.error(401, "unauthorized");

    // The token must be seen working before it expires; on a machine too slow for
    // that (the reload and the first request after the expiry), the next attempt
    // gives it twice as long.
    let mut lead_seconds = 2;
    for attempt in 1.. {
        let name = format!("expiring-{attempt}");
        let expires = rfc3339_from_seconds(now_seconds() + 1 + lead_seconds);
        let expires_at = instant(&expires);
        let token = new_token(
            &["--name", &name, "--stations", "*", "--expires", &expires],
            &fixture.tokens,
        );
        let generation = server.generation();
        server.signal("HUP");
        server.wait_for_generation_after(generation);

        let mut worked = false;
        loop {
            let sent = now_nanos();
            let response = server.get(&units, Some(&token));
            let answered = now_nanos();
            if response.status == 200 {
                // stq read its clock after this request was sent.
                assert!(
                    sent < expires_at,
                    "accepted a request sent after {expires}: {}",
                    response.context()
                );
                response.ok();
                worked = true;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            // Refused like an unknown token, saying it expired; and only once the
            // instant has come.
            let details = response.error(401, "unauthorized");
            assert_eq!(details, Value::Null);
            assert!(
                answered >= expires_at,
                "refused before {expires}: {}",
                response.context()
            );
            assert_eq!(response.header("www-authenticate"), Some(INVALID_TOKEN));
            assert_eq!(
                response.header("www-authenticate"),
                unknown.header("www-authenticate")
            );
            let message = response.json()["error"]["message"].clone();
            assert!(message.as_str().unwrap().contains("expired"), "{message}");
            break;
        }
        // Refused from then on; the next reload does not bring it back.
        let generation = server.generation();
        server.signal("HUP");
        server.wait_for_generation_after(generation);
        let again = server.get(&units, Some(&token));
        again.error(401, "unauthorized");
        assert!(again.body.contains("expired"), "{}", again.context());
        server.get(&units, Some(OPS)).ok();
        // `list` marks it.
        let output = token_cli(&["list"], &fixture.tokens);
        assert_exit_code(&output, 0);
        let listed = text(&output.stdout);
        let row = listed
            .lines()
            .find(|row| row.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in:\n{listed}"));
        assert!(row.contains(&expires) && row.contains("expired"), "{row}");
        if worked {
            return;
        }
        lead_seconds *= 2;
    }
}

#[test]
fn issue_24_an_unknown_member_or_a_bad_expires_stops_the_start() {
    let fixture = Fixture::main();
    for (entry, needle) in [
        (
            json!({"name": "t", "sha256": sha256_hex("t"), "stations": "*", "expiry": "2099-01-01T00:00:00Z"}),
            "unknown field `expiry`",
        ),
        (
            json!({"name": "t", "sha256": sha256_hex("t"), "stations": "*", "expires": "2099-01-01 00:00:00Z"}),
            "`expires`",
        ),
    ] {
        std::fs::write(&fixture.tokens, json!({ "tokens": [entry] }).to_string()).unwrap();
        match Server::try_spawn(&serve_args(&fixture.snapshots, &fixture.tokens, &[]), &[]) {
            Started::Ready(_) => panic!("started with {entry}"),
            Started::Exited(code, log) => {
                assert_eq!(code, Some(1), "{log}");
                assert!(log.contains(needle), "{needle:?} in:\n{log}");
            }
        }
    }
}
