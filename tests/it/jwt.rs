//! docs/api.md section 16's JSON Web Tokens: tokens minted by PyJWT (with
//! cryptography) for RS256, PS256, ES256 and EdDSA, beside the tokens file's;
//! every refusal, each a 401 naming its reason and never the token; the key set
//! as a file read again at a reload, and as a URL served by a local HTTP server
//! (`tests/identity/tool.py serve`): rotation, and the unknown-key refetch limit.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use crate::common::*;
use crate::https::{tool, tool_python};
use crate::reload::small_files;

const ISSUER: &str = "https://idp.test/realms/plant";
const AUDIENCE: &str = "stq";

/// The provider's keys and key sets (`tool.py keys`), under a directory of the test's.
struct Provider {
    _directory: tempfile::TempDir,
    path: PathBuf,
}

impl Provider {
    fn new() -> Provider {
        let directory = temporary_directory();
        let path = directory.path().to_owned();
        tool(&["keys", &path_string(&path)], "");
        Provider {
            _directory: directory,
            path,
        }
    }

    fn file(&self, name: &str) -> String {
        path_string(&self.path.join(name))
    }

    /// One token per spec (`{"kid", "alg", "claims", "header"?}`).
    fn mint(&self, specs: &[Value]) -> Vec<String> {
        let input: String = specs.iter().map(|spec| format!("{spec}\n")).collect();
        tool(&["mint", &path_string(&self.path)], &input)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Claims valid now for the stations `stations`, with `changes` over them
/// (`null` removes a claim).
fn claims(stations: Value, changes: Value) -> Value {
    let now = now_seconds();
    let mut claims = json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice@plant",
        "iat": now,
        "exp": now + 300,
        "stq_stations": stations,
    });
    for (name, value) in changes.as_object().unwrap() {
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(name),
            value => claims
                .as_object_mut()
                .unwrap()
                .insert(name.clone(), value.clone()),
        };
    }
    claims
}

fn start(fixture: &Fixture, jwks: &str, extra: &[&str]) -> Server {
    let mut flags = vec![
        "--jwt-jwks",
        jwks,
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
    ];
    flags.extend_from_slice(extra);
    Server::start(fixture, &flags)
}

