//! Interned strings: unit types, serial numbers, metric names and the other fields
//! summaries group by, compared as integers when a scan filters or groups, and
//! turned back into text only for the rows a summary returns.
//!
//! A reload's table extends the previous generation's (the stations it shares hold
//! that generation's symbols) without copying it: a table is a few layers of
//! strings, each shared by every generation that has it, and a new layer is merged
//! into the one below once it is a quarter of that one's size. So the layers stay
//! few (their sizes shrink geometrically) and a reload copies strings in proportion
//! to what it added, over time.
//!
//! Every table numbers the empty string 0 ([`Symbol::EMPTY`]), so that a sealed
//! block's digest, written without the table, knows which units have no serial.
//!
//! A start from the store maps the table's runs from the store's files ([`run`])
//! instead of copying them into the heap: those layers are never merged into, and
//! the strings a reload adds make heap layers above them. A table's strings that
//! the store has written since are read from its files too, from the next reload on
//! ([`Symbols::stored_in`]), so that the heap holds only the strings added since the
//! store's last write, however long the process runs.

pub(crate) mod run;

use std::mem::size_of;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use string_interner::backend::StringBackend;
use string_interner::symbol::SymbolU32;
use string_interner::{StringInterner, Symbol as _};

use crate::data::fault::StorageFault;
use run::Run;

/// One layer's strings, numbered from 0 in the order they came, one after the
/// other in one buffer (a table of a year of 100 stations holds millions of serial
/// numbers: 258 MB as boxed strings in an `IndexSet`, BENCHMARKS.md).
type Texts = StringInterner<StringBackend<SymbolU32>, foldhash::fast::RandomState>;

/// An interned string: its index in its generation's [`Symbols`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Symbol(pub(crate) u32);

impl Symbol {
    /// The empty string, in every table: an empty serial, for one.
    pub(crate) const EMPTY: Symbol = Symbol(0);
}

/// The strings of one generation that filters compare against and summaries group
/// by, each held once. Cheap to clone: the layers are shared.
#[derive(Clone, Debug)]
pub(crate) struct Symbols {
    /// Oldest first; each numbers its strings from its `first`.
    layers: Vec<Layer>,
    /// The runs the store last wrote of this table's strings, mapped from its files
    /// (from symbol 1 on, contiguous): shared by every table extended from this
    /// one, the next of which reads those strings from them.
    stored: Arc<Mutex<Option<StoredRuns>>>,
}

/// Runs of a table's strings that the store wrote, in order.
type StoredRuns = Arc<[Arc<Run>]>;

/// Which numbering a table has: tables extended from one another share it (each
/// numbers the strings of the one it extends as that one did), a fresh table (a
/// whole reload's) starts another, however long it is. The store's writer keeps its
/// runs only for a table of the lineage it wrote them from: a length alone cannot
/// tell, and a fresh table as long as the one before would take the old runs'
/// strings. A weak reference: it keeps no table's runs alive.
#[derive(Clone, Debug, Default)]
pub(crate) struct Lineage(Weak<Mutex<Option<StoredRuns>>>);

impl Lineage {
    /// Whether `symbols` numbers its strings as the tables of this lineage do.
    pub(crate) fn holds(&self, symbols: &Symbols) -> bool {
        Weak::ptr_eq(&self.0, &Arc::downgrade(&symbols.stored))
    }
}

impl Default for Symbols {
    /// A table of the empty string alone, numbered [`Symbol::EMPTY`].
    fn default() -> Symbols {
        let mut texts = Texts::new();
        texts.get_or_intern("");
        Symbols {
            layers: vec![Layer {
                first: Symbol::EMPTY.0,
                texts: LayerTexts::Heap(Arc::new(texts)),
            }],
            stored: Arc::default(),
        }
    }
}

#[derive(Clone, Debug)]
struct Layer {
    first: u32,
    texts: LayerTexts,
}

/// A layer's strings: interned in the heap, or a run mapped from a store file.
#[derive(Clone, Debug)]
enum LayerTexts {
    Heap(Arc<Texts>),
    Mapped(Arc<Run>),
}

impl LayerTexts {
    fn len(&self) -> usize {
        match self {
            LayerTexts::Heap(texts) => texts.len(),
            LayerTexts::Mapped(run) => run.len(),
        }
    }

    /// A mapped layer's reads fail as its store file does ([`run`]); a heap
    /// layer's never fail.
    fn get(&self, text: &str) -> Result<Option<usize>, StorageFault> {
        match self {
            LayerTexts::Heap(texts) => Ok(texts.get(text).map(|index| index.to_usize())),
            LayerTexts::Mapped(run) => run.get(text),
        }
    }

