//! Exact sums of doubles, whose rounded value does not depend on the order the
//! terms were added in, nor on how they were split into partial sums and joined.
//!
//! A `/metrics/summary` row (docs/api.md section 10.2) is built from partial sums
//! whose split depends on where its records are held: which sealed block, which
//! tier, which shard, whether a block's digest or its records were read. Rounded
//! arithmetic (Welford's, Chan's joins) gives a result that depends on that split
//! in its last bits, and the rows' bytes and ETags with it. An exact sum is the
//! same number however it was reached, and rounding it once at the end gives the
//! same double.
//!
//! [`ExactSum`] is Shewchuk's expansion ("Adaptive Precision Floating-Point
//! Arithmetic and Fast Robust Geometric Predicates", 1997, as in Python's
//! `math.fsum`): non-overlapping doubles in increasing magnitude whose sum is the
//! exact sum of every term added. Measured values hold one to three of them.
//!
//! The sum of squares is exact too: a square is split into its rounded product
//! and the product's error (a fused multiply-add gives it exactly), both added.
//! The spread `n Σx² - (Σx)²` is formed exactly from the two expansions and
//! rounded once, so the variance has neither the order's nor cancellation's error.
//!
//! Exact while no square or product overflows or falls below the normal range:
//! values whose magnitude lies between about 1e-140 and 1e150 (a sum of values
//! scales them down first, so that it stays finite near the largest double).
//! Beyond, a standard deviation is not finite, and is written `null`, unless
//! the values are all equal.

use smallvec::SmallVec;

/// An exact sum of doubles: [`ExactSum::value`] is it, correctly rounded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ExactSum {
    /// Non-overlapping, in increasing magnitude, none zero but perhaps the last.
    parts: SmallVec<[f64; 3]>,
}

impl ExactSum {
    /// The expansion of these parts, as [`ExactSum::parts`] gave them.
    pub(crate) fn from_parts(parts: &[f64]) -> ExactSum {
        let mut sum = ExactSum::default();
        for &part in parts {
            sum.add(part);
        }
        sum
    }

    /// The expansion's parts, to be written and read back by
    /// [`ExactSum::from_parts`].
    pub(crate) fn parts(&self) -> &[f64] {
        &self.parts
    }

    /// Adds `term`, exactly.
    pub(crate) fn add(&mut self, mut term: f64) {
        let mut kept = 0;
        for index in 0..self.parts.len() {
            let mut part = self.parts[index];
            if term.abs() < part.abs() {
                std::mem::swap(&mut term, &mut part);
            }
            let high = term + part;
            let low = part - (high - term);
            if low != 0.0 {
                self.parts[kept] = low;
                kept += 1;
            }
            term = high;
        }
        self.parts.truncate(kept);
        self.parts.push(term);
    }

    /// Adds another exact sum, exactly.
    pub(crate) fn join(&mut self, other: &ExactSum) {
        for &part in &other.parts {
            self.add(part);
        }
    }

    /// Adds `left * right`, exactly: its rounded product and that product's
    /// error.
    pub(crate) fn add_product(&mut self, left: f64, right: f64) {
        let product = left * right;
        self.add(product);
        let error = left.mul_add(right, -product);
        if error != 0.0 {
            self.add(error);
        }
    }

    /// The sum, correctly rounded (to nearest, ties to even), as `math.fsum`
    /// rounds it.
    pub(crate) fn value(&self) -> f64 {
        let parts = &self.parts;
        let Some((&last, rest)) = parts.split_last() else {
            return 0.0;
        };
        let mut high = last;
        let mut low = 0.0;
        let mut below = rest.len();
        // From the largest part down, while the sum so far is exact.
        while below > 0 {
            below -= 1;
            let part = parts[below];
            let sum = high + part;
            low = part - (sum - high);
            high = sum;
            if low != 0.0 {
                break;
            }
        }
        // The rest was cut off exactly halfway: the parts below say which way
        // the exact sum lies.
        if below > 0
            && ((low < 0.0 && parts[below - 1] < 0.0) || (low > 0.0 && parts[below - 1] > 0.0))
        {
            let twice = low * 2.0;
            let rounded = high + twice;
            if twice == rounded - high {
                high = rounded;
            }
        }
        high
    }
}