/// The stations `/stations` lists for `token`, after a 200.
fn stations_seen(server: &Server, token: &str) -> Vec<String> {
    let envelope = server.ok_as("/stations", token);
    (envelope.data.iter())
        .map(|station| station["station_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts a 401 for `token` whose message contains `reason`, with the challenge
/// of an invalid token, and the token in neither the body nor the log.
#[track_caller]
fn assert_refused(server: &Server, token: &str, reason: &str) {
    let response = server.get("/stations", Some(token));
    response.error(401, "unauthorized");
    let message = response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains(reason), "{message:?} lacks {reason:?}");
    assert_eq!(
        response.header("www-authenticate"),
        Some(r#"Bearer realm="stq", error="invalid_token""#)
    );
    assert!(!response.body.contains(token));
    assert!(server.log().iter().all(|line| !line.contains(token)));
}

#[test]
fn issue_53_tokens_of_every_algorithm_are_accepted_beside_the_tokens_file() {
    let provider = Provider::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start(&fixture, &provider.file("jwks.json"), &["--access-log"]);
    let specs: Vec<Value> = [
        ("rsa", "RS256"),
        ("pss", "PS256"),
        ("p256", "ES256"),
        ("ed", "EdDSA"),
    ]
    .iter()
    .map(
        |(kid, alg)| json!({"kid": kid, "alg": alg, "claims": claims(json!(["ST-01"]), json!({}))}),
    )
    .collect();
    for (token, spec) in provider.mint(&specs).iter().zip(&specs) {
        assert_eq!(stations_seen(&server, token), ["ST-01"], "{spec}");
        // Its stations are the claim's: another is forbidden.
        server
            .get("/units?station_ids=ST-02", Some(token))
            .error(403, "forbidden");
    }
    // The tokens file's tokens still work.
    assert_eq!(stations_seen(&server, OPS), ["ST-01", "ST-02"]);
    // `"*"`: every station; an audience list containing stq's; no `kid` is not
    // enough for a set of several keys.
    let tokens = provider.mint(&[
        json!({"kid": "ed", "alg": "EdDSA", "claims": claims(json!("*"), json!({"aud": ["grafana", AUDIENCE]}))}),
        json!({"kid": null, "key": "ed", "alg": "EdDSA", "claims": claims(json!("*"), json!({}))}),
    ]);
    assert_eq!(stations_seen(&server, &tokens[0]), ["ST-01", "ST-02"]);
    assert_refused(&server, &tokens[1], "names no key id");
    // The access lines name the holder by `sub`, never the token.
    server.wait_for_log("token=\"alice@plant\"", 1);
}

#[test]
fn issue_53_every_refusal_is_a_401_that_names_its_reason() {
    let provider = Provider::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start(&fixture, &provider.file("jwks.json"), &[]);
    let now = now_seconds();
    let stations = || json!(["ST-01"]);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"kid": "ed", "alg": "none", "claims": claims(stations(), json!({}))}),
            "algorithm \"none\"",
        ),
        // The RSA key's public JWK as an HMAC secret: the algorithm confusion.
        (
            json!({"kid": "rsa", "alg": "HS256", "claims": claims(stations(), json!({}))}),
            "algorithm \"HS256\"",
        ),
        // An ES256 signature under the RSA key's id: the pair disagrees.
        (
            json!({"kid": "rsa", "key": "p256", "alg": "ES256", "claims": claims(stations(), json!({}))}),
            "not the one its key is for",
        ),
        // The PS256 key, whose JWK names its alg, under a header saying RS256.
        (
            json!({"kid": "pss", "alg": "RS256", "claims": claims(stations(), json!({}))}),
            "not the one its key is for",
        ),
        (
            json!({"kid": "ghost", "key": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({}))}),
            "no key \"ghost\"",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"exp": now - 60}))}),
            "expired",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"exp": null}))}),
            "no `exp` claim",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"nbf": now + 60}))}),
            "not valid yet",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"iat": now + 60}))}),
            "issued in the future",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"iss": "https://elsewhere"}))}),
            "issuer",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"aud": "grafana"}))}),
            "audience",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"stq_stations": null}))}),
            "no `stq_stations` claim",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(json!("ST-01"), json!({}))}),
            "neither \"*\" nor a list",
        ),
        (
            json!({"kid": "ed", "alg": "EdDSA", "claims": claims(json!(["ST-01", 2]), json!({}))}),
            "neither \"*\" nor a list",
        ),
    ];
    let specs: Vec<Value> = cases.iter().map(|(spec, _)| spec.clone()).collect();
    let tokens = provider.mint(&specs);
    for (token, (spec, reason)) in tokens.iter().zip(&cases) {
        let response = server.get("/stations", Some(token));
        assert_eq!(response.status, 401, "{spec}: {}", response.context());
        assert_refused(&server, token, reason);
    }
    // A signature that does not verify: the claims changed after signing.
    let good = &provider
        .mint(&[json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({}))})])[0];
    let parts: Vec<&str> = good.split('.').collect();
    let other = &provider
        .mint(&[json!({"kid": "ed", "alg": "EdDSA", "claims": claims(json!("*"), json!({}))})])[0];
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_refused(&server, &forged, "signature does not verify");
    // Within the 30 s of leeway: accepted.
    let lenient = provider.mint(&[
        json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"exp": now - 10}))}),
        json!({"kid": "ed", "alg": "EdDSA", "claims": claims(stations(), json!({"nbf": now + 10}))}),
    ]);
    for token in &lenient {
        assert_eq!(stations_seen(&server, token), ["ST-01"]);
    }
}