    fn resolve(&self, index: usize) -> Result<Option<&str>, StorageFault> {
        match self {
            LayerTexts::Heap(texts) => {
                Ok(SymbolU32::try_from_usize(index).and_then(|index| texts.resolve(index)))
            }
            LayerTexts::Mapped(run) => (index < run.len()).then(|| run.text(index)).transpose(),
        }
    }

    /// The indexes of its strings equal to `text` ignoring ASCII case.
    fn indexes_ignoring_ascii_case(&self, text: &str) -> Result<Vec<usize>, StorageFault> {
        match self {
            LayerTexts::Heap(texts) => Ok((texts.iter())
                .filter(|(_, candidate)| candidate.eq_ignore_ascii_case(text))
                .map(|(index, _)| index.to_usize())
                .collect()),
            LayerTexts::Mapped(run) => run.indexes_ignoring_ascii_case(text),
        }
    }

    fn texts(&self) -> Box<dyn Iterator<Item = Result<&str, StorageFault>> + '_> {
        match self {
            LayerTexts::Heap(texts) => Box::new(texts.iter().map(|(_, text)| Ok(text))),
            LayerTexts::Mapped(run) => Box::new(run.texts()),
        }
    }
}

/// A new layer is merged into the one below it once it is at least this fraction
/// (one in `MERGE_RATIO`) of that one's size.
const MERGE_RATIO: usize = 4;

impl Symbols {
    #[cfg(test)]
    pub(crate) fn intern(&mut self, text: &str) -> Symbol {
        if let Some(symbol) = self.lookup(text).expect("tests intern into heap tables") {
            return symbol;
        }
        let symbol = Symbol(self.len() as u32);
        match &mut self.layers.last_mut().expect("there is a layer").texts {
            LayerTexts::Heap(texts) => Arc::make_mut(texts).get_or_intern(text),
            LayerTexts::Mapped(_) => unreachable!("tests intern into heap tables"),
        };
        symbol
    }

    /// The symbol of `text`, if the table holds it: a filter value the data never
    /// holds matches nothing. A mapped layer that fails the read is its store
    /// file's fault.
    pub(crate) fn lookup(&self, text: &str) -> Result<Option<Symbol>, StorageFault> {
        for layer in &self.layers {
            if let Some(index) = layer.texts.get(text)? {
                return Ok(Some(Symbol(layer.first + index as u32)));
            }
        }
        Ok(None)
    }

    /// Every symbol whose text equals `text` ignoring ASCII case (`result=fail`
    /// finds `FAIL` and `Fail`; docs/api.md section 4), in no particular order.
    ///
    /// A filter value has few letters, so each spelling of it is looked up: 2 to the
    /// number of its ASCII letters. Past [`Symbols::SPELLINGS_LOOKED_UP`] spellings,
    /// every string of the table is compared instead, once per request.
    pub(crate) fn lookup_ignoring_ascii_case(
        &self,
        text: &str,
    ) -> Result<Vec<Symbol>, StorageFault> {
        let letters: Vec<usize> = (text.bytes().enumerate())
            .filter(|(_, byte)| byte.is_ascii_alphabetic())
            .map(|(index, _)| index)
            .collect();
        if letters.len() > Symbols::SPELLINGS_LOOKED_UP.ilog2() as usize {
            let mut found = Vec::new();
            for layer in &self.layers {
                let indexes = layer.texts.indexes_ignoring_ascii_case(text)?;
                found.extend(
                    indexes
                        .into_iter()
                        .map(|index| Symbol(layer.first + index as u32)),
                );
            }
            return Ok(found);
        }
        let mut spelling = text.to_ascii_lowercase().into_bytes();
        (0..1u32 << letters.len())
            .filter_map(|upper| {
                for (bit, &index) in letters.iter().enumerate() {
                    spelling[index] = match upper & (1 << bit) {
                        0 => spelling[index].to_ascii_lowercase(),
                        _ => spelling[index].to_ascii_uppercase(),
                    };
                }
                // Only ASCII letters changed case: still the UTF-8 it was.
                self.lookup(std::str::from_utf8(&spelling).expect("UTF-8"))
                    .transpose()
            })
            .collect()
    }

    /// How many spellings [`Symbols::lookup_ignoring_ascii_case`] looks up at most.
    const SPELLINGS_LOOKED_UP: u32 = 1 << 12;

    /// The text of a symbol of this table; a mapped layer that fails the read is
    /// its store file's fault.
    pub(crate) fn text(&self, symbol: Symbol) -> Result<&str, StorageFault> {
        let layer = self
            .layers
            .iter()
            .rev()
            .find(|layer| layer.first <= symbol.0)
            .expect("a symbol of this table");
        let text = layer.texts.resolve((symbol.0 - layer.first) as usize)?;
        Ok(text.expect("a symbol of this table"))
    }

    /// How many strings the table holds; the next new one gets this number.
    pub(crate) fn len(&self) -> usize {
        self.layers
            .last()
            .map_or(0, |layer| layer.first as usize + layer.texts.len())
    }

