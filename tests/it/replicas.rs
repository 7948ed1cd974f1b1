//! Issue 11, README "Beyond one machine": identical replicas behind a real load
//! balancer. Two `stq` processes load the same snapshot and share a
//! `--cursor-key-file`; Debian's nginx, started here on loopback, sends requests to
//! them in turn. A paginated walk through nginx lands its pages on both replicas
//! and returns every record once, in order, also with a reload of one replica in
//! the middle; a repeated request gets 304 from either replica.
//!
//! nginx is installed with `apt-get` when it is missing (CI runs as root on Debian).
//! Where it is missing and cannot be (not root, or no apt-get), the test skips,
//! saying which package it needs; under `CI=true` it fails instead
//! (`common::debian_binary`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// The nginx binary, installed from Debian's packages when missing; `None` (the test
/// skips) when it cannot be.
pub(crate) fn nginx_binary() -> Option<PathBuf> {
    debian_binary("/usr/sbin/nginx", "nginx-light")
}

/// The `location` blocks of docs/deployment.md's nginx server for streams and
/// `wait` (docs/api.md section 14), as the page gives them: the test runs the
/// page's configuration, not a copy of it.
pub(crate) fn locations() -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/deployment.md"))
        .expect("read docs/deployment.md");
    let block = (page.split("```nginx\n"))
        .find(|block| block.contains("location ~ ^/(units|metrics)/stream$"))
        .and_then(|block| block.split("```").next())
        .expect("docs/deployment.md's nginx block for streams");
    let server = block
        .split_once("    listen 80;\n")
        .expect("its server block listens on port 80")
        .1;
    // The server block's own closing brace is its last line.
    server.trim_end().strip_suffix('}').unwrap().to_owned()
}

/// nginx in front of `replicas`, round robin, stopped by pid when dropped.
pub(crate) struct Balancer {
    child: Child,
    port: u16,
    directory: tempfile::TempDir,
}

