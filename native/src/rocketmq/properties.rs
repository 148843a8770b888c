//! Property strings: `name 0x01 value 0x02 ...` (spec §3.1, `MessageDecoder.string2messageProperties`).
//!
//! Split on 0x02; split each piece at its first 0x01; drop a piece with no 0x01, an empty
//! name or value, and the `__CRC32#` trailer; a duplicate name keeps its last value, at the
//! place of that last value. The first UNIQ_KEY of a record is kept too: a batch send appends
//! the batch's own properties after each message's.

use crate::text::{same, separators};

const CRC32_KEY: &[u8] = b"__CRC32#";
const FIRST_OF: &[u8] = b"UNIQ_KEY";

/// A property's name and value.
pub type Entry<'a> = (&'a [u8], &'a [u8]);

/// The kept entries of one property string, in order, and its first UNIQ_KEY.
#[cfg(test)]
pub fn parse(text: &[u8]) -> (Vec<Entry<'_>>, Option<&[u8]>) {
    let mut kept = Vec::new();
    let first = parse_into(text, &mut kept);
    (kept, first)
}

/// [`parse`] into `kept` (cleared first), so one vector serves every record of a chunk.
pub fn parse_into<'a>(text: &'a [u8], kept: &mut Vec<Entry<'a>>) -> Option<&'a [u8]> {
    kept.clear();
    let mut first = None;
    // One scan finds both separators: a piece ends at 0x02 and splits at its first 0x01.
    let (mut from, mut sep) = (0usize, None);
    let mut piece = |from: usize, sep: Option<usize>, to: usize| {
        let Some(sep) = sep else {
            return; // no separator: the broker's parser drops the piece too
        };
        let (name, value) = (&text[from..sep], &text[sep + 1..to]);
        if name.is_empty() || value.is_empty() || same(name, CRC32_KEY) {
            return;
        }
        if same(name, FIRST_OF) && first.is_none() {
            first = Some(value);
        }
        // Names per record are few: a linear look-back beats hashing here.
        if let Some(at) = kept.iter().position(|(k, _)| same(k, name)) {
            kept.remove(at);
        }
        kept.push((name, value));
    };
    separators(text, |i| {
        if text[i] == 0x02 {
            piece(from, sep, i);
            (from, sep) = (i + 1, None);
        } else if sep.is_none() {
            sep = Some(i);
        }
    });
    piece(from, sep, text.len());
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_brokers_rules() {
        let (kept, first) = parse(b"a\x011\x02b\x01\x02\x01c\x02a\x012\x02oops\x02__CRC32#\x010123456789\x02k\x01v\x01w");
        assert_eq!(kept, vec![(&b"a"[..], &b"2"[..]), (b"k", b"v\x01w")]);
        assert_eq!(first, None);
    }

    #[test]
    fn the_first_uniq_key_is_kept_beside_the_last() {
        let (kept, first) = parse(b"UNIQ_KEY\x01own\x02UNIQ_KEY\x01batch\x02");
        assert_eq!((kept, first), (vec![(&b"UNIQ_KEY"[..], &b"batch"[..])], Some(&b"own"[..])));
    }
}
