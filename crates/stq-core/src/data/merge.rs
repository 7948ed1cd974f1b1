//! The merge of sorted streams, cut at a cap: how per-station scans become one
//! shard's answer, and shard answers one query's.

use itertools::Itertools;

/// Merges sorted streams into the first `cap` items of their sorted union.
pub(crate) fn merge_sorted<I, T>(streams: Vec<I>, cap: usize) -> Vec<T>
where
    I: Iterator<Item = T>,
    T: Ord,
{
    let mut streams = streams;
    match streams.len() {
        0 => Vec::new(),
        // Not flattened: a stream's own size hint sizes the answer at once.
        1 => (streams.pop().expect("one stream").take(cap)).collect(),
        _ => streams.into_iter().kmerge().take(cap).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_order_and_cap() {
        let merged = merge_sorted(
            vec![vec![1, 4, 9].into_iter(), vec![2, 3, 10].into_iter()],
            5,
        );
        assert_eq!(merged, [1, 2, 3, 4, 9]);
        assert_eq!(
            merge_sorted(Vec::<std::vec::IntoIter<u8>>::new(), 5),
            Vec::<u8>::new()
        );
    }
}