impl Balancer {
    pub(crate) fn start(nginx: PathBuf, replicas: &[&Server]) -> Balancer {
        let directory = temporary_directory();
        let port = free_port();
        let servers: String = replicas
            .iter()
            .map(|replica| format!("server 127.0.0.1:{};\n", replica.port))
            .collect();
        let root = directory.path().display();
        let config = format!(
            "daemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
             error_log {root}/error.log;\nevents {{}}\n\
             http {{\n access_log off;\n\
             client_body_temp_path {root}/body;\n proxy_temp_path {root}/proxy;\n\
             fastcgi_temp_path {root}/fastcgi;\n uwsgi_temp_path {root}/uwsgi;\n\
             scgi_temp_path {root}/scgi;\n\
             upstream stq {{\n{servers}}}\n\
             server {{\n listen 127.0.0.1:{port};\n\
             {locations}\n}}\n}}\n",
            locations = locations()
        );
        let config_path = directory.path().join("nginx.conf");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(nginx)
            .arg("-c")
            .arg(&config_path)
            .arg("-p")
            .arg(directory.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let balancer = Balancer {
            child,
            port,
            directory,
        };
        balancer.wait_until_listening(&balancer.directory.path().join("error.log"));
        balancer
    }

    pub(crate) fn url(&self, path_and_query: &str) -> String {
        format!("http://127.0.0.1:{}{path_and_query}", self.port)
    }

    pub(crate) fn get(&self, path_and_query: &str, headers: &[(&str, &str)]) -> Response {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        let authorization = format!("Bearer {OPS}");
        let mut all = headers.to_vec();
        all.push(("Authorization", &authorization));
        call(&agent, "GET", &self.url(path_and_query), &all)
    }

    /// Waits (generously) until nginx answers `/healthz` through to a replica.
    fn wait_until_listening(&self, error_log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(5))
                .build();
            if agent.get(&self.url("/healthz")).call().is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not answer; error log:\n{}",
                std::fs::read_to_string(error_log).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Which replica answered the request with `request_id`, from their access lines.
pub(crate) fn answered_by(replicas: &[&Server], request_id: &str) -> usize {
    let needle = format!("request_id={request_id} ");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found: Vec<usize> = (0..replicas.len())
            .filter(|&index| replicas[index].log_count(&needle) > 0)
            .collect();
        match found[..] {
            [index] => return index,
            [] => {}
            _ => panic!("{request_id} logged by several replicas"),
        }
        assert!(Instant::now() < deadline, "{request_id} was never logged");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn issue_11_two_replicas_behind_nginx_serve_one_walk_and_304s() {
    let Some(nginx) = nginx_binary() else {
        return;
    };
    let fixture = Fixture::main();
    let keys = temporary_directory();
    let key = keys.path().join("cursor.key");
    std::fs::write(&key, b"the replicas' shared secret, 32 bytes or more").unwrap();
    let key = path_string(&key);
    let flags = ["--cursor-key-file", key.as_str(), "--access-log"];
    let first = Server::start(&fixture, &flags);
    let second = Server::start(&fixture, &flags);
    // The replicas need not be at the same generation.
    second.signal("HUP");
    second.wait_for_generation_after(1);
    let replicas = [&first, &second];
    let balancer = Balancer::start(nginx, &replicas);

    // A walk in pages of 2, each page's request id naming who answered it.
    let base = format!("{}&limit=2", units_all());
    let mut records = Vec::new();
    let mut answered = [0, 0];
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let path = match &cursor {
            None => base.clone(),
            Some(cursor) => format!("{base}&cursor={}", percent_encode(cursor)),
        };
        let request_id = format!("walk-page-{page}");
        let response = balancer.get(&path, &[("X-Request-Id", &request_id)]);
        let envelope = response.ok();
        answered[answered_by(&replicas, &request_id)] += 1;
        records.extend(envelope.data.iter().cloned());
        cursor = envelope.cursor();
        if page == 2 {
            // One replica reloads mid-walk; the walk goes on.
            first.signal("HUP");
            first.wait_for_generation_after(1);
        }
        if cursor.is_none() {
            break;
        }
    }
    assert_records(
        &records,
        &fixture.expect(&Query::units().both()),
        "a walk through nginx",
    );
    assert!(
        answered[0] > 0 && answered[1] > 0,
        "pages answered per replica: {answered:?}"
    );

    // The tag of one replica's answer is the other's too: 304 from both.
    let path = format!("{}&station_ids=ST-01,ST-02", units_all());
    let tag = balancer
        .get(&path, &[])
        .header("etag")
        .expect("an ETag")
        .to_string();
    let mut not_modified_by = [0, 0];
    for attempt in 0..4 {
        let request_id = format!("revalidate-{attempt}");
        let response = balancer.get(
            &path,
            &[("If-None-Match", &tag), ("X-Request-Id", &request_id)],
        );
        assert_eq!(response.status, 304, "{}", response.context());
        not_modified_by[answered_by(&replicas, &request_id)] += 1;
    }
    assert!(
        not_modified_by[0] > 0 && not_modified_by[1] > 0,
        "304s per replica: {not_modified_by:?}"
    );
}

/// Issue 49: a stream and a held `wait` pass through nginx as the deployment page
/// configures it, each event and the held answer as soon as a replica sends them;
/// an event id names a position in its replica's process only, so that another
/// replica resets the stream rather than guess.
#[test]
fn issue_49_a_stream_and_a_wait_pass_through_nginx() {
    use crate::common::sse::EventStream;
    use crate::reload::{append, lines, small_files, unit_line, BASE_TIME};
    let Some(nginx) = nginx_binary() else {
        return;
    };
    let fixture = Fixture::from_files(&small_files());
    let first = Server::start(&fixture, &["--watch", "--access-log"]);
    let second = Server::start(&fixture, &["--watch", "--access-log"]);
    let replicas = [&first, &second];
    let balancer = Balancer::start(nginx, &replicas);
    let file = fixture.snapshots.join("first.units.jsonl");
    let authorization = format!("Bearer {OPS}");
    let query = format!("/units/stream?from={BASE_TIME}&direction=input,output");
    let open = |headers: &[(&str, &str)]| {
        let mut all = vec![("Authorization", authorization.as_str())];
        all.extend_from_slice(headers);
        EventStream::open(&balancer.url(&query), &all)
            .unwrap_or_else(|response| panic!("no stream through nginx: {}", response.context()))
    };
    let mut stream = open(&[("X-Request-Id", "stream-0")]);
    assert_eq!(stream.records(4).len(), 4);
    append(&file, &lines(&[unit_line("ST-01", "SN-N1", 600)]));
    assert_eq!(stream.records(1)[0]["unit_serial"], "SN-N1");

    // A held request through nginx, answered by the next generation, once both
    // replicas serve the same answer (each loads the line on its own).
    let path = format!("/units?from={BASE_TIME}&to=2200-01-01T00:00:00Z&wait=60s");
    for replica in replicas {
        let deadline = Instant::now() + RELOAD_TIMEOUT;
        while replica.ok(&path).data.len() < 5 {
            assert!(Instant::now() < deadline, "a replica never loaded SN-N1");
            thread::sleep(Duration::from_millis(20));
        }
    }
    let tag = balancer.get(&path, &[]).header("etag").unwrap().to_owned();
    let held = {
        let url = balancer.url(&path);
        let (authorization, tag) = (authorization.clone(), tag.clone());
        thread::spawn(move || {
            let agent = ureq::AgentBuilder::new().build();
            call(
                &agent,
                "GET",
                &url,
                &[("Authorization", &authorization), ("If-None-Match", &tag)],
            )
        })
    };
    let deadline = Instant::now() + RELOAD_TIMEOUT;
    while first.admin_value("stq_waiting_requests") + second.admin_value("stq_waiting_requests")
        < 1.0
    {
        assert!(Instant::now() < deadline, "the request was never held");
        thread::sleep(Duration::from_millis(20));
    }
    append(&file, &lines(&[unit_line("ST-01", "SN-N2", 601)]));
    let response = held.join().unwrap();
    assert_eq!(response.status, 200, "{}", response.context());
    assert_ne!(response.header("etag"), Some(tag.as_str()));
    assert_eq!(stream.records(1)[0]["unit_serial"], "SN-N2");

    // The stream's id on the replica that did not issue it: reset, then the
    // backlog; on its issuer, the record added since.
    let id = stream.last_id.clone().unwrap();
    let issuer = answered_by(&replicas, "stream-0");
    drop(stream);
    append(&file, &lines(&[unit_line("ST-01", "SN-N3", 602)]));
    for replica in replicas {
        let deadline = Instant::now() + RELOAD_TIMEOUT;
        while replica.ok(&path).data.len() < 7 {
            assert!(Instant::now() < deadline, "a replica never loaded SN-N3");
            thread::sleep(Duration::from_millis(20));
        }
    }
    let mut resets = 0;
    for attempt in 1..=4 {
        let request_id = format!("stream-{attempt}");
        let mut resumed = open(&[("Last-Event-ID", &id), ("X-Request-Id", &request_id)]);
        let first_event = resumed.next_event().unwrap();
        match answered_by(&replicas, &request_id) == issuer {
            true => assert_eq!(first_event.records()[0]["unit_serial"], "SN-N3"),
            false => {
                assert_eq!(first_event.kind, "reset", "{first_event:?}");
                assert_eq!(resumed.records(7).len(), 7);
                resets += 1;
            }
        }
    }
    assert!(
        (1..4).contains(&resets),
        "round robin reached both: {resets} resets"
    );
}
