//! Time zones of summary buckets (docs/api.md section 10): `tz` names a zone of the
//! IANA database that chrono-tz compiles in (`chrono_tz::IANA_TZDB_VERSION`), and
//! buckets are then cut at that zone's wall-clock times.
//!
//! (The zone's bucket boundaries are `data::summary`'s: its `buckets` module.)

use std::str::FromStr as _;

use chrono_tz::Tz;

/// A summary's time zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Zone {
    /// `UTC`, the default: buckets are the epoch's grid, and `bucket_start` ends in
    /// `Z`.
    #[default]
    Utc,
    /// Any other IANA zone (`Etc/UTC` too): `bucket_start` carries its offset.
    Named(Tz),
}

impl Zone {
    /// The zone an IANA name names, exactly as the database spells it.
    pub(crate) fn parse(name: &str) -> Option<Zone> {
        match name {
            "UTC" => Some(Zone::Utc),
            name => Tz::from_str(name).ok().map(Zone::Named),
        }
    }

    #[cfg(test)]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Zone::Utc => "UTC",
            Zone::Named(tz) => tz.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> Zone {
        Zone::parse(name).unwrap()
    }

    #[test]
    fn names_are_the_databases_exactly_and_utc_is_its_own() {
        assert_eq!(Zone::parse("UTC"), Some(Zone::Utc));
        assert_eq!(zone("Europe/Berlin").name(), "Europe/Berlin");
        assert!(matches!(zone("Etc/UTC"), Zone::Named(_)));
        for unknown in [
            "",
            "utc",
            "europe/berlin",
            "Europe/Nowhere",
            "+01:00",
            "CEST ",
        ] {
            assert_eq!(Zone::parse(unknown), None, "{unknown:?}");
        }
    }
}
