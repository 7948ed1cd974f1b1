//! The chart's arithmetic and the rules against a naive reference: each rule
//! written as the contract states it, checked point by point over the run that
//! ends there.

use proptest::prelude::*;

use super::*;

/// The rules as docs/api.md section 15 states them, one point and one rule at a
/// time, looking back over the points the rule needs.
fn reference(values: &[f64], limits: &Limits, rules: Rules) -> Vec<(usize, u8)> {
    let (center, sigma) = (limits.center, limits.sigma);
    let deviation = |index: usize| values[index] - center;
    let run =
        |index: usize, length: usize| (index + 1 >= length).then(|| index + 1 - length..index + 1);
    let mut flags = Vec::new();
    for index in 0..values.len() {
        let all = |length: usize, test: &dyn Fn(usize) -> bool| {
            run(index, length).is_some_and(|mut run| run.all(test))
        };
        let beyond = |point: usize, zone: f64, side: f64| deviation(point) * side > zone * sigma;
        let some_of = |length: usize, needed: usize, zone: f64| {
            [1.0, -1.0].iter().any(|&side| {
                beyond(index, zone, side)
                    && run(index, length).is_some_and(|run| {
                        run.filter(|&point| beyond(point, zone, side)).count() >= needed
                    })
            })
        };
        let rising = |point: usize| values[point] > values[point - 1];
        let falling = |point: usize| values[point] < values[point - 1];
        let trend = run(index, 6).is_some_and(|run| {
            let differences = run.start + 1..run.end;
            differences.clone().all(rising) || differences.clone().all(falling)
        });
        let alternating = run(index, 14).is_some_and(|run| {
            let differences: Vec<f64> = (run.start + 1..run.end)
                .map(|point| values[point] - values[point - 1])
                .collect();
            differences.iter().all(|difference| *difference != 0.0)
                && differences
                    .windows(2)
                    .all(|pair| (pair[0] > 0.0) != (pair[1] > 0.0))
        });
        let mixed = run(index, 8).is_some_and(|run| {
            run.clone().all(|point| deviation(point).abs() > sigma)
                && run.clone().any(|point| deviation(point) > 0.0)
                && run.clone().any(|point| deviation(point) < 0.0)
        });
        let met = [
            deviation(index).abs() > 3.0 * sigma,
            all(9, &|point| deviation(point) > 0.0) || all(9, &|point| deviation(point) < 0.0),
            trend,
            alternating,
            some_of(3, 2, 2.0),
            some_of(5, 4, 1.0),
            all(15, &|point| deviation(point).abs() < sigma),
            mixed,
        ];
        for (rule, met) in (1..=8).zip(met) {
            if met && rules.contains(rule) {
                flags.push((index, rule));
            }
        }
    }
    flags
}

fn flagged(values: &[f64], limits: &Limits, rules: Rules) -> Vec<(usize, u8)> {
    let mut found = Vec::new();
    flags(values.iter().copied(), limits, rules, |index, rule| {
        found.push((index, rule));
    });
    found
}

/// A chart at 0 with sigma 1, for series designed in sigmas.
const UNIT: Limits = Limits {
    center: 0.0,
    mr_mean: D2,
    sigma: 1.0,
    stddev: 1.0,
};

#[test]
fn limits_are_the_mean_and_the_mean_moving_range_over_d2() {
    let limits = Limits::of([1.0, 3.0, 2.0, 6.0].into_iter()).unwrap();
    assert_eq!(limits.center, 3.0);
    // |3-1| + |2-3| + |6-2| = 7, over 3 ranges.
    assert_eq!(limits.mr_mean, 7.0 / 3.0);
    assert_eq!(limits.sigma, 7.0 / 3.0 / 1.128);
    assert_eq!(limits.upper(), 3.0 + 3.0 * limits.sigma);
    assert_eq!(limits.lower(), 3.0 - 3.0 * limits.sigma);
    assert_eq!(limits.mr_upper(), 3.267 * 7.0 / 3.0);
    // Deviations -2, 0, -1, 3: squares 14 over 3.
    assert_eq!(limits.stddev, (14.0_f64 / 3.0).sqrt());
}

#[test]
fn one_point_or_no_spread_makes_no_chart() {
    assert_eq!(Limits::of([].into_iter()), None);
    assert_eq!(Limits::of([5.0].into_iter()), None);
    assert_eq!(Limits::of([5.0, 5.0, 5.0].into_iter()), None);
    assert!(Limits::of([5.0, 5.0, 6.0].into_iter()).is_some());
}

