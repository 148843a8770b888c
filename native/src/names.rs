//! Codes for the names of a chunk (RocketMQ property names, NSQ header names): 0, 1, 2, ...
//! in the order the names are first seen.
//!
//! A row's names are looked up once each, some six per message. Most names are short
//! (`UNIQ_KEY`, `TAGS`, `TRACE_CONTEXT`, `##trace_id`): up to 16 bytes, a name is known by
//! its length and two overlapping words, so a small open-addressed table finds it with two
//! loads, a multiply and one compare. Names of 17 to 32 bytes (nsq's `##client_dispatch_tag`,
//! on every message of a tagged topic) are known by four words, in a table of their own, so
//! the usual short name still compares three words. Longer names, and new names once a table is
//! half full (a producer that puts a new name on every message), go to a hash map.

use std::collections::HashMap;

use crate::hash::FnvBuild;

/// Slots of the short names' table and of the longer names' (powers of two); at most half are filled.
const SLOTS: usize = 64;
const LONG_SLOTS: usize = 16;

/// A name's key in a table: equal keys, equal names; the default key (length 0, which no name
/// has) marks a free slot.
trait NameKey: Copy + Default + PartialEq {
    fn hash(&self) -> u64;

    /// Asked only once a probe missed (a new name, or a slot taken by another): a hit returns first.
    #[inline(always)]
    fn is_free(&self) -> bool {
        *self == Self::default()
    }
}

/// A short name: its length and words that cover all its bytes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Key {
    len: u64,
    w0: u64,
    w1: u64,
}

/// A name of 17 to 32 bytes: its length and four words that cover all its bytes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct LongKey {
    len: u64,
    w: [u64; 4],
}

#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap())
}

#[inline(always)]
fn half(s: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(s[at..at + 4].try_into().unwrap()) as u64
}

#[inline(always)]
fn mix(h: u64) -> u64 {
    h.wrapping_mul(0x9E37_79B9_7F4A_7C15)
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
}

impl NameKey for Key {
    #[inline(always)]
    fn hash(&self) -> u64 {
        mix(self.w0 ^ self.w1.rotate_left(31) ^ self.len << 56)
    }
}

impl LongKey {
    /// The key of a name of 17 to 32 bytes (None for others): words at 0, 8, n - 16 and n - 8.
    #[inline(always)]
    fn of(s: &[u8]) -> Option<LongKey> {
        let n = s.len();
        (17..=32).contains(&n).then(|| LongKey { len: n as u64, w: [word(s, 0), word(s, 8), word(s, n - 16), word(s, n - 8)] })
    }
}

impl NameKey for LongKey {
    #[inline(always)]
    fn hash(&self) -> u64 {
        let [a, b, c, d] = self.w;
        mix(a ^ b.rotate_left(17) ^ c.rotate_left(31) ^ d.rotate_left(47) ^ self.len << 56)
    }
}

/// An open-addressed table of `N` slots (a power of two), at most half filled.
struct Table<K, const N: usize> {
    keys: [K; N],
    codes: [u32; N],
    filled: usize,
}

impl<K: NameKey, const N: usize> Default for Table<K, N> {
    fn default() -> Self {
        Table { keys: [K::default(); N], codes: [0; N], filled: 0 }
    }
}

impl<K: NameKey, const N: usize> Table<K, N> {
    /// The code of `key` (and whether it is new: then `next`), or None when the key is not
    /// here and the table is half full.
    #[inline(always)]
    fn code(&mut self, key: K, next: u32) -> Option<(u32, bool)> {
        let mut at = (key.hash() >> (64 - N.trailing_zeros())) as usize;
        loop {
            let k = self.keys[at];
            if k == key {
                return Some((self.codes[at], false));
            }
            if k.is_free() {
                break;
            }
            at = (at + 1) % N;
        }
        // A name goes to the map only once its table is half full, which it stays.
        (self.filled < N / 2).then(|| {
            self.keys[at] = key;
            self.codes[at] = next;
            self.filled += 1;
            (next, true)
        })
    }
}

/// The names of one chunk and their codes.
#[derive(Default)]
pub struct NameCodes<'a> {
    short: Table<Key, SLOTS>,
    long: Table<LongKey, LONG_SLOTS>,
    others: HashMap<&'a [u8], u32, FnvBuild>,
    count: u32,
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
        let found = match Key::of(name) {
            Some(key) => self.short.code(key, self.count),
            None => return self.longer(name),
        };
        self.counted(found, name)
    }

    /// [`Self::code`] of a name that is no short one: out of line, so the usual lookup stays small.
    #[inline(never)]
    fn longer(&mut self, name: &'a [u8]) -> (u32, bool) {
        let found = LongKey::of(name).and_then(|key| self.long.code(key, self.count));
        self.counted(found, name)
    }

    /// The code a table `found`, else the map's; the count moved on for a new name.
    #[inline(always)]
    fn counted(&mut self, found: Option<(u32, bool)>, name: &'a [u8]) -> (u32, bool) {
        let next = self.count;
        let (code, new) = found.unwrap_or_else(|| {
            let code = *self.others.entry(name).or_insert(next);
            (code, code == next)
        });
        if new {
            self.count += 1;
        }
        (code, new)
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
                4 if k % 2 == 0 => format!("##client_dispatch_tag{k}").into_bytes(),
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
        let names: [&[u8]; 15] = [b"", b"a", b"ab", b"ba", b"abc", b"abca", b"TAGS", b"TAG", b"TIMER_DELAY_SEC",
                                  b"TIMER_DELAY_SEX", b"##client_dispatch_tag", b"##client_dispatch_tah",
                                  b"##cliemt_dispatch_tag", b"#client_dispatch_tag", &[b'q'; 33]];
        for (i, n) in names.iter().enumerate() {
            assert_eq!(codes.code(n), (i as u32, true), "{n:?}");
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(codes.code(n), (i as u32, false), "{n:?}");
        }
    }
}
