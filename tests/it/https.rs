//! docs/api.md section 16's HTTPS: the API listener with `--tls-cert`/`--tls-key`,
//! driven by curl (`--http2`, `--http1.1`) and by Python's httpx with the test CA,
//! certificates made by the test (`tests/identity/tool.py pki`, Python's
//! cryptography); TLS 1.1 refused; the reload of a new pair and of bad ones; the
//! streams and `wait` of section 14 over HTTP/2; the admin listener plain; and
//! Debian's chromium (headless) loading the overview page over HTTPS, trusting the
//! test CA through an NSS database made with Debian's `certutil` (never by ignoring
//! certificate errors: a browser without that database is refused), its API calls
//! over HTTP/2 as its Resource Timing entries record them.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;
use crate::reload::small_files;

/// The venv that runs `tests/identity/tool.py` (cryptography, PyJWT and httpx from
/// PyPI, pinned in `tests/identity/requirements.txt`), made once under the target
/// directory; once per run, however many tests ask at once.
pub(crate) fn tool_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_tool_python).clone()
}

fn make_tool_python() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("identity-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import cryptography, jwt, httpx, h2"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if !ready(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(made.success(), "python3 -m venv {} failed", venv.display());
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "-r"])
            .arg(workspace.join("tests/identity/requirements.txt"))
            .status()
            .expect("run pip");
        assert!(
            installed.success(),
            "pip install -r tests/identity/requirements.txt failed"
        );
    }
    python
}

/// `tool.py ARGS` with `stdin`; its standard output, after it succeeded.
pub(crate) fn tool(args: &[&str], stdin: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/identity/tool.py");
    let mut child = Command::new(tool_python())
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tests/identity/tool.py");
    {
        use std::io::Write as _;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "tool.py {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A test CA and two pairs it signed, under a directory of the test's.
struct Pki {
    _directory: tempfile::TempDir,
    path: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let directory = temporary_directory();
        let path = directory.path().to_owned();
        tool(&["pki", &path_string(&path)], "");
        Pki {
            _directory: directory,
            path,
        }
    }

    fn file(&self, name: &str) -> String {
        path_string(&self.path.join(name))
    }

    fn ca(&self) -> String {
        self.file("ca.pem")
    }
}

/// `stq serve` over HTTPS with the pair the test puts at `cert.pem` and
/// `key.pem` of `pki` (the first pair to begin with).
fn start_https(fixture: &Fixture, pki: &Pki, extra: &[&str]) -> Server {
    std::fs::copy(pki.file("server.pem"), pki.file("cert.pem")).unwrap();
    std::fs::copy(pki.file("server.key"), pki.file("key.pem")).unwrap();
    let (cert, key) = (pki.file("cert.pem"), pki.file("key.pem"));
    let mut flags = vec!["--tls-cert", &cert, "--tls-key", &key];
    flags.extend_from_slice(extra);
    Server::start(fixture, &flags)
}

/// curl's `-w` fields of a GET with `flags`: HTTP version, status, and the body.
fn curl(server: &Server, pki: &Pki, path: &str, flags: &[&str]) -> (String, String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--cacert", &pki.ca()])
        .args(["-H", &format!("Authorization: Bearer {OPS}")])
        .args(["-w", "\n%{http_version} %{http_code}"])
        .args(flags)
        .arg(server.url(path))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, written) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (version, status) = written.split_once(' ').unwrap_or((written, ""));
    (version.to_owned(), status.to_owned(), body.to_owned())
}