#[test]
fn capability_is_one_sided_with_one_limit_and_none_without() {
    assert_eq!(capability(Some(0.0), Some(12.0), 3.0, 1.0), Some(1.0));
    assert_eq!(capability(None, Some(12.0), 3.0, 1.0), Some(3.0));
    assert_eq!(capability(Some(0.0), None, 3.0, 1.0), Some(1.0));
    assert_eq!(capability(None, None, 3.0, 1.0), None);
    assert_eq!(capability(Some(0.0), Some(1.0), 3.0, 0.0), None);
}

/// Each rule fires at the points a series designed for it says, and nowhere else.
#[test]
fn designed_series_flag_their_rule_at_known_points() {
    let only = |rule: u8, values: &[f64]| -> Vec<usize> {
        let found = flagged(values, &UNIT, Rules::ALL);
        assert_eq!(found, reference(values, &UNIT, Rules::ALL), "rule {rule}");
        found
            .iter()
            .filter(|(_, flagged)| *flagged == rule)
            .map(|(index, _)| *index)
            .collect()
    };
    // Rule 1: beyond 3 sigma, either side; exactly 3 is not beyond.
    assert_eq!(only(1, &[0.5, 3.5, -0.5, -3.2, 3.0]), [1, 3]);
    // Rule 2: the 9th and 10th of ten above; a point on the centre breaks a run.
    let mut above = vec![0.5; 10];
    above.extend([0.0, 0.5, 0.5]);
    assert_eq!(only(2, &above), [8, 9]);
    // Rule 3: six points rising (five rises); an equal pair breaks it.
    let rising = [-0.9, -0.7, -0.5, -0.3, -0.1, 0.1, 0.3, 0.3, 0.5];
    assert_eq!(only(3, &rising), [5, 6]);
    // Rule 4: 14 points alternating, the 14th flagged.
    let zigzag: Vec<f64> = (0..15)
        .map(|i| if i % 2 == 0 { 0.2 } else { -0.2 })
        .collect();
    assert_eq!(only(4, &zigzag), [13, 14]);
    // Rule 5: two of three beyond 2 sigma on one side, the point among them.
    assert_eq!(only(5, &[2.5, 0.1, 2.5, 0.1, -2.5, -0.1]), [2]);
    // Rule 6: four of five beyond 1 sigma on one side.
    assert_eq!(only(6, &[1.5, 1.5, 0.1, 1.5, 1.5, 0.2]), [4]);
    // Rule 7: fifteen within 1 sigma.
    let calm: Vec<f64> = (0..16)
        .map(|i| if i % 3 == 0 { 0.5 } else { -0.4 })
        .collect();
    assert_eq!(only(7, &calm), [14, 15]);
    // Rule 8: eight beyond 1 sigma on both sides; all on one side is not rule 8.
    let jumping = [1.5, -1.5, 1.6, 1.7, -1.5, 1.5, -1.6, 1.5, 1.4];
    assert_eq!(only(8, &jumping), [7, 8]);
    assert_eq!(only(8, &[1.5; 9]), Vec::<usize>::new());
}

#[test]
fn only_the_rules_asked_for_are_applied() {
    let values = [3.5, 3.6, 3.7];
    assert_eq!(
        flagged(&values, &UNIT, Rules::of(&[1])),
        [(0, 1), (1, 1), (2, 1)]
    );
    // Three of three beyond 2 sigma: rule 5 from the third point on.
    assert_eq!(flagged(&values, &UNIT, Rules::of(&[5])), [(2, 5)]);
    assert_eq!(flagged(&values, &UNIT, Rules::of(&[2, 3, 4, 6, 7, 8])), []);
}

/// Values on a coarse grid, so that ties (equal neighbours, points on the centre
/// or a zone boundary) come often.
fn series() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        (-14_i32..=14).prop_map(|step| f64::from(step) * 0.25),
        0..60,
    )
}

fn rule_sets() -> impl Strategy<Value = Rules> {
    (1_u8..=255).prop_map(|bits| {
        Rules::of(
            &(1..=8)
                .filter(|rule| bits & (1 << (rule - 1)) != 0)
                .collect::<Vec<_>>(),
        )
    })
}

proptest! {
    #[test]
    fn flags_match_the_reference(values in series(), rules in rule_sets()) {
        prop_assert_eq!(flagged(&values, &UNIT, rules), reference(&values, &UNIT, rules));
    }

    /// With the series' own limits, as a window that is its own baseline.
    #[test]
    fn flags_with_the_series_own_limits_match_the_reference(values in series()) {
        if let Some(limits) = Limits::of(values.iter().copied()) {
            prop_assert_eq!(
                flagged(&values, &limits, Rules::ALL),
                reference(&values, &limits, Rules::ALL)
            );
        }
    }
}
