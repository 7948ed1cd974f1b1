//! Interned strings: unit types, serial numbers and metric names, compared as
//! integers when a scan filters.

use std::collections::HashMap;

/// An interned string: unit types, serial numbers and metric names are compared as
/// integers when filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Symbol(pub u32);

/// The strings of one generation that filters compare against.
#[derive(Debug, Default)]
pub struct Symbols {
    by_text: HashMap<Box<str>, Symbol>,
}

impl Symbols {
    pub fn intern(&mut self, text: &str) -> Symbol {
        if let Some(symbol) = self.by_text.get(text) {
            return *symbol;
        }
        let symbol = Symbol(self.by_text.len() as u32);
        self.by_text.insert(text.into(), symbol);
        symbol
    }

    pub fn lookup(&self, text: &str) -> Option<Symbol> {
        self.by_text.get(text).copied()
    }
}
