//! The crate's calls on a directory, and what a bucket's errors and `Debug` show
//! of its secrets (S3 itself is exercised against real S3 servers by the service's
//! tests/it/s3.rs).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;

use super::*;

fn directory(root: &Path) -> Objects {
    Objects::open(Location::Directory(root.to_owned()), &S3Settings::default()).unwrap()
}

/// Every file under `root`, as `/`-separated paths relative to it.
fn files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => pending.push(path),
                false => files.push(
                    (path.strip_prefix(root).unwrap().iter())
                        .map(|part| part.to_str().unwrap())
                        .collect::<Vec<_>>()
                        .join("/"),
                ),
            }
        }
    }
    files.sort();
    files
}

#[test]
fn a_directory_puts_gets_lists_and_deletes_objects() {
    let root = tempfile::tempdir().unwrap();
    let objects = directory(&root.path().join("lake"));
    assert_eq!(objects.list("").unwrap(), []);
    objects
        .put(
            "units/day=2026-11-24/part-0.parquet",
            b"0123456789".to_vec(),
        )
        .unwrap();
    objects
        .put("units/day=2026-11-240/part-0.parquet", b"x".to_vec())
        .unwrap();
    objects
        .put(".stq-export", b"fingerprints".to_vec())
        .unwrap();
    // In place of the one before, whole.
    objects.put(".stq-export", b"again".to_vec()).unwrap();
    assert_eq!(objects.get(".stq-export").unwrap(), b"again");
    assert_eq!(
        objects
            .get_range("units/day=2026-11-24/part-0.parquet", 2..5)
            .unwrap(),
        b"234"
    );
    for range in [5..5, 8..11, 11..12] {
        let error =
            (objects.get_range("units/day=2026-11-24/part-0.parquet", range.clone())).unwrap_err();
        assert!(
            matches!(error, ObjectsError::Range { .. }),
            "{range:?}: {error}"
        );
    }
    let listed = |prefix: &str| -> Vec<(String, u64)> {
        (objects.list(prefix).unwrap().into_iter())
            .map(|listed| (listed.name, listed.size))
            .collect()
    };
    assert_eq!(
        listed(""),
        [
            (".stq-export".to_owned(), 5),
            ("units/day=2026-11-24/part-0.parquet".to_owned(), 10),
            ("units/day=2026-11-240/part-0.parquet".to_owned(), 1),
        ]
    );
    assert_eq!(
        listed("units/day=2026-11-24"),
        [("units/day=2026-11-24/part-0.parquet".to_owned(), 10)]
    );
    assert_eq!(listed("metrics"), []);

    objects
        .delete("units/day=2026-11-24/part-0.parquet")
        .unwrap();
    // Not there: no error.
    objects
        .delete("units/day=2026-11-24/part-0.parquet")
        .unwrap();
    let error = objects
        .get("units/day=2026-11-24/part-0.parquet")
        .unwrap_err();
    assert!(error.is_not_found(), "{error}");
    // The partition's directory went with its last file; its parent stays while
    // it holds another.
    assert!(!root.path().join("lake/units/day=2026-11-24").exists());
    assert_eq!(
        files(&root.path().join("lake")),
        [".stq-export", "units/day=2026-11-240/part-0.parquet"]
    );
    objects
        .delete("units/day=2026-11-240/part-0.parquet")
        .unwrap();
    assert_eq!(files(&root.path().join("lake")), [".stq-export"]);
    assert!(root.path().join("lake").is_dir(), "the root stays");
}

/// Issue 35: an object read in pieces gives its bytes in order, and an error of
/// the sink ends the read as that error.
#[test]
fn an_object_is_read_in_pieces_until_the_sink_refuses() {
    let root = tempfile::tempdir().unwrap();
    let objects = directory(root.path());
    let bytes: Vec<u8> = (0..(3 << 20) + 5).map(|at| (at % 251) as u8).collect();
    objects.put("pack-1.pack", bytes.clone()).unwrap();
    let mut read = Vec::new();
    let size = (objects.get_each("pack-1.pack", &mut |piece| {
        read.extend_from_slice(piece);
        Ok(())
    }))
    .unwrap();
    assert_eq!((size, read.len()), (bytes.len() as u64, bytes.len()));
    assert!(read == bytes);
    let refused = objects.get_each("pack-1.pack", &mut |_| Err(io::Error::other("full")));
    assert!(matches!(refused, Err(ObjectsError::Sink(error)) if error.to_string() == "full"));
    let missing = objects.get_each("pack-2.pack", &mut |_| Ok(()));
    assert!(missing.unwrap_err().is_not_found());
}