#[test]
fn issue_53_a_key_set_file_is_read_again_at_a_reload() {
    let provider = Provider::new();
    let fixture = Fixture::from_files(&small_files());
    let jwks = provider.file("served.json");
    std::fs::copy(provider.file("jwks.json"), &jwks).unwrap();
    let server = start(&fixture, &jwks, &[]);
    let token = &provider
        .mint(&[json!({"kid": "next", "alg": "ES256", "claims": claims(json!("*"), json!({}))})])
        [0];
    assert_refused(&server, token, "no key \"next\"");
    std::fs::copy(provider.file("rotated.json"), &jwks).unwrap();
    let generation = server.generation();
    server.signal("HUP");
    server.wait_for_generation_after(generation);
    assert_eq!(stations_seen(&server, token), ["ST-01", "ST-02"]);
    // A set that does not read fails the reload, and the keys stay.
    std::fs::write(&jwks, "{\"keys\": 1}").unwrap();
    server.reload_expecting_failure();
    assert_eq!(stations_seen(&server, token), ["ST-01", "ST-02"]);
}

/// `tool.py serve DIR`: the port it serves on, which also answers how many files
/// it served.
struct KeyServer {
    child: Child,
    port: u16,
}

impl KeyServer {
    fn start(directory: &str) -> KeyServer {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/identity/tool.py");
        let mut child = Command::new(tool_python())
            .arg(script)
            .args(["serve", directory])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the key set's server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap().trim().parse().unwrap();
        // Its lines of GETs are read, so that its output never fills the pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        KeyServer { child, port }
    }

    /// The files fetched so far, as the server counts them: a fetch whose
    /// client has its file is counted (the lines it prints may lag behind).
    fn fetches(&self) -> usize {
        let url = format!("http://127.0.0.1:{}/fetches", self.port);
        let count = ureq::get(&url).call().expect("the key server's count");
        count.into_string().unwrap().trim().parse().unwrap()
    }
}

impl Drop for KeyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn issue_53_a_key_set_url_is_fetched_again_for_an_unknown_key_at_most_once_a_minute() {
    let provider = Provider::new();
    let fixture = Fixture::from_files(&small_files());
    std::fs::copy(provider.file("jwks.json"), provider.file("served.json")).unwrap();
    let keys = KeyServer::start(&path_string(&provider.path));
    let url = format!("http://127.0.0.1:{}/served.json", keys.port);
    let server = start(&fixture, &url, &[]);
    // At start-up: once, or once more where the suite's store pass starts a
    // server of the same arguments first to fill the store.
    let started = keys.fetches();
    assert!(started >= 1, "fetched at start-up");
    let tokens = provider.mint(&[
        json!({"kid": "next", "alg": "ES256", "claims": claims(json!("*"), json!({}))}),
        json!({"kid": "ghost", "key": "p256", "alg": "ES256", "claims": claims(json!("*"), json!({}))}),
    ]);
    // The provider rotates: a token of the new key makes stq fetch the set again.
    std::fs::copy(provider.file("rotated.json"), provider.file("served.json")).unwrap();
    assert_refused(&server, &tokens[0], "no key \"next\"");
    server.wait_for_log("fetched the key set of", 1);
    assert_eq!(keys.fetches(), started + 1);
    assert_eq!(stations_seen(&server, &tokens[0]), ["ST-01", "ST-02"]);
    // Another unknown key within the minute: refused, and not fetched for.
    assert_refused(&server, &tokens[1], "no key \"ghost\"");
    server.wait_for_log("so not now", 1);
    assert_eq!(keys.fetches(), started + 1);
}

#[test]
fn issue_53_a_key_set_that_cannot_be_had_is_a_start_up_error() {
    let fixture = Fixture::from_files(&small_files());
    for jwks in ["/nonexistent/jwks.json", "http://127.0.0.1:9/jwks.json"] {
        let args = serve_args(
            &fixture.snapshots,
            &fixture.tokens,
            &["--jwt-jwks", jwks, "--jwt-issuer", ISSUER],
        );
        match Server::try_spawn(&args, &[]) {
            Started::Exited(code, log) => {
                assert_ne!(code, Some(0));
                assert!(log.contains("--jwt-jwks"), "{log}");
            }
            Started::Ready(_) => panic!("stq started without its key set {jwks}"),
        }
    }
}
