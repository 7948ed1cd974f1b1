//! An [`Answer`] written in the format asked for (docs/api.md section 7): its
//! elements as the inside of the envelope's `data` array (records' stored parts
//! or a summary's rendered rows, copied comma-separated), or as CSV
//! ([`super::csv`]). The envelope around `data` (`message`, `meta`) and the
//! headers each format adds are the HTTP layer's; what an answer holds is this
//! module's alone, so that the HTTP layer names no page, row or record part.

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

    /// The next page's cursor; `None` on the last page, without `limit`, and for
    /// a summary's rows, which are never paged.
    pub fn next_cursor(&self) -> Option<&str> {
        match &self.0 {
            Elements::Page(page) => page.next_cursor(),
            Elements::Rows(_) => None,
        }
    }

    /// The length of its elements' JSON, all told, known before any is written:
    /// what a body is sized by.
    pub fn json_bytes(&self) -> usize {
        match &self.0 {
            Elements::Page(page) => page.json_bytes(),
            Elements::Rows(rows) => rows.rows().map(<[u8]>::len).sum(),
        }
    }

    /// Appends its elements' JSON, comma-separated: what the envelope's `data`
    /// array holds.
    pub fn write_json(&self, body: &mut Vec<u8>) {
        match &self.0 {
            Elements::Page(page) => page.each_record(|index, parts| {
                if index > 0 {
                    body.push(b',');
                }
                parts.write_to(body);
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
