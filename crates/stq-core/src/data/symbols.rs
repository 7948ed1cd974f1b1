//! Interned strings: unit types, serial numbers, metric names and the other fields
//! summaries group by, compared as integers when a scan filters or groups, and
//! turned back into text only for the rows a summary returns.

use indexmap::IndexSet;

/// An interned string: its index in its generation's [`Symbols`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Symbol(pub u32);

/// The strings of one generation that filters compare against and summaries group
/// by, each held once.
#[derive(Debug, Default)]
pub struct Symbols {
    texts: IndexSet<Box<str>>,
}

impl Symbols {
    pub fn intern(&mut self, text: &str) -> Symbol {
        if let Some(index) = self.texts.get_index_of(text) {
            return Symbol(index as u32);
        }
        Symbol(self.texts.insert_full(text.into()).0 as u32)
    }

    pub fn lookup(&self, text: &str) -> Option<Symbol> {
        self.texts
            .get_index_of(text)
            .map(|index| Symbol(index as u32))
    }

    /// The text of a symbol of this table.
    pub fn text(&self, symbol: Symbol) -> &str {
        &self.texts[symbol.0 as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_dense_and_read_back() {
        let mut symbols = Symbols::default();
        let board = symbols.intern("board");
        let serial = symbols.intern("SN-1");
        assert_eq!((board, serial), (Symbol(0), Symbol(1)));
        assert_eq!(symbols.intern("board"), board);
        assert_eq!(symbols.lookup("SN-1"), Some(serial));
        assert_eq!(symbols.lookup("other"), None);
        assert_eq!(symbols.text(serial), "SN-1");
    }
}
