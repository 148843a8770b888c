//! Codes for the names of a chunk (RocketMQ property names, NSQ header names): 0, 1, 2, ...
//! in the order the names are first seen.
//!
//! A row's names are looked up once each, some six per message. Most names are short
//! (`UNIQ_KEY`, `TAGS`, `TRACE_CONTEXT`, `##trace_id`): up to 16 bytes, a name is known by
//! its length and two overlapping words, so a small open-addressed table finds it with two
//! loads, a multiply and one compare. Longer names, and new names once the table is half full (a producer that puts
//! a new name on every message), go to a hash map.

use std::collections::HashMap;

use crate::hash::FnvBuild;

/// Slots of the table (a power of two); at most half are filled.
const SLOTS: usize = 64;

/// A short name: its length (0: the slot is free) and words that cover all its bytes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Key {
    len: u64,
    w0: u64,
    w1: u64,
}

#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap())
}

#[inline(always)]
fn half(s: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(s[at..at + 4].try_into().unwrap()) as u64
}

impl Key {
    /// The key of a name of 1 to 16 bytes (None for others). With the length fixed, the two
    /// reads of each size class overlap and so cover every byte: equal keys, equal names.
    #[inline(always)]
    fn of(s: &[u8]) -> Option<Key> {
        let n = s.len();
        let (w0, w1) = match n {
            8..=16 => (word(s, 0), word(s, n - 8)),
            4..=7 => (half(s, 0) | half(s, n - 4) << 32, 0),
            1..=3 => (s[0] as u64 | (s[n / 2] as u64) << 8 | (s[n - 1] as u64) << 16, 0),
            _ => return None,
        };
        Some(Key { len: n as u64, w0, w1 })
    }

    #[inline(always)]
    fn slot(&self) -> usize {
        let h = (self.w0 ^ self.w1.rotate_left(31) ^ self.len << 56).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - SLOTS.trailing_zeros())) as usize
    }
}

/// The names of one chunk and their codes.
pub struct NameCodes<'a> {
    keys: [Key; SLOTS],
    codes: [u32; SLOTS],
    filled: usize,
    others: HashMap<&'a [u8], u32, FnvBuild>,
    count: u32,
}

impl Default for NameCodes<'_> {
    fn default() -> Self {
        NameCodes { keys: [Key::default(); SLOTS], codes: [0; SLOTS], filled: 0, others: HashMap::default(), count: 0 }
    }
}

impl<'a> NameCodes<'a> {
    /// How many names have a code.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// The code of `name`, and whether the name is new (its code is then `len() - 1`).
    #[inline(always)]
    pub fn code(&mut self, name: &'a [u8]) -> (u32, bool) {
        if let Some(key) = Key::of(name) {
            let mut at = key.slot();
            loop {
                let k = self.keys[at];
                if k == key {
                    return (self.codes[at], false);
                }
                if k.len == 0 {
                    break;
                }
                at = (at + 1) % SLOTS;
            }
            // A short name goes to the map only once the table is half full, which it stays.
            if self.filled < SLOTS / 2 {
                self.keys[at] = key;
                self.codes[at] = self.count;
                self.filled += 1;
                self.count += 1;
                return (self.count - 1, true);
            }
        }
        let next = self.count;
        let code = *self.others.entry(name).or_insert(next);
        if code == next {
            self.count += 1;
        }
        (code, code == next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_keeps_one_code_in_table_and_map_alike() {
        // Names of every size class, more than the table holds, some long, in a repeating order.
        let names: Vec<Vec<u8>> = (0..150u32)
            .map(|k| match k % 5 {
                0 => format!("{k}").into_bytes(),
                1 => format!("n{k:03}").into_bytes(),
                2 => format!("UNIQ_KEY{k}").into_bytes(),
                3 => format!("a_much_longer_property_name_{k}").into_bytes(),
                _ => vec![b'x'; 1 + (k as usize % 16)],
            })
            .collect();
        let mut codes = NameCodes::default();
        let mut seen: HashMap<&[u8], u32> = HashMap::new();
        for step in 0..2000usize {
            let name = &names[(step * 7 + step / 11) % names.len()];
            let (code, new) = codes.code(name);
            match seen.get(name.as_slice()) {
                Some(&c) => assert_eq!((code, new), (c, false), "{name:?}"),
                None => {
                    assert_eq!((code as usize, new), (seen.len(), true), "{name:?}");
                    seen.insert(name, code);
                }
            }
        }
        assert_eq!(codes.len(), seen.len());
    }

    #[test]
    fn names_that_share_bytes_differ() {
        let mut codes = NameCodes::default();
        let names: [&[u8]; 10] = [b"", b"a", b"ab", b"ba", b"abc", b"abca", b"TAGS", b"TAG", b"TIMER_DELAY_SEC",
                                  b"TIMER_DELAY_SEX"];
        for (i, n) in names.iter().enumerate() {
            assert_eq!(codes.code(n), (i as u32, true), "{n:?}");
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(codes.code(n), (i as u32, false), "{n:?}");
        }
    }
}
