//! An [`Answer`] written in the format asked for (docs/api.md section 7): its
//! elements as the envelope's `data` array (records' stored parts or a summary's
//! rendered rows, copied comma-separated), or as CSV
//! ([`super::csv`]). The envelope around `data` (`message`, `meta`) and the
//! headers each format adds are the HTTP layer's; what an answer holds is this
//! module's alone, so that the HTTP layer names no page, row or record part.

use std::ops::Range;

use super::csv;
use super::{Answer, Elements};
use crate::domain::query::{Endpoint, QueryParams};

impl Answer {
    /// How many elements its `data` holds: records, or rows.
    pub fn count(&self) -> usize {
        match &self.0 {
            Elements::Page(page) => page.len(),
            Elements::Rows(rows) => rows.len(),
        }
    }

    /// The next page's cursor as the envelope's `meta.next_cursor` says it: without
    /// `limit` (and for a summary's rows, which are never paged) `None`; with it,
    /// the cursor, or `Some(None)` on the last page.
    pub fn next_cursor(&self) -> Option<Option<&str>> {
        match &self.0 {
            Elements::Page(page) => page.paged().then(|| page.next_cursor()),
            Elements::Rows(_) => None,
        }
    }

    /// A body of `prefix`, then its elements' JSON in an array, comma-separated:
    /// the envelope's `data`. The body is sized once, before anything is written,
    /// for all of that and `room` bytes more (what follows the array); also
    /// returns where the array lies in it.
    pub fn json(&self, prefix: &[u8], room: usize) -> (Vec<u8>, Range<usize>) {
        // Every element's length is known before any is written.
        let bytes: usize = match &self.0 {
            Elements::Page(page) => page.json_bytes(),
            Elements::Rows(rows) => rows.rows().map(<[u8]>::len).sum(),
        };
        let mut body = Vec::with_capacity(bytes + self.count() + room);
        body.extend_from_slice(prefix);
        let start = body.len();
        body.push(b'[');
        match &self.0 {
            Elements::Page(page) => page.each_record(|index, parts| {
                if index > 0 {
                    body.push(b',');
                }
                parts.write_to(&mut body);
            }),
            Elements::Rows(rows) => {
                for (index, row) in rows.rows().enumerate() {
                    if index > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(row);
                }
            }
        }
        body.push(b']');
        let data = start..body.len();
        (body, data)
    }

    /// The identity of its last record in `catalog` (the generation it was read
    /// from), if it is a page that holds any.
    pub(super) fn last_identity(
        &self,
        catalog: &crate::data::catalog::Catalog,
    ) -> Option<crate::data::cursor::RecordIdentity> {
        match &self.0 {
            Elements::Page(page) => page.last().map(|last| catalog.identity_of(last)),
            Elements::Rows(_) => None,
        }
    }

    /// The generation a page was read from; `None` for rows.
    pub fn generation(&self) -> Option<u64> {
        match &self.0 {
            Elements::Page(page) => Some(page.generation()),
            Elements::Rows(_) => None,
        }
    }

    /// The CSV header row's names of an answer of `endpoint` to `params`: the
    /// fields of each element of its `data`, in their order. Known before the
    /// answer is, so that an empty answer has its header too.
    pub fn csv_columns(endpoint: Endpoint, params: &QueryParams) -> Vec<&'static str> {
        csv::columns(endpoint, params)
    }

    /// Its CSV body: the header row of `columns` (from
    /// [`Answer::csv_columns`]), then a row per element.
    pub fn csv(&self, columns: &[&str]) -> Vec<u8> {
        match &self.0 {
            Elements::Page(page) => csv::records(columns, page),
            Elements::Rows(rows) => csv::rows(columns, rows),
        }
    }
}
