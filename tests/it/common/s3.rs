//! Real S3 servers on loopback for the tests (issue 35): moto's (PyPI) and
//! s3s-fs's (crates.io), installed when missing by tests/export/s3-tools.sh, each
//! started and stopped by its process id; used by `s3` and `s3_store`, and by
//! `STQ_TEST_STORE_S3` (every server's store in one shared bucket).

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{temporary_directory, WRAPPER};

/// The bucket every test writes to.
pub(crate) const BUCKET: &str = "lake";

/// Credentials no output of stq may show: distinctive, so that a search for them
/// cannot miss.
pub(crate) const KEY_ID: &str = "STQ35KEYIDQUOKKA";
pub(crate) const SECRET: &str = "stq35-secret-wombat-7f3e9a";

/// One s3s-fs server for a whole run of the suite under `STQ_TEST_STORE_S3`, where
/// every server's store is in its bucket (`common::clean_environment`); never
/// dropped: its wrapper ends it when the test process ends.
pub(crate) fn shared_server() -> &'static S3Server {
    static SERVER: OnceLock<S3Server> = OnceLock::new();
    SERVER.get_or_init(|| S3Server::start(ServerKind::S3sFs))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerKind {
    Moto,
    S3sFs,
}

/// Installs (once a process, and only when missing) what these tests run, with
/// tests/export/s3-tools.sh, which pins the releases; returns the directory it
/// installs under.
fn tools() -> &'static Path {
    static TOOLS: OnceLock<PathBuf> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/export/s3-tools.sh");
        let status = Command::new("bash")
            .arg(script)
            .arg(&directory)
            .status()
            .expect("run tests/export/s3-tools.sh");
        assert!(
            status.success(),
            "tests/export/s3-tools.sh could not install moto, polars, chDB or s3s-fs"
        );
        directory
    })
}

/// The Python of the venv with moto's server, boto3, polars and chDB.
pub(crate) fn python() -> PathBuf {
    tools().join("s3-venv/bin/python")
}

/// The `s3s-fs` binary.
fn s3s_fs() -> PathBuf {
    tools().join("s3s-fs/bin/s3s-fs")
}

/// A loopback port no one listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// An S3 server on loopback with bucket [`BUCKET`], stopped (SIGKILL to its
/// process id) when dropped; a shell wrapper ends it too if the test binary dies.
pub(crate) struct S3Server {
    pub(crate) kind: ServerKind,
    port: u16,
    pid: u32,
    wrapper: Child,
    /// Its data (s3s-fs) and its log.
    directory: tempfile::TempDir,
}

impl S3Server {
    pub(crate) fn start(kind: ServerKind) -> S3Server {
        S3Server::launch(kind, free_port(), temporary_directory())
    }

    /// Starts the stopped server again on its port, with its data (s3s-fs keeps
    /// its objects in files; moto's are in memory, and lost).
    pub(crate) fn restart(&mut self) {
        self.stop();
        (self.pid, self.wrapper) = S3Server::spawn(self.kind, self.port, self.directory.path());
        self.wait_until_listening();
    }

    /// The directory holding bucket [`BUCKET`]'s objects as files (s3s-fs only).
    pub(crate) fn objects_directory(&self) -> PathBuf {
        assert_eq!(
            self.kind,
            ServerKind::S3sFs,
            "moto keeps its objects in memory"
        );
        self.directory.path().join("data").join(BUCKET)
    }

    /// Starts the server's process (through the wrapper) on `port` with its data
    /// and log in `directory`: its pid and the wrapper.
    fn spawn(kind: ServerKind, port: u16, directory: &Path) -> (u32, Child) {
        let mut command = Command::new("sh");
        command.arg("-c").arg(WRAPPER);
        match kind {
            ServerKind::Moto => {
                let python = python();
                command.arg(python.with_file_name("moto_server")).args([
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ]);
            }
            ServerKind::S3sFs => {
                let data = directory.join("data");
                // s3s-fs's buckets are its root's directories.
                std::fs::create_dir_all(data.join(BUCKET)).unwrap();
                command
                    .arg(s3s_fs())
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--access-key", KEY_ID, "--secret-key", SECRET])
                    .arg(&data);
            }
        }
        let log = (File::options().create(true).append(true))
            .open(directory.join("server.log"))
            .unwrap();
        let mut wrapper = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut pid = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(wrapper.stdout.take().unwrap()),
            &mut pid,
        )
        .unwrap();
        (
            pid.trim().parse().expect("the wrapper prints the pid"),
            wrapper,
        )
    }

    fn launch(kind: ServerKind, port: u16, directory: tempfile::TempDir) -> S3Server {
        let (pid, wrapper) = S3Server::spawn(kind, port, directory.path());
        let server = S3Server {
            kind,
            port,
            pid,
            wrapper,
            directory,
        };
        server.wait_until_listening();
        if kind == ServerKind::Moto {
            // moto checks no signature: the bucket is made by a plain PUT.
            let made = ureq::put(&server.endpoint())
                .call()
                .map(|response| response.status());
            assert!(matches!(made, Ok(200)), "moto: create bucket: {made:?}");
        }
        server
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{:?} not listening on {} within 60 s: {}",
                self.kind,
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.directory.path().join("server.log")).unwrap_or_default()
    }

    /// The bucket's URL.
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{BUCKET}", self.port)
    }

    /// The variables stq (and boto3, polars, chDB) take S3's settings from.
    pub(crate) fn variables(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", KEY_ID.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// Stops the server: SIGKILL to its process id, then the wrapper's end.
    pub(crate) fn stop(&mut self) {
        // SAFETY: kill(2) with a pid this test started and a valid signal.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        let _ = self.wrapper.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The variables of `server`, and `RUST_LOG=debug` so that whatever stq would
/// log of S3 is in its output, for the search for secrets.
pub(crate) fn with_debug_log(server: &S3Server) -> Vec<(&'static str, String)> {
    let mut variables = server.variables();
    variables.push(("RUST_LOG", "debug".to_owned()));
    variables
}

pub(crate) fn borrowed<'a>(
    variables: &'a [(&'static str, String)],
) -> Vec<(&'static str, &'a str)> {
    (variables.iter())
        .map(|(name, value)| (*name, value.as_str()))
        .collect()
}

/// Fails if `text` shows a credential.
#[track_caller]
pub(crate) fn assert_no_secret(text: &str, context: &str) {
    assert!(
        !text.contains(SECRET) && !text.contains(KEY_ID),
        "{context} shows a credential:\n{text}"
    );
}
