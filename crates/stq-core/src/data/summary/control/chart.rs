//! The individuals chart (I-MR) of one series and Nelson's eight rules
//! (docs/api.md section 15), as pure arithmetic over values in the contract's
//! order: the limits from the baseline's values, the flags from the window's.
//!
//! Everything is computed in double precision in the points' order, so that the
//! same points give the same bits however the records were held: the order is
//! the contract's, not the tiers'.

use crate::domain::query::Rules;

/// The d2 constant of a moving range of two: sigma = mean moving range / d2.
const D2: f64 = 1.128;
/// The D4 constant of a moving range of two: the MR chart's upper limit.
const D4: f64 = 3.267;

/// A chart's centre and spread, from its baseline's values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Limits {
    /// The baseline's mean.
    pub(super) center: f64,
    /// The mean of the baseline's moving ranges.
    pub(super) mr_mean: f64,
    /// `mr_mean / 1.128`, positive.
    pub(super) sigma: f64,
    /// The baseline's sample standard deviation (n - 1), for `ppk`.
    pub(super) stddev: f64,
}

impl Limits {
    /// The limits of `baseline`'s values, in order; `None` with fewer than two
    /// values or with a sigma of 0 (no chart then, and no rule applies).
    pub(super) fn of(baseline: impl Iterator<Item = f64> + Clone) -> Option<Limits> {
        let (mut count, mut sum, mut ranges, mut previous) = (0_u64, 0.0, 0.0, None);
        for value in baseline.clone() {
            count += 1;
            sum += value;
            if let Some(previous) = previous {
                ranges += f64::abs(value - previous);
            }
            previous = Some(value);
        }
        if count < 2 {
            return None;
        }
        let center = sum / count as f64;
        let mr_mean = ranges / (count - 1) as f64;
        let sigma = mr_mean / D2;
        // Two passes: the squares of deviations from the mean, not of the values,
        // keep the variance of large values with a small spread.
        let squares: f64 = baseline.map(|value| (value - center).powi(2)).sum();
        let stddev = (squares / (count - 1) as f64).sqrt();
        (sigma > 0.0 && sigma.is_finite() && center.is_finite()).then_some(Limits {
            center,
            mr_mean,
            sigma,
            stddev,
        })
    }

    /// `center + 3 sigma`.
    pub(super) fn upper(&self) -> f64 {
        self.center + 3.0 * self.sigma
    }

    /// `center - 3 sigma`.
    pub(super) fn lower(&self) -> f64 {
        self.center - 3.0 * self.sigma
    }

    /// The MR chart's upper limit, `3.267 mr_mean`.
    pub(super) fn mr_upper(&self) -> f64 {
        D4 * self.mr_mean
    }
}

/// Capability against the numeric limits `lower` and `upper` of a process at
/// `center` with spread `spread`: min(U - center, center - L) / 3 spread, one-sided
/// with one limit; `None` without a limit or a positive spread.
pub(super) fn capability(
    lower: Option<f64>,
    upper: Option<f64>,
    center: f64,
    spread: f64,
) -> Option<f64> {
    if spread.is_nan() || spread <= 0.0 {
        return None;
    }
    let margin = match (lower, upper) {
        (Some(lower), Some(upper)) => (upper - center).min(center - lower),
        (None, Some(upper)) => upper - center,
        (Some(lower), None) => center - lower,
        (None, None) => return None,
    };
    Some(margin / (3.0 * spread)).filter(|value| value.is_finite())
}

/// The rules' state along a series: the runs ending at the last point seen.
#[derive(Clone, Debug, Default)]
struct Runs {
    /// Points in a row strictly on the last point's side of the centre (signed:
    /// positive above).
    side: i64,
    /// Differences in a row of the last one's sign (signed: positive rising).
    trend: i64,
    /// Nonzero differences in a row, each of the sign opposite to the one before.
    alternating: u64,
    /// Points in a row within 1 sigma.
    within: u64,
    /// Points in a row beyond 1 sigma.
    beyond: u64,
}

/// Calls `flag(index, rule)` for each point of `values` (in order) that one of
/// `rules` flags, in point order, then rule order (docs/api.md section 15). A
/// point is flagged by a rule when the run of points ending at it meets it.
pub(super) fn flags(
    values: impl Iterator<Item = f64>,
    limits: &Limits,
    rules: Rules,
    mut flag: impl FnMut(usize, u8),
) {
    let (center, sigma) = (limits.center, limits.sigma);
    // Each point's deviation in sigmas, with the last five kept for rules 5 and 6.
    let mut recent = [0.0_f64; 5];
    let mut runs = Runs::default();
    let mut previous: Option<f64> = None;
    let mut last_difference = 0_i64;
    // The indexes of the latest points beyond 1 sigma above and below, for rule 8.
    let (mut last_above, mut last_below) = (None::<usize>, None::<usize>);
    for (index, value) in values.enumerate() {
        let deviation = value - center;
        recent.rotate_right(1);
        recent[0] = deviation;
        let side = sign(deviation);
        runs.side = match side {
            0 => 0,
            _ if side * runs.side > 0 => runs.side + side,
            _ => side,
        };
        let difference = previous.map_or(0, |previous| sign(value - previous));
        runs.trend = match difference {
            0 => 0,
            _ if difference * runs.trend > 0 => runs.trend + difference,
            _ => difference,
        };
        runs.alternating = match difference {
            0 => 0,
            _ if difference == -last_difference => runs.alternating + 1,
            _ => 1,
        };
        last_difference = difference;
        previous = Some(value);
        let distance = deviation.abs();
        runs.within = if distance < sigma { runs.within + 1 } else { 0 };
        runs.beyond = if distance > sigma { runs.beyond + 1 } else { 0 };
        if deviation > sigma {
            last_above = Some(index);
        } else if deviation < -sigma {
            last_below = Some(index);
        }
        // Of the last `points` points (the run ending here), how many lie beyond
        // `zone` sigmas on this point's side; 0 unless this one does.
        let beyond_on_side = |points: usize, zone: f64| -> usize {
            if index + 1 < points || distance <= zone * sigma {
                return 0;
            }
            let side = deviation.signum();
            (recent[..points].iter())
                .filter(|other| **other * side > zone * sigma)
                .count()
        };
        let in_run = |last: Option<usize>| last.is_some_and(|last| last + 8 > index);
        let met = [
            distance > 3.0 * sigma,
            runs.side.unsigned_abs() >= 9,
            runs.trend.unsigned_abs() >= 5,
            runs.alternating >= 13,
            beyond_on_side(3, 2.0) >= 2,
            beyond_on_side(5, 1.0) >= 4,
            runs.within >= 15,
            runs.beyond >= 8 && in_run(last_above) && in_run(last_below),
        ];
        for (rule, met) in (1..=8).zip(met) {
            if met && rules.contains(rule) {
                flag(index, rule);
            }
        }
    }
}

fn sign(value: f64) -> i64 {
    if value > 0.0 {
        1
    } else if value < 0.0 {
        -1
    } else {
        0
    }
}

#[cfg(test)]
mod tests;