    /// About how many heap bytes the table holds: each layer's strings, and per
    /// string where it ends and its hash-table slot (its number and control byte,
    /// at the table's seven-eighths load). Layers shared with other generations are
    /// counted too; layers mapped from the store are not ([`Symbols::mapped_bytes`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let slot = size_of::<usize>() as f64 + (size_of::<u32>() + 1) as f64 * 8.0 / 7.0;
        (self.layers.iter())
            .map(|layer| match &layer.texts {
                LayerTexts::Heap(texts) => {
                    let bytes: usize = texts.iter().map(|(_, text)| text.len()).sum();
                    bytes as u64 + (texts.len() as f64 * slot) as u64
                }
                LayerTexts::Mapped(_) => 0,
            })
            .sum()
    }

    /// The bytes of the store files its mapped layers read, of which only the
    /// pages a lookup touched are in memory.
    pub(crate) fn mapped_bytes(&self) -> u64 {
        (self.layers.iter())
            .map(|layer| match &layer.texts {
                LayerTexts::Heap(_) => 0,
                LayerTexts::Mapped(run) => run.mapped_bytes(),
            })
            .sum()
    }

    /// The table of the empty string and `runs`, which must number their strings
    /// on from each other, from 1: the table a store's runs hold.
    pub(crate) fn of_runs(runs: &[Arc<Run>]) -> Result<Symbols, run::Malformed> {
        let mut symbols = Symbols::default();
        for run in runs {
            if run.first() as usize != symbols.len() {
                return Err(run::Malformed("first symbol: the runs are out of order"));
            }
            symbols.layers.push(Layer {
                first: run.first(),
                texts: LayerTexts::Mapped(Arc::clone(run)),
            });
        }
        Ok(symbols)
    }

    /// Its numbering's identity, shared by the tables extended from it.
    pub(crate) fn lineage(&self) -> Lineage {
        Lineage(Arc::downgrade(&self.stored))
    }

    /// Says that `runs`, which the store wrote from this table (from symbol 1 on,
    /// contiguous, the first `n` of its strings), are named by its manifest and
    /// mapped: the tables extended from this one from now on read those strings
    /// from them and drop their heap copies.
    pub(crate) fn stored_in(&self, runs: &[Arc<Run>]) {
        let end = runs
            .last()
            .map_or(1, |run| run.first() as usize + run.len());
        if end <= self.len() && Symbols::of_runs(runs).is_ok() {
            *self.stored.lock() = Some(runs.into());
        }
    }

    /// Where its prefix of mapped layers ends: the first symbol not in them.
    fn mapped_end(&self) -> usize {
        (self.layers.iter())
            .filter(|layer| matches!(layer.texts, LayerTexts::Mapped(_)))
            .map(|layer| layer.first as usize + layer.texts.len())
            .max()
            .unwrap_or(0)
    }

    /// This table, its strings that the store's runs hold read from them
    /// ([`Symbols::stored_in`]), the rest copied into one heap layer above them.
    fn rebased(&self) -> Result<Symbols, StorageFault> {
        let stored = self.stored.lock().clone();
        let Some(runs) = stored else {
            return Ok(self.clone());
        };
        let end = runs
            .last()
            .map_or(1, |run| run.first() as usize + run.len());
        if end <= self.mapped_end() || end > self.len() {
            return Ok(self.clone());
        }
        let mut symbols = Symbols::of_runs(&runs).expect("runs checked when stored");
        symbols.stored = Arc::clone(&self.stored);
        if end < self.len() {
            let mut texts = Texts::with_capacity_and_hasher(self.len() - end, Default::default());
            for symbol in end..self.len() {
                texts.get_or_intern(self.text(Symbol(symbol as u32))?);
            }
            symbols.layers.push(Layer {
                first: end as u32,
                texts: LayerTexts::Heap(Arc::new(texts)),
            });
        }
        Ok(symbols)
    }

    /// This table with `new` strings, none of which it holds, numbered after its own
    /// in their order: a reload's table, under which the entries of stations it
    /// shares with the generation before keep their meaning. A mapped layer that
    /// fails a read of the strings it copies is its store file's fault.
    pub(crate) fn extended(&self, new: Vec<Box<str>>) -> Result<Symbols, StorageFault> {
        let mut symbols = self.rebased()?;
        if new.is_empty() {
            return Ok(symbols);
        }
        // The layers the new strings merge into, found first, so that every string
        // is inserted once: a first load's millions into the empty string's layer
        // cost a tenth of the load when inserted twice.
        let mut merged = 0;
        let mut length = new.len();
        for below in symbols.layers.iter().rev() {
            let mapped = matches!(below.texts, LayerTexts::Mapped(_));
            if mapped || length * MERGE_RATIO < below.texts.len() {
                break;
            }
            merged += 1;
            length += below.texts.len();
        }
        let kept = symbols.layers.len() - merged;
        let below = symbols.layers.split_off(kept);
        let mut texts = Texts::with_capacity_and_hasher(length, Default::default());
        for layer in &below {
            for text in layer.texts.texts() {
                texts.get_or_intern(text?);
            }
        }
        for text in new {
            texts.get_or_intern(text);
        }
        symbols.layers.push(Layer {
            first: below
                .first()
                .map_or(symbols.len() as u32, |layer| layer.first),
            texts: LayerTexts::Heap(Arc::new(texts)),
        });
        Ok(symbols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34: `result` is matched ignoring ASCII case, by each spelling of a
    /// short value and by a walk of the table for a long one; both find what a
    /// comparison of every string finds, and only that.
    #[test]
    fn issue_34_lookup_ignoring_ascii_case_finds_every_spelling() {
        let long = "Aborted-By-The-Operator-Ünïcode";
        let texts = [
            "pass",
            "PASS",
            "Pass",
            "fail",
            "FAIL",
            "fAiL",
            "failed",
            "pa ss",
            "abort",
            "é-Fail",
            "É-FAIL",
            "é-fail",
            long,
            &long.to_ascii_uppercase(),
            &long.to_ascii_lowercase(),
        ];
        let mut symbols = Symbols::default();
        for text in texts {
            symbols.intern(text);
        }
        let heap = symbols.extended(vec!["PaSs".into(), "x".into()]).unwrap();
        // The same strings in a run mapped from a file, as a start from the store
        // has them, with a heap layer above.
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut bytes = Vec::new();
        run::write(1, texts.iter().copied().map(Ok), &mut bytes).unwrap();
        std::fs::write(file.path(), &bytes).unwrap();
        let mapped = Run::open(file.path(), file.as_file(), 0, &bytes).unwrap();
        let mapped = Symbols::of_runs(&[Arc::new(mapped)]).unwrap();
        let mapped = mapped.extended(vec!["PaSs".into(), "x".into()]).unwrap();
        assert!(mapped.heap_bytes() * 2 < heap.heap_bytes());
        for table in [heap, mapped] {
            for query in [
                "pass", "FAIL", "é-fail", "É-FAIL", long, "ABORT", "missing", "",
            ] {
                let mut found = table.lookup_ignoring_ascii_case(query).unwrap();
                found.sort_unstable();
                let expected: Vec<Symbol> = (0..table.len() as u32)
                    .map(Symbol)
                    .filter(|&symbol| table.text(symbol).unwrap().eq_ignore_ascii_case(query))
                    .collect();
                assert_eq!(found, expected, "{query}");
            }
            assert_eq!(table.lookup_ignoring_ascii_case("pass").unwrap().len(), 4);
            assert_eq!(table.lookup_ignoring_ascii_case(long).unwrap().len(), 3);
        }
    }

    #[test]
    fn symbols_are_dense_and_read_back() {
        let mut symbols = Symbols::default();
        let board = symbols.intern("board");
        let serial = symbols.intern("SN-1");
        assert_eq!((board, serial), (Symbol(1), Symbol(2)));
        assert_eq!(symbols.lookup("").unwrap(), Some(Symbol::EMPTY));
        assert_eq!(symbols.intern("board"), board);
        assert_eq!(symbols.lookup("SN-1").unwrap(), Some(serial));
        assert_eq!(symbols.lookup("other").unwrap(), None);
        assert_eq!(symbols.text(serial).unwrap(), "SN-1");
    }

    #[test]
    fn an_extended_table_keeps_the_old_symbols_and_shares_their_layer() {
        let texts = |range: std::ops::Range<usize>| -> Vec<Box<str>> {
            range.map(|number| format!("SN-{number}").into()).collect()
        };
        let base = Symbols::default().extended(texts(0..1000)).unwrap();
        let mut table = base.clone();
        for round in 0..30 {
            let first = 1000 + round * 3;
            let next = table.extended(texts(first..first + 3)).unwrap();
            for number in 0..first + 3 {
                let symbol = next.lookup(&format!("SN-{number}")).unwrap().unwrap();
                assert_eq!(symbol, Symbol(number as u32 + 1));
                assert_eq!(next.text(symbol).unwrap(), format!("SN-{number}"));
            }
            assert_eq!(next.len(), first + 3 + 1);
            assert!(next.layers.len() <= 4, "{} layers", next.layers.len());
            table = next;
        }
        // Small additions never copied the first 1000 strings.
        let (LayerTexts::Heap(base), LayerTexts::Heap(first)) =
            (&base.layers[0].texts, &table.layers[0].texts)
        else {
            panic!("heap layers");
        };
        assert!(Arc::ptr_eq(base, first));
        assert_eq!(table.extended(Vec::new()).unwrap().len(), table.len());
    }
}