#[test]
fn issue_53_https_speaks_http2_and_http11_to_curl_and_httpx() {
    let pki = Pki::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start_https(&fixture, &pki, &[]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let (version, status, body) = curl(&server, &pki, "/stations", &["--http2"]);
    assert_eq!((version.as_str(), status.as_str()), ("2", "200"), "{body}");
    let stations: Value = serde_json::from_str(&body).unwrap();
    assert!(stations["data"]
        .as_array()
        .is_some_and(|data| !data.is_empty()));
    let (version, status, _) = curl(&server, &pki, "/stations", &["--http1.1"]);
    assert_eq!((version.as_str(), status.as_str()), ("1.1", "200"));
    let answer: Value = serde_json::from_str(&tool(
        &["get", &server.url("/stations"), &pki.ca(), OPS],
        "",
    ))
    .unwrap();
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["http_version"], "HTTP/2", "{answer}");
    // A client that does not trust the CA gets no answer.
    let untrusted = Command::new("curl")
        .args(["--silent", "--http2", "-o", "/dev/null"])
        .arg(server.url("/stations"))
        .status()
        .unwrap();
    assert!(!untrusted.success());
    // Plain HTTP to the HTTPS listener gets no HTTP answer: the TLS layer refuses it.
    let plain = Command::new("curl")
        .args(["--silent", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{}/stations", server.port))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "000");
    // The admin listener stays plain HTTP.
    assert!(server.admin_value("stq_reloads_total") >= 0.0);
}

#[test]
fn issue_53_tls_1_1_is_refused_by_the_server_and_1_2_and_1_3_accepted() {
    let pki = Pki::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start_https(&fixture, &pki, &[]);
    let port = server.port.to_string();
    let outcome = |version: &str| tool(&["tls", version, "127.0.0.1", &port], "");
    // The alert is the server's: the client offered TLS 1.1 and nothing else.
    let refused = outcome("1.1");
    assert!(
        refused.starts_with("refused") && refused.contains("ALERT"),
        "{refused}"
    );
    assert_eq!(outcome("1.2").trim(), "connected TLSv1.2");
    assert_eq!(outcome("1.3").trim(), "connected TLSv1.3");
}

/// The subject's common name of the certificate a new connection gets.
fn served_subject(server: &Server, pki: &Pki) -> String {
    let output = Command::new("curl")
        .args([
            "--silent",
            "--verbose",
            "-o",
            "/dev/null",
            "--cacert",
            &pki.ca(),
        ])
        .arg(server.url("/healthz"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let line = log
        .lines()
        .find(|line| line.contains("subject:"))
        .unwrap_or_else(|| panic!("no subject in curl's log:\n{log}"));
    line.split("CN=")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn issue_53_a_reload_serves_a_new_pair_and_keeps_the_pair_for_a_bad_one() {
    let pki = Pki::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start_https(&fixture, &pki, &[]);
    assert_eq!(served_subject(&server, &pki), "first");
    // A new pair (another key type too) from the next connection on.
    std::fs::copy(pki.file("other.pem"), pki.file("cert.pem")).unwrap();
    std::fs::copy(pki.file("other.key"), pki.file("key.pem")).unwrap();
    server.signal("HUP");
    server.wait_for_log("reloaded: generation", 1);
    assert_eq!(served_subject(&server, &pki), "second");
    // A key that is not the certificate's: the reload fails, the pair stays.
    std::fs::copy(pki.file("stray.key"), pki.file("key.pem")).unwrap();
    server.reload_expecting_failure();
    assert!(
        server.log_count("does not belong to the certificate") == 1,
        "{}",
        server.log().join("\n")
    );
    assert_eq!(served_subject(&server, &pki), "second");
    // A certificate file that holds no certificate: the same.
    std::fs::copy(pki.file("other.key"), pki.file("key.pem")).unwrap();
    std::fs::write(pki.file("cert.pem"), "not a certificate\n").unwrap();
    server.reload_expecting_failure();
    assert_eq!(served_subject(&server, &pki), "second");
    assert_eq!(server.admin_value("stq_failed_reloads_total"), 2.0);
}

#[test]
fn issue_53_a_bad_pair_is_a_start_up_error() {
    let pki = Pki::new();
    let fixture = Fixture::from_files(&small_files());
    let (cert, stray) = (pki.file("server.pem"), pki.file("stray.key"));
    let args = serve_args(
        &fixture.snapshots,
        &fixture.tokens,
        &["--tls-cert", &cert, "--tls-key", &stray],
    );
    match Server::try_spawn(&args, &[]) {
        Started::Exited(code, log) => {
            assert_ne!(code, Some(0));
            assert!(log.contains("does not belong to the certificate"), "{log}");
        }
        Started::Ready(_) => panic!("stq started with a key that is not its certificate's"),
    }
}

#[test]
fn issue_53_streams_and_wait_share_one_http2_connection() {
    let pki = Pki::new();
    let fixture = Fixture::from_files(&small_files());
    let server = start_https(&fixture, &pki, &[]);
    let plain = Command::new("curl")
        .args([
            "--silent",
            "--cacert",
            &pki.ca(),
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-H", &format!("Authorization: Bearer {OPS}")])
        .arg(server.url("/stations"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&plain.stdout).into_owned();
    let etag = (head.lines())
        .find_map(|line| line.strip_prefix("etag: "))
        .expect("an ETag")
        .trim()
        .to_owned();
    // Four streams, then a request held by `wait` with the answer's tag: one
    // connection, each request a stream of it.
    let authorization = format!("Authorization: Bearer {OPS}");
    let common = ["--http2", "--cacert", &pki.ca(), "-H", &authorization];
    let mut curl = Command::new("curl")
        .args(["--silent", "--verbose", "--parallel", "-o", "/dev/null"])
        .args(common)
        .args(
            [
                "/units/stream",
                "/metrics/stream",
                "/units/stream?station_ids=ST-01",
                "/metrics/stream?station_ids=ST-02",
            ]
            .map(|path| server.url(path)),
        )
        .arg("--next")
        .args(["-o", "/dev/null"])
        .args(common)
        .args(["-H", &format!("If-None-Match: {etag}")])
        .arg(server.url("/stations?wait=1s"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("run curl");
    let log = BufReader::new(curl.stderr.take().unwrap());
    let (mut connected, mut reused, mut streams, mut held) = (0, 0, 0, 0);
    for line in log.lines().map_while(Result::ok) {
        connected += usize::from(line.contains("Connected to 127.0.0.1"));
        reused += usize::from(line.contains("Re-using existing connection"));
        streams += usize::from(line.starts_with("< HTTP/2 200"));
        held += usize::from(line.starts_with("< HTTP/2 304"));
        if streams == 4 && held == 1 {
            break;
        }
    }
    assert_eq!((connected, reused), (1, 4));
    // The streams are still open, all on that connection.
    crate::live::wait_for_metric(&server, "stq_streams", 4.0);
    let _ = curl.kill();
    let _ = curl.wait();
}

/// An NSS database under `home` (`$HOME/.pki/nssdb`, where chromium on Linux looks)
/// that trusts `ca` to issue servers' certificates, made with Debian's `certutil`
/// (`libnss3-tools`, installed when missing); `None` when it cannot be.
fn nss_database_trusting(home: &Path, ca: &str) -> Option<()> {
    let certutil = debian_binary("/usr/bin/certutil", "libnss3-tools")?;
    let database = home.join(".pki/nssdb");
    std::fs::create_dir_all(&database).unwrap();
    let database = format!("sql:{}", path_string(&database));
    let run = |args: &[&str]| {
        let output = Command::new(&certutil).args(args).output().unwrap();
        assert!(
            output.status.success(),
            "certutil {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    run(&["-N", "-d", &database, "--empty-password"]);
    run(&[
        "-A",
        "-d",
        &database,
        "-n",
        "stq test CA",
        "-t",
        "C,,",
        "-i",
        ca,
    ]);
    let listed = run(&["-L", "-d", &database]);
    assert!(listed.contains("stq test CA"), "{listed}");
    Some(())
}

/// Headless chromium whose `$HOME` is `home`, checking certificates (headless_chrome
/// would pass `--ignore-certificate-errors` by default); `None` when Debian's
/// chromium is missing and cannot be installed.
fn checking_browser(home: &Path) -> Option<headless_chrome::Browser> {
    use std::ffi::OsStr;
    let path = debian_binary("/usr/bin/chromium", "chromium")?;
    let flags = [
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let options = headless_chrome::LaunchOptions {
        path: Some(path),
        headless: true,
        // Root in a container: chromium's sandbox needs user namespaces it may not have.
        sandbox: false,
        ignore_certificate_errors: false,
        window_size: Some((1280, 800)),
        args: flags.iter().map(OsStr::new).collect(),
        process_envs: Some([("HOME".to_owned(), path_string(home))].into()),
        idle_browser_timeout: std::time::Duration::from_secs(300),
        ..headless_chrome::LaunchOptions::default()
    };
    Some(headless_chrome::Browser::new(options).expect("start chromium"))
}

/// Runs `script` (an expression, possibly a promise) in the page: its JSON value.
fn evaluate(tab: &headless_chrome::Tab, script: &str) -> Value {
    let result = tab
        .evaluate(script, true)
        .unwrap_or_else(|error| panic!("evaluate {script}: {error}"));
    result.value.unwrap_or(Value::Null)
}

/// The URL and `nextHopProtocol` of each of the page's requests to the API (every
/// resource but the page's own files), as its Resource Timing entries record them.
fn api_calls(tab: &headless_chrome::Tab) -> Vec<(String, String)> {
    let text = evaluate(
        tab,
        "JSON.stringify(performance.getEntriesByType('resource')
           .filter((entry) => !new URL(entry.name).pathname.startsWith('/ui/'))
           .map((entry) => [entry.name, entry.nextHopProtocol]))",
    );
    serde_json::from_str(text.as_str().expect("a JSON string")).unwrap()
}

#[test]
fn issue_53_chromium_loads_the_overview_page_over_https() {
    let pki = Pki::new();
    let home = temporary_directory();
    if nss_database_trusting(home.path(), &pki.ca()).is_none() {
        return;
    }
    let Some(browser) = checking_browser(home.path()) else {
        return;
    };
    let fixture = Fixture::from_files(&small_files());
    let server = start_https(&fixture, &pki, &[]);
    // The name the certificate has (beside 127.0.0.1), as a person would type it.
    let page = format!("https://localhost:{}/", server.port);

    let tab = browser.new_tab().expect("open a tab");
    tab.set_default_timeout(std::time::Duration::from_secs(60));
    tab.navigate_to(&page)
        .unwrap()
        .wait_until_navigated()
        .unwrap();
    assert_eq!(tab.get_title().unwrap(), "stq overview");
    assert_eq!(evaluate(&tab, "window.isSecureContext"), Value::Bool(true));

    // Signed in as a person would: the token typed into its field.
    tab.wait_for_element("#token")
        .unwrap()
        .click()
        .unwrap()
        .type_into(OPS)
        .unwrap();
    tab.press_key("Enter").unwrap();
    tab.wait_for_element("#stations[data-state='ready']")
        .unwrap();
    tab.wait_for_element("#yields[data-state='ready']").unwrap();
    let shown: Vec<String> = serde_json::from_str(
        evaluate(
            &tab,
            "JSON.stringify([...document.querySelectorAll('#stations tbody tr')]
               .map((row) => row.cells[0].textContent))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    let (_, status, body) = curl(&server, &pki, "/stations", &["--http2"]);
    assert_eq!(status, "200", "{body}");
    let listed: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|station| station["station_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown, listed);
    assert_eq!(shown, ["ST-01", "ST-02"]);

    // Every call the page made went to stq over HTTPS, on HTTP/2 (ALPN `h2`), and
    // the page itself came the same way.
    let calls = api_calls(&tab);
    let called = |path: &str| {
        calls
            .iter()
            .any(|(url, _)| url.starts_with(&format!("{page}{}", &path[1..])))
    };
    assert!(called("/stations") && called("/units/summary"), "{calls:?}");
    for (url, protocol) in &calls {
        assert!(url.starts_with(&page), "{url} is not stq's HTTPS origin");
        assert_eq!(protocol, "h2", "{url}");
    }
    let navigation = evaluate(
        &tab,
        "performance.getEntriesByType('navigation')[0].nextHopProtocol",
    );
    assert_eq!(navigation, Value::String("h2".into()));

    // A browser without the database does not trust the certificate: the trust
    // above is the CA's, not a certificate error passed over.
    let bare = temporary_directory();
    let untrusting = checking_browser(bare.path()).unwrap();
    let tab = untrusting.new_tab().expect("open a tab");
    tab.set_default_timeout(std::time::Duration::from_secs(60));
    let refused = tab
        .navigate_to(&page)
        .and_then(|tab| tab.wait_until_navigated().map(|_| ()));
    let error = format!(
        "{:?}",
        refused.expect_err("an untrusted certificate was accepted")
    );
    assert!(error.contains("ERR_CERT_AUTHORITY_INVALID"), "{error}");
}