#[test]
fn a_writer_puts_its_object_when_finished_and_nothing_otherwise() {
    let root = tempfile::tempdir().unwrap();
    let objects = directory(root.path());
    let mut writer = objects
        .writer("metrics/day=2026-11-24/part-0.parquet")
        .unwrap();
    writer.write_all(b"PAR1").unwrap();
    // Only the temporary file, named so that Hive-style readers skip it.
    let during = files(root.path());
    assert_eq!(during.len(), 1);
    assert!(
        during[0].starts_with("metrics/day=2026-11-24/.part-0.parquet."),
        "{during:?}"
    );
    assert_eq!(writer.finish().unwrap(), 4);
    assert_eq!(
        files(root.path()),
        ["metrics/day=2026-11-24/part-0.parquet"]
    );

    let mut abandoned = objects
        .writer("metrics/day=2026-11-25/part-0.parquet")
        .unwrap();
    abandoned.write_all(b"PAR1 and half a part").unwrap();
    drop(abandoned);
    assert_eq!(
        files(root.path()),
        ["metrics/day=2026-11-24/part-0.parquet"]
    );
}

#[test]
fn a_failed_put_leaves_no_object() {
    let root = tempfile::tempdir().unwrap();
    let objects = directory(root.path());
    objects.put("units/a/held", b"1".to_vec()).unwrap();
    // `units/a` is a directory that holds a file: a rename onto it fails.
    let error = objects.put("units/a", b"2".to_vec()).unwrap_err();
    assert!(matches!(error, ObjectsError::Io { .. }), "{error}");
    assert_eq!(files(root.path()), ["units/a/held"]);
    // Under a file, no directory can be made: nothing is written at all.
    let error = objects.put("units/a/held/b", b"3".to_vec()).unwrap_err();
    assert!(matches!(error, ObjectsError::Io { .. }), "{error}");
    assert_eq!(files(root.path()), ["units/a/held"]);
    assert_eq!(objects.get("units/a/held").unwrap(), b"1");
}

#[test]
fn names_that_leave_the_root_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let objects = directory(&root.path().join("lake"));
    for name in ["../escaped", "/etc/passwd", "a//b", "", "a/"] {
        let error = objects.put(name, b"x".to_vec()).unwrap_err();
        assert!(
            matches!(error, ObjectsError::Name { .. }),
            "{name:?}: {error}"
        );
    }
    assert!(matches!(
        objects.list("units/").unwrap_err(),
        ObjectsError::Name { .. }
    ));
    assert!(!root.path().join("escaped").exists());
    assert!(!root.path().join("lake").exists());
}

/// A secret that no message may show.
const SECRET: &str = "stq-35-SECRET-wJalrXUtnFEMI";
const KEY_ID: &str = "AKIA35KEYIDEXAMPLE";

/// An HTTP server on loopback that answers each of `answers` requests with 403
/// and a body that quotes the credentials, as S3's `SignatureDoesNotMatch` quotes
/// the key id (here the secret too, the worst a server could do).
fn quoting_server(answers: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(answers) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let answer = format!(
                "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
                 <AWSAccessKeyId>{KEY_ID}</AWSAccessKeyId><Secret>{SECRET}</Secret></Error>"
            );
            let _ = write!(
                stream,
                "HTTP/1.1 403 Forbidden\r\ncontent-type: application/xml\r\ncontent-length: \
                 {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    port
}

#[test]
fn secrets_never_reach_a_message_or_a_debug() {
    let port = quoting_server(2);
    let settings = S3Settings::from_variables([
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", &format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true"),
    ]);
    let location = Location::parse("s3://lake/stq").unwrap();
    let objects = Objects::open(location.clone(), &settings).unwrap();
    let put = objects
        .put("units/part-0.parquet", b"PAR1".to_vec())
        .unwrap_err();
    let get = objects.get("units/part-0.parquet").unwrap_err();
    assert!(matches!(put, ObjectsError::S3 { .. }), "{put}");
    // The server's answer is in the message, its secrets are not.
    assert!(put.to_string().contains("SignatureDoesNotMatch"), "{put}");
    let shown = [
        format!("{location} {location:?}"),
        format!("{settings:?}"),
        format!("{objects:?}"),
        format!("{put} {put:?}"),
        format!("{get} {get:?}"),
    ];
    for text in shown {
        assert!(!text.contains(SECRET), "{text}");
        assert!(!text.contains(KEY_ID), "{text}");
    }
}

#[test]
fn a_bucket_is_not_called_from_an_async_runtime() {
    let settings = S3Settings::from_variables([
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        // Never reached: the call is refused before any request.
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ("AWS_ALLOW_HTTP", "true"),
    ]);
    let objects = Objects::open(Location::parse("s3://lake").unwrap(), &settings).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let error = runtime.block_on(async { objects.get("a").unwrap_err() });
    assert!(matches!(error, ObjectsError::Runtime { .. }), "{error}");
    drop(runtime);
    // Dropped on a runtime's thread, the bucket's own runtime does not panic.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move { drop(objects) });
}
