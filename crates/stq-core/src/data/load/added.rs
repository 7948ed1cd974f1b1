//! What a reload changed, for live answers (docs/api.md section 14): the records
//! it added (appended lines, a new file's lines, a held file's released lines),
//! by station and kind, and the stations whose records it removed or changed (a
//! file replaced, shrunk or removed). A stream sends what a generation added
//! without looking at history; a held request is evaluated again only when a
//! generation touches its stations.
//!
//! Records are named by their key in their station (instant, then load order),
//! which stays the same from generation to generation unless the reload spread
//! the files' ordinals anew; such a reload, and any other that read everything
//! again (a repair), says so ([`Additions::whole`]) instead of listing records.

use std::collections::{HashMap, HashSet};

use super::build::StationBuilder;
use crate::data::key::RecordKey;
use crate::domain::record::Kind;

/// The records one reload added and the stations whose records it removed or
/// changed. Empty for a reload that changed nothing.
#[derive(Clone, Debug, Default)]
pub struct Additions {
    /// Every record may have changed: the reload read everything again.
    whole: bool,
    /// By station: the keys of the unit and metric records added, each sorted.
    added: HashMap<Box<str>, Added>,
    /// Stations that lost a record or had one changed.
    altered: HashSet<Box<str>>,
}

/// One station's added records, by kind, each list in key order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Added {
    pub(crate) units: Vec<RecordKey>,
    pub(crate) metrics: Vec<RecordKey>,
}

impl Added {
    pub(crate) fn of(&self, kind: Kind) -> &[RecordKey] {
        match kind {
            Kind::Units => &self.units,
            Kind::Metrics => &self.metrics,
        }
    }
}

/// What a station's change is to a reader of its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// Nothing of it changed.
    Untouched,
    /// It only gained records.
    Added,
    /// It lost or changed records (or the reload read everything again).
    Altered,
}

impl Additions {
    /// A reload that read every file again: any record may have changed.
    pub(crate) fn whole() -> Additions {
        Additions {
            whole: true,
            ..Additions::default()
        }
    }

    /// What a reload changed: the records `new_records` read, but those of a last
    /// line read again (`reread`: its station and load order) that came back as
    /// they were, and the stations that lost records (`lost`), with those whose
    /// last line read again did not come back.
    pub(crate) fn of_reload(
        new_records: &HashMap<Box<str>, StationBuilder>,
        reread: &[(Box<str>, u64)],
        lost: HashSet<Box<str>>,
    ) -> Additions {
        let mut added: HashMap<Box<str>, Added> = (new_records.iter())
            .map(|(station, batch)| {
                let keys = |records: &mut dyn Iterator<Item = RecordKey>| {
                    let mut keys: Vec<RecordKey> = records.collect();
                    keys.sort_unstable();
                    keys
                };
                let added = Added {
                    units: keys(&mut batch.units.iter().map(|(key, _)| *key)),
                    metrics: keys(&mut batch.metrics.iter().map(|(key, _)| *key)),
                };
                (station.clone(), added)
            })
            .collect();
        let mut altered = lost;
        for (station, load_order) in reread {
            // A valid record's line can only gain trailing blanks and stay valid, so
            // the same line read again is the same record, or none.
            let back = added.get_mut(station).is_some_and(|added| {
                let before = added.units.len() + added.metrics.len();
                added.units.retain(|key| key.load_order != *load_order);
                added.metrics.retain(|key| key.load_order != *load_order);
                added.units.len() + added.metrics.len() < before
            });
            if !back {
                altered.insert(station.clone());
            }
        }
        added.retain(|_, added| !added.units.is_empty() || !added.metrics.is_empty());
        Additions {
            whole: false,
            added,
            altered,
        }
    }

    /// The most it did to any station `allowed` says a reader reads.
    pub(crate) fn touch_of(&self, allowed: impl Fn(&str) -> bool) -> Touch {
        if self.whole || self.altered.iter().any(|station| allowed(station)) {
            return Touch::Altered;
        }
        match self.added.keys().any(|station| allowed(station)) {
            true => Touch::Added,
            false => Touch::Untouched,
        }
    }

    /// The stations it added records to, and their keys.
    pub(crate) fn added(&self) -> impl Iterator<Item = (&str, &Added)> {
        self.added
            .iter()
            .map(|(station, added)| (&**station, added))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::Timestamp;

    fn key(seconds: i64, load_order: u64) -> RecordKey {
        RecordKey {
            instant: Timestamp { seconds, nanos: 0 },
            load_order,
        }
    }

    fn additions(units: &[(&str, RecordKey)], lost: &[&str]) -> Additions {
        let mut added: HashMap<Box<str>, Added> = HashMap::new();
        for (station, key) in units {
            added.entry((*station).into()).or_default().units.push(*key);
        }
        Additions {
            whole: false,
            added,
            altered: lost.iter().map(|station| (*station).into()).collect(),
        }
    }

    #[test]
    fn a_station_is_touched_as_the_most_the_reload_did_to_it() {
        let changed = additions(&[("a", key(1, 1))], &["b"]);
        assert_eq!(changed.touch_of(|station| station == "a"), Touch::Added);
        assert_eq!(changed.touch_of(|station| station == "b"), Touch::Altered);
        assert_eq!(changed.touch_of(|station| station == "c"), Touch::Untouched);
        assert_eq!(changed.touch_of(|_| true), Touch::Altered);
        assert_eq!(Additions::whole().touch_of(|_| false), Touch::Altered);
        assert_eq!(Additions::default().touch_of(|_| true), Touch::Untouched);
    }
}
