//! A reader of Server-Sent Events (WHATWG HTML, "Server-sent events") over real
//! HTTP, as the tests of streams need it: the response's status and headers, then
//! its events one at a time as they arrive, with the comments and `retry` seen on
//! the way.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde_json::Value;

use super::{call, Response};

/// One event: its type (`message` when it names none), its id and its data.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: String,
    pub id: Option<String>,
    pub data: String,
}

impl Event {
    /// The records of a `records` event.
    pub fn records(&self) -> Vec<Value> {
        assert_eq!(self.kind, "records", "{self:?}");
        match serde_json::from_str(&self.data) {
            Ok(Value::Array(records)) => records,
            other => panic!("a records event's data is not an array: {other:?}"),
        }
    }
}

/// An open stream.
pub struct EventStream {
    pub status: u16,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    reader: BufReader<Box<dyn Read + Send + Sync>>,
    /// The `retry` values read so far.
    pub retries: Vec<u64>,
    /// How many comment lines were read.
    pub comments: usize,
    /// The id of the last event that set one.
    pub last_id: Option<String>,
}

/// The agent streams are read with: a read that waits longer than a minute means
/// the server stopped sending, which fails the test rather than hanging it.
fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout_read(Duration::from_secs(60))
        .build()
}

impl EventStream {
    /// `GET url` with `headers`: the stream if the server answered 200 with
    /// `text/event-stream`, else the whole response.
    pub fn open(url: &str, headers: &[(&str, &str)]) -> Result<EventStream, Response> {
        let mut request = agent().get(url);
        for (name, value) in headers {
            request = request.set(name, value);
        }
        let response = match request.call() {
            Ok(response) => response,
            Err(ureq::Error::Status(..)) => return Err(call(&agent(), "GET", url, headers)),
            Err(error) => panic!("GET {url}: transport error: {error}"),
        };
        let status = response.status();
        let mut headers_seen = Vec::new();
        for name in response.headers_names() {
            for value in response.all(&name) {
                headers_seen.push((name.to_ascii_lowercase(), value.to_owned()));
            }
        }
        Ok(EventStream {
            status,
            headers: headers_seen,
            reader: BufReader::new(response.into_reader()),
            retries: Vec::new(),
            comments: 0,
            last_id: None,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(seen, _)| seen == name)
            .map(|(_, value)| value.as_str())
    }

    /// The next event, or `None` once the server closed the stream; comments are
    /// counted on the way.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            match self.next_item()? {
                Ok(event) => return Some(event),
                Err(_) => self.comments += 1,
            }
        }
    }

    /// The next event, or comment (`Err`, its text), or `None` once the server
    /// closed the stream.
    pub fn next_item(&mut self) -> Option<Result<Event, String>> {
        let mut kind = None;
        let mut id = None;
        let mut data: Vec<String> = Vec::new();
        let mut any = false;
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = line.strip_suffix('\n').unwrap_or(&line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() {
                if any && (!data.is_empty() || kind.is_some()) {
                    if let Some(id) = &id {
                        self.last_id = Some(String::clone(id));
                    }
                    return Some(Ok(Event {
                        kind: kind.unwrap_or_else(|| "message".to_owned()),
                        id,
                        data: data.join("\n"),
                    }));
                }
                continue;
            }
            if let Some(comment) = line.strip_prefix(':') {
                return Some(Err(comment.to_owned()));
            }
            any = true;
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "event" => kind = Some(value.to_owned()),
                "id" => id = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                "retry" => self.retries.push(value.parse().expect("a numeric retry")),
                other => panic!("an unknown field {other:?} in a stream"),
            }
        }
    }

    /// The records of the next `count` records, reading whole events (which must
    /// be `records` events and end exactly at `count`).
    #[track_caller]
    pub fn records(&mut self, count: usize) -> Vec<Value> {
        let mut records = Vec::new();
        while records.len() < count {
            let event = self
                .next_event()
                .unwrap_or_else(|| panic!("the stream ended after {} records", records.len()));
            records.extend(event.records());
        }
        assert_eq!(
            records.len(),
            count,
            "an event went past the records expected"
        );
        records
    }

    /// The next event, which must be of type `kind`.
    #[track_caller]
    pub fn expect(&mut self, kind: &str) -> Event {
        let event = self.next_event().expect("the stream ended");
        assert_eq!(event.kind, kind, "{event:?}");
        event
    }
}
