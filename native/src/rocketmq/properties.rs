//! Property strings: `name 0x01 value 0x02 ...` (spec §3.1, `MessageDecoder.string2messageProperties`).
//!
//! Split on 0x02; split each piece at its first 0x01; drop a piece with no 0x01, an empty
//! name or value, and the `__CRC32#` trailer; a duplicate name keeps its last value, at the
//! place of that last value. The first UNIQ_KEY of a record is kept too: a batch send appends
//! the batch's own properties after each message's.

use crate::names::NameCodes;
use crate::text::{same, separators};

const CRC32_KEY: &[u8] = b"__CRC32#";
const FIRST_OF: &[u8] = b"UNIQ_KEY";

/// A property's name and value.
#[cfg(test)]
pub type Entry<'a> = (&'a [u8], &'a [u8]);

/// The kept entries of one property string, in order, and its first UNIQ_KEY.
#[cfg(test)]
pub fn parse(text: &[u8]) -> (Vec<Entry<'_>>, Option<&[u8]>) {
    let (mut kept, mut names) = (Kept::default(), NameCodes::default());
    kept.parse(text, &mut names, |_| {});
    (kept.entries.iter().map(|&(_, k, v)| (k, v)).collect(), kept.first_uniq)
}

/// Calls `each(name, value)` for every piece the broker's parser keeps, in order: split on
/// 0x02, each piece at its first 0x01; a piece with no 0x01, an empty name or value, or the
/// `__CRC32#` trailer is dropped. A name may come more than once ([`Kept`] keeps its last value).
/// Returns whether `text` is all ASCII.
#[inline(always)]
pub fn pieces<'a>(text: &'a [u8], mut each: impl FnMut(&'a [u8], &'a [u8])) -> bool {
    // One scan finds both separators: a piece ends at 0x02 and splits at its first 0x01.
    let (mut from, mut sep) = (0usize, None);
    let mut piece = |from: usize, sep: Option<usize>, to: usize| {
        let Some(sep) = sep else {
            return; // no separator: the broker's parser drops the piece too
        };
        let (name, value) = (&text[from..sep], &text[sep + 1..to]);
        if !name.is_empty() && !value.is_empty() && !same(name, CRC32_KEY) {
            each(name, value);
        }
    };
    let ascii = separators(text, |i| {
        if text[i] == 0x02 {
            piece(from, sep, i);
            (from, sep) = (i + 1, None);
        } else if sep.is_none() {
            sep = Some(i);
        }
    });
    piece(from, sep, text.len());
    ascii
}

/// One message's kept properties, their names coded: each name once, at the place of its
/// last value; and the message's first UNIQ_KEY. One `Kept` serves every message of a chunk.
#[derive(Default)]
pub struct Kept<'a> {
    /// (name code, name, value), in order.
    pub entries: Vec<(u32, &'a [u8], &'a [u8])>,
    pub first_uniq: Option<&'a [u8]>,
    /// Per name code: the message (counted from 1) that last kept the name, so a name seen
    /// again is found without comparing it with the message's other names.
    stamp: Vec<u32>,
    message: u32,
    uniq_code: Option<u32>,
}

impl<'a> Kept<'a> {
    /// The properties of the next message, from `text`; names get their codes from `names`,
    /// and `new(name)` is called for each name that gets a code here. Returns whether `text`
    /// is all ASCII (else the caller checks it is UTF-8).
    #[inline(always)]
    pub fn parse(&mut self, text: &'a [u8], names: &mut NameCodes<'a>, mut new: impl FnMut(&'a [u8])) -> bool {
        let Kept { entries, first_uniq, stamp, message, uniq_code } = self;
        entries.clear();
        *first_uniq = None;
        *message += 1;
        let message = *message;
        pieces(text, |name, value| {
            let (code, fresh) = names.code(name);
            if fresh {
                stamp.push(0);
                if same(name, FIRST_OF) {
                    *uniq_code = Some(code);
                }
                new(name);
            }
            if *uniq_code == Some(code) && first_uniq.is_none() {
                *first_uniq = Some(value);
            }
            let last = &mut stamp[code as usize];
            if *last == message {
                // A name again: the broker's map keeps the last value, put in place last.
                let at = entries.iter().position(|e| e.0 == code).expect("a name stamped for this message is kept");
                entries.remove(at);
            }
            *last = message;
            entries.push((code, name, value));
        })
    }
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

    #[test]
    fn one_kept_serves_message_after_message() {
        // A name kept by one message is no duplicate in the next; codes hold across messages.
        let (mut kept, mut names) = (Kept::default(), NameCodes::default());
        let mut new = Vec::new();
        let texts: [&[u8]; 3] = [b"a\x011\x02UNIQ_KEY\x01u\x02", b"b\x012\x02a\x013\x02a\x014\x02", b"a\x015\x02UNIQ_KEY\x01v\x02"];
        let mut got = Vec::new();
        for text in texts {
            kept.parse(text, &mut names, |name| new.push(name));
            got.push((kept.entries.clone(), kept.first_uniq));
        }
        assert_eq!(new, vec![&b"a"[..], b"UNIQ_KEY", b"b"]);
        assert_eq!(got, vec![(vec![(0, &b"a"[..], &b"1"[..]), (1, b"UNIQ_KEY", b"u")], Some(&b"u"[..])),
                             (vec![(2, &b"b"[..], &b"2"[..]), (0, b"a", b"4")], None),
                             (vec![(0, &b"a"[..], &b"5"[..]), (1, b"UNIQ_KEY", b"v")], Some(&b"v"[..]))]);
    }
}