/// `n Σx² - (Σx)²` of `count` values whose exact sum is `sum` and the exact sum
/// of whose squares is `squares`, formed exactly and rounded once: `count - 1`
/// times `count` times the sample variance.
pub(crate) fn spread(count: u64, sum: &ExactSum, squares: &ExactSum) -> f64 {
    // Exact below 2^53 values, which no summary reaches.
    let count = count as f64;
    let mut total = ExactSum::default();
    for &part in squares.parts() {
        total.add_product(count, part);
    }
    for &left in sum.parts() {
        for &right in sum.parts() {
            total.add_product(-left, right);
        }
    }
    total.value()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The exact sum of `terms`, correctly rounded: as an integer count of
    /// 2^-60, which an `i128` holds for these terms, cast to a double (Rust
    /// rounds that cast to nearest, ties to even) and scaled back exactly.
    fn rounded_exactly(terms: &[f64]) -> f64 {
        let scale = 2f64.powi(60);
        let scaled: i128 = terms
            .iter()
            .map(|term| {
                let scaled = term * scale;
                assert_eq!(scaled.fract(), 0.0, "{term} is a multiple of 2^-60");
                scaled as i128
            })
            .sum();
        scaled as f64 / scale
    }

    /// Doubles that are multiples of 2^-60 below 2^59 in magnitude, of mixed
    /// scales, so that sums cancel and carry.
    fn term() -> impl Strategy<Value = f64> {
        (any::<i64>(), -60i32..=6)
            .prop_map(|(mantissa, exponent)| (mantissa >> 11) as f64 * 2f64.powi(exponent))
    }

    proptest! {
        /// Any order and any split into partial sums give the correctly rounded
        /// sum.
        #[test]
        fn a_sum_is_the_exact_sum_rounded_once(
            terms in proptest::collection::vec(term(), 0..40),
            cuts in proptest::collection::vec(any::<usize>(), 0..5),
            seed in any::<u64>(),
        ) {
            let expected = rounded_exactly(&terms);
            let mut whole = ExactSum::default();
            terms.iter().for_each(|&term| whole.add(term));
            prop_assert_eq!(whole.value().to_bits(), expected.to_bits());
            // Shuffled, cut into pieces, each summed and the pieces joined
            // from the last.
            let mut shuffled = terms.clone();
            let mut state = seed | 1;
            for index in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(index, (state % (index as u64 + 1)) as usize);
            }
            let mut bounds: Vec<usize> = cuts.iter().map(|cut| cut % (terms.len() + 1)).collect();
            bounds.push(0);
            bounds.push(terms.len());
            bounds.sort_unstable();
            let mut joined = ExactSum::default();
            for piece in bounds.windows(2).rev() {
                let part = ExactSum::from_parts(&shuffled[piece[0]..piece[1]]);
                let read_back = ExactSum::from_parts(part.parts());
                joined.join(&read_back);
            }
            prop_assert_eq!(joined.value().to_bits(), expected.to_bits());
        }
    }

    #[test]
    fn halfway_cases_round_to_even_by_the_parts_below() {
        let sum = |terms: &[f64]| {
            let mut sum = ExactSum::default();
            terms.iter().for_each(|&term| sum.add(term));
            sum.value()
        };
        assert_eq!(sum(&[1e-16, 1.0, 1e16]), 1.000_000_000_000_000_2e16);
        assert_eq!(sum(&[0.1; 10]), 1.0);
        assert_eq!(sum(&[1e100, 1.0, -1e100]), 1.0);
        assert_eq!(sum(&[]), 0.0);
    }

    #[test]
    fn the_spread_has_no_cancellation_error() {
        // Values near 7.35e8 one apart: Σx² is about 1.6e18, past a double's
        // integers, and its rounding alone would be off by hundreds.
        let values = [735_297_020.0, 735_297_021.0, 735_297_022.0];
        let mut sum = ExactSum::default();
        let mut squares = ExactSum::default();
        for value in values {
            sum.add(value);
            squares.add_product(value, value);
        }
        // n Σx² - (Σx)² = n (n - 1) s², with s² = 1.
        assert_eq!(spread(3, &sum, &squares), 6.0);
    }
}
